"""Tiering one range of the commit log: its messages written per topic as Parquet.

``tier_range`` takes ``[start, end)`` of one commit-log file (a whole sealed file, or with a
seal age the settled part of the last one) and:

1. scans the file record by record (``scan_records``: every check recovery makes, the body
   CRC included), keeping per (topic, queue) where each message is. Messages in no consume
   queue (transaction half and rollback records) are left out, as dispatch leaves them out, so
   the tier holds the rows the ``rocketstore`` Spark source reads;
2. a damaged record whose length still leads to a valid record, a BLANK or the end of the data
   is logged with its file and position and skipped; a record that cannot be stepped over ends
   the range there (``RangeResult.complete`` is False and ``covered`` stops before it);
3. per topic, decodes the messages with ``columns.RangeDecoder`` (the Spark source's decoder,
   so values and types are the source's), sorted by ``queue_id`` then ``queue_offset``, writes
   them as zstd Parquet in row groups of ``row_group_rows`` / ``row_group_bytes`` under a
   hidden temporary name, fsyncs, renames it to ``part-<start>`` and lists it in the topic's
   manifest;
4. records ``covered = end of the range`` once every topic's file is listed.

A topic whose manifest lists a file cut from ``start`` already is skipped (a re-run after a
crash), and the range then ends where that file's range ends, so every topic of one range
holds the same messages. ``pace`` is called between steps of bounded work (a scan window, a
row group): the tiering service sleeps there so that puts keep their pace.

Threads: one caller at a time per tiered directory (the service thread, or the CLI).
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..columns._arrow import ARROW_SCHEMA, RangeDecoder
from ..store._durable import fsync_dir, make_dirs_synced
from ..store.log._record import (
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_COMMIT_TYPE,
    check_record,
)
from ..store.read._reader import CommitLogView
from ..store.recovery._scan import (
    BAD_RECORD,
    BLANK_RECORD,
    ScannedRecord,
    scan_records,
)
from ._manifest import (
    TierError,
    TierFile,
    TopicManifest,
    is_topic_name,
    load_covered,
    load_manifest,
    part_name,
    save_covered,
    save_manifest,
    tiered_topics,
    topic_dir,
)

log = logging.getLogger(__name__)

DICTIONARY_COLUMNS = (
    "topic",
    "tags",
    "keys.list.element",
    "properties.key_value.key",
    "properties.key_value.value",
    "born_host",
    "store_host",
    "reconsume_times",
    "sys_flag",
)
"""Columns whose values repeat: dictionary-encoded (the rest are plain, then zstd)."""
STATISTICS_COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "tags",
    "born_timestamp",
    "store_timestamp",
)
"""Columns with min / max statistics per row group: what readers skip row groups by."""

_SCAN_WINDOW = 16 << 20  # bytes of the file scanned between two ``pace`` calls
_NO_OFFSET = 2**63 - 1


def _no_pace() -> None:
    pass


@dataclass(frozen=True)
class WriterOptions:
    row_group_rows: int = 65_536
    row_group_bytes: int = 32 << 20
    compression_level: int = 3
    """zstd level."""


DEFAULT_OPTIONS = WriterOptions()


@dataclass(frozen=True)
class Damaged:
    """A record that failed a check and was not tiered."""

    path: str
    position: int  # in its file
    why: str


@dataclass
class _Queue:
    """Where the messages of one queue are in the scanned file."""

    positions: array[int] = field(default_factory=lambda: array("q"))
    sizes: array[int] = field(default_factory=lambda: array("q"))


@dataclass
class _Scan:
    end: int  # commit-log offset where the scanned range ends
    complete: bool
    queues: dict[tuple[str, int], _Queue]
    damaged: list[Damaged]
    records: int


@dataclass(frozen=True)
class RangeResult:
    """What tiering one range did."""

    start: int
    end: int  # ``covered`` afterwards (when complete)
    complete: bool
    files: int  # Parquet files written
    rows: int
    parquet_bytes: int
    skipped_topics: tuple[str, ...]  # listed already (a re-run)
    damaged: tuple[Damaged, ...]

    @property
    def source_bytes(self) -> int:
        return self.end - self.start


def _in_queue(sys_flag: int) -> bool:
    tran = sys_flag & SYSFLAG_TRANSACTION_MASK
    return tran == 0 or tran == TRANSACTION_COMMIT_TYPE


def _steppable(buf: memoryview, pos: int, limit: int) -> int:
    """The length of the damaged record at ``pos`` when it can be stepped over: its head says a
    message of a plausible length, and after it comes a valid record, a BLANK or the end of
    the data. 0 otherwise."""
    if pos + 8 > limit:
        return 0
    total = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
    magic = int.from_bytes(buf[pos + 4 : pos + 8], "big", signed=True)
    if magic not in (MAGIC_V1, MAGIC_V2) or total < 20 or pos + total > limit:
        return 0
    nxt = pos + total
    try:
        check_record(buf, nxt, limit, check_crc=True)
    except Exception:
        return 0
    return total


def scan_range(
    view: CommitLogView, start: int, end: int, *, pace: Callable[[], None] = _no_pace
) -> _Scan:
    """The messages of ``[start, end)`` (one file), grouped by queue. ``end`` is the file's end
    (a sealed file: the range ends there) or a settled position inside it."""
    mf = view.file_at(start)
    if mf is None:
        raise TierError(f"no commit-log file holds offset {start}")
    base = mf.from_offset
    file_end = base + mf.file_size
    whole = end >= file_end
    limit = min(end, file_end) - base
    buf = memoryview(mf.mm)
    queues: dict[tuple[str, int], _Queue] = {}
    damaged: list[Damaged] = []
    records = 0
    pos = start - base
    wide = False  # scan to the limit: a record larger than a window, or the last window
    try:
        while True:
            window = limit if wide else min(limit, pos + _SCAN_WINDOW)
            found: list[ScannedRecord] = []
            r = scan_records(buf, pos, window, base, check_crc=True, collect=found)
            for phys, size, topic, qid, _qoff, sys_flag, _ts, _keyed in found:
                if not _in_queue(sys_flag):
                    continue
                q = queues.get((topic, qid))
                if q is None:
                    if not is_topic_name(topic) or qid < 0:
                        # the body CRC does not cover the topic and queue: damage there shows
                        # only as a name no topic can have
                        at = phys - base
                        why = f"topic {topic!r} queue {qid} is not a topic's queue"
                        log.error("damaged record skipped, not tiered: %s position %d: %s",
                                  mf.path, at, why)  # fmt: skip
                        damaged.append(Damaged(str(mf.path), at, why))
                        continue
                    q = queues[(topic, qid)] = _Queue()
                q.positions.append(phys - base)
                q.sizes.append(size)
            records += len(found)
            pace()
            if window < limit and r.stop != BLANK_RECORD:
                # the window's edge may cut a record: go on from the last good one
                wide = r.end == pos
                pos = r.end
                continue
            where = f"{mf.path} position {r.end} (commit-log offset {base + r.end})"
            if r.stop == BAD_RECORD:
                step = _steppable(buf, r.end, limit)
                damaged.append(Damaged(str(mf.path), r.end, r.error or ""))
                if step:
                    log.error("damaged record skipped, not tiered: %s: %s", where, r.error)
                    pos, wide = r.end + step, False
                    continue
                log.error(
                    "damaged record at %s: %s; its length leads to no record, so tiering "
                    "stops before it",
                    where,
                    r.error,
                )
                return _Scan(base + r.end, False, queues, damaged, records)
            if r.stop == BLANK_RECORD:
                return _Scan(file_end, True, queues, damaged, records)
            if not whole:  # the settled part of the last file
                return _Scan(base + r.end, True, queues, damaged, records)
            if np.frombuffer(buf[r.end : limit], dtype=np.uint8).any():
                log.error("zeroes at %s and data after them; tiering stops before them", where)
                damaged.append(Damaged(str(mf.path), r.end, "zeroes followed by data"))
                return _Scan(base + r.end, False, queues, damaged, records)
            return _Scan(file_end, True, queues, damaged, records)
    finally:
        buf.release()


def _chunks(q: _Queue, rows: int, limit_bytes: int) -> list[tuple[int, int]]:
    """``[0, len(q))`` cut into pieces of at most ``rows`` messages and about ``limit_bytes``."""
    out: list[tuple[int, int]] = []
    i, n = 0, len(q.positions)
    sizes = q.sizes
    while i < n:
        j, total = i, 0
        while j < n and j - i < rows and (total < limit_bytes or j == i):
            total += sizes[j]
            j += 1
        out.append((i, j))
        i = j
    return out


class _TopicFile:
    """One topic's Parquet file of a range, written under a hidden name, then renamed."""

    def __init__(self, root: Path, topic: str, start: int, options: WriterOptions) -> None:
        self.directory = topic_dir(root, topic)
        make_dirs_synced(self.directory)
        self.name = part_name(start)
        self.tmp = self.directory / f".{self.name}.tmp"
        self.options = options
        self.writer = pq.ParquetWriter(
            self.tmp,
            ARROW_SCHEMA,
            compression="zstd",
            compression_level=options.compression_level,
            use_dictionary=list(DICTIONARY_COLUMNS),
            write_statistics=list(STATISTICS_COLUMNS),
        )
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.rows = 0
        self.queues: dict[int, tuple[int, int]] = {}
        self.time_lo = _NO_OFFSET
        self.time_hi = -_NO_OFFSET

    def add(self, queue_id: int, batch: pa.RecordBatch, pace: Callable[[], None]) -> None:
        offsets = batch.column("queue_offset").to_numpy()
        if len(offsets) > 1 and (np.diff(offsets) <= 0).any():
            batch = batch.take(pa.array(np.argsort(offsets, kind="stable")))
            offsets = batch.column("queue_offset").to_numpy()
        first, last = int(offsets[0]), int(offsets[-1])
        old = self.queues.get(queue_id)
        self.queues[queue_id] = (first, last) if old is None else (old[0], max(old[1], last))
        times = batch.column("store_timestamp").cast(pa.int64()).to_numpy() // 1000
        self.time_lo = min(self.time_lo, int(times.min()))
        self.time_hi = max(self.time_hi, int(times.max()))
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        self.rows += batch.num_rows
        if (
            self.pending_rows >= self.options.row_group_rows
            or self.pending_bytes >= self.options.row_group_bytes
        ):
            self._flush()
            pace()

    def _flush(self) -> None:
        if not self.pending:
            return
        table = pa.Table.from_batches(self.pending, ARROW_SCHEMA)
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def finish(self, commitlog: tuple[int, int]) -> TierFile:
        """Close, fsync and rename the file; its manifest entry."""
        self._flush()
        self.writer.close()
        fd = os.open(self.tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        final = self.directory / self.name
        os.replace(self.tmp, final)
        fsync_dir(self.directory)
        return TierFile(
            self.name,
            commitlog,
            self.rows,
            final.stat().st_size,
            dict(self.queues),
            (self.time_lo, self.time_hi),
        )

    def abandon(self) -> None:
        try:
            self.writer.close()
        except Exception:  # the file is removed anyway
            pass
        self.tmp.unlink(missing_ok=True)


def tier_range(
    view: CommitLogView,
    root: str | os.PathLike[str],
    start: int,
    end: int,
    *,
    options: WriterOptions = DEFAULT_OPTIONS,
    pace: Callable[[], None] = _no_pace,
) -> RangeResult:
    """Tier the messages of commit-log range ``[start, end)`` (inside one file; ``end`` at or
    past the file's end: the whole, sealed file) into ``root`` and move ``covered`` to the end
    of what was tiered. ``start`` must be ``covered`` (ranges go in order); a range below it
    is tiered already and is left as it is."""
    base = Path(root)
    covered = load_covered(base)
    if start > covered:
        raise TierError(
            f"commit-log ranges are tiered in order: {root} covers up to {covered}, "
            f"not up to {start}"
        )
    manifests = {t: load_manifest(base, t) for t in tiered_topics(base)}
    done = {t: f for t, m in manifests.items() for f in m.files if f.commitlog[0] == start}
    if done:  # a re-run: the range ends where its first run ended it
        ends = {f.commitlog[1] for f in done.values()}
        if len(ends) != 1:
            raise TierError(
                f"the files of commit-log range {start} end at different offsets: {sorted(ends)}"
            )
        end = ends.pop()
    if start < covered:  # tiered already: nothing to do
        return RangeResult(start, covered, True, 0, 0, 0, tuple(sorted(done)), ())
    scan = scan_range(view, start, end, pace=pace)
    if done and scan.end != end:
        raise TierError(
            f"commit-log range {start} was tiered up to {end}, now it ends at {scan.end}"
        )
    stop = scan.end
    mf = view.file_at(start)
    assert mf is not None
    mv = memoryview(mf.mm)
    # the scan checked every record's body CRC: the decoder checks all else again, not that
    decoder = RangeDecoder(
        None, batch_rows=options.row_group_rows, check_crc=False, fail_on_data_loss=False
    )
    topics = sorted({t for t, _q in scan.queues})
    damaged = list(scan.damaged)
    files = rows = size = 0
    try:
        for topic in topics:
            if topic in done:
                continue
            out = _TopicFile(base, topic, start, options)
            try:
                for qid in sorted(q for t, q in scan.queues if t == topic):
                    q = scan.queues[(topic, qid)]
                    for i, j in _chunks(q, options.row_group_rows, options.row_group_bytes):
                        pos, sizes = q.positions[i:j], q.sizes[i:j]
                        data = b"".join(mv[p : p + n] for p, n in zip(pos, sizes, strict=True))
                        batch = decoder.records(data, topic, qid, 0, _NO_OFFSET)
                        if batch.num_rows != j - i:
                            damaged += _missing(mf.path, data, pos, sizes, batch)
                        if batch.num_rows:
                            out.add(qid, batch, pace)
                if not out.rows:
                    out.abandon()
                    continue
                entry = out.finish((start, stop))
            except BaseException:
                out.abandon()
                raise
            manifest = manifests.get(topic) or TopicManifest(topic)
            manifest.files.append(entry)
            save_manifest(base, manifest)
            manifests[topic] = manifest
            files += 1
            rows += entry.rows
            size += entry.bytes
            pace()
    finally:
        mv.release()
    if stop > start:  # everything below ``stop`` is in the tier now
        save_covered(base, stop)
    if not scan.complete:
        log.error(
            "commit-log range %d..%d tiered up to %d only (a damaged record)", start, end, stop
        )
    return RangeResult(
        start,
        stop,
        scan.complete,
        files,
        rows,
        size,
        tuple(sorted(done)),
        tuple(damaged),
    )


def _missing(
    path: Path, data: bytes, pos: array[int], sizes: array[int], batch: pa.RecordBatch
) -> list[Damaged]:
    """The records of a chunk the decoder refused (it logged why): logged with their place."""
    kept = set(batch.column("commitlog_offset").to_pylist())
    out = []
    at = 0
    for p, n in zip(pos, sizes, strict=True):
        phys = int.from_bytes(data[at + 28 : at + 36], "big", signed=True)
        if phys not in kept:
            log.error("damaged record skipped, not tiered: %s position %d", path, p)
            out.append(Damaged(str(path), p, "refused by the decoder"))
        at += n
    return out
