"""RocketMQ 5's controller: it keeps each broker group's replicas, master, SyncStateSet and
epochs, watches the brokers' heartbeats and elects a new master when a group loses its own
(controller mode). Its state lives in an existing consensus engine behind one interface
(``StateBackend``): a durable local file for one controller, or etcd for several.

The wire codecs (``_headers``, ``_bodies``) and the client (``_client``: a broker's requests to
the active controller) import nothing of the rest, so a broker in controller mode takes them
without the server side. See docs/controller.md.
"""

from ._backend import Member as Member
from ._backend import StateBackend as StateBackend
from ._backend import Versioned as Versioned
from ._bodies import BodyError as BodyError
from ._bodies import BrokerMemberGroup as BrokerMemberGroup
from ._bodies import BrokerReplicasInfo as BrokerReplicasInfo
from ._bodies import ElectMasterResponseBody as ElectMasterResponseBody
from ._bodies import ReplicaIdentity as ReplicaIdentity
from ._bodies import ReplicasInfo as ReplicasInfo
from ._bodies import SyncStateSet as SyncStateSet
from ._bodies import decode_broker_names as decode_broker_names
from ._bodies import encode_broker_names as encode_broker_names
from ._client import ControllerClient as ControllerClient
from ._client import Elected as Elected
from ._client import split_controller_addresses as split_controller_addresses
from ._config import ControllerConfig as ControllerConfig
from ._config import enabled_in_namesrv as enabled_in_namesrv
from ._controller import Controller as Controller
from ._errors import BackendError as BackendError
from ._errors import BackendUnavailableError as BackendUnavailableError
from ._errors import ControllerConfigError as ControllerConfigError
from ._errors import ControllerError as ControllerError
from ._errors import ControllerRefusedError as ControllerRefusedError
from ._errors import LeadershipLostError as LeadershipLostError
from ._errors import NoActiveControllerError as NoActiveControllerError
from ._errors import StateCorruptError as StateCorruptError
from ._etcd_backend import EtcdBackend as EtcdBackend
from ._etcd_client import EtcdAuthError as EtcdAuthError
from ._etcd_client import EtcdSecurity as EtcdSecurity
from ._file_backend import FileBackend as FileBackend
from ._headers import AlterSyncStateSetRequest as AlterSyncStateSetRequest
from ._headers import AlterSyncStateSetResponse as AlterSyncStateSetResponse
from ._headers import ApplyBrokerIdRequest as ApplyBrokerIdRequest
from ._headers import ApplyBrokerIdResponse as ApplyBrokerIdResponse
from ._headers import BrokerHeartbeatRequest as BrokerHeartbeatRequest
from ._headers import CleanBrokerDataRequest as CleanBrokerDataRequest
from ._headers import ElectMasterRequest as ElectMasterRequest
from ._headers import ElectMasterResponse as ElectMasterResponse
from ._headers import GetMetaDataResponse as GetMetaDataResponse
from ._headers import GetNextBrokerIdRequest as GetNextBrokerIdRequest
from ._headers import GetNextBrokerIdResponse as GetNextBrokerIdResponse
from ._headers import GetReplicaInfoRequest as GetReplicaInfoRequest
from ._headers import GetReplicaInfoResponse as GetReplicaInfoResponse
from ._headers import Header as Header
from ._headers import NotifyBrokerRoleChangedRequest as NotifyBrokerRoleChangedRequest
from ._headers import RegisterBrokerRequest as RegisterBrokerRequest
from ._headers import RegisterBrokerResponse as RegisterBrokerResponse
from ._processor import ControllerProcessor as ControllerProcessor
from ._record import GroupRecord as GroupRecord
from ._stats import ControllerSnapshot as ControllerSnapshot
from ._stats import GroupGauges as GroupGauges

__all__ = [
    "AlterSyncStateSetRequest",
    "AlterSyncStateSetResponse",
    "ApplyBrokerIdRequest",
    "ApplyBrokerIdResponse",
    "BackendError",
    "BackendUnavailableError",
    "BodyError",
    "BrokerHeartbeatRequest",
    "BrokerMemberGroup",
    "BrokerReplicasInfo",
    "CleanBrokerDataRequest",
    "Controller",
    "ControllerClient",
    "ControllerConfig",
    "ControllerConfigError",
    "ControllerError",
    "ControllerProcessor",
    "ControllerRefusedError",
    "ControllerSnapshot",
    "ElectMasterRequest",
    "ElectMasterResponse",
    "ElectMasterResponseBody",
    "Elected",
    "EtcdAuthError",
    "EtcdBackend",
    "EtcdSecurity",
    "FileBackend",
    "GetMetaDataResponse",
    "GetNextBrokerIdRequest",
    "GetNextBrokerIdResponse",
    "GetReplicaInfoRequest",
    "GetReplicaInfoResponse",
    "GroupGauges",
    "GroupRecord",
    "Header",
    "LeadershipLostError",
    "Member",
    "NoActiveControllerError",
    "NotifyBrokerRoleChangedRequest",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "ReplicaIdentity",
    "ReplicasInfo",
    "StateBackend",
    "StateCorruptError",
    "SyncStateSet",
    "Versioned",
    "decode_broker_names",
    "enabled_in_namesrv",
    "encode_broker_names",
    "split_controller_addresses",
]
