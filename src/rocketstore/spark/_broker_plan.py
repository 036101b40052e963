"""Planning reads through brokers (driver side, no pyspark needed): the queues of every broker
group from the routes, offset ranges from GET_MIN/MAX_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP, cut
into partitions of at most maxRowsPerPartition offsets. The same rules as path mode
(``_path_plan``): startingTimestamp before startingOffsets, queues not named in JSON offsets start at
the earliest and end at the latest, failOnDataLoss for starts below a queue's first offset.
"""

from __future__ import annotations

from ..store.read._reader import split_range
from ._broker import Addresses, BrokerQueue, BrokerRange, Cluster
from ._options import (
    EARLIEST,
    LATEST,
    NestedOffsets,
    RemoteOptions,
    SourceOptionError,
    SourceOptions,
)
from ._path_plan import Constraints


def remote_of(opts: SourceOptions) -> RemoteOptions:
    assert opts.remote is not None
    return opts.remote


def _spec(nested: int | NestedOffsets | None, flat: object, q: BrokerQueue, is_start: bool) -> int:
    if isinstance(nested, dict):
        value = nested.get(q.topic, {}).get(q.broker_name, {}).get(str(q.queue_id))
        if value is None:
            return EARLIEST if is_start else LATEST
        return value
    if isinstance(nested, int):
        return nested
    return flat if isinstance(flat, int) else (EARLIEST if is_start else LATEST)


def queues(
    cluster: Cluster, opts: SourceOptions, *, must_exist: bool = True
) -> list[tuple[BrokerQueue, Addresses]]:
    out = []
    for topic in opts.topics or ():
        out.extend(cluster.queues(topic, must_exist=must_exist))
    return out


def start_offset(
    cluster: Cluster, opts: SourceOptions, q: BrokerQueue, addrs: Addresses, lo: int, hi: int
) -> int:
    """Where a read of the queue starts: startingTimestamp, else startingOffsets."""
    if opts.starting_timestamp is not None:
        return cluster.offset_for_time(addrs, q, opts.starting_timestamp)
    value = _spec(remote_of(opts).starting, opts.starting, q, True)
    begin = lo if value == EARLIEST else hi if value == LATEST else value
    if begin < lo:
        if opts.fail_on_data_loss:
            raise SourceOptionError(
                f"{q.topic}/{q.broker_name}/{q.queue_id}: starting offset {begin} is below the "
                f"queue's first offset {lo} (removed by retention); set failOnDataLoss=false "
                "to start at the first one"
            )
        begin = lo
    return begin


def plan_remote(
    cluster: Cluster, opts: SourceOptions, cons: Constraints | None = None
) -> list[BrokerRange]:
    """The ranges of a batch read: one or more per (broker, topic, queue)."""
    cons = cons or Constraints()
    if cons.empty:
        return []
    out: list[BrokerRange] = []
    for q, addrs in queues(cluster, opts):
        if cons.topics is not None and q.topic not in cons.topics:
            continue
        if not cons.allows_queue(q.queue_id):
            continue
        lo, hi = cluster.min_offset(addrs, q), cluster.max_offset(addrs, q)
        begin = start_offset(cluster, opts, q, addrs, lo, hi)
        value = _spec(remote_of(opts).ending, opts.ending, q, False)
        end = hi if value == LATEST else value
        if opts.ending_timestamp is not None:
            end = min(end, cluster.offset_for_time(addrs, q, opts.ending_timestamp))
        end = min(end, hi, cons.offset_hi)
        begin = max(begin, cons.offset_lo)
        if cons.time_lo is not None and begin < end:
            begin = max(begin, cluster.offset_for_time(addrs, q, cons.time_lo))
        if cons.time_hi is not None and begin < end:
            end = min(end, cluster.offset_for_time(addrs, q, cons.time_hi))
        if begin >= end:
            continue
        if cons.offsets_in is not None:
            wanted = sorted(o for o in cons.offsets_in if begin <= o < end)
            runs: list[tuple[int, int]] = []
            for o in wanted:
                if runs and runs[-1][1] == o:
                    runs[-1] = (runs[-1][0], o + 1)
                else:
                    runs.append((o, o + 1))
        else:
            runs = split_range(begin, end, opts.max_rows_per_partition)
        for a, b in runs:
            out.append(BrokerRange(q.topic, q.broker_name, q.queue_id, a, b, addrs))
    return out


# ---- streaming --------------------------------------------------------------------------------


def latest(cluster: Cluster, opts: SourceOptions) -> tuple[NestedOffsets, NestedOffsets]:
    """Every queue's (end, first) offsets; queues (and topics) that appeared are included."""
    end: NestedOffsets = {}
    first: NestedOffsets = {}
    for q, addrs in queues(cluster, opts, must_exist=False):
        end.setdefault(q.topic, {}).setdefault(q.broker_name, {})[str(q.queue_id)] = (
            cluster.max_offset(addrs, q)
        )
        first.setdefault(q.topic, {}).setdefault(q.broker_name, {})[str(q.queue_id)] = (
            cluster.min_offset(addrs, q)
        )
    return end, first


def initial(cluster: Cluster, opts: SourceOptions) -> NestedOffsets:
    out: NestedOffsets = {}
    for q, addrs in queues(cluster, opts):
        lo, hi = cluster.min_offset(addrs, q), cluster.max_offset(addrs, q)
        begin = start_offset(cluster, opts, q, addrs, lo, hi)
        out.setdefault(q.topic, {}).setdefault(q.broker_name, {})[str(q.queue_id)] = begin
    return out


SEP = "\x00"


def flatten(nested: NestedOffsets) -> dict[str, dict[str, int]]:
    """{topic NUL broker: {queue: offset}}: the shape ``_path_plan.limit_offsets`` works on."""
    return {f"{t}{SEP}{b}": dict(qs) for t, bs in nested.items() for b, qs in bs.items()}


def nest(flat: dict[str, dict[str, int]]) -> NestedOffsets:
    out: NestedOffsets = {}
    for key, qs in flat.items():
        t, _, b = key.partition(SEP)
        out.setdefault(t, {})[b] = dict(qs)
    return out
