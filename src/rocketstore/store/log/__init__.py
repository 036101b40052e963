"""The log: memory-mapped files and their allocation, write buffers, the commit log, the record
and batch encodings, and the flush services that make the log durable.

Imports: the store's foundation modules (``store/_config``, ``_errors``, ``_clock``, ...) only."""
