"""Broker state shared by every front end (remoting and gRPC): topic configuration, subscription
groups, consumer offsets, group membership from heartbeats and long-poll holds.

The modules here hold state and persist it in RocketMQ 4.x's config files
(``<store root>/config/topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json``); they
contain no network code and import nothing from :mod:`rocketstore.remoting`. The request
processors that drive them sit beside them. Everything is private (``_x.py``); import from the
module that defines a name.
"""
