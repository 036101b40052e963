"""The name server (RocketMQ 4.x's namesrv): brokers register their topics with it, clients ask
it for a topic's route.

Also the protocol bodies brokers and clients exchange with it (RocketMQ's TopicRouteData,
RegisterBrokerBody, ClusterInfo, ...), which the broker's registration uses too.
"""

from ._bodies import MASTER_ID as MASTER_ID
from ._bodies import BodyError as BodyError
from ._bodies import BrokerData as BrokerData
from ._bodies import ClusterInfo as ClusterInfo
from ._bodies import DataVersion as DataVersion
from ._bodies import QueueData as QueueData
from ._bodies import RegisterBrokerBody as RegisterBrokerBody
from ._bodies import RegisterBrokerResult as RegisterBrokerResult
from ._bodies import TopicConfigWrapper as TopicConfigWrapper
from ._bodies import TopicRouteData as TopicRouteData
from ._bodies import decode_kv_table as decode_kv_table
from ._bodies import decode_topic_list as decode_topic_list
from ._bodies import topic_config as topic_config
from ._kv import KVConfigError as KVConfigError
from ._kv import KVConfigManager as KVConfigManager
from ._processor import NamesrvProcessor as NamesrvProcessor
from ._processor import body_crc32 as body_crc32
from ._route_table import RouteInfoManager as RouteInfoManager
from ._server import NameServer as NameServer

__all__ = [
    "MASTER_ID",
    "BodyError",
    "BrokerData",
    "ClusterInfo",
    "DataVersion",
    "KVConfigError",
    "KVConfigManager",
    "NameServer",
    "NamesrvProcessor",
    "QueueData",
    "RegisterBrokerBody",
    "RegisterBrokerResult",
    "RouteInfoManager",
    "TopicConfigWrapper",
    "TopicRouteData",
    "body_crc32",
    "decode_kv_table",
    "decode_topic_list",
    "topic_config",
]
