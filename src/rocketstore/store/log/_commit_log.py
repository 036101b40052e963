"""CommitLog: every message of every topic, appended to one MappedFileQueue.

The put path packs the record straight into the mapped file (or write buffer) under one put
lock, then hands what dispatch needs (a DispatchRequest) to ``dispatch_handoff`` so the
dispatcher does not parse the record again. Queue offsets come from the topic-queue table,
which recovery rebuilds.

The puts, each for what it takes: ``put_message`` (a ``Message``: delays, transactions, any
properties), ``put_fields`` (a record's fields, its properties as stored: a broker's plain
send), ``put_messages`` (a batch of Messages) and ``put_encoded_batch`` (records of one queue
encoded column-wise ahead of the lock). Every put ends in the same tail: the result of the
append, then either the waits (the flush under SYNC_FLUSH and the put stages, see
``_put_stages``) in the calling thread, or, given a ``deferred`` list (``deferred_put``, the
store's non-blocking puts), a future that the services complete.

Threads: the puts from any thread (serialised by the put lock); the flush service threads;
readers from anywhere.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any, NamedTuple

from .._clock import Clock, ns_reader

if TYPE_CHECKING:
    from ._batch_encode import EncodedBatch
from .._config import StoreConfig
from .._disk import WRITE_FAILED_PREFIX
from .._durable import is_disk_full, os_error_cause
from .._errors import CorruptRecordError, StoreIOError, translate_os_errors
from ._flush import CommitRealTimeService, FlushRealTimeService, GroupCommitService
from ._mapped_file import MappedFile, SelectMappedBufferResult
from ._mapped_file_queue import MappedFileQueue
from ._message import (
    BatchedMessage,
    Message,
    PutMessageResult,
    PutMessageStatus,
    RedeliveredMessage,
)
from ._put_core import PutCore, QueueOffsetTable
from ._put_stages import DoneFuture, PutCompletion, PutStage, run_stages
from ._record import (
    BLANK,
    BLANK_MAGIC,
    DEFAULT_BORN_HOST,
    HEAD_V4_8,
    HEAD_V4_SIZE,
    INT16,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SCHEDULE_TOPIC,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    BatchDispatch,
    DispatchRequest,
    MessageExt,
    check_record,
    crc32,
    decode_message,
    encode_record,
    pack_host,
    tags_code,
    write_batch_v4,
    write_v4,
    write_v4_py,
)

log = logging.getLogger(__name__)

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_TOPIC_LENGTH = 127
_QUEUE_FIELDS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET at byte 20
_STORE_TS = struct.Struct(">q")


class InvalidTopicError(ValueError):
    pass


def validate_topic(topic: str) -> bytes:
    """Check a topic name (it becomes a directory name) and return its UTF-8 bytes."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("the topic is empty")
    if not TOPIC_PATTERN.fullmatch(topic):  # match() would let a trailing newline through
        raise InvalidTopicError(f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]")
    encoded = topic.encode()
    if len(encoded) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic {topic[:20]!r}... is longer than {MAX_TOPIC_LENGTH} bytes")
    return encoded


class _PutWaits(NamedTuple):
    """What a put that waits (WAIT is not false) waits for, in order (see ``_put_stages``)."""

    group_commit: GroupCommitService | None  # the flush wait under SYNC_FLUSH
    timeout: float  # of the flush wait, seconds (sync_flush_timeout)
    stages: tuple[PutStage, ...]


class _Prepared(NamedTuple):
    """A message checked and encoded outside the put lock."""

    topic: str
    tail: bytes  # TOPICLENGTH + topic + PROPERTIESLENGTH + properties
    queue_id: int
    body: bytes | bytearray | memoryview
    crc: int
    flag: int
    sys_flag: int
    born_ts: int
    born_host: bytes
    reconsume: int
    prepared: int
    props: bytes
    total: int
    tags_code: int  # DELAY_TAGS_CODE: the delivery time, set under the lock
    keys: str | None
    uniq: str | None
    wait: bool


DELAY_TAGS_CODE = -1
# transaction types whose records go to their consume queue (a constant: no tuple a put)
_IN_QUEUE_TYPES = frozenset((TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE))
# the pure-Python single put packs its record in place (one pack_into, two copies): the
# reference write_v4_py checks again what _prepare checked and packs the head into a copy
_COMPILED_WRITE = write_v4 is not write_v4_py
_MESSAGE_MAGICS = (MAGIC_V1, MAGIC_V2)
_new_result = tuple.__new__  # builds a NamedTuple without its Python-level __new__
_PUT_OK = PutMessageStatus.PUT_OK
_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL


def _refused(status: PutMessageStatus, error: str) -> PutMessageResult:
    return PutMessageResult(status, error=error)


_CREATE_FAILED = _refused(
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED, "could not create a commit-log file"
)


def _failed_future(
    pending: list[Future[PutMessageResult]], exc: Exception
) -> Future[PutMessageResult]:
    """A non-blocking put that raised: the error goes to its future, the one handed to the
    services already or a new one (unless a service completed it already)."""
    fut: Future[PutMessageResult] = pending[0] if pending else Future()
    try:
        fut.set_exception(exc)
    except InvalidStateError:
        log.exception("a put failed after its result was settled")
    return fut


def deferred_put(
    put: Callable[[Any, list[Future[PutMessageResult]]], PutMessageResult], arg: Any
) -> Future[PutMessageResult]:
    """A put of ``arg`` (``CommitLog.put_message`` and its kin, given a ``deferred`` list)
    without its waits: a future of its result, which the group-commit service (SYNC_FLUSH)
    and the put stages complete; done on return when there is nothing to wait for (ASYNC_FLUSH
    without stages, WAIT=false, a refused put). A put that raised: the error in the future.
    Any thread, an event loop's included: it never waits for a flush."""
    pending: list[Future[PutMessageResult]] = []
    try:
        r = put(arg, pending)
    except Exception as exc:
        return _failed_future(pending, exc)
    return pending[0] if pending else DoneFuture(r)  # complete: no Future's Condition


_BUSY_LIMIT_MS = 10_000_000  # RocketMQ's bound: a begin time further back is not a put's


class CommitLog:
    def __init__(
        self,
        config: StoreConfig,
        clock: Clock,
        queue: MappedFileQueue,
        *,
        on_flushed: Callable[[int], None] | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self._now_ns = ns_reader(clock)  # store times: self._now_ns() // 1_000_000
        self._monotonic = clock.monotonic
        self.queue = queue
        self.file_size = config.mapped_file_size_commit_log
        self.max_message_size = config.max_message_size
        self.max_properties_size = config.max_properties_size
        self.store_host = pack_host(f"{config.store_host}:{config.store_port}")
        self._store_host_extra = len(self.store_host) - 8  # 12 for an IPv6 store host
        self.put_lock = threading.Lock()
        # (topic, queue id) → next logical offset, and the per-topic put counters (per stored
        # topic: SCHEDULE_TOPIC_XXXX for delayed messages, as RocketMQ counts them)
        self.topic_queue_table = QueueOffsetTable()
        self._topics: dict[str, bytes] = {}  # topic → length byte + UTF-8 name
        self._born_hosts: dict[str, bytes] = {}  # "host:port" → its packed BORNHOST
        self._delay_levels = config.delay_levels_ms()
        self.dispatch_handoff: collections.deque[DispatchRequest | BatchDispatch] | None = None
        # when set, dispatch runs in the put path under the put lock, right after a record
        # becomes readable (ASYNC_FLUSH without write buffers; see ReputMessageService)
        self.inline_dispatch: Callable[[DispatchRequest | BatchDispatch], None] | None = None
        # with inline_dispatch: the same for a record with no keys, UNIQ_KEY or transaction
        # type, given as (topic, queue id, offset, size, tags code, store time, queue offset)
        self.inline_plain: Callable[[str, int, int, int, int, int, int], None] | None = None
        self.on_append: Callable[[], None] | None = None  # wakes the dispatcher
        self.sync_flush = config.flush_disk_type == "SYNC_FLUSH"
        self.sync_flush_timeout = config.sync_flush_timeout / 1000
        flushed = on_flushed or (lambda _ts: None)
        self.flush_service: GroupCommitService | FlushRealTimeService
        if self.sync_flush:
            self.flush_service = GroupCommitService(queue, clock, flushed)
        else:
            self.flush_service = FlushRealTimeService(
                queue,
                clock,
                interval_ms=config.flush_interval_commit_log,
                least_pages=config.flush_commit_log_least_pages,
                thorough_interval_ms=config.flush_commit_log_thorough_interval,
                on_flushed=flushed,
                timed=config.flush_commit_log_timed,
            )
        # what a put waits for, None for nothing. One attribute on purpose: with 30 instance
        # attributes or more, CPython 3.11 stops specialising their lookups and every put
        # costs ~2 % more (callgrind); add fields to _PutWaits, not to CommitLog
        self._waits: _PutWaits | None = None
        if isinstance(self.flush_service, GroupCommitService):
            self._waits = _PutWaits(self.flush_service, self.sync_flush_timeout, ())
        self.commit_service: CommitRealTimeService | None = None
        if queue.pool is not None:
            self.commit_service = CommitRealTimeService(
                queue,
                clock,
                interval_ms=config.commit_interval_commit_log,
                least_pages=config.commit_commit_log_least_pages,
                thorough_interval_ms=config.commit_commit_log_thorough_interval,
                flusher=self.flush_service,
            )
        self.put_latency_max_ms = 0.0
        # None while writes are accepted, else (status, reason)
        self._refusal: tuple[PutMessageStatus, str] | None = (
            PutMessageStatus.SERVICE_NOT_AVAILABLE,
            "the store is not running",
        )
        self._extra_refusals: dict[str, tuple[PutMessageStatus, str]] = {}
        # the plain put in one call over the hot state (``_put_core``); also the put lock as
        # other threads see it (begin_ns, busy_timeout_ms, disk_full_logged)
        self._core = PutCore(
            self.topic_queue_table,
            self._topics,
            self.store_host,
            self.file_size,
            self.max_message_size,
            crc32,
            self._now_ns,
            config.os_page_cache_busy_timeout_mills,
        )
        self.wire_dispatch(None)

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.flush_service.start()
        if self.commit_service is not None:
            self.commit_service.start()
        self.set_refusal("stopped", None)

    def shutdown(self) -> None:
        self.set_refusal(
            "stopped", (PutMessageStatus.SERVICE_NOT_AVAILABLE, "the store is shut down")
        )
        with self.put_lock:  # let a put in progress finish
            pass
        if self.commit_service is not None:
            self.commit_service.stop()
        self.flush_service.stop()

    @property
    def running(self) -> bool:
        return "stopped" not in self._extra_refusals

    @property
    def topic_put_counts(self) -> dict[str, int]:
        """Messages stored per topic since start (a copy)."""
        return self.topic_queue_table.put_counts()

    @property
    def topic_put_bytes(self) -> dict[str, int]:
        """Bytes of records stored per topic since start (a copy)."""
        return self.topic_queue_table.put_bytes()

    @property
    def stats_put_count(self) -> int:
        """Messages stored since start (all topics)."""
        return sum(self.topic_put_counts.values())

    @property
    def stats_put_bytes(self) -> int:
        """Bytes of records stored since start (all topics)."""
        return sum(self.topic_put_bytes.values())

    def wire_dispatch(self, reput: Any) -> None:
        """Tell the plain put (``_put_core``) how dispatch runs, after the store has set
        ``inline_plain`` (with ``reput``, the ReputMessageService, when dispatch runs inline),
        ``dispatch_handoff`` and ``on_append``, or cleared them. The store's start and
        shutdown thread, no put running."""
        self._core.wire(
            self.put_lock,
            self.queue,
            reput if self.inline_plain is not None else None,
            self.inline_plain,
            self.dispatch_handoff,
            self.on_append,
        )

    def is_os_page_cache_busy(self) -> bool:
        """RocketMQ's isOSPageCacheBusy: a put has held the put lock for longer than
        ``os_page_cache_busy_timeout_mills`` (writing into the page cache stalls). Any thread."""
        begin = self._core.begin_ns
        if not begin or not self.put_lock.locked():  # (a put that raised left its time)
            return False
        held_ms = (self._now_ns() - begin) // 1_000_000
        return self._core.busy_timeout_ms < held_ms < _BUSY_LIMIT_MS

    def _early_refusal(self) -> PutMessageResult | None:
        """What every put checks before it prepares its messages and takes the put lock:
        refused writes (the first reason), then OS_PAGECACHE_BUSY; None to go on. The put
        paths call it only when one of them may apply (``_refusal`` set, the lock's begin
        time set), and check ``_refusal`` again under the lock (shutdown may begin between)."""
        refusal = self._refusal
        if refusal is not None:
            return _refused(*refusal)
        return self._busy_refusal()

    def _busy_refusal(self) -> PutMessageResult | None:
        """OS_PAGECACHE_BUSY when the put lock has been held too long (checked, as RocketMQ
        checks it, before a put waits for the lock), else None."""
        if self.is_os_page_cache_busy():
            return _refused(
                PutMessageStatus.OS_PAGECACHE_BUSY,
                f"a put has held the put lock for more than "
                f"{self._core.busy_timeout_ms} ms (os_page_cache_busy_timeout_mills)",
            )
        return None

    def refusal(self) -> tuple[PutMessageStatus, str] | None:
        """Why writes are refused now (the first reason), or None."""
        return self._refusal

    def add_put_stage(self, stage: PutStage) -> None:
        """Make every put that waits (WAIT is not false) also wait for ``stage`` after its
        flush wait and the stages added before (see ``_put_stages``; a SYNC_MASTER's
        replication wait). Any thread; puts already appended keep the stages they began with.
        """
        waits = self._waits
        if waits is None:
            self._waits = _PutWaits(None, self.sync_flush_timeout, (stage,))
        else:
            self._waits = waits._replace(stages=(*waits.stages, stage))

    @property
    def put_stages(self) -> tuple[PutStage, ...]:
        """The stages added with ``add_put_stage``, in order."""
        return self._waits.stages if self._waits is not None else ()

    def set_refusal(self, reason: str, refusal: tuple[PutMessageStatus, str] | None) -> None:
        """Refuse writes for ``reason`` (a slave, a full disk, shutdown), or lift it (None)."""
        if refusal is None:
            self._extra_refusals.pop(reason, None)
        else:
            self._extra_refusals[reason] = refusal
        self._refusal = next(iter(self._extra_refusals.values()), None)
        self._core.refused = self._refusal is not None

    # ---- offsets ----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        mf = self.queue.first_file()
        if mf is None:
            return -1
        if mf.available:
            return mf.from_offset
        return self.roll_next_file(mf.from_offset)

    @property
    def max_offset(self) -> int:
        return self.queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # ---- validation and encoding (outside the lock) -----------------------------------------

    def _topic_tail(self, topic: str) -> bytes:
        """TOPICLENGTH + topic + an empty PROPERTIESLENGTH: the record tail of a message
        without properties (validated once per topic, then cached)."""
        tail = self._topics.get(topic)
        if tail is None:
            encoded = validate_topic(topic)
            tail = bytes((len(encoded),)) + encoded + b"\x00\x00"
            if len(self._topics) < 100_000:
                self._topics[topic] = tail
        return tail

    def _prepare(self, msg: Message) -> _Prepared | PutMessageResult:
        """Check a message and encode what can be encoded before taking the put lock."""
        topic = msg.topic
        topic_tail = self._topics.get(topic)
        if topic_tail is None:
            try:
                topic_tail = self._topic_tail(topic)
            except InvalidTopicError as exc:
                return _refused(_ILLEGAL, str(exc))
        body = msg.body
        if body.__class__ is not bytes and not isinstance(body, bytearray | memoryview):
            return _refused(_ILLEGAL, "the body must be bytes")
        blen = len(body)
        if blen > self.max_message_size:
            return _refused(
                _ILLEGAL, f"body of {blen} bytes exceeds max_message_size {self.max_message_size}"
            )
        queue_id = msg.queue_id
        if queue_id < 0:
            return _refused(_ILLEGAL, f"negative queue id {queue_id}")
        sys_flag = msg.sys_flag
        props = msg.properties
        code = 0
        keys = uniq = None
        wait = msg.wait_store_msg_ok
        if props:
            if PROPERTY_DELAY in props and msg.__class__ is not RedeliveredMessage:
                tran = sys_flag & SYSFLAG_TRANSACTION_MASK
                if tran in _IN_QUEUE_TYPES:
                    rewritten = self._delay_rewrite(topic, queue_id, props)
                    if isinstance(rewritten, PutMessageResult):
                        return rewritten
                    if rewritten is not None:
                        topic, queue_id, props = rewritten
                        topic_tail = self._topic_tail(topic)
            if msg.__class__ is BatchedMessage:  # stored as given (a name may be there twice)
                text = msg.properties_text  # type: ignore[attr-defined]
            else:
                if len(props) == 1:
                    ((k, v),) = props.items()
                    text = f"{k}\x01{v}"
                else:
                    text = "\x02".join([f"{k}\x01{v}" for k, v in props.items()])
                if text.count("\x01") != len(props) or text.count("\x02") != len(props) - 1:
                    return _refused(
                        _ILLEGAL, "property names and values must not contain \\x01 or \\x02"
                    )
            pbytes = text.encode()
            tags = props.get(PROPERTY_TAGS)
            if tags:
                code = tags_code(tags)
            keys = props.get(PROPERTY_KEYS)
            uniq = props.get(PROPERTY_UNIQ_KEY)
            if props.get(PROPERTY_WAIT) == "false":
                wait = False
            if topic == SCHEDULE_TOPIC and PROPERTY_DELAY in props:
                code = DELAY_TAGS_CODE
        else:
            pbytes = b""
        return self._checked(
            topic,
            topic_tail,
            queue_id,
            body,
            msg.flag,
            sys_flag,
            msg.born_timestamp,
            msg.born_host,
            msg.reconsume_times,
            msg.prepared_transaction_offset,
            pbytes,
            code,
            keys,
            uniq,
            wait,
        )

    def _checked(
        self,
        topic: str,
        topic_tail: bytes,
        queue_id: int,
        body: bytes | bytearray | memoryview,
        flag: int,
        sys_flag: int,
        born_ts: int,
        born_host: str | None,
        reconsume: int,
        prepared_offset: int,
        pbytes: bytes,
        code: int,
        keys: str | None,
        uniq: str | None,
        wait: bool,
    ) -> _Prepared | PutMessageResult:
        """A record's parts checked (properties size, born host, record size) and put
        together in ``_Prepared``'s field order; ``topic_tail`` without properties. Any thread,
        no lock."""
        if pbytes:
            if len(pbytes) > self.max_properties_size:
                return _refused(
                    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                    f"properties of {len(pbytes)} bytes exceed {self.max_properties_size}",
                )
            topic_tail = topic_tail[:-2] + INT16.pack(len(pbytes)) + pbytes
        if born_host:
            try:
                host = self._born_hosts[born_host]
            except KeyError:
                try:
                    host = pack_host(born_host)
                except ValueError as bad:
                    return _refused(_ILLEGAL, str(bad))
                hosts = self._born_hosts
                if len(hosts) >= 4096:
                    hosts.clear()
                hosts[born_host] = host
        else:
            host = DEFAULT_BORN_HOST
        total = HEAD_V4_SIZE + len(body) + len(topic_tail) + self._store_host_extra
        if len(host) == 20:
            total += 12
        if total + 8 > self.file_size:
            return _refused(_ILLEGAL, f"a record of {total} bytes cannot fit in a commit-log file")
        # a plain tuple in _Prepared's field order (building the NamedTuple costs more)
        return (  # type: ignore[return-value]
            topic,
            topic_tail,
            queue_id,
            body,
            crc32(body) & 0x7FFFFFFF,
            flag,
            sys_flag,
            born_ts,
            host,
            reconsume,
            prepared_offset,
            pbytes,
            total,
            code,
            keys,
            uniq,
            wait,
        )

    def _delay_rewrite(
        self, topic: str, queue_id: int, props: dict[str, str]
    ) -> tuple[str, int, dict[str, str]] | PutMessageResult | None:
        raw = props.get(PROPERTY_DELAY, "")
        try:
            level = int(raw)
        except ValueError:
            return _refused(_ILLEGAL, f"DELAY must be a level number, got {raw!r}")
        if level <= 0 or topic == SCHEDULE_TOPIC:
            return None
        level = min(level, len(self._delay_levels))
        new_props = dict(props)
        new_props[PROPERTY_DELAY] = str(level)
        new_props[PROPERTY_REAL_TOPIC] = topic
        new_props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        return SCHEDULE_TOPIC, level - 1, new_props

    def delivery_time(self, level: int, store_timestamp: int) -> int:
        levels = self._delay_levels
        return store_timestamp + levels[min(level, len(levels)) - 1]

    # ---- the put path -----------------------------------------------------------------------

    def _note_latency(self, seconds: float) -> None:
        ms = seconds * 1000
        if ms > self.put_latency_max_ms:
            self.put_latency_max_ms = ms

    def _writable_file(self, size: int, now: int) -> MappedFile | PutMessageResult:
        """The file the next ``size`` bytes go to, with disk blocks for them; ends a file that
        cannot take them with a BLANK record and rolls to a new one. Put lock held.

        A refusal instead when no file could be created (CREATE_MAPPED_FILE_FAILED) or the
        disk has no blocks for the bytes (SERVICE_NOT_AVAILABLE, as RocketMQ answers when its
        disk is full); nothing is written then, except a BLANK ending a full file."""
        files = self.queue.files
        mf = files[-1] if files else None
        if mf is None or mf.wrote_position >= self.file_size:
            mf = self.queue.get_last_mapped_file(0)
            if mf is None:
                return _CREATE_FAILED
        pos = mf.wrote_position
        if pos + size + 8 > self.file_size:
            if pos + 8 > mf.allocated:
                refused = self._allocate(mf, pos + 8)
                if refused is not None:
                    return refused
            BLANK.pack_into(mf.write_target, pos, self.file_size - pos, BLANK_MAGIC)
            mf.wrote_position = self.file_size
            mf.store_timestamp = now
            mf = self.queue.get_last_mapped_file(0)
            if mf is None:
                return _CREATE_FAILED
            pos = mf.wrote_position
        end = min(pos + size + 8, self.file_size)
        if end > mf.allocated:
            refused = self._allocate(mf, end)
            if refused is not None:
                return refused
        return mf

    def _allocate(self, mf: MappedFile, end: int) -> PutMessageResult | None:
        """Disk blocks for ``mf`` up to ``end``; the refusal when there are none. Put lock held."""
        try:
            mf.ensure_allocated(end)
        except StoreIOError as exc:
            if is_disk_full(exc):
                if not self._core.disk_full_logged:
                    self._core.disk_full_logged = True
                    log.error("the disk is full: %s; puts are refused", exc)
                return _refused(
                    PutMessageStatus.SERVICE_NOT_AVAILABLE,
                    f"the disk is full: no space for the commit log ({exc})",
                )
            log.error("cannot allocate commit-log space: %s (%s)", os_error_cause(exc), exc)
            return _refused(
                PutMessageStatus.UNKNOWN_ERROR,
                f"{WRITE_FAILED_PREFIX}{os_error_cause(exc)} ({exc})",
            )
        self._core.disk_full_logged = False
        return None

    def put_message(
        self, msg: Message, deferred: list[Future[PutMessageResult]] | None = None
    ) -> PutMessageResult:
        """Append one message; waits for the flush under SYNC_FLUSH and for the put stages
        (unless WAIT=false).

        With ``deferred`` (``deferred_put``) it waits for nothing: once the record is
        appended, a future goes to the flush service and the stages, which complete it, and
        into ``deferred``, and the append's result (PUT_OK) returns. A put with nothing to wait
        for, or refused before the append, returns its result and leaves ``deferred`` empty.

        Any thread. Takes the put lock for the append only. A plain message is appended by
        the put core in one call (``_put_core``); everything else here.
        """
        appended = self._core.put(msg)
        if appended is not None:
            if deferred is not None:
                self._defer(deferred, appended, msg.wait_store_msg_ok)
            elif self._waits and msg.wait_store_msg_ok:
                return self._wait_stored(appended)
            return appended
        if self._refusal is not None or self._core.begin_ns:
            if (early := self._early_refusal()) is not None:
                return early
        p = self._prepare(msg)
        if p.__class__ is PutMessageResult:
            return p  # type: ignore[return-value]
        return self._append(p, deferred)  # type: ignore[arg-type]

    def put_fields(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: bytes,
        tags_code: int,
        keys: str | None,
        uniq: str | None,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: str | None,
        reconsume_times: int,
        wait: bool,
        deferred: list[Future[PutMessageResult]] | None = None,
    ) -> PutMessageResult:
        """Append one message given as its record's fields: what ``put_message`` stores for a
        ``Message`` of these fields whose properties, in the order they are stored, encode to
        ``properties`` (``name\x01value`` pairs joined by ``\x02``, UTF-8), with ``tags_code``
        the consume-queue code of its TAGS (0 without), ``keys`` / ``uniq`` its KEYS and
        UNIQ_KEY values (None when absent) and ``wait`` whether the put waits for its flush and
        stages. The caller guarantees what ``put_message`` would check in the properties: no
        DELAY, no WAIT, no separator inside a name or value. Everything else is checked here
        as ``put_message`` checks it; ``deferred`` as in ``put_message``.

        A broker's plain send comes here from its frame without a ``Message`` or a dict of its
        properties. Any thread; takes the put lock for the append only.
        """
        if self._refusal is not None or self._core.begin_ns:
            if (early := self._early_refusal()) is not None:
                return early
        topic_tail = self._topics.get(topic)
        if topic_tail is None:
            try:
                topic_tail = self._topic_tail(topic)
            except InvalidTopicError as exc:
                return _refused(_ILLEGAL, str(exc))
        blen = len(body)
        if blen > self.max_message_size:
            return _refused(
                _ILLEGAL, f"body of {blen} bytes exceeds max_message_size {self.max_message_size}"
            )
        if queue_id < 0:
            return _refused(_ILLEGAL, f"negative queue id {queue_id}")
        p = self._checked(
            topic, topic_tail, queue_id, body, flag, sys_flag, born_timestamp, born_host,
            reconsume_times, 0, properties, tags_code, keys, uniq, wait,
        )  # fmt: skip
        if p.__class__ is PutMessageResult:
            return p  # type: ignore[return-value]
        return self._append(p, deferred)  # type: ignore[arg-type]

    def _append(
        self, p: _Prepared, deferred: list[Future[PutMessageResult]] | None
    ) -> PutMessageResult:
        """Append a checked record (``_checked``'s tuple) under the put lock, dispatch it as
        the store is wired, then the waits or their hand-over to ``deferred``. Any thread."""
        (
            topic,
            tail,
            queue_id,
            body,
            crc,
            flag,
            sys_flag,
            born_ts,
            born_host,
            reconsume,
            prepared,
            props,
            total,
            code,
            keys,
            uniq,
            wait,
        ) = p  # type: ignore[misc]
        tran = sys_flag & SYSFLAG_TRANSACTION_MASK
        in_queue = tran in _IN_QUEUE_TYPES
        key = (topic, queue_id)
        with self.put_lock:
            refusal = self._refusal  # again under the lock: shutdown may have begun
            if refusal is not None:
                return _refused(*refusal)
            core = self._core
            core.begin_ns = now_ns = self._now_ns()
            try:
                now = now_ns // 1_000_000
                files = self.queue.files
                mf = files[-1] if files else None
                if mf is None or mf.wrote_position + total + 8 > mf.allocated:
                    # a roll or a step of disk blocks (allocated never passes the file size): the
                    # only parts of an append that can take long, so the ones timed
                    begin = self._monotonic()
                    got = self._writable_file(total, now)
                    self._note_latency(self._monotonic() - begin)
                    if isinstance(got, PutMessageResult):  # (a roll: isinstance costs nothing)
                        return got
                    mf = got
                pos = mf.wrote_position
                target = mf.write_target
                phys = mf.from_offset + pos
                table = self.topic_queue_table
                qoff = table.get(key, 0) if in_queue else 0
                if len(born_host) == 8 and not self._store_host_extra:
                    if _COMPILED_WRITE:
                        write_v4(
                            target, pos, total, MAGIC_V1, crc, queue_id, flag, qoff, phys,
                            sys_flag, born_ts or now, born_host, now, self.store_host, reconsume,
                            prepared, body, tail,
                        )  # fmt: skip
                    else:  # write_v4_py's work without its checks (_prepare made the parts)
                        blen = len(body)
                        HEAD_V4_8.pack_into(
                            target, pos, total, MAGIC_V1, crc, queue_id, flag, qoff, phys,
                            sys_flag, born_ts or now, born_host, now, self.store_host, reconsume,
                            prepared, blen,
                        )  # fmt: skip
                        q = pos + HEAD_V4_SIZE + blen
                        target[pos + HEAD_V4_SIZE : q] = body
                        target[q : pos + total] = tail
                else:
                    target[pos : pos + total] = encode_record(
                        topic=topic,
                        body=bytes(body),
                        queue_id=queue_id,
                        flag=flag,
                        queue_offset=qoff,
                        phys_offset=phys,
                        sys_flag=sys_flag,
                        born_timestamp=born_ts or now,
                        born_host=born_host,
                        store_timestamp=now,
                        store_host=self.store_host,
                        reconsume_times=reconsume,
                        prepared_transaction_offset=prepared,
                        properties=props.decode(),
                    )
                mf.wrote_position = pos + total
                mf.store_timestamp = now
                if in_queue:
                    table[key] = qoff + 1
                plain = self.inline_plain  # set only with inline_dispatch
                if plain is not None and not (tran or keys or uniq) and code != DELAY_TAGS_CODE:
                    plain(topic, queue_id, phys, total, code, now, qoff)  # the commonest record
                elif (inline := self.inline_dispatch) is not None or (
                    handoff := self.dispatch_handoff
                ) is not None:
                    if code == DELAY_TAGS_CODE:
                        code = self.delivery_time(queue_id + 1, now)
                    if plain is not None and not tran and not keys and not uniq:
                        plain(topic, queue_id, phys, total, code, now, qoff)
                    else:
                        req = _new_result(
                            DispatchRequest,
                            (
                                topic,
                                queue_id,
                                phys,
                                total,
                                code,
                                now,
                                qoff,
                                keys,
                                uniq,
                                sys_flag,
                                prepared,
                            ),
                        )
                        if inline is not None:
                            inline(req)  # the record is readable already (wrote_position moved)
                        else:
                            handoff.append(req)  # type: ignore[union-attr]
                self.topic_queue_table.count(topic, 1, total)
            finally:
                core.begin_ns = 0
        on_append = self.on_append
        if on_append is not None:
            on_append()
        result: PutMessageResult = _new_result(
            PutMessageResult, (_PUT_OK, phys, total, qoff, now, self.store_host, 1, None, ())
        )
        if deferred is not None:
            self._defer(deferred, result, wait)
        elif wait and self._waits:
            return self._wait_stored(result)
        return result

    def _defer(
        self, pending: list[Future[PutMessageResult]], result: PutMessageResult, wait: bool
    ) -> None:
        """The non-blocking put's tail: a future for the flush wait and the stages, handed to
        them and put into ``pending``; nothing when there is nothing to wait for (the result
        is final). Calling thread, no lock."""
        waits = self._waits
        if not wait or waits is None:
            return
        fut: Future[PutMessageResult] = Future()
        pending.append(fut)
        group_commit, timeout, stages = waits
        completion = PutCompletion(fut, result.wrote_offset + result.wrote_bytes, result, stages)
        if group_commit is not None:
            group_commit.await_flush(completion.end, timeout, completion.flushed)
        else:
            completion.advance(result)

    def _wait_stored(self, result: PutMessageResult) -> PutMessageResult:
        """The blocking put's waits: the flush (SYNC_FLUSH), then the stages. Producer
        threads, no lock."""
        end = result.wrote_offset + result.wrote_bytes
        waits = self._waits
        assert waits is not None  # the caller checked
        group_commit, timeout, stages = waits
        if group_commit is not None and not group_commit.wait_flushed(end, timeout):
            return result._replace(status=PutMessageStatus.FLUSH_DISK_TIMEOUT)
        if stages:
            return run_stages(stages, end, result)
        return result

    def put_messages(
        self, msgs: Sequence[Message], deferred: list[Future[PutMessageResult]] | None = None
    ) -> PutMessageResult:
        """Append a batch (one topic and queue, no delay, no transaction) as one append.

        Every message is checked first; the records are then packed straight into the file
        under the put lock and become visible together. (Under the interpreter lock, encoding
        outside the put lock would buy no parallelism, only a second copy.) The batch waits
        as one put (``deferred`` as in ``put_message``).

        The batch skips the waits only when every message in it says WAIT=false: one
        message's WAIT=false never drops the durability the others asked for. (RocketMQ's
        client refuses to build a batch whose messages disagree on WAIT and the broker goes by
        the batch's flag, the first message's; for a batch that agrees this is the same.)
        """
        if self._refusal is not None or self._core.begin_ns:
            if (early := self._early_refusal()) is not None:
                return early
        if not msgs:
            return _refused(_ILLEGAL, "empty batch")
        topic, queue_id = msgs[0].topic, msgs[0].queue_id
        prepare = self._prepare
        prepared: list[tuple[Any, ...]] = []
        total = 0
        fast = not self._store_host_extra
        wait = False
        for msg in msgs:
            if msg.topic != topic or msg.queue_id != queue_id:
                return _refused(_ILLEGAL, "a batch must have one topic and queue")
            if msg.sys_flag & SYSFLAG_TRANSACTION_MASK or (
                msg.properties and PROPERTY_DELAY in msg.properties
            ):
                return _refused(_ILLEGAL, "batches take neither delayed nor transactional messages")
            p = prepare(msg)
            if isinstance(p, PutMessageResult):
                return p
            # p is a plain tuple in _Prepared's field order: index, don't name
            prepared.append(p)
            total += p[12]
            if len(p[8]) != 8:
                fast = False
            if p[16]:
                wait = True  # one message that waits makes the batch wait
        if total + 8 > self.file_size:
            return _refused(_ILLEGAL, f"a batch of {total} bytes cannot fit in a commit-log file")
        store_host = self.store_host
        key = (topic, queue_id)
        offsets: list[int] = []
        sizes: list[int] = []
        codes: list[int] = []
        indexed: list[DispatchRequest] = []  # records with keys, for the index
        with self.put_lock:
            refusal = self._refusal  # again under the lock: shutdown may have begun
            if refusal is not None:
                return _refused(*refusal)
            core = self._core
            core.begin_ns = now_ns = self._now_ns()
            try:
                begin = self._monotonic()
                now = now_ns // 1_000_000
                got = self._writable_file(total, now)
                if isinstance(got, PutMessageResult):
                    return got
                mf = got
                target = mf.write_target
                base = mf.from_offset
                first_pos = pos = mf.wrote_position
                first_qoff = qoff = self.topic_queue_table.get(key, 0)
                collect = self.dispatch_handoff is not None or self.inline_dispatch is not None
                if fast and _COMPILED_WRITE:
                    offsets = write_batch_v4(
                        target, pos, base, queue_id, qoff, now, store_host, prepared
                    )
                    if collect:
                        sizes = [r[12] for r in prepared]
                        codes = [r[13] for r in prepared]
                        for i, r in enumerate(prepared):
                            if r[14] or r[15]:
                                req = (topic, queue_id, offsets[i], r[12], r[13], now, qoff + i)
                                indexed.append(DispatchRequest(*req, r[14], r[15], r[6], r[10]))
                else:  # pure Python (packed in place, as put_message does), or IPv6 hosts
                    for (
                        _t, tail, _q, body, crc, flag, sys_flag, born_ts, born_host, reconsume,
                        prepared_offset, props, size, code, keys, uniq, _w,
                    ) in prepared:  # fmt: skip
                        phys = base + pos
                        if fast:
                            blen = len(body)
                            HEAD_V4_8.pack_into(
                                target, pos, size, MAGIC_V1, crc, queue_id, flag, qoff, phys,
                                sys_flag, born_ts or now, born_host, now, store_host, reconsume,
                                prepared_offset, blen,
                            )  # fmt: skip
                            q = pos + HEAD_V4_SIZE + blen
                            target[pos + HEAD_V4_SIZE : q] = body
                            target[q : pos + size] = tail
                        else:
                            target[pos : pos + size] = encode_record(
                                topic=topic, body=bytes(body), queue_id=queue_id, flag=flag,
                                queue_offset=qoff, phys_offset=phys, sys_flag=sys_flag,
                                born_timestamp=born_ts or now, born_host=born_host,
                                store_timestamp=now, store_host=store_host,
                                reconsume_times=reconsume,
                                prepared_transaction_offset=prepared_offset,
                                properties=props.decode(),
                            )  # fmt: skip
                        offsets.append(phys)
                        if collect:
                            sizes.append(size)
                            codes.append(code)
                            if keys or uniq:
                                indexed.append(
                                    DispatchRequest(
                                        topic,
                                        queue_id,
                                        phys,
                                        size,
                                        code,
                                        now,
                                        qoff,
                                        keys,
                                        uniq,
                                        sys_flag,
                                        prepared_offset,
                                    )
                                )
                        pos += size
                        qoff += 1
                self._publish_batch(
                    mf, topic, queue_id, first_pos, total, first_qoff, now,
                    tuple(offsets), tuple(sizes), tuple(codes), tuple(indexed),
                )  # fmt: skip
                self._note_latency(self._monotonic() - begin)
            finally:
                core.begin_ns = 0
        return self._batch_result(
            base + first_pos, total, first_qoff, now, tuple(offsets), wait, deferred
        )

    def _publish_batch(
        self,
        mf: MappedFile,
        topic: str,
        queue_id: int,
        first_pos: int,
        total: int,
        first_qoff: int,
        now: int,
        offsets: tuple[int, ...],
        sizes: tuple[int, ...],
        codes: tuple[int, ...],
        indexed: tuple[DispatchRequest, ...],
        key_offsets: Sequence[int] = (),
        key_values: Sequence[str] = (),
    ) -> None:
        """Make a batch packed at ``first_pos`` of ``mf`` visible: one append, so readers and
        dispatch see all of it or none; dispatch takes it as one entry. Put lock held."""
        inline = self.inline_dispatch
        handoff = self.dispatch_handoff
        batch = None
        if inline is not None or handoff is not None:
            batch = BatchDispatch(
                topic, queue_id, mf.from_offset + first_pos, total, first_qoff, now,
                offsets, sizes, codes, indexed, key_offsets, key_values,
            )  # fmt: skip
            if handoff is not None and inline is None:
                handoff.append(batch)
        n = len(offsets)
        mf.wrote_position = first_pos + total
        mf.store_timestamp = now
        self.topic_queue_table[(topic, queue_id)] = first_qoff + n
        self.topic_queue_table.count(topic, n, total)
        if inline is not None and batch is not None:
            inline(batch)  # now that the batch is readable

    def _batch_result(
        self,
        first_phys: int,
        total: int,
        first_qoff: int,
        now: int,
        offsets: tuple[int, ...],
        wait: bool,
        deferred: list[Future[PutMessageResult]] | None = None,
    ) -> PutMessageResult:
        """After a batch: wake dispatch, then the waits (or ``deferred``'s hand-over, as in
        ``put_message``), the result."""
        on_append = self.on_append
        if on_append is not None:
            on_append()
        result = PutMessageResult(
            _PUT_OK, first_phys, total, first_qoff, now, self.store_host, len(offsets), None,
            offsets,
        )  # fmt: skip
        if deferred is not None:
            self._defer(deferred, result, wait)
        elif wait and self._waits:
            return self._wait_stored(result)
        return result

    def put_encoded_batch(self, batch: EncodedBatch) -> PutMessageResult:
        """Append records of one topic and queue encoded ahead of the lock
        (``_batch_encode.encode_plain_batch``) in one copy: the batch's times and offsets
        stamped in place, one publish for dispatch (consume-queue units and index keys in one
        entry). The checks are ``put_messages``'s for the same rows. Needs numpy.

        Any thread; takes the put lock for the copy, the stamp and the publish."""
        from itertools import compress

        import numpy as np  # the spark extra; the rest of the store does without it

        from ._batch_encode import stamp

        refusal = self._refusal
        if refusal is not None:
            return _refused(*refusal)
        n = len(batch)
        if not n or (batch.keys and len(batch.keys) != n) or len(batch.tags_codes) != n:
            return _refused(_ILLEGAL, "empty batch or columns of different lengths")
        try:
            self._topic_tail(batch.topic)  # checks the topic name
        except InvalidTopicError as exc:
            return _refused(_ILLEGAL, str(exc))
        if batch.queue_id < 0:
            return _refused(_ILLEGAL, f"negative queue id {batch.queue_id}")
        if batch.max_body > self.max_message_size:
            return _refused(
                _ILLEGAL,
                f"body of {batch.max_body} bytes exceeds max_message_size {self.max_message_size}",
            )
        if batch.max_properties > self.max_properties_size:
            return _refused(
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                f"properties of {batch.max_properties} bytes exceed {self.max_properties_size}",
            )
        if batch.store_host != self.store_host:
            return _refused(_ILLEGAL, "the batch was encoded for another store host")
        total = batch.total
        if max(batch.sizes) + 8 > self.file_size or total + 8 > self.file_size:
            return _refused(_ILLEGAL, f"a batch of {total} bytes cannot fit in a commit-log file")
        key = (batch.topic, batch.queue_id)
        core = self._core
        if core.begin_ns and (busy := self._busy_refusal()) is not None:
            return busy
        with self.put_lock:
            refusal = self._refusal  # again under the lock: shutdown may have begun
            if refusal is not None:
                return _refused(*refusal)
            core.begin_ns = now_ns = self._now_ns()  # see is_os_page_cache_busy
            try:
                begin = self._monotonic()
                now = now_ns // 1_000_000
                got = self._writable_file(total, now)
                if isinstance(got, PutMessageResult):
                    return got
                mf = got
                wpos = mf.wrote_position
                first_phys = mf.from_offset + wpos
                first_qoff = self.topic_queue_table.get(key, 0)
                target = mf.write_target
                # numpy copies without the interpreter lock: the task's other threads (Spark's
                # input, commit, dispatch) run meanwhile
                dst = np.frombuffer(target, dtype=np.uint8, count=total, offset=wpos)
                try:
                    np.copyto(dst, np.frombuffer(batch.data, dtype=np.uint8))
                finally:
                    del dst
                offsets = stamp(target, wpos, batch, first_phys, first_qoff, now)
                key_offsets: tuple[int, ...] = ()
                key_values: tuple[str, ...] = ()
                if batch.keys:
                    key_values = tuple(filter(None, batch.keys))  # type: ignore[arg-type]
                    key_offsets = (
                        offsets if len(key_values) == n else tuple(compress(offsets, batch.keys))
                    )
                self._publish_batch(
                    mf, batch.topic, batch.queue_id, wpos, total, first_qoff, now,
                    offsets, batch.sizes, batch.tags_codes, (), key_offsets, key_values,
                )  # fmt: skip
                self._note_latency(self._monotonic() - begin)
            finally:
                core.begin_ns = 0
        return self._batch_result(first_phys, total, first_qoff, now, offsets, True)

    def append_data(self, start_offset: int, data: bytes | bytearray | memoryview) -> bool:
        """Replication (a slave's HAClient thread): append raw commit-log bytes exactly at
        ``start_offset``, which must be the end of the log, or the start of a file when the
        log is empty. False, with nothing written, when it is not, when the bytes would cross
        the end of a file, or when no file could be created. Wakes dispatch after an append.
        Takes the put lock."""
        n = len(data)
        with self.put_lock:
            files = self.queue.files
            last = files[-1] if files else None
            if last is None:
                if start_offset % self.file_size:
                    return False
            elif start_offset != last.from_offset + last.wrote_position:
                return False
            if not n:
                return True
            mf = self.queue.get_last_mapped_file(start_offset)
            if mf is None or mf.from_offset + mf.wrote_position != start_offset:
                return False
            pos = mf.wrote_position
            if pos + n > self.file_size:
                return False
            if pos + n > mf.allocated:  # raises StoreIOError (ENOSPC) with nothing written
                mf.ensure_allocated(pos + n)
            if mf.write_buffer is not None:
                mf.append(data)
            else:
                # a file write, not a copy into the mapping: no page faults under the
                # interpreter lock (a slave's catch-up writes whole files), which pwrite
                # releases, so dispatch runs meanwhile; the mapping shares the page cache
                with memoryview(data) as view, translate_os_errors(f"append to {mf.path}"):
                    done = 0
                    while done < n:
                        done += os.pwrite(mf._fd, view[done:], pos + done)
                mf.wrote_position = pos + n
        on_append = self.on_append
        if on_append is not None:
            on_append()
        return True

    def written_end(self) -> int:
        """The end of what was appended (beyond the committed end while write buffers hold
        data). Any thread."""
        return self.queue.get_max_wrote_position()

    def incomplete_at(self, phys_offset: int) -> bool:
        """True when a message record starts at ``phys_offset`` whose end is not readable yet
        (a slave that received part of it). Any thread."""
        mf = self.queue.find_mapped_file_by_offset(phys_offset)
        if mf is None or not mf.hold():
            return False
        try:
            pos = phys_offset - mf.from_offset
            readable = min(mf.read_position, mf.allocated)
            if pos + 8 > readable:
                return pos < self.file_size
            total, magic = BLANK.unpack_from(mf.mm, pos)
            return (
                magic in _MESSAGE_MAGICS and total > 0 and readable < pos + total <= self.file_size
            )
        finally:
            mf.release()

    # ---- reading ----------------------------------------------------------------------------

    def get_data(self, offset: int, size: int | None = None) -> SelectMappedBufferResult | None:
        """A held view of the commit log from ``offset`` (to the end of its file's readable
        data, or ``size`` bytes)."""
        mf = self.queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        return mf.select_mapped_buffer(offset - mf.from_offset, size)

    def read_message(
        self, phys_offset: int, size: int | None = None, *, check_crc: bool = True
    ) -> MessageExt | None:
        """Decode the message at ``phys_offset``; None where there is none."""
        mf = self.queue.find_mapped_file_by_offset(phys_offset)
        if mf is None or not mf.hold():
            return None
        try:
            pos = phys_offset - mf.from_offset
            limit = min(mf.read_position, mf.allocated)  # nothing past a loaded file's data
            if size is not None:
                limit = min(limit, pos + size)
            try:
                return decode_message(mf.mm, pos, limit, check_crc=check_crc)
            except CorruptRecordError:
                return None
        finally:
            mf.release()

    def check_at(self, phys_offset: int, *, check_crc: bool) -> DispatchRequest | int:
        """Validate the record at ``phys_offset`` (see ``check_record``)."""
        mf = self.queue.find_mapped_file_by_offset(phys_offset)
        if mf is None or not mf.hold():
            return 0
        try:
            return check_record(
                mf.mm,
                phys_offset - mf.from_offset,
                min(mf.read_position, mf.allocated),
                check_crc=check_crc,
                delay_time=self.delivery_time,
            )
        finally:
            mf.release()

    # ---- recovery helpers -------------------------------------------------------------------

    def rebuild_topic_queue_table(self, entries: dict[tuple[str, int], int]) -> None:
        self.topic_queue_table.reset(entries)
