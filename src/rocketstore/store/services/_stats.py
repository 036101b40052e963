"""StoreStatsService: RocketMQ's store statistics (``runtime_info()``) and a typed snapshot.

Counters and where they come from:

- puts: messages and record bytes per stored topic, counted by the commit log under its put lock
  (a delayed message counts under SCHEDULE_TOPIC_XXXX, as in RocketMQ);
- put latency: the whole ``MessageStore.put_message`` / ``put_messages`` call, lock waits and
  sync-flush waits included. Only calls of 1 ms or more are timed into buckets; the ``[<=0ms]``
  bucket is the remaining calls. The distribution restarts every 60 s, when the TPS line is
  logged, as RocketMQ's does;
- gets: found / miss / transferred messages, counted by the read API; get latency max is timed
  by ``MessageStore.get_message``.

TPS windows are RocketMQ's: one sample of every counter per second (at most 601 kept); the rate
over N seconds compares the newest sample with the one N samples before it, and is missing ("")
until that many samples exist. ``runtime_info()`` renders values as RocketMQ does (Java number
formatting, "tps10 tps60 tps600" strings); ``statistics()`` returns the same figures typed and
frozen.

Threads: the sampling thread; ``note_*`` from any thread (plain int updates under the GIL);
``runtime_info`` / ``statistics`` from any thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, NamedTuple

from .._clock import Clock
from .._disk import DiskUsageProbe, RunningFlags
from .._service import ServiceThread
from ..queue._consume_queue import BLANK_SIZE, UNIT, UNIT_SIZE, ConsumeQueueTable

if TYPE_CHECKING:
    from ..ha import HAStatistics
    from ..log._commit_log import CommitLog
    from ..read._read_api import ReadApi
    from ._schedule import LevelProgress

log = logging.getLogger(__name__)

PUT_LATENCY_BUCKETS = (
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
)
_BUCKET_UPPER_MS = (0, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
TPS_WINDOWS = (10, 60, 600)
SAMPLE_INTERVAL_S = 1.0
MAX_SAMPLES = TPS_WINDOWS[-1] + 1
PRINT_INTERVAL_S = 60.0


def latency_percentile(distribution: Sequence[int], px: float) -> float:
    """The latency (ms) below which ``px`` of the puts of ``distribution`` (counts per
    PUT_LATENCY_BUCKETS) fell, interpolated linearly inside the bucket it lands in, as RocketMQ
    interpolates in its buckets; the open last bucket counts as ending at 10 s."""
    total = sum(distribution)
    target = int(total * px)
    passed = 0
    for i, count in enumerate(distribution):
        if target <= passed + count:
            upper = _BUCKET_UPPER_MS[min(i, len(_BUCKET_UPPER_MS) - 1)]
            lower = _BUCKET_UPPER_MS[i - 1] if i > 0 else 0
            return lower + ((upper - lower) * (target - passed) / count if count else 0.0)
        passed += count
    return 0.0


def latency_bucket(ms: int) -> int:
    """Index in PUT_LATENCY_BUCKETS of a latency in whole milliseconds."""
    for i, upper in enumerate(_BUCKET_UPPER_MS):
        if ms <= 0 if i == 0 else ms < upper:
            return i
    return len(PUT_LATENCY_BUCKETS) - 1


def java_double(x: float) -> str:
    """``String.valueOf(double)``: shortest digits, scientific outside [1e-3, 1e7)."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        text = repr(float(x))
        return text if "e" not in text else format(Decimal(text), "f")
    sign, digits, exp = Decimal(repr(float(x))).as_tuple()
    assert isinstance(exp, int)
    mantissa = "".join(map(str, digits)).rstrip("0") or "0"
    exponent = exp + len(digits) - 1
    frac = mantissa[1:] or "0"
    return f"{'-' if sign else ''}{mantissa[0]}.{frac}E{exponent}"


@dataclass(frozen=True, slots=True)
class TopicPutStats:
    messages: int
    bytes: int


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot of the store's statistics (``MessageStore.statistics()``). Immutable."""

    boot_timestamp: int
    runtime_ms: int
    put_message_times_total: int
    put_message_size_total: int
    put_message_average_size: float
    put_message_entire_time_max_ms: int
    put_message_distribute_time: tuple[int, ...]  # counts per PUT_LATENCY_BUCKETS
    get_message_entire_time_max_ms: int
    get_found_total: int
    get_miss_total: int
    get_transferred_total: int
    # (10 s, 1 min, 10 min); None until enough samples exist
    put_tps: tuple[float | None, ...]
    get_found_tps: tuple[float | None, ...]
    get_miss_tps: tuple[float | None, ...]
    get_total_tps: tuple[float, ...]
    get_transferred_tps: tuple[float | None, ...]
    dispatch_behind_bytes: int
    commit_log_min_offset: int
    commit_log_max_offset: int
    commit_log_disk_ratio: float
    consume_queue_disk_ratio: float
    running_flags: int
    topics: Mapping[str, TopicPutStats]  # puts since start, by stored topic
    schedule: tuple[LevelProgress, ...]
    ha: HAStatistics | None = None  # replication (filled in by MessageStore.statistics)
    put_message_failed_times: int = 0  # puts the store refused (not stored) since start
    # put latency percentiles (ms) of the last full minute's distribution (RocketMQ's
    # putLatency99 / putLatency999), interpolated within its buckets
    put_latency_99: float = 0.0
    put_latency_999: float = 0.0


class _Sample(NamedTuple):
    ts: int
    puts: int
    found: int
    miss: int
    transferred: int


class StoreStatsService(ServiceThread):
    def __init__(
        self,
        clock: Clock,
        commit_log: CommitLog,
        reader: ReadApi,
        *,
        dispatch_behind: Callable[[], int],
        disk_usage: DiskUsageProbe,
        logics_path: str,
        flags: RunningFlags,
        schedule_progress: Callable[[], list[LevelProgress]] | None = None,
    ) -> None:
        super().__init__("StoreStatsService")
        self.clock = clock
        self.commit_log = commit_log
        self.reader = reader
        self.dispatch_behind = dispatch_behind
        self.disk_usage = disk_usage
        self.commit_log_path = str(commit_log.queue.store_path)
        self.logics_path = logics_path
        self.flags = flags
        self.schedule_progress = schedule_progress
        self.boot_timestamp = clock.now_ms()
        self._sampling_lock = threading.Lock()
        self._samples: collections.deque[_Sample] = collections.deque(maxlen=MAX_SAMPLES)
        self._last_sample = clock.monotonic() - SAMPLE_INTERVAL_S
        self._last_print = clock.monotonic()
        # latency: slow calls by bucket since the last reset; calls counted at that reset
        self._slow = [0] * len(PUT_LATENCY_BUCKETS)
        self._batch_extra = 0  # messages of batches beyond the first (one call, many messages)
        self._calls_at_reset = 0
        self.put_time_max_ms = 0
        self.get_time_max_ms = 0
        self.put_failed = 0  # refused puts (any thread; a lost increment under a race is fine)
        self._last_distribution: tuple[int, ...] = (0,) * len(PUT_LATENCY_BUCKETS)

    # ---- counting (any thread) --------------------------------------------------------------

    def note_slow_put(self, seconds: float) -> None:
        """A put call that took ``seconds`` (called for calls of 1 ms or more)."""
        ms = int(seconds * 1000)
        self._slow[latency_bucket(ms)] += 1
        if ms > self.put_time_max_ms:
            self.put_time_max_ms = ms

    def note_batch(self, messages: int) -> None:
        self._batch_extra += messages - 1

    def note_get(self, seconds: float) -> None:
        ms = int(seconds * 1000)
        if ms > self.get_time_max_ms:
            self.get_time_max_ms = ms

    def _put_calls(self) -> int:
        return self.commit_log.stats_put_count - self._batch_extra

    def put_distribution(self) -> tuple[int, ...]:
        slow = list(self._slow)
        fast = self._put_calls() - self._calls_at_reset - sum(slow[1:])
        slow[0] += max(0, fast)
        return tuple(slow)

    def reset_distribution(self) -> tuple[int, ...]:
        """Start a new latency distribution; returns the one that ended."""
        ended = self.put_distribution()
        self._last_distribution = ended
        self._calls_at_reset = self._put_calls()
        self._slow = [0] * len(PUT_LATENCY_BUCKETS)
        return ended

    # ---- sampling ---------------------------------------------------------------------------

    def sample(self) -> None:
        """Take one sample of every counter now (the thread does it each second)."""
        r = self.reader
        s = _Sample(
            self.clock.now_ms(),
            self.commit_log.stats_put_count,
            r.get_found,
            r.get_miss,
            r.transferred,
        )
        with self._sampling_lock:
            self._samples.append(s)
            self._last_sample = self.clock.monotonic()

    def maybe_sample(self) -> bool:
        """Sample when a second has passed on the clock since the last sample."""
        if self.clock.monotonic() - self._last_sample >= SAMPLE_INTERVAL_S:
            self.sample()
            return True
        return False

    def _tps(self, field: int, window: int) -> float | None:
        with self._sampling_lock:
            if len(self._samples) <= window:
                return None
            begin, end = self._samples[-(window + 1)], self._samples[-1]
        elapsed = end.ts - begin.ts
        if elapsed <= 0:
            return 0.0
        return (end[field] - begin[field]) / elapsed * 1000

    def tps(self, field: str) -> tuple[float | None, ...]:
        index = _Sample._fields.index(field)
        return tuple(self._tps(index, w) for w in TPS_WINDOWS)

    # ---- reporting --------------------------------------------------------------------------

    def statistics(self) -> StoreStatistics:
        cl = self.commit_log
        counts = dict(cl.topic_put_counts)
        sizes = dict(cl.topic_put_bytes)
        total = sum(counts.values())
        size = sum(sizes.values())
        found, miss = self.tps("found"), self.tps("miss")
        topics = {t: TopicPutStats(counts[t], sizes.get(t, 0)) for t in sorted(counts)}
        progress = self.schedule_progress() if self.schedule_progress is not None else []
        return StoreStatistics(
            boot_timestamp=self.boot_timestamp,
            runtime_ms=self.clock.now_ms() - self.boot_timestamp,
            put_message_times_total=total,
            put_message_size_total=size,
            put_message_average_size=size / total if total else 0.0,
            put_message_entire_time_max_ms=self.put_time_max_ms,
            put_message_distribute_time=self.put_distribution(),
            get_message_entire_time_max_ms=self.get_time_max_ms,
            get_found_total=self.reader.get_found,
            get_miss_total=self.reader.get_miss,
            get_transferred_total=self.reader.transferred,
            put_tps=self.tps("puts"),
            get_found_tps=found,
            get_miss_tps=miss,
            get_total_tps=tuple((f or 0.0) + (m or 0.0) for f, m in zip(found, miss, strict=True)),
            get_transferred_tps=self.tps("transferred"),
            dispatch_behind_bytes=self.dispatch_behind(),
            put_message_failed_times=self.put_failed,
            put_latency_99=latency_percentile(self._last_distribution, 0.99),
            put_latency_999=latency_percentile(self._last_distribution, 0.999),
            commit_log_min_offset=cl.min_offset,
            commit_log_max_offset=cl.max_offset,
            commit_log_disk_ratio=self.disk_usage(self.commit_log_path),
            consume_queue_disk_ratio=self.disk_usage(self.logics_path),
            running_flags=self.flags.bits,
            topics=types.MappingProxyType(topics),
            schedule=tuple(progress),
        )

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ's store runtime info: StoreStatsService's keys plus DefaultMessageStore's
        (disk ratios, commit-log offsets, delay progress), with dispatchBehindBytes and
        runningFlags. Values are strings formatted as RocketMQ formats them."""
        s = self.statistics()

        def tps(values: tuple[float | None, ...]) -> str:
            return " ".join("" if v is None else java_double(v) for v in values)

        days, rest = divmod(s.runtime_ms, 86_400_000)
        hours, rest = divmod(rest, 3_600_000)
        minutes, rest = divmod(rest, 60_000)
        times_total = s.put_message_times_total or 1  # RocketMQ reports 1 before any put
        info = {
            "bootTimestamp": str(s.boot_timestamp),
            "runtime": f"[ {days} days, {hours} hours, {minutes} minutes, {rest // 1000} seconds ]",
            "putMessageEntireTimeMax": str(s.put_message_entire_time_max_ms),
            "putMessageTimesTotal": str(times_total),
            "putMessageFailedTimes": str(s.put_message_failed_times),
            "putMessageSizeTotal": str(s.put_message_size_total),
            "putMessageDistributeTime": "".join(
                f"{name}:{n} "
                for name, n in zip(PUT_LATENCY_BUCKETS, s.put_message_distribute_time, strict=True)
            ),
            "putMessageAverageSize": java_double(s.put_message_size_total / times_total),
            "dispatchMaxBuffer": "0",
            "getMessageEntireTimeMax": str(s.get_message_entire_time_max_ms),
            "putTps": tps(s.put_tps),
            "getFoundTps": tps(s.get_found_tps),
            "getMissTps": tps(s.get_miss_tps),
            "getTotalTps": tps(s.get_total_tps),
            "getTransferedTps": tps(s.get_transferred_tps),
            "getTransferredTps": tps(s.get_transferred_tps),  # RocketMQ 5's spelling
            "putLatency99": f"{s.put_latency_99:.2f}",
            "putLatency999": f"{s.put_latency_999:.2f}",
            f"commitLogDiskRatio_{self.commit_log_path}": java_double(s.commit_log_disk_ratio),
            "commitLogDiskRatio": java_double(s.commit_log_disk_ratio),
            "consumeQueueDiskRatio": java_double(s.consume_queue_disk_ratio),
            "commitLogMinOffset": str(s.commit_log_min_offset),
            "commitLogMaxOffset": str(s.commit_log_max_offset),
            "dispatchBehindBytes": str(s.dispatch_behind_bytes),
            "runningFlags": str(s.running_flags),
        }
        for p in s.schedule:
            info[f"scheduleMessageOffset_{p.level}"] = f"{p.offset},{p.max_offset}"
        return info

    # ---- the thread -------------------------------------------------------------------------

    def _print_tps(self) -> None:
        ended = self.reset_distribution()
        window = int(PRINT_INTERVAL_S)
        idx = TPS_WINDOWS.index(window) if window in TPS_WINDOWS else 1
        log.info(
            "[STORETPS] put_tps %s get_found_tps %s get_miss_tps %s get_transfered_tps %s",
            self.tps("puts")[idx],
            self.tps("found")[idx],
            self.tps("miss")[idx],
            self.tps("transferred")[idx],
        )
        log.info(
            "[PAGECACHERT] TotalPut %d, PutMessageDistributeTime %s",
            sum(ended),
            " ".join(f"{n}:{c}" for n, c in zip(PUT_LATENCY_BUCKETS, ended, strict=True)),
        )

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(SAMPLE_INTERVAL_S)
            try:
                self.maybe_sample()
                now = self.clock.monotonic()
                if now - self._last_print >= PRINT_INTERVAL_S:
                    self._last_print = now
                    self._print_tps()
            except Exception:
                log.exception("statistics sampling failed")


def stored_topics(consume_queues: ConsumeQueueTable) -> dict[str, TopicPutStats]:
    """Messages and record bytes each topic holds now, read from its consume queues (for
    ``rocketstore stats`` on a store at rest). Any thread."""
    out: dict[str, list[int]] = {}
    for cq in consume_queues:
        acc = out.setdefault(cq.topic, [0, 0])
        offset, end = cq.min_offset, cq.max_offset
        while offset < end:
            with cq.units_from(offset) as units:
                if units is None:
                    offset = cq.roll_next_file(offset)
                    continue
                view, count = units
                count = min(count, end - offset)
                for _phys, size, _tags in UNIT.iter_unpack(view[: count * UNIT_SIZE]):
                    if 0 < size != BLANK_SIZE:
                        acc[0] += 1
                        acc[1] += size
            if count <= 0:
                break
            offset += count
    return {t: TopicPutStats(m, b) for t, (m, b) in sorted(out.items())}
