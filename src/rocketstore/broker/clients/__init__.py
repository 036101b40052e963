"""Requests about clients, groups and offsets: heartbeats and membership (``_clients``),
consumer and queue offsets (``_offsets``), the queue locks of orderly consumers
(``_queue_locks``).
"""
