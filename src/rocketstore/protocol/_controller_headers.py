"""The custom headers of RocketMQ 5's controller requests (package
``remoting.protocol.header.controller`` of RocketMQ 5.1.4), encoded to and decoded from a
command's extFields.

Each header is a frozen dataclass whose ``WIRE`` table names, per attribute, the Java field (the
extFields key), its Java type and whether the Java side marks it ``@CFNotNull``::

    request code                       header (extFields)                       → response header
    1012 CONTROLLER_GET_NEXT_BROKER_ID GetNextBrokerIdRequestHeader: clusterName, brokerName
                                       → clusterName, brokerName, nextBrokerId
    1013 CONTROLLER_APPLY_BROKER_ID    ApplyBrokerIdRequestHeader: clusterName, brokerName,
                                       appliedBrokerId, registerCheckCode ("addr;millis")
                                       → clusterName, brokerName
    1003 CONTROLLER_REGISTER_BROKER    RegisterBrokerToControllerRequestHeader: clusterName,
                                       brokerName, brokerId, brokerAddress
                                       → clusterName, brokerName, masterBrokerId,
                                       masterAddress, masterEpoch, syncStateSetEpoch
    1002 CONTROLLER_ELECT_MASTER       ElectMasterRequestHeader: clusterName*, brokerName*,
                                       brokerId*, designateElect*
                                       → masterBrokerId, masterAddress, masterEpoch,
                                       syncStateSetEpoch
    1001 CONTROLLER_ALTER_SYNC_STATE_SET  AlterSyncStateSetRequestHeader: brokerName,
                                       masterBrokerId, masterEpoch → newSyncStateSetEpoch
    1004 CONTROLLER_GET_REPLICA_INFO   GetReplicaInfoRequestHeader: brokerName
                                       → masterBrokerId, masterAddress, masterEpoch
    1005 CONTROLLER_GET_METADATA_INFO  (none) → group, controllerLeaderId,
                                       controllerLeaderAddress, isLeader, peers ("id:addr;")
    1011 CLEAN_BROKER_DATA             CleanControllerBrokerDataRequestHeader: clusterName,
                                       brokerName*, brokerControllerIdsToClean ("1;2"),
                                       isCleanLivingBroker
     904 BROKER_HEARTBEAT (one-way)    BrokerHeartbeatRequestHeader: clusterName*, brokerAddr*,
                                       brokerName*, brokerId, epoch, maxOffset, confirmOffset,
                                       heartbeatTimeoutMills, electionPriority
    1008 NOTIFY_BROKER_ROLE_CHANGED    NotifyBrokerRoleChangedRequestHeader: masterAddress,
         (controller → broker)         masterEpoch, syncStateSetEpoch, masterBrokerId

(``*``: ``@CFNotNull``.) Every value is text on the wire, as Java's ``makeCustomHeaderToNet``
writes it (``toString()`` of the field; a null field is left out); reading follows
``decodeCommandCustomHeader``: a missing ``@CFNotNull`` field, or a number that does not parse
into its Java type, is a ``RequestError`` (answered SYSTEM_ERROR with the reason), booleans are
``Boolean.parseBoolean`` (``true`` in any case, anything else false).

Pure functions and immutable values, any thread; this module imports nothing of the
controller's server side, so a broker in controller mode codes its requests with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ..remoting import RequestError, ext_bool, ext_int, ext_int32, ext_str

STR = "String"
LONG = "Long"
INT = "Integer"
BOOL = "Boolean"

# attribute, Java field (the extFields key), Java type, @CFNotNull
Wire = tuple[tuple[str, str, str, bool], ...]
H = TypeVar("H", bound="Header")


class Header:
    """A header: a frozen dataclass with a ``WIRE`` table."""

    WIRE: ClassVar[Wire] = ()

    def to_ext(self) -> dict[str, str]:
        """The extFields of this header: every field that is not None, as text."""
        out: dict[str, str] = {}
        for attr, key, kind, _required in self.WIRE:
            value = getattr(self, attr)
            if value is None:
                continue
            if kind == BOOL:
                out[key] = "true" if value else "false"
            else:
                out[key] = str(value)
        return out

    @classmethod
    def from_ext(cls: type[H], ext: Mapping[str, Any]) -> H:
        """The header carried by ``ext``; RequestError for a missing required field or a
        number that is not one (or does not fit its Java type)."""
        values: dict[str, Any] = {}
        fields = dict(ext)
        for attr, key, kind, required in cls.WIRE:
            if kind == STR:
                value: Any = ext_str(fields, key)
            elif kind == LONG:
                value = ext_int(fields, key)
            elif kind == INT:
                value = ext_int32(fields, key)
            else:
                value = ext_bool(fields, key) if ext.get(key) is not None else None
            if value is None:
                if required:
                    raise RequestError(f"the custom field <{key}> is null")
                continue  # the field's default: None, or a Java primitive's
            values[attr] = value
        return cls(**values)


def require(value: Any, key: str) -> Any:
    """``value``, or RequestError naming the Java field when it is None (a field RocketMQ does
    not mark ``@CFNotNull`` but cannot serve without)."""
    if value is None:
        raise RequestError(f"the custom field <{key}> is null")
    return value


# ---- broker registration ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdRequest(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, False),
        ("broker_name", "brokerName", STR, False),
    )


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdResponse(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    next_broker_id: int | None = None
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, False),
        ("broker_name", "brokerName", STR, False),
        ("next_broker_id", "nextBrokerId", LONG, False),
    )


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdRequest(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    applied_broker_id: int | None = None
    register_check_code: str | None = None  # "brokerAddr;timestampMillis"
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, False),
        ("broker_name", "brokerName", STR, False),
        ("applied_broker_id", "appliedBrokerId", LONG, False),
        ("register_check_code", "registerCheckCode", STR, False),
    )


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdResponse(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, False),
        ("broker_name", "brokerName", STR, False),
    )


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequest(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    broker_id: int | None = None
    broker_address: str | None = None
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, False),
        ("broker_name", "brokerName", STR, False),
        ("broker_id", "brokerId", LONG, False),
        ("broker_address", "brokerAddress", STR, False),
    )


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponse(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, False),
        ("broker_name", "brokerName", STR, False),
        ("master_broker_id", "masterBrokerId", LONG, False),
        ("master_address", "masterAddress", STR, False),
        ("master_epoch", "masterEpoch", INT, False),
        ("sync_state_set_epoch", "syncStateSetEpoch", INT, False),
    )


# ---- elections and the SyncStateSet ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElectMasterRequest(Header):
    """``designate_elect`` false: a broker asks (its id is elected when the group never had a
    master); true: an administrator designates ``broker_id``."""

    cluster_name: str
    broker_name: str
    broker_id: int
    designate_elect: bool = False
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, True),
        ("broker_name", "brokerName", STR, True),
        ("broker_id", "brokerId", LONG, True),
        ("designate_elect", "designateElect", BOOL, True),
    )


@dataclass(frozen=True, slots=True)
class ElectMasterResponse(Header):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None
    WIRE: ClassVar[Wire] = (
        ("master_broker_id", "masterBrokerId", LONG, False),
        ("master_address", "masterAddress", STR, False),
        ("master_epoch", "masterEpoch", INT, False),
        ("sync_state_set_epoch", "syncStateSetEpoch", INT, False),
    )


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetRequest(Header):
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_epoch: int | None = None
    WIRE: ClassVar[Wire] = (
        ("broker_name", "brokerName", STR, False),
        ("master_broker_id", "masterBrokerId", LONG, False),
        ("master_epoch", "masterEpoch", INT, False),
    )


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetResponse(Header):
    new_sync_state_set_epoch: int = 0  # a Java int: always written
    WIRE: ClassVar[Wire] = (("new_sync_state_set_epoch", "newSyncStateSetEpoch", INT, False),)


@dataclass(frozen=True, slots=True)
class GetReplicaInfoRequest(Header):
    broker_name: str | None = None
    WIRE: ClassVar[Wire] = (("broker_name", "brokerName", STR, False),)


@dataclass(frozen=True, slots=True)
class GetReplicaInfoResponse(Header):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    WIRE: ClassVar[Wire] = (
        ("master_broker_id", "masterBrokerId", LONG, False),
        ("master_address", "masterAddress", STR, False),
        ("master_epoch", "masterEpoch", INT, False),
    )


# ---- the controllers, brokers' liveness, administration --------------------------------------


@dataclass(frozen=True, slots=True)
class GetMetaDataResponse(Header):
    """``peers``: ``id:address;`` for each controller; ``is_leader``: whether the controller
    that answers is the active one."""

    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False  # a Java boolean: always written
    peers: str | None = None
    WIRE: ClassVar[Wire] = (
        ("group", "group", STR, False),
        ("controller_leader_id", "controllerLeaderId", STR, False),
        ("controller_leader_address", "controllerLeaderAddress", STR, False),
        ("is_leader", "isLeader", BOOL, False),
        ("peers", "peers", STR, False),
    )

    def peer_list(self) -> list[tuple[str, str]]:
        """(id, address) of each peer in ``peers``."""
        out = []
        for item in (self.peers or "").split(";"):
            peer_id, sep, address = item.partition(":")
            if sep and peer_id:
                out.append((peer_id, address))
        return out


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest(Header):
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int | None = None
    epoch: int | None = None
    max_offset: int | None = None
    confirm_offset: int | None = None
    heartbeat_timeout_mills: int | None = None
    election_priority: int | None = None
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, True),
        ("broker_addr", "brokerAddr", STR, True),
        ("broker_name", "brokerName", STR, True),
        ("broker_id", "brokerId", LONG, False),
        ("epoch", "epoch", INT, False),
        ("max_offset", "maxOffset", LONG, False),
        ("confirm_offset", "confirmOffset", LONG, False),
        ("heartbeat_timeout_mills", "heartbeatTimeoutMills", LONG, False),
        ("election_priority", "electionPriority", INT, False),
    )


@dataclass(frozen=True, slots=True)
class NotifyBrokerRoleChangedRequest(Header):
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None
    master_broker_id: int | None = None
    WIRE: ClassVar[Wire] = (
        ("master_address", "masterAddress", STR, False),
        ("master_epoch", "masterEpoch", INT, False),
        ("sync_state_set_epoch", "syncStateSetEpoch", INT, False),
        ("master_broker_id", "masterBrokerId", LONG, False),
    )


@dataclass(frozen=True, slots=True)
class CleanBrokerDataRequest(Header):
    """``broker_controller_ids_to_clean``: ``1;2;3`` (None: the whole group)."""

    broker_name: str
    cluster_name: str | None = None
    broker_controller_ids_to_clean: str | None = None
    is_clean_living_broker: bool = False  # a Java boolean: always written
    WIRE: ClassVar[Wire] = (
        ("cluster_name", "clusterName", STR, False),
        ("broker_name", "brokerName", STR, True),
        ("broker_controller_ids_to_clean", "brokerControllerIdsToClean", STR, False),
        ("is_clean_living_broker", "isCleanLivingBroker", BOOL, False),
    )
