"""Administration requests, RocketMQ 4.9.8's AdminBrokerProcessor as mqadmin uses it: topics and
groups (``_admin``), their wire bodies (``_bodies``, ``_consumer_bodies``), connected clients
(``_clients``), a group's consumers and offsets (``_consumers``), queue contents (``_queue``),
broker configuration (``_config``, ``_config_keys``) and the tiered store's manifest (``_tier``).
"""
