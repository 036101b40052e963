"""The etcd backend: several controllers over one etcd cluster, one of them active.

Keys, under ``<prefix>/<controller group>`` (default ``/rocketstore/controller/group1``)::

    .../leader              {"id": "n0", "address": "127.0.0.1:9878"}  bound to the active
                            controller's lease: it goes when the lease expires
    .../members/<id>        {"id": ..., "address": ...}                 each controller's, bound
                            to its lease (GET_METADATA_INFO's peers)
    .../groups/<broker name>  the group's record (``_record``); its revision is the key's
                            mod_revision

Leadership: each controller holds a lease of ``ttl_s`` seconds and renews it every third of
that. The one that creates ``leader`` (a transaction: create it if it does not exist) is active
until its lease expires or it deletes the key. A controller counts itself active only until
``sent + TTL`` of its last renewal (the time the renewal was sent, so never past the moment
etcd lets the lease go); past that it answers NOT_LEADER even if etcd is out of reach.

Every write is one transaction that compares both the group key's mod_revision with the
revision the record was read at and the ``leader`` key's create_revision with the one this
controller created it at: a write from a controller whose leadership has gone (its lease expired
and another took over, even if it has not noticed) is refused by etcd, as is a write over a
record someone changed since it was read. So two controllers never both change a group, and
epochs only grow.

Loop thread.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..store._clock import SYSTEM_CLOCK, Clock
from ._backend import Member, StateBackend, Versioned
from ._errors import BackendUnavailableError, LeadershipLostError, StateCorruptError
from ._etcd_client import (
    EtcdAuthError,
    EtcdClient,
    EtcdRequestError,
    EtcdSecurity,
    KeyValue,
    b64,
    prefix_end,
)
from ._record import GroupRecord

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/rocketstore/controller"
DEFAULT_TTL_S = 5
NOT_FOUND = 5  # gRPC's code for "requested lease not found"


def _member_of(kv: KeyValue) -> Member | None:
    try:
        doc = json.loads(kv.value)
        return Member(str(doc["id"]), str(doc["address"]))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _range_kvs(response: dict[str, Any]) -> list[KeyValue]:
    found = response.get("response_range", {}).get("kvs", [])
    return [KeyValue.from_doc(kv) for kv in found]


class EtcdBackend(StateBackend):
    """The state of the controllers of ``group`` in the etcd cluster at ``endpoints``."""

    kind = "etcd"

    def __init__(
        self,
        endpoints: list[str],
        group: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl_s: int = DEFAULT_TTL_S,
        timeout_s: float = 2.0,
        clock: Clock = SYSTEM_CLOCK,
        security: EtcdSecurity | None = None,
    ) -> None:
        self.client = EtcdClient(endpoints, timeout=timeout_s, security=security)
        self.clock = clock
        self.ttl_s = ttl_s
        root = f"{prefix.rstrip('/')}/{group}"
        self.leader_key = f"{root}/leader".encode()
        self.members_prefix = f"{root}/members/".encode()
        self.groups_prefix = f"{root}/groups/".encode()
        self._lease: int | None = None
        self._lease_deadline = 0.0  # monotonic: the lease is surely alive until then
        self._leader_revision: int | None = None  # create_revision of the leader key we made

    def _group_key(self, broker_name: str) -> bytes:
        return self.groups_prefix + broker_name.encode("utf-8")

    async def open(self) -> None:
        """With a user: its credentials tried now, so that wrong ones stop the start with
        etcd's reason (EtcdAuthError). etcd out of reach is no error: it is reached at the
        first call, and until then this controller is a standby."""
        if not self.client.security.user:
            return
        try:
            await self.client.call("/v3/kv/range", {"key": b64(self.leader_key)})
        except EtcdAuthError:
            raise
        except (BackendUnavailableError, EtcdRequestError) as exc:
            log.warning("controller: etcd not reached at start (%s); trying again", exc)

    async def close(self) -> None:
        await self.release_leadership()

    # ---- leadership ---------------------------------------------------------------------------

    async def _renew_lease(self) -> bool:
        """A live lease of our own (granted anew when there is none); False when it was lost."""
        sent = self.clock.monotonic()
        if self._lease is not None:
            try:
                ttl = await self.client.keepalive(self._lease)
            except EtcdRequestError as exc:
                if exc.grpc_code != NOT_FOUND:
                    raise
                ttl = 0
            if ttl > 0:
                self._lease_deadline = sent + ttl
                return True
            log.warning("controller: etcd lease %x expired", self._lease)
            self._lease = None
            self._leader_revision = None
            return False
        self._lease = await self.client.grant(self.ttl_s)
        self._lease_deadline = sent + self.ttl_s
        return True

    async def take_leadership(self, me: Member) -> bool:
        try:
            if not await self._renew_lease():
                await self._renew_lease()  # a new lease; the leadership of the old one is gone
        except EtcdRequestError as exc:
            raise BackendUnavailableError(str(exc)) from exc
        lease = self._lease
        assert lease is not None
        value = b64(json.dumps({"id": me.member_id, "address": me.address}))
        member_key = b64(self.members_prefix + me.member_id.encode("utf-8"))
        put_member = {"request_put": {"key": member_key, "value": value, "lease": str(lease)}}
        ok, _rev, responses = await self.client.txn(
            [{"key": b64(self.leader_key), "target": "CREATE", "result": "EQUAL",
              "create_revision": "0"}],
            [{"request_put": {"key": b64(self.leader_key), "value": value, "lease": str(lease)}},
             put_member, {"request_range": {"key": b64(self.leader_key)}}],
            [{"request_range": {"key": b64(self.leader_key)}}, put_member],
        )  # fmt: skip
        found = _range_kvs(responses[2] if ok else responses[0])
        if found and found[0].lease == lease:
            if self._leader_revision != found[0].create_revision:
                self._leader_revision = found[0].create_revision
            return self.holds_leadership()
        self._leader_revision = None
        return False

    def holds_leadership(self) -> bool:
        return self._leader_revision is not None and self.clock.monotonic() < self._lease_deadline

    async def release_leadership(self) -> None:
        lease, self._lease = self._lease, None
        revision, self._leader_revision = self._leader_revision, None
        if lease is None:
            return
        try:
            if revision is not None:
                await self.client.txn(
                    [{"key": b64(self.leader_key), "target": "CREATE", "result": "EQUAL",
                      "create_revision": str(revision)}],
                    [{"request_delete_range": {"key": b64(self.leader_key)}}],
                )  # fmt: skip
            await self.client.revoke(lease)
        except (BackendUnavailableError, EtcdRequestError) as exc:
            log.warning("controller: could not give up the etcd lease (it expires): %s", exc)

    async def leader(self) -> Member | None:
        found = await self.client.range(self.leader_key)
        return _member_of(found[0]) if found else None

    async def members(self) -> list[Member]:
        found = await self.client.range(self.members_prefix, prefix_end(self.members_prefix))
        return [m for m in (_member_of(kv) for kv in found) if m is not None]

    # ---- records ------------------------------------------------------------------------------

    def _versioned(self, kv: KeyValue) -> Versioned:
        try:
            record = GroupRecord.decode(kv.value)
        except StateCorruptError as exc:
            raise StateCorruptError(f"etcd key {kv.key.decode(errors='replace')}: {exc}") from None
        return Versioned(record, kv.mod_revision)

    async def read(self, broker_name: str) -> Versioned | None:
        found = await self.client.range(self._group_key(broker_name))
        return self._versioned(found[0]) if found else None

    async def read_all(self) -> dict[str, Versioned]:
        found = await self.client.range(self.groups_prefix, prefix_end(self.groups_prefix))
        out = {}
        for kv in found:
            name = kv.key[len(self.groups_prefix) :].decode("utf-8", errors="replace")
            out[name] = self._versioned(kv)
        return out

    async def compare_and_set(
        self, broker_name: str, record: GroupRecord | None, revision: int
    ) -> int | None:
        leader_revision = self._leader_revision
        if leader_revision is None or not self.holds_leadership():
            raise LeadershipLostError("this controller does not hold the etcd leadership")
        key = b64(self._group_key(broker_name))
        if record is None:
            change: dict[str, Any] = {"request_delete_range": {"key": key}}
        else:
            change = {"request_put": {"key": key, "value": b64(record.encode())}}
        ok, new_revision, responses = await self.client.txn(
            [
                {"key": b64(self.leader_key), "target": "CREATE", "result": "EQUAL",
                 "create_revision": str(leader_revision)},
                {"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)},
            ],
            [change],
            [{"request_range": {"key": b64(self.leader_key)}}],
        )  # fmt: skip
        if ok:
            return new_revision
        leader = _range_kvs(responses[0])
        if not leader or leader[0].create_revision != leader_revision:
            self._leader_revision = None
            raise LeadershipLostError("another controller holds the etcd leadership now")
        return None
