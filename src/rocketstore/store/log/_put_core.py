"""The commit log's hot put state, and the put of a plain message in one call.

Two pieces, each with a compiled twin in ``_put_core_c.pyx`` (selected at import by
``_speedups``); the classes here are the reference, and the tests feed the same puts through
both and compare the stores byte for byte:

``QueueOffsetTable``
    (topic, queue id) → the queue's next logical offset, and per stored topic the messages
    and bytes put since start. A mapping over (topic, queue id) keys for everyone but the put
    (recovery rebuilds it, the admin forgets a queue, a batch reads and moves it); the
    compiled twin keeps a topic's offsets in a C array and its counters in C fields.

``PutCore``
    ``put(msg)``: one message appended as ``CommitLog.put_message`` appends it, in one call,
    when it is *plain*; ``None`` otherwise, with nothing written, and the commit log's general
    path takes the message. Plain is:

    - writes accepted (no refusal) and no put holding the lock too long;
    - a ``Message`` (not a subclass), no properties, no born host, transaction type none;
    - a ``bytes`` body no longer than ``max_message_size``, a queue id from 0, every field
      within its record field (otherwise the general path raises as it always did);
    - a topic put before (its record tail validated and cached by the general path);
    - an IPv4 store host, and room for the record in the last file's reserved disk blocks (a
      roll or a step of blocks goes the general way).

    Under the put lock it packs the record, moves the queue offset and the counters, then
    dispatches as the store is wired (``wire``): inline, the consume-queue unit written at
    once when it is the next unit of its queue's last file (the compiled twin writes it
    itself, with the dispatch bookkeeping of ``ReputMessageService.dispatch_plain``; anything
    else is handed to ``inline_plain``, the general inline dispatch), or a DispatchRequest for
    the dispatch thread. Returns the PutMessageResult; waits (SYNC_FLUSH, put stages) stay
    with the commit log.

Threads: ``put`` from any thread (it takes the put lock); the mapping methods of
``QueueOffsetTable`` under the put lock, or from one thread while no put runs (recovery).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..._speedups import EXTENSIONS_ENABLED, missing
from ._message import Message, PutMessageResult, PutMessageStatus
from ._record import (
    DEFAULT_BORN_HOST,
    HEAD_V4_8,
    HEAD_V4_SIZE,
    MAGIC_V1,
    SYSFLAG_TRANSACTION_MASK,
    DispatchRequest,
    write_v4,
    write_v4_py,
)

if TYPE_CHECKING:
    import threading

    from ._mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__
_PUT_OK = PutMessageStatus.PUT_OK
Key = tuple[str, int]


class QueueOffsetTable:
    """(topic, queue id) → next queue offset, and per-topic put counters (see the module)."""

    def __init__(self, entries: Mapping[Key, int] | None = None) -> None:
        self._offsets: dict[Key, int] = dict(entries) if entries else {}
        self._counts: dict[str, int] = {}
        self._bytes: dict[str, int] = {}

    # ---- the put's side ---------------------------------------------------------------------

    def next_offset(self, topic: str, queue_id: int) -> int:
        """The queue's next offset (0 for a queue not in the table)."""
        return self._offsets.get((topic, queue_id), 0)

    def advance(self, topic: str, queue_id: int, next_offset: int, size: int) -> None:
        """A record of ``size`` bytes stored in the queue: its next offset is ``next_offset``."""
        self._offsets[(topic, queue_id)] = next_offset
        self.count(topic, 1, size)

    def count(self, topic: str, messages: int, size: int) -> None:
        """``messages`` records of ``size`` bytes in all stored under ``topic``."""
        counts = self._counts
        if topic in counts:
            counts[topic] += messages
            self._bytes[topic] += size
        else:
            counts[topic] = messages
            self._bytes[topic] = size

    def reset(self, entries: Mapping[Key, int]) -> None:
        """The queue offsets become ``entries`` (recovery's rebuild); the counters stay."""
        self._offsets = dict(entries)

    def put_counts(self) -> dict[str, int]:
        """Messages stored per topic since start (a copy)."""
        return dict(self._counts)

    def put_bytes(self) -> dict[str, int]:
        """Bytes of records stored per topic since start (a copy)."""
        return dict(self._bytes)

    # ---- a mapping over (topic, queue id) ---------------------------------------------------

    def __getitem__(self, key: Key) -> int:
        return self._offsets[key]

    def __setitem__(self, key: Key, value: int) -> None:
        self._offsets[key] = value

    def __delitem__(self, key: Key) -> None:
        del self._offsets[key]

    def __contains__(self, key: object) -> bool:
        return key in self._offsets

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._offsets))

    def __len__(self) -> int:
        return len(self._offsets)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, QueueOffsetTable | dict):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def get(self, key: Key, default: int = 0) -> int:
        return self._offsets.get(key, default)

    def pop(self, key: Key, default: int | None = None) -> int | None:
        return self._offsets.pop(key, default)

    def keys(self) -> list[Key]:
        return list(self._offsets)

    def values(self) -> list[int]:
        return list(self._offsets.values())

    def items(self) -> list[tuple[Key, int]]:
        return list(self._offsets.items())

    def __repr__(self) -> str:
        return f"QueueOffsetTable({self._offsets!r})"


class PutCore:
    """The plain put in one call (see the module). Made by the commit log, which wires it."""

    def __init__(
        self,
        table: QueueOffsetTable,
        tails: dict[str, bytes],
        store_host: bytes,
        file_size: int,
        max_message_size: int,
        crc32: Callable[[bytes], int],
        now_ns: Callable[[], int],
        busy_timeout_ms: int,
    ) -> None:
        self.table = table
        self.tails = tails  # topic → TOPICLENGTH + topic + empty PROPERTIESLENGTH
        self.store_host = store_host
        self.file_size = file_size
        self.max_message_size = max_message_size
        self.crc32 = crc32
        self.now_ns = now_ns
        # the put lock seen from other threads: since when a put holds it (RocketMQ's
        # beginTimeInLock, 0 while none does), the bound of isOSPageCacheBusy, and whether a
        # full disk was reported already; written under the put lock, read by any thread
        self.begin_ns = 0
        self.busy_timeout_ms = busy_timeout_ms
        self.disk_full_logged = False
        self.served = 0  # puts appended here (the tests and benchmarks read it)
        self.refused = True  # writes refused (the commit log's refusal is set)
        self.lock: threading.Lock | None = None
        self.queue: MappedFileQueue | None = None
        self.reput: Any = None  # the ReputMessageService while dispatch runs inline
        self.inline_plain: Callable[[str, int, int, int, int, int, int], None] | None = None
        self.handoff: deque[Any] | None = None
        self.on_append: Callable[[], None] | None = None

    def wire(
        self,
        lock: threading.Lock,
        queue: MappedFileQueue,
        reput: Any,
        inline_plain: Callable[[str, int, int, int, int, int, int], None] | None,
        handoff: deque[Any] | None,
        on_append: Callable[[], None] | None,
    ) -> None:
        """What the put takes and tells: the put lock, the commit log's files, inline
        dispatch (``reput`` and ``inline_plain``, or None) or the dispatch thread's hand-off
        (or None), and what wakes the services after an append. The commit log calls it when
        the store wires or unwires dispatch."""
        self.lock = lock
        self.queue = queue
        self.reput = reput
        self.inline_plain = inline_plain
        self.handoff = handoff
        self.on_append = on_append

    def put(self, msg: Message) -> PutMessageResult | None:
        """Append ``msg`` when it is plain: its result (PUT_OK); None, nothing written,
        otherwise. Any thread; takes the put lock."""
        if self.refused or self.begin_ns or msg.__class__ is not Message:
            return None
        if msg.properties or msg.born_host:
            return None
        topic = msg.topic
        tail = self.tails.get(topic)
        body = msg.body
        if tail is None or body.__class__ is not bytes or len(body) > self.max_message_size:
            return None
        queue_id = msg.queue_id
        flag = msg.flag
        sys_flag = msg.sys_flag
        born = msg.born_timestamp
        reconsume = msg.reconsume_times
        prepared = msg.prepared_transaction_offset
        # the fields' types and ranges are the record writer's to check (struct.error, as the
        # general path raises it); the compiled twin checks them and declines instead
        if queue_id < 0 or sys_flag & SYSFLAG_TRANSACTION_MASK:
            return None
        total = HEAD_V4_SIZE + len(body) + len(tail)
        if total + 8 > self.file_size or len(self.store_host) != 8:
            return None
        crc = self.crc32(body) & 0x7FFFFFFF
        lock = self.lock
        queue = self.queue
        if lock is None or queue is None:
            return None
        table = self.table
        key = (topic, queue_id)
        with lock:
            files = queue.files
            if self.refused or not files:
                return None
            mf = files[-1]
            pos = mf.wrote_position
            if pos + total + 8 > mf.allocated:
                return None  # a roll or a step of disk blocks: the general path
            offsets = table._offsets
            qoff = offsets.get(key, 0)
            target = mf.write_target
            if pos < 0 or pos + total > len(target):
                return None  # a mapping shorter than its file: the general path raises
            self.begin_ns = now_ns = self.now_ns()
            try:
                now = now_ns // 1_000_000
                phys = mf.from_offset + pos
                if _COMPILED_WRITE:
                    write_v4(
                        target, pos, total, MAGIC_V1, crc, queue_id, flag, qoff, phys,
                        sys_flag, born or now, DEFAULT_BORN_HOST, now, self.store_host,
                        reconsume, prepared, body, tail,
                    )  # fmt: skip
                else:  # write_v4_py's work without its checks (made above)
                    HEAD_V4_8.pack_into(
                        target, pos, total, MAGIC_V1, crc, queue_id, flag, qoff, phys,
                        sys_flag, born or now, DEFAULT_BORN_HOST, now, self.store_host,
                        reconsume, prepared, len(body),
                    )  # fmt: skip
                    q = pos + HEAD_V4_SIZE + len(body)
                    target[pos + HEAD_V4_SIZE : q] = body
                    target[q : pos + total] = tail
                mf.wrote_position = pos + total
                mf.store_timestamp = now
                offsets[key] = qoff + 1
                counts = table._counts
                if topic in counts:
                    counts[topic] += 1
                    table._bytes[topic] += total
                else:
                    counts[topic] = 1
                    table._bytes[topic] = total
                plain = self.inline_plain
                if plain is not None:
                    plain(topic, queue_id, phys, total, 0, now, qoff)
                elif (handoff := self.handoff) is not None:
                    fields = (topic, queue_id, phys, total, 0, now, qoff, None, None, sys_flag)
                    handoff.append(_new_tuple(DispatchRequest, (*fields, prepared)))
            finally:
                self.begin_ns = 0
            self.served += 1
        on_append = self.on_append
        if on_append is not None:
            on_append()
        result: PutMessageResult = _new_tuple(
            PutMessageResult, (_PUT_OK, phys, total, qoff, now, self.store_host, 1, None, ())
        )
        return result


_COMPILED_WRITE = write_v4 is not write_v4_py


QueueOffsetTablePy = QueueOffsetTable
PutCorePy = PutCore
if EXTENSIONS_ENABLED:
    try:
        from . import _put_core_c
    except ImportError:
        missing("rocketstore.store.log._put_core_c")
    else:
        QueueOffsetTable = _put_core_c.QueueOffsetTable  # type: ignore[misc, assignment]
        PutCore = _put_core_c.PutCore  # type: ignore[misc, assignment]
