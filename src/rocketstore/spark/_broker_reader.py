"""Spark readers of broker mode (option ``namesrv`` or ``broker``): batch and streaming.

Planning (``partitions``, the stream offsets) runs on the driver with a short-lived
:class:`Cluster`; ``read()`` runs in the executors and pulls its partition's exact offsets
through the worker process's pooled connections, so it depends only on the options and the
partition, and a re-run gives the same rows. Stream offsets are
``{topic: {broker name: {queue id: next offset}}}`` in canonical order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..store.read._reader import split_range
from ._broker import BrokerRange, Cluster, pull_range
from ._broker_plan import flatten, initial, latest, nest, plan_remote, queues, remote_of
from ._options import NestedOffsets, SourceOptionError, SourceOptions, canonical_nested
from ._path_plan import Constraints, limit_offsets
from ._pushdown import FilterPushdown

log = logging.getLogger(__name__)


class BrokerPartition(InputPartition):
    """One (broker, topic, queue, offset range) to pull. ``host`` is where the data lives
    (Spark's Python data sources cannot pass a preferred location on yet)."""

    def __init__(self, r: BrokerRange) -> None:
        super().__init__((r.broker_name, r.topic, r.queue_id, r.begin, r.end))
        self.range = r
        self.host = r.host


def read_remote(opts: SourceOptions, r: BrokerRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    return pull_range(
        r,
        remote_of(opts),
        schema,
        batch_rows=opts.batch_rows,
        check_crc=opts.check_crc,
        fail_on_data_loss=opts.fail_on_data_loss,
    )


class BrokerBatchReader(DataSourceReader):
    """A batch read through brokers: one partition per (broker, topic, queue, offset range)."""

    def __init__(self, opts: SourceOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema
        self.constraints = Constraints()
        with Cluster(remote_of(opts)) as cluster:  # errors at planning: unknown topics
            queues(cluster, opts)

    def partitions(self) -> Sequence[InputPartition]:
        with Cluster(remote_of(self.opts)) as cluster:
            ranges = plan_remote(cluster, self.opts, self.constraints)
        return [BrokerPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BrokerPartition):
            return iter(())
        return read_remote(self.opts, partition.range, self.schema)


class BrokerPushdownReader(FilterPushdown, BrokerBatchReader):
    """A batch read through brokers with filter pushdown (topic, queue_id, queue_offset
    exactly; store_timestamp by SEARCH_OFFSET_BY_TIMESTAMP; keys are left to Spark)."""


class BrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read through brokers. With commitOffsets the committed end of every
    micro-batch is also written to the brokers as consumerGroup's consumer offsets."""

    def __init__(self, opts: SourceOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema
        self.target: NestedOffsets | None = None
        with Cluster(remote_of(opts)) as cluster:
            initial(cluster, opts)  # errors at planning

    def initialOffset(self) -> dict[str, Any]:
        with Cluster(remote_of(self.opts)) as cluster:
            return canonical_nested(initial(cluster, self.opts))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with Cluster(remote_of(self.opts)) as cluster:
            self.target = canonical_nested(latest(cluster, self.opts)[0])

    def _latest(self) -> tuple[NestedOffsets, NestedOffsets]:
        with Cluster(remote_of(self.opts)) as cluster:
            end, first = latest(cluster, self.opts)
        if self.target is not None:  # availableNow: nothing past what was there at the start
            t = self.target
            end = {
                topic: {
                    b: {q: min(v, t[topic][b][q]) for q, v in qs.items() if q in t[topic][b]}
                    for b, qs in bs.items()
                    if b in t[topic]
                }
                for topic, bs in end.items()
                if topic in t
            }
        return end, first

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        end, first = self._latest()
        for t, bs in start.items():  # never move a queue backwards
            for b, qs in bs.items():
                for q, v in qs.items():
                    cur = end.setdefault(t, {}).setdefault(b, {})
                    cur[q] = max(cur.get(q, v), v)
        if isinstance(limit, ReadMaxRows):
            mins = {(k, q): v for k, qs in flatten(first).items() for q, v in qs.items()}
            end = nest(limit_offsets(flatten(start), flatten(end), mins, limit.max_rows))
        return canonical_nested(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return canonical_nested(self._latest()[0])

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        with Cluster(remote_of(self.opts)) as cluster:
            for q, addrs in queues(cluster, self.opts, must_exist=False):
                hi = end.get(q.topic, {}).get(q.broker_name, {}).get(str(q.queue_id))
                if hi is None:
                    continue
                lo = start.get(q.topic, {}).get(q.broker_name, {}).get(str(q.queue_id))
                lowest = cluster.min_offset(addrs, q)
                if lo is None:
                    lo = lowest  # a queue that appeared after the query started
                if lo < lowest:
                    if self.opts.fail_on_data_loss:
                        raise SourceOptionError(
                            f"{q.topic}/{q.broker_name}/{q.queue_id}: offsets {lo}..{lowest} "
                            "were removed by retention before they were read; set "
                            "failOnDataLoss=false to skip them"
                        )
                    lo = lowest
                for a, b in split_range(lo, hi, self.opts.max_rows_per_partition):
                    r = BrokerRange(q.topic, q.broker_name, q.queue_id, a, b, addrs)
                    out.append(BrokerPartition(r))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BrokerPartition):
            return iter(())
        return read_remote(self.opts, partition.range, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """With commitOffsets: ``end`` becomes consumerGroup's offsets on the brokers (so
        RocketMQ's tools show the pipeline's lag). A broker that cannot be reached only logs:
        the checkpoint, not the broker, is where the stream resumes from."""
        remote = remote_of(self.opts)
        if not remote.commit_offsets:
            return
        try:
            with Cluster(remote) as cluster:
                for q, addrs in queues(cluster, self.opts, must_exist=False):
                    off = end.get(q.topic, {}).get(q.broker_name, {}).get(str(q.queue_id))
                    if off is not None:
                        cluster.commit(addrs, q, remote.consumer_group, int(off))
        except Exception as exc:  # progress stays in the checkpoint
            log.warning(
                "could not write %s's offsets to the brokers: %s", remote.consumer_group, exc
            )
