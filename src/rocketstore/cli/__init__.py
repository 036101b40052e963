"""The ``rocketstore`` command: one module per command group.

::

    _main      the group (ACL keys) and the registration of every command
    _store     put, get, query, stats, inspect (a store directory, no broker)
    _bench     bench
    _spark     export, import (Spark jobs)
    _serve     namesrv, broker, serve
    _controller  controller (RocketMQ 5's; run it, status, sync-state, elect-master, ...)
    _client    produce, consume (through the brokers)
    _topic     topic create|list|delete|route            (admin requests to the brokers:
    _cluster   cluster list                                mqadmin's commands)
    _group     group update|delete|list
    _consumer  consumer progress|connection|status|..., producer connection
    _settings  broker-config, broker-perm, kv, broker-stats, namesrv-config
    _message   message query|view
    _admin_common  what the admin commands share (the client, tables, JSON, targets)
    _consume   following a topic's queues for consume
    _errors    client errors as one line with a hint
    _common    what several groups share
"""

from __future__ import annotations

from ._main import main as main

__all__ = ["main"]
