"""The read side: get / look-up / query over the log and the queues (ReadApi), raw records for
pulls, and the read-only view of a store directory (StoreReader).

Imports: the foundation, ``store.log`` and ``store.queue``."""
