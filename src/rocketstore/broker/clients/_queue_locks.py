"""Queue locks for orderly consumers (RocketMQ's RebalanceLockManager): LOCK_BATCH_MQ (41) and
UNLOCK_BATCH_MQ (42).

An orderly push consumer consumes a queue only while it holds the queue's lock on the broker, so
that one client of a group at a time sees the queue's messages, in order. A lock belongs to a
client id, is renewed by locking again (the client does so every 20 s) and lapses after
``LOCK_MAX_LIVE_MS`` (60 s) without renewal; an unlock by its holder frees it at once.

Bodies (JSON as the Java and C++ clients write it)::

    request:  {"consumerGroup": G, "clientId": C, "mqSet": [{"brokerName", "queueId", "topic"}]}
    response: {"lockOKMQSet": [{"brokerName", "queueId", "topic"}, ...]}   (41 only)

Loop thread only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ...acl._remoting import check_then
from ...remoting import Connection, RemotingCommand, ResponseCode
from ...remoting._fastjson import loads_lenient
from ...store._clock import SYSTEM_CLOCK, Clock
from .._services import HasClock

RC = ResponseCode
LOCK_BATCH_MQ = 41
UNLOCK_BATCH_MQ = 42
LOCK_MAX_LIVE_MS = 60_000


class LockContext(HasClock, Protocol):
    """What the queue locks use of the broker."""


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


@dataclass(slots=True)
class _Lock:
    client_id: str
    renewed_ms: int


class QueueLocks:
    """Per group, which client holds which queue."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, max_live_ms: int = LOCK_MAX_LIVE_MS) -> None:
        self._clock = clock
        self._max_live_ms = max_live_ms
        self._table: dict[str, dict[QueueKey, _Lock]] = {}

    def try_lock(self, group: str, queues: Iterable[QueueKey], client_id: str) -> list[QueueKey]:
        """Lock (or renew) each queue free, lapsed or already ``client_id``'s; the ones locked."""
        now = self._clock.now_ms()
        locks = self._table.setdefault(group, {})
        out = []
        for mq in queues:
            held = locks.get(mq)
            if held is None or held.client_id == client_id or self._lapsed(held, now):
                locks[mq] = _Lock(client_id, now)
                out.append(mq)
        return out

    def unlock(self, group: str, queues: Iterable[QueueKey], client_id: str) -> None:
        """Free the queues ``client_id`` holds (others' locks stay)."""
        locks = self._table.get(group)
        if not locks:
            return
        for mq in queues:
            held = locks.get(mq)
            if held is not None and held.client_id == client_id:
                del locks[mq]
        if not locks:
            del self._table[group]

    def holder(self, group: str, mq: QueueKey) -> str | None:
        """The client holding ``mq`` for ``group`` now, None when nobody does."""
        held = self._table.get(group, {}).get(mq)
        if held is None or self._lapsed(held, self._clock.now_ms()):
            return None
        return held.client_id

    def _lapsed(self, held: _Lock, now: int) -> bool:
        return now - held.renewed_ms > self._max_live_ms


@dataclass(frozen=True, slots=True)
class LockRequest:
    """A decoded LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body: the object the ACL checks (its group
    and its queues' topics) and the handler acts on."""

    group: str
    client_id: str
    queues: tuple[QueueKey, ...]

    @property
    def topics(self) -> list[str]:
        return [q.topic for q in self.queues]


def parse_lock_request(body: bytes | bytearray | memoryview) -> LockRequest:
    """ValueError when the body is not a lock request."""
    try:
        doc = loads_lenient(bytes(body).decode("utf-8"))
        group = doc["consumerGroup"]
        client_id = doc["clientId"]
        queues = tuple(
            QueueKey(str(q["topic"]), str(q["brokerName"]), int(q["queueId"]))
            for q in doc.get("mqSet") or []
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError) as exc:
        raise ValueError(f"bad lock request body: {exc}") from None
    if not isinstance(group, str) or not isinstance(client_id, str):
        raise ValueError("bad lock request body: consumerGroup and clientId must be strings")
    return LockRequest(group, client_id, queues)


class QueueLockProcessor:
    def __init__(self, broker: LockContext) -> None:
        self.locks = QueueLocks(broker.clock)

    def handlers(self) -> dict[int, Any]:
        return {LOCK_BATCH_MQ: self.lock_batch, UNLOCK_BATCH_MQ: self.unlock_batch}

    def lock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            request = parse_lock_request(cmd.body)
        except ValueError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, str(exc))
        refused = check_then(cmd, request)
        if refused is not None:
            return refused
        locked = self.locks.try_lock(request.group, request.queues, request.client_id)
        body = json.dumps({"lockOKMQSet": [mq.to_json() for mq in locked]}, separators=(",", ":"))
        return RemotingCommand.response(RC.SUCCESS, None, {}, body.encode())

    def unlock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            request = parse_lock_request(cmd.body)
        except ValueError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, str(exc))
        refused = check_then(cmd, request)
        if refused is not None:
            return refused
        self.locks.unlock(request.group, request.queues, request.client_id)
        return RemotingCommand.response(RC.SUCCESS)
