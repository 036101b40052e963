"""Administration requests, RocketMQ 4.9.8's AdminBrokerProcessor as mqadmin uses it: topics and
groups (``_admin``), connected clients (``_clients``), a group's consumers and offsets
(``_consumers``), queue contents (``_queue``), broker configuration (``_config``,
``_config_keys``) and the tiered store's manifest (``_tier``). The bodies they answer with are
the protocol room's (``rocketstore.protocol._admin_bodies``, ``_consumer_bodies``), which clients
decode without loading the broker.
"""
