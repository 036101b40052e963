"""Spark readers of path mode (option ``path``, a store directory): batch and streaming.

Readers are pickled by Spark after planning (``pushFilters`` / ``partitions`` run in the
planner); they hold options, the Arrow schema of the read and plans only, never open files.
``read()`` opens its own StoreReader, so it depends on nothing but those and the partition.
"""

from __future__ import annotations

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

from ..columns._arrow import QueueRange, RangeDecoder
from ..store.read._reader import split_range
from ._options import Offsets, SourceOptionError, SourceOptions, canonical
from ._path_plan import (
    Constraints,
    initial,
    latest,
    limit_offsets,
    open_reader,
    plan_batch,
    resolve_topics,
)
from ._pushdown import FilterPushdown


class RangePartition(InputPartition):
    """One (topic, queue, offset range) to read."""

    def __init__(self, r: QueueRange) -> None:
        super().__init__((r.topic, r.queue_id, r.begin, r.end))
        self.range = r


def read_range(opts: SourceOptions, r: QueueRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    reader = open_reader(opts)
    try:
        decoder = RangeDecoder(
            reader,
            schema=schema,
            batch_rows=opts.batch_rows,
            check_crc=opts.check_crc,
            fail_on_data_loss=opts.fail_on_data_loss,
        )
        yield from decoder.batches(r)
    finally:
        reader.close()


class BatchReader(DataSourceReader):
    """A batch read: one partition per (topic, queue, offset range)."""

    def __init__(self, opts: SourceOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema
        self.constraints = Constraints()
        with open_reader(opts) as reader:  # errors at planning: not a store, unknown topics
            resolve_topics(reader, opts)

    def partitions(self) -> Sequence[InputPartition]:
        with open_reader(self.opts) as reader:
            ranges = plan_batch(reader, self.opts, self.constraints)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())
        return read_range(self.opts, partition.range, self.schema)


class PushdownBatchReader(FilterPushdown, BatchReader):
    """A batch read that turns filters into a smaller plan.

    Exact (Spark does not re-check them): topic and queue_id (=, IN, ranges), queue_offset
    (=, IN, ranges), IS NOT NULL of columns that are never null. Used to prune, and re-checked
    by Spark: store_timestamp ranges (→ offsets by a binary search over store times) and
    ``keys = array(...)`` (→ the index, when the store has one).
    """


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read. Offsets: {topic: {queue id: next offset}}, canonical order."""

    def __init__(self, opts: SourceOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema
        self.target: Offsets | None = None
        with open_reader(opts) as reader:
            initial(reader, opts)  # errors at planning

    def initialOffset(self) -> dict[str, Any]:
        with open_reader(self.opts) as reader:
            return canonical(initial(reader, self.opts))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with open_reader(self.opts) as reader:
            self.target = canonical(latest(reader, self.opts))

    def _latest(self) -> tuple[Offsets, dict[tuple[str, str], int]]:
        with open_reader(self.opts) as reader:
            end = latest(reader, self.opts)
            mins = {(t, q): reader.min_offset(t, int(q)) for t, qs in end.items() for q in qs}
        if self.target is not None:  # availableNow: nothing past what was there at the start
            end = {
                t: {
                    q: min(v, self.target[t][q])
                    for q, v in qs.items()
                    if q in self.target.get(t, {})
                }
                for t, qs in end.items()
                if t in self.target
            }
        return end, mins

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        end, mins = self._latest()
        # never move a queue backwards (a queue the start already read past keeps its offset)
        for t, qs in start.items():
            for q, v in qs.items():
                cur = end.setdefault(t, {})
                cur[q] = max(cur.get(q, v), v)
        if isinstance(limit, ReadMaxRows):
            end = limit_offsets(start, end, mins, limit.max_rows)
        return canonical(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        end, _ = self._latest()
        return canonical(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        with open_reader(self.opts) as reader:
            for topic, queues in end.items():
                for q, hi in queues.items():
                    qid = int(q)
                    lowest = reader.min_offset(topic, qid)
                    lo = start.get(topic, {}).get(q)
                    if lo is None:
                        lo = lowest  # a queue that appeared after the query started
                    if lo < lowest:
                        if self.opts.fail_on_data_loss:
                            raise SourceOptionError(
                                f"{topic}/{qid}: offsets {lo}..{lowest} were removed by retention "
                                "before they were read; set failOnDataLoss=false to skip them"
                            )
                        lo = lowest
                    for a, b in split_range(lo, hi, self.opts.max_rows_per_partition):
                        out.append(RangePartition(QueueRange(topic, qid, a, b)))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())
        return read_range(self.opts, partition.range, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the store keeps its messages by its own retention."""
