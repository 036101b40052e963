"""The bodies of RocketMQ 5's controller requests and responses (RocketMQ 5.1.4's
``remoting.protocol.body`` classes), in fastjson's text: bean fields in name order, null fields
left out, ``Long`` map keys bare, sets as arrays (written in ascending order).

Shapes::

    SyncStateSet             {"syncStateSet":[1,2],"syncStateSetEpoch":3}
                             (ALTER_SYNC_STATE_SET's request and response, REGISTER_BROKER's,
                             GET_REPLICA_INFO's and NOTIFY_BROKER_ROLE_CHANGED's bodies)
    ElectMasterResponseBody  {"brokerMemberGroup":BrokerMemberGroup,"syncStateSet":[2]}
    BrokerMemberGroup        {"brokerAddrs":{1:"127.0.0.1:30911",2:"..."},
                              "brokerName":"broker-a","cluster":"DefaultCluster"}
    broker names             ["broker-a","broker-b"]   (GET_SYNC_STATE_DATA's request)
    BrokerReplicasInfo       {"replicasInfoTable":{"broker-a":ReplicasInfo}}
    ReplicasInfo             {"inSyncReplicas":[ReplicaIdentity],"masterAddress":"...",
                              "masterBrokerId":1,"masterEpoch":2,
                              "notInSyncReplicas":[ReplicaIdentity],"syncStateSetEpoch":3}
    ReplicaIdentity          {"alive":true,"brokerAddress":"...","brokerId":1,
                              "brokerName":"broker-a"}

Decoding accepts strict JSON and fastjson's bare integer keys; a body that is not the shape it
should be is a ``BodyError`` (a ``RequestError``: a request carrying it is answered SYSTEM_ERROR
with the reason).

Pure functions and immutable values, any thread; imports nothing of the controller's server side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..remoting import RequestError
from ..remoting import _fastjson as fastjson


class BodyError(RequestError):
    """A body that is not the JSON of the class it should hold."""


def _doc(body: bytes | bytearray | memoryview | str, what: str) -> Any:
    if not body:
        raise BodyError(f"{what}: the body is empty")
    try:
        return fastjson.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BodyError(f"{what}: the body is not JSON: {exc}") from None


def _object(doc: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise BodyError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _long(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BodyError(f"{what}: not an integer: {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise BodyError(f"{what}: not an integer: {value!r}") from None
    if not -(1 << 63) <= number < (1 << 63):
        raise BodyError(f"{what}: out of range: {value!r}")
    return number


def _opt_long(value: Any, what: str) -> int | None:
    return None if value is None else _long(value, what)


def _opt_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise BodyError(f"{what}: not a string: {value!r}")


def _ids(value: Any, what: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise BodyError(f"{what}: expected an array of broker ids, got {value!r:.80}")
    return frozenset(_long(v, what) for v in value)


def _encode(doc: Any) -> bytes:
    return fastjson.dumps(doc).encode("utf-8")


# ---- SyncStateSet ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncStateSet:
    """The replicas of a group in sync with its master (the master among them), and the epoch
    of this set (one more at each change)."""

    members: frozenset[int] = frozenset()
    epoch: int = 0

    def encode(self) -> bytes:
        return _encode({"syncStateSet": sorted(self.members), "syncStateSetEpoch": self.epoch})

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> SyncStateSet:
        doc = _object(_doc(body, "SyncStateSet"), "SyncStateSet")
        members = _ids(doc.get("syncStateSet"), "SyncStateSet.syncStateSet")
        epoch = _long(doc.get("syncStateSetEpoch", 0), "SyncStateSet.syncStateSetEpoch")
        if not -(1 << 31) <= epoch < (1 << 31):
            raise BodyError(f"SyncStateSet.syncStateSetEpoch: out of range: {epoch}")
        return cls(members, epoch)


# ---- ElectMasterResponseBody and BrokerMemberGroup ------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerMemberGroup:
    """The replicas of a broker group: broker id → address."""

    cluster: str | None
    broker_name: str | None
    broker_addrs: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "broker_addrs", MappingProxyType(dict(sorted(self.broker_addrs.items())))
        )

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"brokerAddrs": dict(self.broker_addrs)}
        if self.broker_name is not None:
            doc["brokerName"] = self.broker_name
        if self.cluster is not None:
            doc["cluster"] = self.cluster
        return doc

    def encode(self) -> bytes:
        return _encode(self.to_doc())

    @classmethod
    def from_doc(cls, doc: Any, what: str = "BrokerMemberGroup") -> BrokerMemberGroup:
        doc = _object(doc, what)
        addrs = doc.get("brokerAddrs") or {}
        if not isinstance(addrs, dict):
            raise BodyError(f"{what}.brokerAddrs: expected an object, got {addrs!r:.80}")
        table: dict[int, str] = {}
        for key, value in addrs.items():
            address = _opt_str(value, f"{what}.brokerAddrs")
            if address is not None:
                table[_long(key, f"{what}.brokerAddrs")] = address
        return cls(
            _opt_str(doc.get("cluster"), f"{what}.cluster"),
            _opt_str(doc.get("brokerName"), f"{what}.brokerName"),
            table,
        )

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> BrokerMemberGroup:
        return cls.from_doc(_doc(body, "BrokerMemberGroup"))


@dataclass(frozen=True, slots=True)
class ElectMasterResponseBody:
    """ELECT_MASTER's answer: the group's members (None when the master did not change) and the
    SyncStateSet after the election."""

    broker_member_group: BrokerMemberGroup | None
    sync_state_set: frozenset[int]

    def encode(self) -> bytes:
        doc: dict[str, Any] = {}
        if self.broker_member_group is not None:
            doc["brokerMemberGroup"] = self.broker_member_group.to_doc()
        doc["syncStateSet"] = sorted(self.sync_state_set)
        return _encode(doc)

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> ElectMasterResponseBody:
        doc = _object(_doc(body, "ElectMasterResponseBody"), "ElectMasterResponseBody")
        group = doc.get("brokerMemberGroup")
        return cls(
            None if group is None else BrokerMemberGroup.from_doc(group),
            _ids(doc.get("syncStateSet"), "ElectMasterResponseBody.syncStateSet"),
        )


# ---- GET_SYNC_STATE_DATA --------------------------------------------------------------------


def encode_broker_names(names: Iterable[str]) -> bytes:
    return _encode(list(names))


def decode_broker_names(body: bytes | bytearray | memoryview | str) -> list[str]:
    """The broker names of a GET_SYNC_STATE_DATA request (an empty list for an empty body)."""
    if not body:
        return []
    doc = _doc(body, "broker names")
    if not isinstance(doc, list) or not all(isinstance(n, str) for n in doc):
        raise BodyError(f"broker names: expected an array of strings, got {doc!r:.80}")
    return list(doc)


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    broker_name: str | None
    broker_id: int | None
    broker_address: str | None
    alive: bool | None = None

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.alive is not None:
            doc["alive"] = self.alive
        if self.broker_address is not None:
            doc["brokerAddress"] = self.broker_address
        if self.broker_id is not None:
            doc["brokerId"] = self.broker_id
        if self.broker_name is not None:
            doc["brokerName"] = self.broker_name
        return doc

    @classmethod
    def from_doc(cls, doc: Any) -> ReplicaIdentity:
        doc = _object(doc, "ReplicaIdentity")
        alive = doc.get("alive")
        if alive is not None and not isinstance(alive, bool):
            raise BodyError(f"ReplicaIdentity.alive: not a boolean: {alive!r}")
        return cls(
            _opt_str(doc.get("brokerName"), "ReplicaIdentity.brokerName"),
            _opt_long(doc.get("brokerId"), "ReplicaIdentity.brokerId"),
            _opt_str(doc.get("brokerAddress"), "ReplicaIdentity.brokerAddress"),
            alive,
        )


@dataclass(frozen=True, slots=True)
class ReplicasInfo:
    """A group as GET_SYNC_STATE_DATA shows it: its master, both epochs, and its replicas in and
    out of the SyncStateSet (each with whether the controller hears its heartbeats)."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync_replicas: tuple[ReplicaIdentity, ...] = ()
    not_in_sync_replicas: tuple[ReplicaIdentity, ...] = ()

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"inSyncReplicas": [r.to_doc() for r in self.in_sync_replicas]}
        if self.master_address is not None:
            doc["masterAddress"] = self.master_address
        if self.master_broker_id is not None:
            doc["masterBrokerId"] = self.master_broker_id
        doc["masterEpoch"] = self.master_epoch
        doc["notInSyncReplicas"] = [r.to_doc() for r in self.not_in_sync_replicas]
        doc["syncStateSetEpoch"] = self.sync_state_set_epoch
        return doc

    @classmethod
    def from_doc(cls, doc: Any) -> ReplicasInfo:
        doc = _object(doc, "ReplicasInfo")

        def replicas(key: str) -> tuple[ReplicaIdentity, ...]:
            items = doc.get(key) or []
            if not isinstance(items, list):
                raise BodyError(f"ReplicasInfo.{key}: expected an array, got {items!r:.80}")
            return tuple(ReplicaIdentity.from_doc(i) for i in items)

        return cls(
            _opt_long(doc.get("masterBrokerId"), "ReplicasInfo.masterBrokerId"),
            _opt_str(doc.get("masterAddress"), "ReplicasInfo.masterAddress"),
            _long(doc.get("masterEpoch", 0), "ReplicasInfo.masterEpoch"),
            _long(doc.get("syncStateSetEpoch", 0), "ReplicasInfo.syncStateSetEpoch"),
            replicas("inSyncReplicas"),
            replicas("notInSyncReplicas"),
        )


@dataclass(frozen=True, slots=True)
class BrokerReplicasInfo:
    """GET_SYNC_STATE_DATA's answer: broker name → ReplicasInfo (the names the controller
    knows; unknown ones are left out)."""

    table: Mapping[str, ReplicasInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "table", MappingProxyType(dict(self.table)))

    def encode(self) -> bytes:
        return _encode({"replicasInfoTable": {k: v.to_doc() for k, v in self.table.items()}})

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> BrokerReplicasInfo:
        doc = _object(_doc(body, "BrokerReplicasInfo"), "BrokerReplicasInfo")
        table = doc.get("replicasInfoTable") or {}
        if not isinstance(table, dict):
            raise BodyError(f"BrokerReplicasInfo.replicasInfoTable: not an object: {table!r:.80}")
        return cls({str(k): ReplicasInfo.from_doc(v) for k, v in table.items()})
