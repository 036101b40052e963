"""ReadOnlyStore: what ``rocketstore get``, ``query`` and ``stats`` read, without changing a store.

Built on :class:`~rocketstore.store.read._reader.StoreReader`: no lock is taken, nothing is written
or created, every file is mapped read-only, so a store that a running broker owns, a crashed
store and a damaged one can all be read as they are. What recovery would repair is repaired in
memory only:

- dispatch: the commit log past the last record the consume queues point at (a crashed store's
  queues lag its log) is scanned, and its records are added to their queues in memory, as
  recovery would dispatch them; for key queries the records past the index's end likewise;
- damage: a unit whose record fails a check (bad CRC, wrong size, another queue's record) is
  skipped and reported in ``warnings`` (the file and the offset); the records after it are
  still read. A scan past the queues' end that meets a bad record reports it and goes on with
  the next file.

What cannot be read at all raises: NotAStoreError (no commitlog/ or consumequeue/ in the
directory) and CorruptFileError (commit-log files of different sizes, a consume queue whose
files do not load).

Threads: one ReadOnlyStore per thread. Close it when done.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .._checkpoint import StoreCheckpoint
from .._clock import SYSTEM_CLOCK
from .._disk import RunningFlags, disk_used_ratio
from .._errors import CorruptFileError, CorruptRecordError
from ..log._message import GetMessageResult, GetMessageStatus, QueryMessageResult
from ..log._record import (
    SCHEDULE_TOPIC,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_COMMIT_TYPE,
    MessageExt,
    decode_message,
    decode_msg_id,
)
from ..queue._filter import MessageFilter
from ..read._reader import (
    COMMIT_LOG_DIR,
    CONSUME_QUEUE_DIR,
    NotAStoreError,
    StoreReader,
    _store_files,
)
from ..services._delay_offset import DelayOffsetFile
from ..services._schedule import LevelProgress
from ..services._stats import StoreStatsService, TopicPutStats
from ._scan import BAD_RECORD, BLANK_RECORD, ScannedRecord, scan_records

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog
    from ..read._read_api import ReadApi

S = GetMessageStatus
UNITS_PER_GET = 800  # units looked at per get at least (RocketMQ's floor)


@dataclass(frozen=True, slots=True)
class LogExtent:
    """Where the commit log's valid records are: [min_offset, max_offset), and how far the
    consume queues reach into it (``dispatched``)."""

    min_offset: int
    max_offset: int
    dispatched: int


def detect_commit_log_file_size(root: Path, configured: int | None = None) -> int | None:
    """The commit log's file size: ``configured``, else the largest file (a file cut short
    or half-created is smaller than the others, never larger). CorruptFileError when a file
    has another size; None when there are no files."""
    files = _store_files(root / COMMIT_LOG_DIR)
    sizes = {p.name: p.stat().st_size for p in files}
    if not sizes:
        return None
    size = configured or max(sizes.values())
    for name, actual in sizes.items():
        if actual != size:
            raise CorruptFileError(
                f"{root / COMMIT_LOG_DIR / name}: {actual} bytes, the commit-log files are "
                f"{size} (cut short or half-created)"
            )
    if size == 0:
        raise CorruptFileError(f"{root / COMMIT_LOG_DIR}: the commit-log files are empty")
    return size


class _LogFigures:
    """What StoreStatsService reads of a commit log, for a log nobody writes."""

    def __init__(self, path: Path, extent: LogExtent) -> None:
        self.stats_put_count = 0
        self.topic_put_counts: dict[str, int] = {}
        self.topic_put_bytes: dict[str, int] = {}
        self.min_offset = extent.min_offset
        self.max_offset = extent.max_offset
        self.queue = types.SimpleNamespace(store_path=path)


class _NoReads:
    get_found = 0
    get_miss = 0
    transferred = 0


class ReadOnlyStore:
    """Read-only get / query / stats over a store directory (ours or RocketMQ's)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        commit_log_file_size: int | None = None,
        consume_queue_file_size: int | None = None,
        index_slots: int | None = None,
        index_entries: int | None = None,
    ) -> None:
        self.root = Path(root)
        if (
            not (self.root / COMMIT_LOG_DIR).is_dir()
            and not (self.root / CONSUME_QUEUE_DIR).is_dir()
        ):
            what = "does not exist" if not self.root.exists() else "holds no store"
            raise NotAStoreError(
                f"{self.root} {what} (no commitlog/ or consumequeue/ in it): check --store"
            )
        size = detect_commit_log_file_size(self.root, commit_log_file_size)
        self.reader = StoreReader(
            self.root,
            commit_log_file_size=size,
            consume_queue_file_size=consume_queue_file_size,
            index_slots=index_slots,
            index_entries=index_entries,
        )
        self.file_size = self.reader.commit_log_file_size
        self.warnings: list[str] = []
        # in memory: units past the consume queues' end, keyed records past the index's end
        self._extra: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self._keyed: list[int] | None = None
        self._extent: LogExtent | None = None

    # ---- warnings ---------------------------------------------------------------------------

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def _where(self, phys: int) -> str:
        start = phys - phys % self.file_size
        return f"{COMMIT_LOG_DIR}/{start:020d} at {phys} (file position {phys - start})"

    # ---- dispatch in memory -----------------------------------------------------------------

    def _has_queue(self, topic: str, queue_id: int) -> bool:
        return (self.reader.cq_dir / topic / str(queue_id)).is_dir()

    def _queue_ends(self) -> tuple[int, dict[tuple[str, int], int]]:
        """(commit-log end of the last record any queue points at, each queue's end)."""
        dispatched = 0
        ends: dict[tuple[str, int], int] = {}
        for topic in self.reader.topics():
            for qid in self.reader.queue_ids(topic):
                q = self.reader.queue(topic, qid)
                ends[(topic, qid)] = q.max_offset
                unit = q.unit(q.max_offset - 1) if q.max_offset > q.min_offset else None
                if unit is not None and unit[0] + unit[1] > dispatched:
                    dispatched = unit[0] + unit[1]
        return dispatched, ends

    def _index_end(self) -> int | None:
        """The commit-log offset of the last record the index holds (None: no usable index)."""
        service = self.reader.index.service()
        if service is None or not service.files:
            return None
        return service.files[-1].end_phy_offset

    def extent(self, *, keys: bool = False) -> LogExtent:
        """Scan the commit log past what the queues (and, with ``keys``, the index) hold, and
        dispatch those records in memory. Once per store (keys: once more at most)."""
        if self._extent is not None and (not keys or self._keyed is not None):
            return self._extent
        dispatched, ends = self._queue_ends()
        start = dispatched
        index_end: int | None = None
        if keys:
            index_end = self._index_end()
            start = min(start, index_end) if index_end is not None else 0
            self._keyed = []
        files = _store_files(self.root / COMMIT_LOG_DIR)
        cl_min = int(files[0].name) if files else 0
        start = max(start, cl_min)
        log_end = max(start, cl_min)
        batch: list[ScannedRecord] = []
        extra: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for path in files:
            base = int(path.name)
            if base + self.file_size <= start:
                continue
            mf = self.reader.commit_log.file_at(base)
            if mf is None:
                break
            rel = max(0, start - base)
            r = scan_records(mf.mm, rel, self.file_size, base, check_crc=True, collect=batch)
            for phys, size, topic, qid, qoff, sys_flag, _ts, keyed in batch:
                tran = sys_flag & SYSFLAG_TRANSACTION_MASK
                in_queue = tran == 0 or tran == TRANSACTION_COMMIT_TYPE
                if in_queue and phys >= dispatched and qoff >= ends.get((topic, qid), 0):
                    extra.setdefault((topic, qid), []).append((qoff, phys, size))
                if keyed and self._keyed is not None and (index_end is None or phys > index_end):
                    self._keyed.append(phys)
            batch.clear()
            if r.records or r.end > rel:
                log_end = base + r.end
            if r.stop == BLANK_RECORD:
                log_end = base + self.file_size
                continue
            if r.stop == BAD_RECORD:
                self._warn(
                    f"{self._where(base + r.end)}: invalid record ({r.error}); recovery would "
                    "cut the log here, the records after it are read as they are"
                )
                continue  # the next file may hold intact records
            if r.end < self.file_size:
                break  # the data ends here
            log_end = base + self.file_size
        if self._extent is None:
            for units in extra.values():
                units.sort()
            self._extra = extra
            self._extent = LogExtent(cl_min, log_end, dispatched)
        return self._extent

    # ---- queues -----------------------------------------------------------------------------

    def queues(self) -> list[tuple[str, int]]:
        self.extent()
        found = {(t, q) for t in self.reader.topics() for q in self.reader.queue_ids(t)}
        return sorted(found | set(self._extra))

    def min_offset(self, topic: str, queue_id: int) -> int:
        self.extent()
        if self._has_queue(topic, queue_id):
            q = self.reader.queue(topic, queue_id)
            if q.max_offset > q.min_offset:
                return self.reader.min_offset(topic, queue_id)
        extra = self._extra.get((topic, queue_id))
        return extra[0][0] if extra else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        self.extent()
        end = self.reader.max_offset(topic, queue_id) if self._has_queue(topic, queue_id) else 0
        extra = self._extra.get((topic, queue_id))
        return max(end, extra[-1][0] + 1) if extra else end

    def _units(self, topic: str, queue_id: int, begin: int) -> Iterator[tuple[int, int, int, int]]:
        """(offset, phys, size, tags code) of a queue from ``begin``: its units, then what is
        dispatched in memory (tags code -1: not computed)."""
        end = 0
        if self._has_queue(topic, queue_id):
            q = self.reader.queue(topic, queue_id)
            end = q.max_offset
            yield from q.units(begin, end)
        for qoff, phys, size in self._extra.get((topic, queue_id), ()):
            if qoff >= max(begin, end):
                yield qoff, phys, size, -1

    def _checked(
        self, topic: str, queue_id: int, offset: int, phys: int, size: int
    ) -> MessageExt | None:
        """The record a unit points at, or None (reported) when it is damaged or not its own."""
        try:
            msg = self.reader.message_at(phys, size)
        except CorruptRecordError as exc:
            self._warn(
                f"{self._where(phys)}: the record of {topic}/{queue_id} offset {offset} is "
                f"damaged ({exc}); skipped"
            )
            return None
        if msg.topic != topic or msg.queue_id != queue_id or msg.queue_offset != offset:
            self._warn(
                f"{self._where(phys)}: {topic}/{queue_id} offset {offset} points at a record of "
                f"{msg.topic}/{msg.queue_id} offset {msg.queue_offset}; skipped"
            )
            return None
        return msg

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Up to ``max_msg_nums`` messages of a queue from ``offset``, with RocketMQ's statuses
        (damaged records are skipped and reported in ``warnings``)."""
        self.extent()
        if not self._has_queue(topic, queue_id) and (topic, queue_id) not in self._extra:
            return GetMessageResult(S.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
        if hi == 0:
            return GetMessageResult(S.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetMessageResult(S.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetMessageResult(S.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetMessageResult(S.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)
        out: list[MessageExt] = []
        looked = offset
        budget = max(UNITS_PER_GET, max_msg_nums)
        for qoff, phys, size, tags in self._units(topic, queue_id, offset):
            if qoff - offset >= budget or len(out) >= max_msg_nums:
                break
            looked = qoff + 1
            if (
                message_filter is not None
                and tags != -1
                and not message_filter.is_matched_by_consume_queue(tags)
            ):
                continue
            msg = self._checked(topic, queue_id, qoff, phys, size)
            if msg is None:
                continue
            if message_filter is not None and not message_filter.is_matched_by_commit_log(msg):
                continue
            out.append(msg)
        status = S.FOUND if out else S.NO_MATCHED_MESSAGE
        return GetMessageResult(status, looked, lo, hi, out)

    # ---- by key and by id -------------------------------------------------------------------

    def _record(
        self, phys: int, *, read_body: bool = True, report: bool = True
    ) -> MessageExt | None:
        """The record at ``phys`` (checked with its body), or None; a damaged record is
        reported when ``report`` (a record is known to start there)."""
        mf = self.reader.commit_log.file_at(phys)
        if mf is None:
            return None
        pos = phys - mf.from_offset
        try:
            msg = decode_message(mf.mm, pos, mf.file_size, check_crc=read_body, read_body=read_body)
        except (CorruptRecordError, ValueError, IndexError) as exc:
            if read_body and report:
                self._warn(f"{self._where(phys)}: damaged record ({exc}); skipped")
            return None
        return msg if msg.commitlog_offset == phys else None

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**63 - 1
    ) -> QueryMessageResult:
        """Messages of ``topic`` whose UNIQ_KEY or one of whose KEYS is ``key``, stored within
        [begin, end]: the newest ``max_num``, ascending by commit-log offset. The index answers
        for what it holds; the records past its end are looked at one by one."""
        self.extent(keys=True)
        found: dict[int, MessageExt] = {}

        def accept(phys: int) -> bool:
            if phys in found:
                return False
            msg = self._record(phys)
            if msg is None or msg.topic != topic or (msg.uniq_key != key and key not in msg.keys):
                return False
            found[phys] = msg
            return True

        result = QueryMessageResult()
        service = self.reader.index.service()
        if service is not None and service.files:
            offsets, ts, phy = service.query(topic, key, max_num, begin, end, accept)
            if offsets:
                result.index_last_update_timestamp = ts
                result.index_last_update_phyoffset = phy
            found = {o: found[o] for o in offsets}
        for phys in self._keyed or ():
            head = self._record(phys, read_body=False)
            if head is None or head.topic != topic:
                continue
            if head.uniq_key != key and key not in head.keys:
                continue
            if begin <= head.store_timestamp <= end:
                accept(phys)
        result.messages = [found[o] for o in sorted(found)][-max_num:]
        result.buffer_total_size = sum(m.store_size for m in result.messages)
        return result

    def look_offset_msg_id(self, msg_id: str) -> MessageExt | None:
        """The message an offset message id (store address + commit-log offset) names, checked:
        a record must start there and carry that id. None when ``msg_id`` is not one."""
        try:
            _host, phys = decode_msg_id(msg_id)
        except ValueError:
            return None
        files = _store_files(self.root / COMMIT_LOG_DIR)
        if not files or phys < int(files[0].name):
            return None
        msg = self._record(phys, report=False)  # an id of another kind points anywhere
        if msg is None or msg.msg_id != msg_id.upper():
            return None
        return msg

    # ---- statistics -------------------------------------------------------------------------

    def topic_totals(self) -> dict[str, TopicPutStats]:
        """Messages and record bytes each topic holds (its queues, with what is dispatched in
        memory)."""
        out: dict[str, list[int]] = {}
        for topic, qid in self.queues():
            acc = out.setdefault(topic, [0, 0])
            begin = self.min_offset(topic, qid)
            for _qoff, _phys, size, _tags in self._units(topic, qid, begin):
                acc[0] += 1
                acc[1] += size
        return {t: TopicPutStats(m, b) for t, (m, b) in sorted(out.items())}

    def delay_progress(self, levels_ms: tuple[int, ...]) -> list[LevelProgress]:
        """Every delay level with a queue or a stored offset: its next offset to deliver (from
        config/delayOffset.json, or its .bak) and its queue's end."""
        offsets: dict[int, int] = {}
        file = DelayOffsetFile(self.root / "config")
        for path in (file.path, file.bak_path):
            try:
                table = file._read(path)
            except CorruptFileError as exc:
                self._warn(str(exc))
                continue
            if table is not None:
                offsets = table
                break
        queues = {
            qid + 1: self.max_offset(t, qid) for t, qid in self.queues() if t == SCHEDULE_TOPIC
        }
        out = []
        for level in sorted(set(queues) | set(offsets)):
            delay = levels_ms[level - 1] if 0 < level <= len(levels_ms) else None
            out.append(LevelProgress(level, delay, offsets.get(level, 0), queues.get(level, 0), 0))
        return out

    def runtime_info(self, levels_ms: tuple[int, ...]) -> dict[str, str]:
        """RocketMQ's runtime-info keys for a store at rest: the commit log's extent, how far
        dispatch lags it, the delay levels' progress; counters of a store that has served
        nothing since it was opened."""
        ext = self.extent()
        progress = self.delay_progress(levels_ms)
        figures = _LogFigures(self.root / COMMIT_LOG_DIR, ext)
        service = StoreStatsService(
            SYSTEM_CLOCK,
            cast("CommitLog", figures),
            cast("ReadApi", _NoReads()),
            dispatch_behind=lambda: max(0, ext.max_offset - max(ext.dispatched, ext.min_offset)),
            disk_usage=disk_used_ratio,
            logics_path=str(self.root / CONSUME_QUEUE_DIR),
            flags=RunningFlags(),
            schedule_progress=lambda: progress,
        )
        return service.runtime_info()

    def checkpoint(self) -> dict[str, int]:
        path = self.root / "checkpoint"
        if not path.is_file():
            return {}
        cp = StoreCheckpoint(path, read_only=True)
        try:
            return dict(cp.as_dict())
        finally:
            cp.shutdown()

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> ReadOnlyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["LogExtent", "ReadOnlyStore", "detect_commit_log_file_size"]
