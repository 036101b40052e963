"""Broker state shared by every front end (remoting and gRPC): topic configuration, subscription
groups, consumer offsets, group membership from heartbeats and long-poll holds.

The modules here hold state and persist it in RocketMQ 4.x's config files
(``<store root>/config/topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json``); they
contain no network code and import nothing from :mod:`rocketstore.remoting`. The request
processors that drive them sit beside them, each typed by the few pieces of the broker it uses
(the protocols of ``_services.py``); ``_controller.py`` wires them. The broker imports none of its
front ends beyond remoting: ``rocketstore.server`` adds the gRPC one (docs/layers.md).
Everything is private (``_x.py``); import from the module that defines a name.
"""
