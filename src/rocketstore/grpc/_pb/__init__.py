"""Modules generated from ``rocketstore/grpc/proto`` by ``scripts/gen_grpc.sh``.

``definition_pb2`` (shared types), ``service_pb2`` (requests and responses) and
``service_pb2_grpc`` (``MessagingServiceServicer``, ``MessagingServiceStub``,
``add_MessagingServiceServicer_to_server``). Their proto files register in protobuf's default
pool as ``apache/rocketmq/v2/*.proto``: the official Python client registers the same message
names under other file names, so the two cannot be imported into one process.
"""
