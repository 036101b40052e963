"""ScheduleMessageService: delivers delayed messages when their time comes.

A put with DELAY level n > 0 is stored by the commit log in SCHEDULE_TOPIC_XXXX queue n-1 (REAL_TOPIC
and REAL_QID saved in its properties); the consume-queue unit's tags code is its delivery time
(store time + the level's delay). This service keeps one timer per level: it walks the level's
queue from the next undelivered offset, and each due message is put again to its real topic and
queue with its body, flag, sys flag, born time and host, reconsume times and its properties
string unchanged, DELAY, REAL_TOPIC and REAL_QID included, as RocketMQ 4.9.8 stores it. The first
message not yet due sets when the level's timer fires next.

As RocketMQ: an empty or caught-up level looks again after 100 ms; a put that fails for a reason
that can pass (disk full, shutting down) is retried after 10 s from the same offset; a message
that can never be delivered (no REAL_TOPIC, a refused topic, a transaction half message) is
logged with its id and skipped: it stays in the commit log. A delivery time further away than the
level's delay (a clock that went back) is taken as due now. Queues of levels the current table does
not know (a store written with a longer ``message_delay_level``) are delivered by their stored
delivery times.

Timer messages (RocketMQ 5's exact delivery time, property TIMER_DELIVER_MS): such a message
waits in the longest level not longer than its delay; when that level is over and time remains,
it is put into the schedule again in the level that fits what remains (``timer_level``), and so
on, so it is delivered at its time, never early and late by less than the shortest level. A
4.x message (DELAY only) is delivered after its level's delay, as RocketMQ 4.9.8 does.

Progress (level -> next offset) is persisted in config/delayOffset.json every
``flush_delay_offset_interval`` ms and at shutdown. Only progress whose re-put messages are
flushed in the commit log is persisted, so a crash repeats deliveries (at most those since the
last persist) and never loses one. Offsets are clamped into each queue's [min, max] at start and
whenever a queue's minimum moves (retention cleaning).

Runs only on a master. Threads: the service's own thread; ``deliver_due`` and ``persist`` may be
called from any thread (one lock serialises them).
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from collections.abc import Callable
from typing import NamedTuple

from .._clock import Clock
from .._durable import fsync_dir, is_disk_full, replace_synced
from .._service import ServiceThread
from ..log._message import Message, PutMessageResult, PutMessageStatus, RedeliveredMessage
from ..log._record import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    MessageExt,
)
from ..queue._consume_queue import BLANK_SIZE, ConsumeQueue, ConsumeQueueTable
from ._delay_offset import DelayOffsetFile

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.1  # RocketMQ's DELAY_FOR_A_WHILE
RETRY_WAIT_S = 10.0  # RocketMQ's DELAY_FOR_A_PERIOD
MAX_WAIT_S = 0.1  # the thread looks at the clock at least this often
FIRST_DELAY_S = 1.0  # RocketMQ's FIRST_DELAY_TIME: the first round runs a second after start
BATCH = 1024  # messages per level per run, so one busy level does not starve the others
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
_PERMANENT = frozenset(
    {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED}
)
# RocketMQ 5's exact delivery time (epoch ms) of a timer message
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# recalled timer messages not dropped yet (config/<this>); kept a day past their time
RECALL_FILE = "timerRecall.json"
_RECALL_KEPT_MS = 86_400_000


PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
# RocketMQ 5's timerMaxDelaySec default: 3 days
DEFAULT_TIMER_MAX_DELAY_MS = 3 * 86_400_000


def apply_timer(
    props: dict[str, str],
    now_ms: int,
    levels_ms: tuple[int, ...] | list[int],
    max_delay_ms: int = DEFAULT_TIMER_MAX_DELAY_MS,
) -> None:
    """A RocketMQ 5 client's timer properties (TIMER_DELAY_SEC, TIMER_DELAY_MS or
    TIMER_DELIVER_MS, in that order of precedence) turned into what this store delivers by:
    TIMER_DELIVER_MS and the first DELAY level (``timer_level``). A message that already has
    a DELAY level keeps it. ValueError for a value that is not a number or a delay over
    ``max_delay_ms``. Changes ``props`` in place."""
    if PROPERTY_DELAY in props:
        return
    deliver: int | None = None
    for name, scale in ((PROPERTY_TIMER_DELAY_SEC, 1000), (PROPERTY_TIMER_DELAY_MS, 1)):
        raw = props.pop(name, None)
        if raw is not None and deliver is None:
            if not raw.strip().lstrip("-").isdigit():
                raise ValueError(f"{name} is not a number: {raw!r}")
            deliver = now_ms + int(raw) * scale
    if deliver is None:
        raw = props.get(PROPERTY_TIMER_DELIVER_MS)
        if raw is None:
            return
        if not raw.strip().isdigit():
            raise ValueError(f"{PROPERTY_TIMER_DELIVER_MS} is not a number: {raw!r}")
        deliver = int(raw)
    if deliver - now_ms > max_delay_ms:
        raise ValueError(f"the delivery time is more than {max_delay_ms} ms ahead")
    props[PROPERTY_TIMER_DELIVER_MS] = str(deliver)
    level = timer_level(deliver - now_ms, levels_ms)
    if level:
        props[PROPERTY_DELAY] = str(level)


def timer_level(remaining_ms: int, levels_ms: tuple[int, ...] | list[int]) -> int:
    """The delay level (1-based) a message due ``remaining_ms`` from now waits in next: the
    longest level not longer than what remains, so it never arrives early and hops on for the
    rest; the shortest level when every level is longer (late by less than that level). 0 when
    it is due."""
    if remaining_ms <= 0 or not levels_ms:
        return 0
    best = 0
    for level, ms in enumerate(levels_ms, 1):
        if ms <= remaining_ms and (best == 0 or ms > levels_ms[best - 1]):
            best = level
    if best == 0:
        best = min(range(1, len(levels_ms) + 1), key=lambda level: levels_ms[level - 1])
    return best


class LevelProgress(NamedTuple):
    """One delay level: next offset to deliver, the queue's max offset, delivered since start."""

    level: int
    delay_ms: int | None
    offset: int
    max_offset: int
    delivered: int


class ScheduleMessageService(ServiceThread):
    def __init__(
        self,
        *,
        levels_ms: tuple[int, ...],
        consume_queues: ConsumeQueueTable,
        read_message: Callable[[int, int], MessageExt | None],
        put_message: Callable[[Message], PutMessageResult],
        flushed_offset: Callable[[], int],
        offset_file: DelayOffsetFile,
        clock: Clock,
        persist_interval_ms: int,
    ) -> None:
        super().__init__("ScheduleMessageService")
        self.levels_ms = levels_ms
        self.consume_queues = consume_queues
        self._read = read_message
        self._put = put_message
        self._flushed = flushed_offset
        self.offset_file = offset_file
        self.clock = clock
        self.persist_interval = persist_interval_ms / 1000
        self._lock = threading.RLock()
        self._offsets: dict[int, int] = {}  # level -> next offset (delivered up to here)
        self._safe: dict[int, int] = {}  # level -> offset whose re-puts are all flushed
        # level -> (offset after a delivery, commit-log end of its re-put; 0: nothing written)
        self._unflushed: dict[int, collections.deque[tuple[int, int]]] = {}
        self._next_run: dict[int, float] = {}  # level -> monotonic time of its timer
        self._delivered: collections.Counter[int] = collections.Counter()
        self._warned_levels: set[int] = set()
        self._loaded = False
        self._persist_disk_full = False  # the last persist found the disk full
        # recalled timer messages: "<topic>\x01<UNIQ_KEY>" → delivery time (epoch ms)
        self._recalled: dict[str, int] = {}
        self._recalled_dirty = False
        self.recall_path = offset_file.dir / RECALL_FILE

    # ---- progress ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read delayOffset.json (or its .bak). Store start-up thread."""
        with self._lock:
            table = self.offset_file.load()
            unknown = sorted(level for level in table if level > len(self.levels_ms))
            if unknown:
                log.warning(
                    "delayOffset.json has levels %s beyond the %d configured; their queues are "
                    "delivered by their stored delivery times",
                    unknown,
                    len(self.levels_ms),
                )
            self._offsets = dict(table)
            self._safe = dict(table)
            self._unflushed = {}
            self._recalled = self._load_recalled()
            self._loaded = True

    def offset_table(self) -> dict[int, int]:
        """Level -> next offset to deliver (in memory, may be ahead of the file)."""
        with self._lock:
            return dict(self._offsets)

    def progress(self) -> list[LevelProgress]:
        """Every level that has a queue or an offset, ascending."""
        with self._lock:
            queues = self._level_queues()
            levels = sorted(set(queues) | set(self._offsets))
            out = []
            for level in levels:
                cq = queues.get(level)
                out.append(
                    LevelProgress(
                        level,
                        self._delay_of(level),
                        self._offsets.get(level, 0),
                        cq.max_offset if cq is not None else 0,
                        self._delivered[level],
                    )
                )
            return out

    def _advance(self, level: int, offset: int, end_phys: int) -> None:
        self._offsets[level] = offset
        self._unflushed.setdefault(level, collections.deque()).append((offset, end_phys))

    def _collect_safe(self, flushed: int) -> dict[int, int]:
        for level, pending in self._unflushed.items():
            while pending and pending[0][1] <= flushed:
                self._safe[level] = pending.popleft()[0]
        return dict(self._safe)

    def persist(self) -> None:
        """Write the flushed part of the progress to delayOffset.json (and the recalled timer
        messages when they changed). Any thread."""
        with self._lock:
            if not self._loaded:
                return
            table = self._collect_safe(self._flushed())
            try:
                self.offset_file.persist(table)
            except OSError as exc:
                if not is_disk_full(exc):
                    log.exception("could not persist delay progress; retried at the next interval")
                elif not self._persist_disk_full:  # told once until it works again
                    log.error("could not persist delay progress (retried): %s", exc)
                self._persist_disk_full = is_disk_full(exc)
            else:
                if self._persist_disk_full:
                    log.info("delay progress persisted again")
                self._persist_disk_full = False
            stale = self.clock.now_ms() - _RECALL_KEPT_MS
            for key in [k for k, when in self._recalled.items() if when < stale]:
                del self._recalled[key]
                self._recalled_dirty = True
            if self._recalled_dirty:
                try:
                    self._persist_recalled()
                except OSError:
                    log.exception("could not persist recalled messages; retried later")

    # ---- recall -----------------------------------------------------------------------------

    def recall(self, topic: str, uniq_key: str, deliver_ms: int) -> None:
        """Cancel the timer message ``uniq_key`` of ``topic`` due at ``deliver_ms``: it is
        dropped when its level comes (or at its next hop). ValueError when its time has come
        (a timer message is never delivered early, so before then it cannot have been). The
        recall is on disk when this returns. Any thread."""
        with self._lock:
            if self.clock.now_ms() >= deliver_ms:
                raise ValueError("the message's delivery time has come: too late to recall it")
            self._recalled[f"{topic}\x01{uniq_key}"] = deliver_ms
            self._persist_recalled()

    def _load_recalled(self) -> dict[str, int]:
        try:
            doc = json.loads(self.recall_path.read_text("utf-8"))
            return {str(k): int(v) for k, v in doc.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.error("%s is damaged (%s): recalls in it are forgotten", self.recall_path, exc)
            return {}

    def _persist_recalled(self) -> None:
        self.recall_path.parent.mkdir(parents=True, exist_ok=True)
        replace_synced(self.recall_path, json.dumps(self._recalled).encode("utf-8"))
        fsync_dir(self.recall_path.parent)
        self._recalled_dirty = False

    def correct_offsets(self) -> None:
        """Clamp every level's offset into its queue's [min, max] (start-up, after cleaning)."""
        with self._lock:
            for level, cq in self._level_queues().items():
                current = self._offsets.get(level)
                if current is None:
                    continue
                lo, hi = cq.min_offset, cq.max_offset
                fixed = min(max(current, lo), hi)
                if fixed != current:
                    log.error(
                        "delay level %d: offset %d outside its queue [%d, %d]; corrected to %d",
                        level,
                        current,
                        lo,
                        hi,
                        fixed,
                    )
                    self._offsets[level] = self._safe[level] = fixed
                    self._unflushed.pop(level, None)

    # ---- delivery ---------------------------------------------------------------------------

    def _delay_of(self, level: int) -> int | None:
        return self.levels_ms[level - 1] if 0 < level <= len(self.levels_ms) else None

    def _level_queues(self) -> dict[int, ConsumeQueue]:
        by_id = self.consume_queues.queues.get(SCHEDULE_TOPIC)
        return {qid + 1: cq for qid, cq in list(by_id.items())} if by_id else {}

    def deliver_due(self) -> int:
        """Run every level whose timer has fired; returns how many messages were delivered.

        Called by the service thread; tests call it after moving a ManualClock.
        """
        with self._lock:
            now = self.clock.monotonic()
            delivered = 0
            for level, cq in sorted(self._level_queues().items()):
                if self._next_run.get(level, 0.0) > now:
                    continue
                if self._delay_of(level) is None and level not in self._warned_levels:
                    self._warned_levels.add(level)
                    log.warning(
                        "SCHEDULE_TOPIC_XXXX queue %d is delay level %d, beyond the %d configured "
                        "(message_delay_level); delivered by its stored delivery times",
                        level - 1,
                        level,
                        len(self.levels_ms),
                    )
                try:
                    count, wait = self._run_level(level, cq)
                except Exception:
                    log.exception(
                        "delay level %d: delivery failed; retrying in %.0f s", level, RETRY_WAIT_S
                    )
                    count, wait = 0, RETRY_WAIT_S
                delivered += count
                self._next_run[level] = self.clock.monotonic() + wait
            return delivered

    def next_wait(self) -> float:
        """Seconds until the earliest level timer (at most MAX_WAIT_S)."""
        with self._lock:
            now = self.clock.monotonic()
            nearest = min(self._next_run.values(), default=now + MAX_WAIT_S)
            return max(0.0, min(MAX_WAIT_S, nearest - now))

    def _run_level(self, level: int, cq: ConsumeQueue) -> tuple[int, float]:
        """Deliver what is due in one level: (delivered, seconds until this level runs again)."""
        offset = self._offsets.get(level, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if offset < lo:
            log.error(
                "delay level %d: offset %d is below its queue's minimum %d; moving up",
                level,
                offset,
                lo,
            )
            offset = lo
            self._advance(level, offset, 0)
        delay_ms = self._delay_of(level)
        now_ms = self.clock.now_ms()
        delivered = 0
        while offset < hi:
            if delivered >= BATCH:
                return delivered, 0.0
            unit = cq.get_unit(offset)
            if unit is None:
                return delivered, IDLE_WAIT_S
            phys, size, deliver_at = unit
            if phys < 0 or size <= 0 or size == BLANK_SIZE:
                offset += 1
                self._advance(level, offset, 0)
                continue
            if delay_ms is not None and deliver_at > now_ms + delay_ms:
                deliver_at = now_ms  # a clock that went back: due now, as RocketMQ
            if deliver_at > now_ms:
                return delivered, (deliver_at - now_ms) / 1000
            msg = self._read(phys, size)
            if msg is None:
                log.error(
                    "delay level %d offset %d: no message at commit-log offset %d (deleted?); skipped",
                    level,
                    offset,
                    phys,
                )
                offset += 1
                self._advance(level, offset, 0)
                continue
            outcome = self._redeliver(level, offset, msg)
            if outcome is None:
                return delivered, RETRY_WAIT_S
            offset += 1
            self._advance(level, offset, outcome)
            if outcome:
                delivered += 1
                self._delivered[level] += 1
        return delivered, IDLE_WAIT_S

    def _redeliver(self, level: int, offset: int, msg: MessageExt) -> int | None:
        """Put ``msg`` back to its real topic: the commit-log end of the new record, 0 when the
        message was skipped, None to retry later."""
        props = msg.properties
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        real_qid = props.get(PROPERTY_REAL_QUEUE_ID, "")
        where = f"delay level {level} offset {offset} (msgId {msg.msg_id})"
        if not real_topic or not real_qid.isdigit():
            log.error(
                "%s: no valid REAL_TOPIC / REAL_QID (%r, %r); skipped", where, real_topic, real_qid
            )
            return 0
        if real_topic == TRANS_HALF_TOPIC:
            log.error(
                "%s: real topic is %s; a half message is never delivered; skipped",
                where,
                real_topic,
            )
            return 0
        deliver_ms = props.get(PROPERTY_TIMER_DELIVER_MS, "")
        if self._recalled and deliver_ms:
            key = f"{real_topic}\x01{props.get(PROPERTY_UNIQ_KEY, '')}"
            if self._recalled.pop(key, None) is not None:
                self._recalled_dirty = True
                log.info("%s: recalled; dropped", where)
                return 0
        hop = (
            timer_level(int(deliver_ms) - self.clock.now_ms(), self.levels_ms)
            if deliver_ms.isdigit()
            else 0
        )
        out_props = props
        kind: type[Message] = RedeliveredMessage
        if hop:
            # a timer message not due yet: back into the schedule, in the level that fits what
            # remains (the commit log writes REAL_TOPIC / REAL_QID again)
            out_props = {
                k: v
                for k, v in props.items()
                if k not in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID)
            }
            out_props[PROPERTY_DELAY] = str(hop)
            kind = Message
        out = kind(
            real_topic,
            msg.body,
            int(real_qid),
            properties=out_props,
            flag=msg.flag,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host_str,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
        )
        r = self._put(out)
        if r.ok:
            return r.wrote_offset + r.wrote_bytes
        if r.status in _PERMANENT:
            log.error(
                "%s: %s refused it for good (%s); skipped",
                where,
                real_topic,
                r.error or r.status.name,
            )
            return 0
        log.warning(
            "%s: put refused (%s: %s); retrying in %.0f s",
            where,
            r.status.name,
            r.error,
            RETRY_WAIT_S,
        )
        return None

    # ---- the thread -------------------------------------------------------------------------

    def start(self) -> None:
        """Clamp the offsets into their queues and start delivering (master only: the caller
        decides)."""
        if not self._loaded:
            self.load()
        self.correct_offsets()
        super().start()

    def run(self) -> None:
        self.wait_for_running(FIRST_DELAY_S)
        last_persist = self.clock.monotonic()
        while not self.stopped:
            self.deliver_due()
            now = self.clock.monotonic()
            if now - last_persist >= self.persist_interval:
                last_persist = now
                self.persist()
            self.wait_for_running(self.next_wait())
