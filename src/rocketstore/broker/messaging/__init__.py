"""Requests that move messages: send (``_send``, with retry and DLQ re-sends in
``_send_back``), pull (``_pull``), lookups by key and id (``_query``), transactions
(``_transaction``, ``_end_transaction``).
"""
