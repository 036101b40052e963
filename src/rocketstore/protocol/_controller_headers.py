"""The custom headers of RocketMQ 5's controller requests (package
``remoting.protocol.header.controller`` of RocketMQ 5.1.4), encoded to and decoded from a
command's extFields.

Each header is declared once, as a frozen dataclass made by ``@header``; its wire table
(``WIRE``) is derived from the declaration: an attribute's extFields key is its name in
camelCase (``cluster_name`` → ``clusterName``), its Java type follows the annotation (``str``
String, ``int`` Long, ``Int32`` Integer, ``bool`` Boolean), and a field without a default is
one the Java side marks ``@CFNotNull``::

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

import dataclasses
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, TypeVar, dataclass_transform

from ..remoting import RequestError
from ..remoting._command import int32_value, int_value, str_value

STR = "String"
LONG = "Long"
INT = "Integer"
BOOL = "Boolean"

Int32 = Annotated[int, INT]
"""A field the Java side declares ``Integer`` / ``int`` (a plain ``int`` is a Java long)."""

H = TypeVar("H", bound="Header")


# attribute, Java field (the extFields key), Java type, @CFNotNull
Wire = tuple[tuple[str, str, str, bool], ...]
_KIND_OF: dict[Any, str] = {str: STR, int: LONG, bool: BOOL}


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def _kind(annotation: Any, attr: str) -> str:
    """The Java type of an annotation: ``X``, ``X | None``, ``Int32`` or ``Int32 | None``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is not Annotated and len(args) == 1:
        annotation = args[0]  # X | None
    if typing.get_origin(annotation) is Annotated:
        return str(annotation.__metadata__[0])
    kind = _KIND_OF.get(annotation)
    if kind is None:
        raise TypeError(f"header field {attr}: no Java type for {annotation!r}")
    return kind


class Header:
    """A header: a frozen dataclass made by ``@header``, with the wire table it derives."""

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
        for attr, key, kind, required in cls.WIRE:
            value: Any = ext.get(key)
            if value is not None:
                if kind == STR:
                    value = str_value(value)
                elif kind == LONG:
                    value = int_value(value, key)
                elif kind == INT:
                    value = int32_value(value, key)
                elif not isinstance(value, bool):  # Boolean.parseBoolean
                    value = str(value).lower() == "true"
            if value is None:
                if required:
                    raise RequestError(f"the custom field <{key}> is null")
                continue  # the field's default: None, or a Java primitive's
            values[attr] = value
        return cls(**values)


@dataclass_transform(frozen_default=True)
def header(cls: type[H]) -> type[H]:
    """Make ``cls`` a frozen, slotted dataclass and derive its ``WIRE`` table from its fields."""
    made = dataclasses.dataclass(frozen=True, slots=True)(cls)
    hints = typing.get_type_hints(made, include_extras=True)
    made.WIRE = tuple(
        (
            field.name,
            _camel(field.name),
            _kind(hints[field.name], field.name),
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING,
        )
        for field in dataclasses.fields(typing.cast(Any, made))
    )
    return made


def require(value: Any, key: str) -> Any:
    """``value``, or RequestError naming the Java field when it is None (a field RocketMQ does
    not mark ``@CFNotNull`` but cannot serve without)."""
    if value is None:
        raise RequestError(f"the custom field <{key}> is null")
    return value


# ---- broker registration ---------------------------------------------------------------------


@header
class GetNextBrokerIdRequest(Header):
    cluster_name: str | None = None
    broker_name: str | None = None


@header
class GetNextBrokerIdResponse(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    next_broker_id: int | None = None


@header
class ApplyBrokerIdRequest(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    applied_broker_id: int | None = None
    register_check_code: str | None = None  # "brokerAddr;timestampMillis"


@header
class ApplyBrokerIdResponse(Header):
    cluster_name: str | None = None
    broker_name: str | None = None


@header
class RegisterBrokerRequest(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    broker_id: int | None = None
    broker_address: str | None = None


@header
class RegisterBrokerResponse(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None


# ---- elections and the SyncStateSet ----------------------------------------------------------


@header
class ElectMasterRequest(Header):
    """``designate_elect`` false: a broker asks (its id is elected when the group never had a
    master); true: an administrator designates ``broker_id``."""

    cluster_name: str
    broker_name: str
    broker_id: int
    designate_elect: bool


@header
class ElectMasterResponse(Header):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None


@header
class AlterSyncStateSetRequest(Header):
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_epoch: Int32 | None = None


@header
class AlterSyncStateSetResponse(Header):
    new_sync_state_set_epoch: Int32 = 0  # a Java int: always written


@header
class GetReplicaInfoRequest(Header):
    broker_name: str | None = None


@header
class GetReplicaInfoResponse(Header):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None


# ---- the controllers, brokers' liveness, administration --------------------------------------


@header
class GetMetaDataResponse(Header):
    """``peers``: ``id:address;`` for each controller; ``is_leader``: whether the controller
    that answers is the active one."""

    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False  # a Java boolean: always written
    peers: str | None = None

    def peer_list(self) -> list[tuple[str, str]]:
        """(id, address) of each peer in ``peers``."""
        out = []
        for item in (self.peers or "").split(";"):
            peer_id, sep, address = item.partition(":")
            if sep and peer_id:
                out.append((peer_id, address))
        return out


@header
class BrokerHeartbeatRequest(Header):
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int | None = None
    epoch: Int32 | None = None
    max_offset: int | None = None
    confirm_offset: int | None = None
    heartbeat_timeout_mills: int | None = None
    election_priority: Int32 | None = None


@header
class NotifyBrokerRoleChangedRequest(Header):
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None
    master_broker_id: int | None = None


@header
class CleanBrokerDataRequest(Header):
    """``broker_controller_ids_to_clean``: ``1;2;3`` (None: the whole group)."""

    broker_name: str
    cluster_name: str | None = None
    broker_controller_ids_to_clean: str | None = None
    is_clean_living_broker: bool = False  # a Java boolean: always written
