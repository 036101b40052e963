"""Planning reads: which (topic, queue, offset range) a read covers (no pyspark needed).

Runs on the driver side (Spark's planner worker). Everything a partition needs is decided here
and carried in the partition, so ``read()`` depends only on the options and the partition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..columns._arrow import QueueRange
from ..store.read._reader import StoreReader, split_range
from ._options import EARLIEST, LATEST, Offsets, SourceOptionError, SourceOptions


def open_reader(opts: SourceOptions) -> StoreReader:
    return StoreReader(
        opts.path,
        commit_log_file_size=opts.commit_log_file_size,
        consume_queue_file_size=opts.consume_queue_file_size,
    )


def resolve_topics(
    reader: StoreReader, opts: SourceOptions, *, must_exist: bool = True
) -> list[str]:
    present = reader.topics()
    if opts.topics is None:
        return present
    if must_exist:
        unknown = [t for t in opts.topics if t not in present]
        if unknown:
            raise SourceOptionError(
                f"unknown topic(s) {', '.join(unknown)} in {opts.path}; "
                f"it has: {', '.join(present) or 'no topics'}"
            )
    return [t for t in opts.topics if t in present]


@dataclass
class Constraints:
    """What pushed filters allow the plan to skip. Offsets: [lo, hi); times: [lo, hi) in ms."""

    topics: set[str] | None = None
    queue_ids: set[int] | None = None
    queue_lo: int = -(2**31)
    queue_hi: int = 2**31
    offset_lo: int = 0
    offset_hi: int = 2**63 - 1
    offsets_in: set[int] | None = None
    time_lo: int | None = None
    time_hi: int | None = None
    keys: list[str] = field(default_factory=list)
    empty: bool = False

    def allows_queue(self, queue_id: int) -> bool:
        if self.queue_ids is not None and queue_id not in self.queue_ids:
            return False
        return self.queue_lo <= queue_id < self.queue_hi


def _resolve(
    reader: StoreReader,
    topic: str,
    qid: int,
    spec: int | Offsets,
    ts: int | None,
    lo: int,
    hi: int,
    is_start: bool,
) -> int:
    if isinstance(spec, dict):
        per = spec.get(topic)
        value = per.get(str(qid)) if per is not None else None
        if value is None:
            value = EARLIEST if is_start else LATEST
    else:
        value = spec
    if value == EARLIEST:
        return lo
    if value == LATEST:
        return hi
    return value


def start_offset(reader: StoreReader, opts: SourceOptions, topic: str, qid: int) -> int:
    """Where a read of the queue starts: startingTimestamp, else startingOffsets."""
    lo, hi = reader.min_offset(topic, qid), reader.max_offset(topic, qid)
    if opts.starting_timestamp is not None:
        return reader.offset_for_time(topic, qid, opts.starting_timestamp)
    begin = _resolve(reader, topic, qid, opts.starting, None, lo, hi, True)
    if begin < lo:
        if opts.fail_on_data_loss:
            raise SourceOptionError(
                f"{topic}/{qid}: starting offset {begin} is below the queue's first offset {lo} "
                "(removed by retention); set failOnDataLoss=false to start at the first one"
            )
        begin = lo
    return begin


def plan_batch(
    reader: StoreReader, opts: SourceOptions, cons: Constraints | None = None
) -> list[QueueRange]:
    """The queue ranges of a batch read, cut to at most maxRowsPerPartition rows each."""
    cons = cons or Constraints()
    if cons.empty:
        return []
    out: list[QueueRange] = []
    for topic in resolve_topics(reader, opts):
        if cons.topics is not None and topic not in cons.topics:
            continue
        for qid in reader.queue_ids(topic):
            if not cons.allows_queue(qid):
                continue
            lo, hi = reader.min_offset(topic, qid), reader.max_offset(topic, qid)
            begin = start_offset(reader, opts, topic, qid)
            end = _resolve(reader, topic, qid, opts.ending, None, lo, hi, False)
            if opts.ending_timestamp is not None:
                end = min(end, reader.offset_for_time(topic, qid, opts.ending_timestamp))
            end = min(end, hi)
            begin = max(begin, cons.offset_lo)
            end = min(end, cons.offset_hi)
            if cons.time_lo is not None and begin < end:
                begin = max(begin, reader.offset_for_time(topic, qid, cons.time_lo))
            if cons.time_hi is not None and begin < end:
                end = min(end, reader.offset_for_time(topic, qid, cons.time_hi))
            if begin >= end:
                continue
            wanted: set[int] | None = cons.offsets_in
            if cons.keys:
                hits: set[int] | None = None
                for key in cons.keys:
                    found = reader.lookup_key(topic, key)
                    if found is None:
                        hits = None
                        break
                    these = {off for q, off in found if q == qid}
                    hits = these if hits is None else hits | these
                    break  # one key suffices to prune; Spark checks the rest
                if hits is not None:
                    wanted = hits if wanted is None else wanted & hits
            if wanted is not None:
                out.extend(_runs(topic, qid, sorted(o for o in wanted if begin <= o < end)))
                continue
            for a, b in split_range(begin, end, opts.max_rows_per_partition):
                out.append(QueueRange(topic, qid, a, b))
    return out


def _runs(topic: str, qid: int, offsets: list[int]) -> list[QueueRange]:
    out: list[QueueRange] = []
    for off in offsets:
        if out and out[-1].end == off:
            last = out[-1]
            out[-1] = QueueRange(topic, qid, last.begin, off + 1)
        else:
            out.append(QueueRange(topic, qid, off, off + 1))
    return out


# ---- streaming ------------------------------------------------------------------------------


def latest(reader: StoreReader, opts: SourceOptions) -> Offsets:
    """Every selected queue's end offset (topics that appear later are included)."""
    out: Offsets = {}
    for topic in resolve_topics(reader, opts, must_exist=False):
        out[topic] = {str(q): reader.max_offset(topic, q) for q in reader.queue_ids(topic)}
    return out


def initial(reader: StoreReader, opts: SourceOptions) -> Offsets:
    resolve_topics(reader, opts)  # unknown topics are an error when the query starts
    out: Offsets = {}
    for topic in resolve_topics(reader, opts):
        out[topic] = {str(q): start_offset(reader, opts, topic, q) for q in reader.queue_ids(topic)}
    return out


def limit_offsets(
    start: Offsets, end: Offsets, queue_min: dict[tuple[str, str], int], max_rows: int
) -> Offsets:
    """Move ``end`` back so at most ``max_rows`` offsets are read in total, shared out in
    proportion to what each queue has waiting (every queue with data gets at least one)."""
    pending: dict[tuple[str, str], tuple[int, int]] = {}
    for topic, queues in end.items():
        for q, hi in queues.items():
            lo = start.get(topic, {}).get(q, queue_min.get((topic, q), 0))
            if hi > lo:
                pending[(topic, q)] = (lo, hi)
    total = sum(hi - lo for lo, hi in pending.values())
    if total <= max_rows:
        return end
    out: Offsets = {t: dict(qs) for t, qs in end.items()}
    budget = max_rows
    items = sorted(pending.items())
    for (topic, q), (lo, hi) in items:
        share = max(1, math.floor((hi - lo) * max_rows / total))
        take = min(hi - lo, share, max(budget, 0))
        if budget <= 0:
            take = 0
        budget -= take
        out[topic][q] = lo + take
    return out
