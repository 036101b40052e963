"""The store's background services beside the log: delayed delivery (schedule and its progress
file), retention cleaning, statistics.

Imports: the foundation, ``store.log``, ``store.queue``, ``store.read`` and ``store.ha``."""
