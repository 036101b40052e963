"""Pop consumption state: which messages of a queue a consumer group has handed out, until when
they stay invisible to the group's other consumers, and which are done.

RocketMQ 5.x consumers (the gRPC front end's ReceiveMessage, the remoting front end's POP) do not
own queues: any consumer of a group may receive from any queue, and each message it gets stays
*invisible* to the rest of the group for a while. The consumer acks it when processed, or asks
for more time; an unacked message becomes visible again when its time runs out and is handed out
once more with its delivery attempt one higher. After the last allowed attempt it is due for the
dead-letter topic ``%DLQ%<group>`` instead.

Per (group, topic, queue) this module keeps::

      acked            in flight / acked            never handed out
    ──────────────┬──────────────────────────────┬──────────────────────────►  queue offset
                progress                     next_offset

- ``next_offset``: the first offset never handed out (after skipping what the group's filter
  does not match).
- ``in flight``: offsets handed out and not yet acked, each with its commit-log offset, delivery
  attempt, when its current receipt handle was issued, its invisible time, and a random token
  naming that handle. Every other offset below ``next_offset`` is done.
- ``progress`` (the group's consume offset): the smallest in-flight offset, else
  ``next_offset``. It advances over the contiguous done prefix by itself.

The state does not touch the store: :meth:`PopState.receive` takes a ``read`` callable that says
which messages from an offset match the consumer's filter (queue offset and commit-log offset
only), and the caller fetches the messages themselves.

Receipt handles are opaque ASCII strings: base64url of a JSON array (group, topic, queue id,
queue offset, commit-log offset, issue time, invisible time, attempt, token) and an HMAC-SHA256
over it under the state's secret. A handle is accepted while it is the current handle of its
message: a forged or damaged handle fails the HMAC, and a stale one (acked already, superseded by
a change of invisibility, or handed to another consumer after it expired) no longer names the
entry's token. A handle still works after its invisible time ran out as long as nobody else has
been handed the message since.

Persistence (``<dir>/popState.json``, written by :meth:`PopState.persist`: tmp file, fsync,
rename, directory fsync, with the previous good file kept as ``.bak``). The broker calls persist
periodically and at shutdown; a crash loses what changed since the last persist, and delivery is
at-least-once across it:

- a hand-out not yet persisted: the message is handed out again as a first delivery; the handle
  the consumer holds is refused (its token is unknown), so its ack fails and the message may be
  processed twice;
- an ack not yet persisted: the message is still in flight in the file and comes back after its
  invisible time;
- a change of invisibility not yet persisted: the old deadline applies and the new handle is
  refused.

Nothing is lost: an offset is only ever marked done by an ack (or a filter skip, a reset, or the
ack that follows a dead-letter put) that the file records. Handles stay valid across a clean
restart (the HMAC secret is kept in the file unless the broker passes one in).

Deadlines are wall-clock milliseconds (``clock.now_ms()``), so they keep their meaning across a
restart; a jump of the wall clock moves them all.

Threads: every method may be called from any thread; one lock serialises them. ``receive``
calls ``read`` while holding it, so ``read`` must be short and must not call back into the
PopState. ``persist`` takes its snapshot under the lock and writes outside it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import hmac
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ...store._clock import SYSTEM_CLOCK, Clock
from .._errors import BrokerError
from ._json_file import ConfigFile

POP_STATE_FILE = "popState.json"
# RocketMQ's default: 16 retries after the first delivery (the subscription group's
# retryMaxTimes), so 17 deliveries in all.
DEFAULT_MAX_DELIVERY_ATTEMPTS = 17
# How long a message handed to the broker for the dead-letter topic waits for that put's ack
# before it is offered again.
DEFAULT_DEAD_LETTER_RETRY_MS = 30_000
# At most this many reads per receive when the filter skips everything read.
_MAX_READS = 8
_HANDLE_VERSION = 1
_MAC_BYTES = 16
_FORMAT_VERSION = 1

QueueKey = tuple[str, str, int]


class InvalidReceiptHandleError(BrokerError, ValueError):
    """A receipt handle is malformed, forged, or no longer the current handle of its message
    (INVALID_RECEIPT_HANDLE on the wire)."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """One handed-out message as its receipt handle describes it."""

    handle: str
    group: str
    topic: str
    queue_id: int
    offset: int
    phys_offset: int
    # when this handle was issued: the delivery, or the last change of invisibility (epoch ms)
    deliver_time_ms: int
    invisible_ms: int
    # 1 for the first delivery
    attempt: int
    token: int

    @property
    def invisible_until_ms(self) -> int:
        """When the message becomes visible to the group again unless acked or extended."""
        return self.deliver_time_ms + self.invisible_ms


class ReadBatch(NamedTuple):
    """What a ``read(offset, max_count)`` callable found from ``offset`` on."""

    # (queue offset, commit-log offset) of the messages to hand out, offsets ascending and in
    # [offset, next_offset); at most max_count of them
    found: Sequence[tuple[int, int]]
    # where the next read starts: every offset below it that is not in ``found`` is skipped for
    # good (filtered out, or below the queue's minimum); ``offset`` itself when nothing is there
    next_offset: int


@dataclass(frozen=True, slots=True)
class Received:
    """The result of :meth:`PopState.receive`."""

    # for the consumer, expired redeliveries first, then new messages by offset
    deliveries: tuple[Receipt, ...]
    # for the broker: put each message into %DLQ%<group>, then ack its handle
    dead_letters: tuple[Receipt, ...]


@dataclass(frozen=True, slots=True)
class PopStatistics:
    queues: int
    in_flight: int
    dead_letters_pending: int


@dataclass(slots=True)
class _Entry:
    offset: int
    phys_offset: int
    attempt: int
    deliver_time_ms: int
    invisible_ms: int
    token: int
    # handed to the broker for the dead-letter topic rather than to a consumer
    dead: bool = False

    @property
    def deadline(self) -> int:
        return self.deliver_time_ms + self.invisible_ms


@dataclass(slots=True)
class _Queue:
    next_offset: int
    entries: dict[int, _Entry] = field(default_factory=dict)
    # (deadline, offset, token); entries whose token or deadline changed are skipped when popped
    deadlines: list[tuple[int, int, int]] = field(default_factory=list)

    def progress(self) -> int:
        return min(self.entries) if self.entries else self.next_offset

    def schedule(self, entry: _Entry) -> None:
        heapq.heappush(self.deadlines, (entry.deadline, entry.offset, entry.token))

    def current(self, item: tuple[int, int, int]) -> _Entry | None:
        deadline, offset, token = item
        entry = self.entries.get(offset)
        if entry is None or entry.token != token or entry.deadline != deadline:
            return None
        return entry


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PopState:
    """The pop state of every (group, topic, queue) of one broker.

    ``path`` is the state file (None: kept in memory only). ``secret`` keys the receipt
    handles' HMAC; when None, the file's secret is used, or a new random one is made and stored
    in the file. ``token`` makes the random token of each new handle (tests may fix it).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        secret: bytes | None = None,
        dead_letter_retry_ms: int = DEFAULT_DEAD_LETTER_RETRY_MS,
        token: Callable[[], int] | None = None,
    ) -> None:
        if dead_letter_retry_ms <= 0:
            raise ValueError(f"dead_letter_retry_ms must be positive, not {dead_letter_retry_ms}")
        self._clock = clock
        self._dead_letter_retry_ms = dead_letter_retry_ms
        self._token = token if token is not None else lambda: secrets.randbits(63)
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._queues: dict[QueueKey, _Queue] = {}
        self._changes = 0
        self._persisted_changes = 0
        self._file = ConfigFile(Path(path)) if path is not None else None
        stored_secret: bytes | None = None
        if self._file is not None:
            loaded = self._file.load(_decode_state)
            if loaded is not None:
                stored_secret, self._queues = loaded
        # a secret given by the caller is not written to the file
        self._secret_in_file = secret is None
        self._secret = secret if secret is not None else stored_secret or secrets.token_bytes(32)
        if self._file is not None and self._secret_in_file and self._secret != stored_secret:
            self._changes += 1  # the file must learn the new secret

    # ---- receiving ---------------------------------------------------------------------------

    def receive(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_nums: int,
        invisible_ms: int,
        *,
        read: Callable[[int, int], ReadBatch],
        start_offset: int | Callable[[], int] = 0,
        max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
        orderly: bool = False,
    ) -> Received:
        """Hand out up to ``max_nums`` messages of one queue to a consumer of ``group``, each
        invisible to the group for ``invisible_ms`` from now.

        Messages whose invisible time ran out come first (attempt + 1); then new ones from
        ``read(next_offset, count)``. ``start_offset`` (or its result, asked once) is where a
        queue the group never received from begins. An expired message that already had
        ``max_delivery_attempts`` deliveries is not redelivered but returned in
        ``dead_letters``: the caller puts it into %DLQ%<group> and acks its handle; unacked,
        it is offered again after ``dead_letter_retry_ms``.

        ``orderly`` (a FIFO group): the queue is handed out in offset order, one batch at a
        time. While any message of the queue is invisible nothing is handed out; once every
        unacked one is visible again they come back first, in offset order, then new ones.

        Any thread (see the module docstring about ``read``).
        """
        if max_nums <= 0:
            raise ValueError(f"max_nums must be positive, not {max_nums}")
        if invisible_ms < 0:
            raise ValueError(f"invisible_ms must not be negative, not {invisible_ms}")
        if max_delivery_attempts <= 0:
            raise ValueError(f"max_delivery_attempts must be positive, not {max_delivery_attempts}")
        key = (group, topic, queue_id)
        with self._lock:
            now = self._clock.now_ms()
            queue = self._queues.get(key)
            if queue is None:
                first = start_offset() if callable(start_offset) else start_offset
                if first < 0:
                    raise ValueError(f"start offset must not be negative, not {first}")
                queue = self._queues[key] = _Queue(next_offset=first)
                self._changes += 1
            if orderly:
                if any(e.deadline > now for e in queue.entries.values()):
                    return Received((), ())  # the last batch is still out
                expired, dead = self._take_all_expired(queue, max_nums, max_delivery_attempts)
            else:
                expired, dead = self._take_expired(queue, now, max_nums, max_delivery_attempts)
            unsent = len(queue.entries) - len(expired) - len(dead)
            # an orderly queue with expired messages left over (more than max_nums) reads
            # nothing new until those are out
            room = 0 if orderly and unsent else max_nums - len(expired)
            try:
                fresh, next_offset = self._read_fresh(queue, read, room)
            except BaseException:
                for entry in expired + dead:
                    queue.schedule(entry)  # untouched: back on the heap as they were
                raise
            deliveries: list[Receipt] = []
            for entry in expired:
                entry.attempt += 1
                deliveries.append(self._issue(key, queue, entry, now, invisible_ms))
            for offset, phys_offset in fresh:
                entry = _Entry(offset, phys_offset, 1, now, invisible_ms, 0)
                queue.entries[offset] = entry
                deliveries.append(self._issue(key, queue, entry, now, invisible_ms))
            dead_letters: list[Receipt] = []
            for entry in dead:
                entry.dead = True
                dead_letters.append(self._issue(key, queue, entry, now, self._dead_letter_retry_ms))
            if next_offset != queue.next_offset or deliveries or dead_letters:
                queue.next_offset = next_offset
                self._changes += 1
            return Received(tuple(deliveries), tuple(dead_letters))

    def _take_expired(
        self, queue: _Queue, now: int, max_nums: int, max_attempts: int
    ) -> tuple[list[_Entry], list[_Entry]]:
        """Pop the expired entries off the deadline heap: up to ``max_nums`` to redeliver, and
        every expired one that is (or is already marked) due for the dead-letter topic."""
        expired: list[_Entry] = []
        dead: list[_Entry] = []
        heap = queue.deadlines
        while heap and heap[0][0] <= now:
            entry = queue.current(heap[0])
            if entry is None:
                heapq.heappop(heap)
                continue
            if entry.dead or entry.attempt >= max_attempts:
                dead.append(entry)
            elif len(expired) < max_nums:
                expired.append(entry)
            else:
                break
            heapq.heappop(heap)
        return expired, dead

    @staticmethod
    def _take_all_expired(
        queue: _Queue, max_nums: int, max_attempts: int
    ) -> tuple[list[_Entry], list[_Entry]]:
        """For an orderly queue whose unacked messages are all visible again: the first
        ``max_nums`` to redeliver by offset, and every one due for the dead-letter topic. The
        deadline heap is emptied (every deadline in it has passed); the rest are rescheduled."""
        queue.deadlines.clear()
        expired: list[_Entry] = []
        dead: list[_Entry] = []
        for offset in sorted(queue.entries):
            entry = queue.entries[offset]
            if entry.dead or entry.attempt >= max_attempts:
                dead.append(entry)
            elif len(expired) < max_nums:
                expired.append(entry)
            else:
                queue.schedule(entry)  # visible, waits for the batch before it
        return expired, dead

    @staticmethod
    def _read_fresh(
        queue: _Queue, read: Callable[[int, int], ReadBatch], count: int
    ) -> tuple[list[tuple[int, int]], int]:
        """Up to ``count`` never-handed-out (offset, commit-log offset) pairs and the new
        ``next_offset``; the queue itself is not changed."""
        found: list[tuple[int, int]] = []
        offset = queue.next_offset
        for _ in range(_MAX_READS):
            if len(found) >= count:
                break
            batch = read(offset, count - len(found))
            if batch.next_offset < offset:
                raise ValueError(f"read({offset}) went back to offset {batch.next_offset}")
            for unit_offset, phys_offset in batch.found:
                if not offset <= unit_offset < batch.next_offset or (
                    found and unit_offset <= found[-1][0]
                ):
                    raise ValueError(
                        f"read({offset}) returned offset {unit_offset} outside "
                        f"[{offset}, {batch.next_offset}) or out of order"
                    )
                found.append((unit_offset, phys_offset))
            if batch.next_offset == offset or batch.found:
                offset = batch.next_offset
                break
            offset = batch.next_offset  # all filtered out: read on
        if len(found) > count:
            raise ValueError(f"read returned {len(found)} messages, more than the {count} asked")
        return found, offset

    def _issue(
        self, key: QueueKey, queue: _Queue, entry: _Entry, now: int, invisible_ms: int
    ) -> Receipt:
        """Give ``entry`` a new token and deadline (the old handle stops working) and return
        its receipt. Lock held."""
        entry.token = self._token()
        entry.deliver_time_ms = now
        entry.invisible_ms = invisible_ms
        queue.schedule(entry)
        group, topic, queue_id = key
        # the handle carries the receipt's fields (after the handle itself), in its order
        fields = (
            group,
            topic,
            queue_id,
            entry.offset,
            entry.phys_offset,
            now,
            invisible_ms,
            entry.attempt,
            entry.token,
        )
        payload = json.dumps([_HANDLE_VERSION, *fields], separators=(",", ":")).encode("utf-8")
        handle = f"{_b64encode(payload)}.{_b64encode(self._mac(payload))}"
        return Receipt(handle, *fields)

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._secret, payload, hashlib.sha256).digest()[:_MAC_BYTES]

    # ---- handles -----------------------------------------------------------------------------

    def decode(self, handle: str) -> Receipt:
        """What ``handle`` says, once its HMAC is checked (not whether it is still current).

        Raises InvalidReceiptHandleError for a malformed or forged handle. Any thread.
        """
        payload_text, dot, mac_text = handle.partition(".")
        if not dot:
            raise InvalidReceiptHandleError("not a receipt handle of this broker")
        try:
            payload = _b64decode(payload_text)
            mac = _b64decode(mac_text)
        except (binascii.Error, ValueError):
            raise InvalidReceiptHandleError("receipt handle is not base64url") from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise InvalidReceiptHandleError("receipt handle signature does not match")
        try:
            fields = json.loads(payload)
            version, group, topic, *numbers = fields
            if version != _HANDLE_VERSION:
                raise ValueError(f"version {version}")
            if not isinstance(group, str) or not isinstance(topic, str):
                raise ValueError("group or topic is not a string")
            if len(numbers) != 7 or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in numbers
            ):
                raise ValueError("bad numbers")
        except (ValueError, TypeError) as exc:
            raise InvalidReceiptHandleError(f"receipt handle content is malformed: {exc}") from None
        queue_id, offset, phys_offset, deliver_time_ms, invisible_ms, attempt, token = numbers
        return Receipt(
            handle,
            group,
            topic,
            queue_id,
            offset,
            phys_offset,
            deliver_time_ms,
            invisible_ms,
            attempt,
            token,
        )

    def _current(
        self, handle: str, group: str | None, topic: str | None
    ) -> tuple[Receipt, _Queue, _Entry]:
        """The receipt, queue and entry ``handle`` names, if it is the entry's current handle
        (and belongs to ``group`` / ``topic`` when given). Lock held."""
        receipt = self.decode(handle)
        if group is not None and receipt.group != group:
            raise InvalidReceiptHandleError(
                f"receipt handle is of group {receipt.group!r}, not {group!r}"
            )
        if topic is not None and receipt.topic != topic:
            raise InvalidReceiptHandleError(
                f"receipt handle is of topic {receipt.topic!r}, not {topic!r}"
            )
        queue = self._queues.get((receipt.group, receipt.topic, receipt.queue_id))
        entry = queue.entries.get(receipt.offset) if queue is not None else None
        if queue is None or entry is None or entry.token != receipt.token:
            raise InvalidReceiptHandleError(
                f"receipt handle of offset {receipt.offset} in {receipt.topic}:"
                f"{receipt.queue_id} is stale (acked, changed, or handed out again)"
            )
        return receipt, queue, entry

    def ack(self, handle: str, *, group: str | None = None, topic: str | None = None) -> Receipt:
        """Mark the message of ``handle`` done; the group's progress moves over it when every
        offset below it is done too. Returns what the handle said.

        Raises InvalidReceiptHandleError for a handle that is malformed, forged, of another
        group / topic (when given), or no longer current. Any thread.
        """
        with self._lock:
            receipt, queue, entry = self._current(handle, group, topic)
            del queue.entries[entry.offset]
            self._changes += 1
            return receipt

    def change_invisible(
        self,
        handle: str,
        invisible_ms: int,
        *,
        group: str | None = None,
        topic: str | None = None,
    ) -> Receipt:
        """Make the message of ``handle`` invisible for ``invisible_ms`` from now (0: visible at
        once) and return its new receipt; the old handle stops working. The delivery attempt is
        unchanged.

        Raises as :meth:`ack` does, and ValueError for a negative ``invisible_ms``. Any thread.
        """
        if invisible_ms < 0:
            raise ValueError(f"invisible_ms must not be negative, not {invisible_ms}")
        with self._lock:
            receipt, queue, entry = self._current(handle, group, topic)
            self._changes += 1
            key = (receipt.group, receipt.topic, receipt.queue_id)
            return self._issue(key, queue, entry, self._clock.now_ms(), invisible_ms)

    def renew(
        self, handle: str, invisible_ms: int, *, group: str | None = None, topic: str | None = None
    ) -> int:
        """Keep the message of ``handle`` invisible for ``invisible_ms`` from now without
        replacing the handle (the broker's auto-renewal of a consumer's receive: the consumer
        still holds it). Returns the new deadline (epoch ms). Raises as :meth:`ack`. Any
        thread."""
        if invisible_ms < 0:
            raise ValueError(f"invisible_ms must not be negative, not {invisible_ms}")
        with self._lock:
            _receipt, queue, entry = self._current(handle, group, topic)
            entry.deliver_time_ms = self._clock.now_ms()
            entry.invisible_ms = invisible_ms
            queue.schedule(entry)
            self._changes += 1
            return entry.deadline

    # ---- progress ----------------------------------------------------------------------------

    def progress(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's consume offset in the queue: every offset below it is done. None when the
        group never received from the queue. Any thread."""
        with self._lock:
            queue = self._queues.get((group, topic, queue_id))
            return queue.progress() if queue is not None else None

    def progress_table(self) -> dict[QueueKey, int]:
        """``progress`` of every queue the state knows. Any thread."""
        with self._lock:
            return {key: queue.progress() for key, queue in self._queues.items()}

    def in_flight(self, group: str, topic: str, queue_id: int) -> list[int]:
        """The queue offsets handed out and not yet acked, ascending. Any thread."""
        with self._lock:
            queue = self._queues.get((group, topic, queue_id))
            return sorted(queue.entries) if queue is not None else []

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Start the group over at ``offset`` in the queue (an admin's offset reset): every
        in-flight message is forgotten and its handle refused. Any thread."""
        if offset < 0:
            raise ValueError(f"offset must not be negative, not {offset}")
        with self._lock:
            self._queues[(group, topic, queue_id)] = _Queue(next_offset=offset)
            self._changes += 1

    def statistics(self) -> PopStatistics:
        """A snapshot of the state's size. Any thread."""
        with self._lock:
            entries = [e for q in self._queues.values() for e in q.entries.values()]
            dead = sum(1 for e in entries if e.dead)
            return PopStatistics(len(self._queues), len(entries) - dead, dead)

    # ---- persistence -------------------------------------------------------------------------

    def persist(self) -> bool:
        """Write the state file if anything changed since the last write; True if written.

        Blocks for the file's fsyncs (call it from a background thread or an executor, not the
        event loop). Raises StoreIOError when the write fails (the state stays dirty).
        """
        if self._file is None:
            return False
        with self._persist_lock:
            with self._lock:
                if self._changes == self._persisted_changes:
                    return False
                changes = self._changes
                secret = self._secret if self._secret_in_file else None
                text = _encode_state(secret, self._queues.items())
            self._file.persist(text)
            self._persisted_changes = changes
            return True


# ---- the state file ----------------------------------------------------------------------------
#
# {"version": 1, "secret": "<hex>" (null when the caller gives the secret),
#  "queues": [{"group": "G", "topic": "T", "queue_id": 0, "next_offset": 12,
#              "in_flight": [[offset, phys_offset, attempt, deliver_time_ms, invisible_ms,
#                             token, dead], ...]}, ...]}


def _encode_state(secret: bytes | None, queues: Iterable[tuple[QueueKey, _Queue]]) -> str:
    doc: dict[str, Any] = {
        "version": _FORMAT_VERSION,
        "secret": secret.hex() if secret is not None else None,
        "queues": [
            {
                "group": group,
                "topic": topic,
                "queue_id": queue_id,
                "next_offset": queue.next_offset,
                "in_flight": [
                    [
                        e.offset,
                        e.phys_offset,
                        e.attempt,
                        e.deliver_time_ms,
                        e.invisible_ms,
                        e.token,
                        e.dead,
                    ]
                    for e in sorted(queue.entries.values(), key=lambda e: e.offset)
                ],
            }
            for (group, topic, queue_id), queue in queues
        ],
    }
    return json.dumps(doc, separators=(",", ":"))


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} is not a non-negative integer: {value!r}")
    return value


def _decode_state(doc: Any) -> tuple[bytes | None, dict[QueueKey, _Queue]]:
    """The secret (None when the file has none) and queues of a parsed state file; ValueError
    for content of the wrong shape."""
    if not isinstance(doc, dict) or doc.get("version") != _FORMAT_VERSION:
        raise ValueError(f"not a version {_FORMAT_VERSION} pop state")
    secret = bytes.fromhex(doc["secret"]) if doc["secret"] is not None else None
    queues: dict[QueueKey, _Queue] = {}
    for item in doc["queues"]:
        group, topic = item["group"], item["topic"]
        if not isinstance(group, str) or not isinstance(topic, str):
            raise ValueError("group or topic is not a string")
        key = (group, topic, _int(item["queue_id"], "queue_id"))
        queue = _Queue(next_offset=_int(item["next_offset"], "next_offset"))
        for row in item["in_flight"]:
            offset, phys, attempt, deliver, invisible, token, dead = row
            if not isinstance(dead, bool):
                raise ValueError(f"dead flag is not a boolean: {dead!r}")
            entry = _Entry(
                _int(offset, "offset"),
                _int(phys, "phys_offset"),
                _int(attempt, "attempt"),
                _int(deliver, "deliver_time_ms"),
                _int(invisible, "invisible_ms"),
                _int(token, "token"),
                dead,
            )
            if entry.offset >= queue.next_offset:
                raise ValueError(f"in-flight offset {offset} not below next_offset")
            queue.entries[entry.offset] = entry
            queue.schedule(entry)
        queues[key] = queue
    return secret, queues
