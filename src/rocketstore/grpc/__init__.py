"""RocketMQ 5.x's gRPC front end (``apache.rocketmq.v2.MessagingService``).

``proto/`` holds the protocol definitions; ``_pb`` the Python modules generated from them by
``scripts/gen_grpc.sh`` (checked in, not edited by hand).
"""
