"""The ``rocketstore`` command: one module per command group.

::

    _main      the group (ACL keys) and the registration of every command
    _store     put, get, query, stats, inspect (a store directory, no broker)
    _bench     bench
    _spark     export, import (Spark jobs)
    _serve     namesrv, broker, serve
    _controller  controller (RocketMQ 5's; run it, status, sync-state, elect-master, ...)
    _client    produce, consume (through the brokers)
    _admin     topic, cluster, group, consumer, message (admin requests to the brokers)
    _consume   following a topic's queues for consume
    _errors    client errors as one line with a hint
    _common    what several groups share
"""

from __future__ import annotations

from ._main import main as main

__all__ = ["main"]
