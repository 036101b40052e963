"""The wire types that clients, brokers, the name server and the controller exchange, in one
room below all of them: a client never loads a broker or a name server to decode their answers,
and a broker never loads the controller's server to speak to it.

    _namesrv_bodies      the name server's bodies: TopicRouteData, RegisterBrokerBody,
                         ClusterInfo, KV tables, topic lists
    _properties          properties text (config bodies of the name server, broker, controller)
    _java_order          the order Java's HashMap iterates keys in (bodies written as Java does)
    _admin_bodies        the broker's admin bodies: MessageQueue, offsets, topic and group
                         tables, consume stats, connections
    _consumer_bodies     a consumer's running info and status
    _heartbeat           HEART_BEAT's body: consumer and producer groups, subscriptions
    _subscription_group  SubscriptionGroupConfig, a consumer group's settings
    _controller_headers  RocketMQ 5's controller request and response headers
    _controller_bodies   the controller's bodies: SyncStateSet, BrokerReplicasInfo, ...
    _controller_client   a broker's asyncio client of the active controller
    _json_values         integers and booleans of JSON bodies as peers write them
    _errors              ProtocolError, ControllerError and the client's controller errors

Every module here imports only the store's foundation and remoting (tests/test_layers.py
checks it), so importing one loads nothing of any server. Pure functions and immutable values
(any thread), but the controller client (loop thread).
"""
