"""The broker's state, shared by every front end: topic configs, subscription groups, consumer
offsets, client membership from heartbeats, pop (invisibility) state, held pulls and the
broker's request counters. Each piece persists itself in RocketMQ 4.x's config files where
RocketMQ keeps one; nothing here answers a request (the processors of ``clients/``,
``messaging/``, ``admin/`` and ``replication/`` do, through ``broker/_services.py``).
"""
