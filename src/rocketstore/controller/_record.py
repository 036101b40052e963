"""A broker group's record: what the controller keeps of one group (RocketMQ 5.1.4's
BrokerReplicaInfo and SyncStateInfo of one broker name, in one value), and its stored form.

A record is immutable: every change makes a new one, and a backend stores it only with a
compare-and-set on the revision it was read at, so two writers can never both change a group.

Stored form (UTF-8 JSON, the same in the file backend and in etcd)::

    {"v": 1,
     "cluster": "DefaultCluster", "broker": "broker-a",
     "nextBrokerId": 3,                          next id GET_NEXT_BROKER_ID offers
     "replicas": [{"id": 1, "address": "127.0.0.1:30911",
                   "checkCode": "127.0.0.1:30911;1700000000000"}, ...],
     "masterId": 1,                              null: no master now
     "masterEpoch": 2,                           one more at each election (or loss of master)
     "syncStateSet": [1, 2],
     "syncStateSetEpoch": 3}                     one more at each change of the set

A record that is not this shape is a ``StateCorruptError``; nothing is guessed.

Pure values; any thread.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ._errors import StateCorruptError

FORMAT_VERSION = 1
FIRST_BROKER_ID = 1  # RocketMQ's MixAll.FIRST_BROKER_CONTROLLER_ID


@dataclass(frozen=True, slots=True)
class Replica:
    broker_id: int
    address: str
    check_code: str  # "address;timestampMillis", as the broker applied for its id


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One broker group: its replicas (broker id → Replica), the next id to offer, its master
    (None: none now), the master epoch, and the SyncStateSet with its epoch."""

    cluster_name: str
    broker_name: str
    replicas: Mapping[int, Replica] = field(default_factory=dict)
    next_broker_id: int = FIRST_BROKER_ID
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", MappingProxyType(dict(sorted(self.replicas.items()))))

    # ---- reads ------------------------------------------------------------------------------

    def address_of(self, broker_id: int | None) -> str | None:
        replica = None if broker_id is None else self.replicas.get(broker_id)
        return None if replica is None else replica.address

    @property
    def master_address(self) -> str | None:
        return self.address_of(self.master_id)

    @property
    def never_had_master(self) -> bool:
        """No election has ever happened in this group (RocketMQ's isFirstTimeForElect)."""
        return self.master_epoch == 0

    def addresses(self) -> dict[int, str]:
        return {i: r.address for i, r in self.replicas.items()}

    # ---- changes (each a new record) -----------------------------------------------------------

    def with_replica(self, broker_id: int, address: str, check_code: str) -> GroupRecord:
        """A replica added under ``broker_id`` (the next id to offer moves on by one, as
        RocketMQ counts applications)."""
        replicas = dict(self.replicas)
        replicas[broker_id] = Replica(broker_id, address, check_code)
        return replace(self, replicas=replicas, next_broker_id=self.next_broker_id + 1)

    def with_address(self, broker_id: int, address: str) -> GroupRecord:
        old = self.replicas[broker_id]
        replicas = dict(self.replicas)
        replicas[broker_id] = Replica(broker_id, address, old.check_code)
        return replace(self, replicas=replicas)

    def with_master(self, master_id: int | None) -> GroupRecord:
        """A new master (the master epoch one more); with a master the SyncStateSet becomes
        just it (its epoch one more); without one (the master lost and none electable) the set
        stays as it was."""
        record = replace(self, master_id=master_id, master_epoch=self.master_epoch + 1)
        if master_id is None:
            return record
        return record.with_sync_state_set(frozenset({master_id}))

    def with_sync_state_set(self, members: frozenset[int]) -> GroupRecord:
        return replace(
            self,
            sync_state_set=frozenset(members),
            sync_state_set_epoch=self.sync_state_set_epoch + 1,
        )

    def without_replicas(self, broker_ids: frozenset[int]) -> GroupRecord:
        replicas = {i: r for i, r in self.replicas.items() if i not in broker_ids}
        return replace(self, replicas=replicas, sync_state_set=self.sync_state_set - broker_ids)

    # ---- stored form --------------------------------------------------------------------------

    def encode(self) -> bytes:
        doc = {
            "v": FORMAT_VERSION,
            "cluster": self.cluster_name,
            "broker": self.broker_name,
            "nextBrokerId": self.next_broker_id,
            "replicas": [
                {"id": r.broker_id, "address": r.address, "checkCode": r.check_code}
                for r in self.replicas.values()
            ],
            "masterId": self.master_id,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
        }
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | str) -> GroupRecord:
        """The record stored as ``data``; StateCorruptError when it is not one."""
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise StateCorruptError(f"a group record that is not JSON: {exc}") from None
        return cls.from_doc(doc)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.encode())
        return doc

    @classmethod
    def from_doc(cls, doc: Any) -> GroupRecord:
        if not isinstance(doc, dict):
            raise StateCorruptError(f"a group record that is not an object: {doc!r:.80}")
        if doc.get("v") != FORMAT_VERSION:
            raise StateCorruptError(f"a group record of format {doc.get('v')!r}, not 1")
        try:
            replicas = {}
            for item in doc["replicas"]:
                replica = Replica(_int(item["id"]), _str(item["address"]), _str(item["checkCode"]))
                replicas[replica.broker_id] = replica
            master = doc["masterId"]
            record = cls(
                cluster_name=_str(doc["cluster"]),
                broker_name=_str(doc["broker"]),
                replicas=replicas,
                next_broker_id=_int(doc["nextBrokerId"]),
                master_id=None if master is None else _int(master),
                master_epoch=_int(doc["masterEpoch"]),
                sync_state_set=frozenset(_int(i) for i in doc["syncStateSet"]),
                sync_state_set_epoch=_int(doc["syncStateSetEpoch"]),
            )
        except KeyError as exc:
            raise StateCorruptError(f"a group record without {exc}: {doc!r:.200}") from None
        except TypeError as exc:
            raise StateCorruptError(f"a group record with {exc}: {doc!r:.200}") from None
        if record.master_epoch < 0 or record.sync_state_set_epoch < 0:
            raise StateCorruptError(f"a group record with a negative epoch: {doc!r:.200}")
        return record


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} where an integer belongs")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} where a string belongs")
    return value
