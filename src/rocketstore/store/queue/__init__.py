"""The queues: consume queues, the key index, tag filters, and the reput service that dispatches
the commit log into them.

Imports: the foundation and ``store.log``."""
