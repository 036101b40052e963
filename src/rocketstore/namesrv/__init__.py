"""The name server (RocketMQ 4.x's namesrv): brokers register their topics with it, clients ask
it for a topic's route.

The bodies brokers and clients exchange with it (RocketMQ's TopicRouteData, RegisterBrokerBody,
ClusterInfo, ...) are the protocol room's (``rocketstore.protocol._namesrv_bodies``), which the
broker's registration and the client use without loading the name server.
"""

from ._kv import KVConfigError as KVConfigError
from ._kv import KVConfigManager as KVConfigManager
from ._processor import NamesrvProcessor as NamesrvProcessor
from ._route_table import RouteInfoManager as RouteInfoManager
from ._server import NameServer as NameServer

__all__ = [
    "KVConfigError",
    "KVConfigManager",
    "NameServer",
    "NamesrvProcessor",
    "RouteInfoManager",
]
