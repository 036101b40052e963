"""RocketMQ 5.x's gRPC front end (``apache.rocketmq.v2.MessagingService``) over the broker.

``GrpcFrontEnd`` serves the official 5.x clients from a running ``BrokerController``: routes,
client settings (Telemetry), sends, pop-style receives with invisibility and receipt handles,
acks, dead letters, FIFO delivery for groups with ``consumeMessageOrderly`` (a message group
hashes to one queue; such a queue is handed out in order, its next message only after the last
one is acked or dead-lettered), and offset-based pulls, on the same topics, consumer offsets
and DLQs as the remoting front end; the broker's ACL (``MQv2-HMAC-SHA1`` signatures over a
fresh date-time, the plain_acl.yml accounts' topic and group permissions) and TLS.
``attach_grpc`` builds one for a broker. Routes cover the whole cluster: every broker group's
queues of a topic, each at the gRPC front end of its broker (``_routes.py``).

Transactional messages: a TRANSACTION send stores a half message, EndTransaction commits or rolls
it back, and an open one is checked with a producer of its topic through the Telemetry stream
(RecoverOrphanedTransactionCommand), over the broker's transaction service.

Delayed (timer) messages may be recalled before their time (RecallMessage).

A push consumer's (auto-renewed) receive stays invisible while its client lives, and what a
client leaves unacked is visible to its group again a second after it terminates or expires.

Not served (answered UNSUPPORTED or ignored): SQL92 filters, lite topics, namespaces
(``resource_namespace`` is ignored), and the 4.x ``%RETRY%<group>``
topic in receives (a pop consumer's retries stay in its own queue).

``proto/`` holds the protocol definitions; ``_pb`` the Python modules generated from them by
``scripts/gen_grpc.sh`` (checked in, not edited by hand).
"""

from ._acl import load_credentials as load_credentials
from ._acl import parse_credentials as parse_credentials
from ._config import DEFAULT_GRPC_PORT as DEFAULT_GRPC_PORT
from ._config import GrpcConfig as GrpcConfig
from ._config import grpc_config_from_cli as grpc_config_from_cli
from ._server import GrpcFrontEnd as GrpcFrontEnd
from ._server import attach_grpc as attach_grpc

__all__ = [
    "DEFAULT_GRPC_PORT",
    "GrpcConfig",
    "GrpcFrontEnd",
    "attach_grpc",
    "grpc_config_from_cli",
    "load_credentials",
    "parse_credentials",
]
