"""The broker: RocketMQ's broker state and request processors, shared by every front end
(remoting and gRPC), in rooms:

- ``state/``: topic configs, subscription groups, consumer offsets, client membership, pop
  state, held pulls and counters; persisted in RocketMQ 4.x's config files
  (``<store root>/config/topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json``);
- ``clients/``: heartbeats, offsets and queue locks; ``messaging/``: send, pull, lookups and
  transactions; ``admin/``: mqadmin's requests; ``replication/``: the name servers and a
  slave's copy of its master's state;
- at the top: ``_errors``, ``_config`` (below the rooms), ``_services`` (one protocol per piece
  of state; a processor is typed by the few it uses) and ``_controller`` (BrokerController,
  which wires them; only the composition root imports it).

The broker imports none of its front ends beyond remoting: ``rocketstore.server`` adds the gRPC
one (docs/layers.md). Everything is private (``_x.py``); import from the module that defines a
name.
"""
