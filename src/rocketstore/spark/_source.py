"""The ``rocketstore`` PySpark data source: batch and streaming reads of store directories,
batch and streaming writes into an embedded store; with option ``namesrv`` or ``broker`` the
same through running brokers (``_remote_source``, ``_remote_writer``).

Readers are pickled by Spark after planning (``pushFilters`` / ``partitions`` run in the
planner); they hold options, the Arrow schema of the read and plans only, never open files.
``read()`` opens its own StoreReader, so it depends on nothing but those and the partition.

Column pruning: ``reader(schema)`` / ``streamReader(schema)`` get the schema Spark plans with:
the user's ``.schema(...)``, else ``schema()``, which is the ``columns`` option's selection or
every column. Any subset of the columns in any order is read, and only those are decoded.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ._arrow import SCHEMA_DDL, QueueRange, RangeDecoder, schema_ddl, select_schema
from ._options import Offsets, SourceOptionError, SourceOptions, canonical
from ._plan import (
    Constraints,
    initial,
    latest,
    limit_offsets,
    open_reader,
    plan_batch,
    resolve_topics,
)

NAME = "rocketstore"
_NOT_NULL = frozenset(
    {
        "topic",
        "queue_id",
        "queue_offset",
        "commitlog_offset",
        "msg_id",
        "body",
        "keys",
        "properties",
        "born_timestamp",
        "store_timestamp",
        "born_host",
        "store_host",
        "reconsume_times",
        "sys_flag",
    }
)


class RangePartition(InputPartition):
    """One (topic, queue, offset range) to read."""

    def __init__(self, r: QueueRange) -> None:
        super().__init__((r.topic, r.queue_id, r.begin, r.end))
        self.range = r


def arrow_schema(schema: StructType, opts: SourceOptions) -> pa.Schema:
    """The Arrow schema of a read with Spark schema ``schema`` (checked at planning: every
    field a rocketstore column of its type; the same columns as option columns, if given)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    names = tuple(schema.fieldNames())
    if opts.columns is not None and names != opts.columns:
        raise SourceOptionError(
            f"option columns ({', '.join(opts.columns)}) and the schema of the read "
            f"({', '.join(names)}) name different columns; give one of them"
        )
    return select_schema(list(to_arrow_schema(schema, timezone="UTC")))


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


class RocketStoreDataSource(DataSource):
    """``spark.read.format("rocketstore").option("path", DIR)`` (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        """Every column, or the ones option ``columns`` names (in its order)."""
        opts = SourceOptions.parse(self.options)
        return schema_ddl(opts.columns) if opts.columns else SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = SourceOptions.parse(self.options)
        arrow = arrow_schema(schema, opts)
        pushdown = _pushdown_allowed(opts.push_filters)
        if opts.remote is not None:
            from ._remote_source import BrokerBatchReader, BrokerPushdownReader

            return (BrokerPushdownReader if pushdown else BrokerBatchReader)(opts, arrow)
        if pushdown:
            return PushdownBatchReader(opts, arrow)
        return BatchReader(opts, arrow)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = SourceOptions.parse(self.options, streaming=True)
        if opts.remote is not None:
            from ._remote_source import BrokerStreamReader

            return BrokerStreamReader(opts, arrow_schema(schema, opts))
        return StreamReader(opts, arrow_schema(schema, opts))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from ._remote_writer import RemoteBatchWriter, is_remote

        if is_remote(self.options):
            return RemoteBatchWriter(dict(self.options), schema, overwrite)
        from ._writer import BatchWriter

        return BatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from ._remote_writer import RemoteStreamWriter, is_remote

        if is_remote(self.options):
            return RemoteStreamWriter(dict(self.options), schema, overwrite)
        from ._writer import StreamWriter

        return StreamWriter(dict(self.options), schema, overwrite)


def _pushdown_allowed(setting: str) -> bool:
    """Whether the reader may implement ``pushFilters``.

    Spark refuses a reader that implements pushFilters when
    ``spark.sql.python.filterPushdown.enabled`` is false, and the reader cannot see the conf.
    The planner that runs without pushdown keeps the conf value in a local of the function
    that calls ``DataSource.reader``; with option pushFilters=auto (the default) that frame
    decides. pushFilters=true / false overrides it.
    """
    if setting != "auto":
        return setting == "true"
    frame: FrameType | None = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            break
        if frame.f_code.co_filename.endswith("plan_data_source_read.py"):
            return bool(frame.f_locals.get("enable_pushdown", True))
        frame = frame.f_back
    return True


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


def _ms(value: Any) -> int | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    return None


class PushdownBatchReader(BatchReader):
    """A batch read that turns filters into a smaller plan.

    Exact (Spark does not re-check them): topic and queue_id (=, IN, ranges), queue_offset
    (=, IN, ranges), IS NOT NULL of columns that are never null. Used to prune, and re-checked
    by Spark: store_timestamp ranges (→ offsets by a binary search over store times) and
    ``keys = array(...)`` (→ the index, when the store has one).
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        c = self.constraints
        for f in filters:
            attribute: tuple[str, ...] = getattr(f, "attribute", ())
            col = attribute[0] if len(attribute) == 1 else None
            if isinstance(f, IsNotNull) and col in _NOT_NULL:
                continue
            if col == "topic" and isinstance(f, EqualTo | In):
                values = {f.value} if isinstance(f, EqualTo) else set(f.value)
                c.topics = values if c.topics is None else c.topics & values
                continue
            if col in ("queue_id", "queue_offset") and _push_int(c, col, f):
                continue
            if col == "store_timestamp":
                _push_time(c, f)
            elif col == "keys" and isinstance(f, EqualTo) and isinstance(f.value, list | tuple):
                keys = [k for k in f.value if isinstance(k, str)]
                if not keys:
                    c.empty = True
                c.keys = keys
            yield f


def _push_int(c: Constraints, col: str, f: Filter) -> bool:
    if isinstance(f, EqualTo | In):
        raw = [f.value] if isinstance(f, EqualTo) else list(f.value)
        values = {v for v in raw if isinstance(v, int)}
        if col == "queue_id":
            c.queue_ids = values if c.queue_ids is None else c.queue_ids & values
        else:
            c.offsets_in = values if c.offsets_in is None else c.offsets_in & values
        if not values:
            c.empty = True
        return True
    if not isinstance(f.value, int) or isinstance(f.value, bool):  # type: ignore[attr-defined]
        return False
    v: int = f.value  # type: ignore[attr-defined]
    lo, hi = (None, None)
    if isinstance(f, GreaterThan):
        lo = v + 1
    elif isinstance(f, GreaterThanOrEqual):
        lo = v
    elif isinstance(f, LessThan):
        hi = v
    elif isinstance(f, LessThanOrEqual):
        hi = v + 1
    else:
        return False
    if col == "queue_id":
        if lo is not None:
            c.queue_lo = max(c.queue_lo, lo)
        if hi is not None:
            c.queue_hi = min(c.queue_hi, hi)
    else:
        if lo is not None:
            c.offset_lo = max(c.offset_lo, lo)
        if hi is not None:
            c.offset_hi = min(c.offset_hi, hi)
    return True


def _push_time(c: Constraints, f: Filter) -> None:
    v = _ms(getattr(f, "value", None))
    if v is None:
        return
    # store times are whole milliseconds; Spark's are microseconds, hence the rounding
    if isinstance(f, GreaterThan | GreaterThanOrEqual):
        c.time_lo = v if c.time_lo is None else max(c.time_lo, v)
    elif isinstance(f, LessThan | LessThanOrEqual):
        c.time_hi = v + 1 if c.time_hi is None else min(c.time_hi, v + 1)
    elif isinstance(f, EqualTo):
        c.time_lo = v if c.time_lo is None else max(c.time_lo, v)
        c.time_hi = v + 1 if c.time_hi is None else min(c.time_hi, v + 1)


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
        from ..store.read._reader import split_range
        from ._options import SourceOptionError

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
