"""``rocketstore_ceiling``: the Spark side of a read or a write with no store work at all.

A benchmark reference (``rocketstore bench --scenario spark-read-write``). The reader plans
like ``rocketstore`` (same options, partitions and schema handling, column pruning included)
but decodes nothing while it reads: each partition decodes a few of its first records once,
repeats them into one batch of ``batchRows`` rows, and yields that batch again and again (the
last one cut) until it has yielded as many rows as the partition holds. The rows have the
same shape as rocketstore's, so Spark's work on them is the same; what a rocketstore read
costs beyond this one is its decoding. The writer takes Arrow batches and discards them
(what a rocketstore write costs beyond it is the store's work).

Register it with ``spark.dataSource.register(CeilingDataSource)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..columns._arrow import QueueRange, RangeDecoder
from ..columns._schema import SCHEMA_DDL, schema_ddl
from ._options import SourceOptions
from ._path_plan import open_reader, plan_batch
from ._path_reader import RangePartition
from ._source import arrow_schema

NAME = "rocketstore_ceiling"
_SAMPLE = 100  # records decoded to make a partition's batch


def template(opts: SourceOptions, r: QueueRange, schema: pa.Schema) -> pa.RecordBatch:
    """One batch of ``opts.batch_rows`` rows: the first records of ``r``, repeated."""
    with open_reader(opts) as reader:
        decoder = RangeDecoder(reader, schema=schema, whole_batch=False)
        sample = QueueRange(r.topic, r.queue_id, r.begin, min(r.end, r.begin + _SAMPLE))
        first = next(iter(decoder.batches(sample)), None)
    if first is None or not first.num_rows:
        return pa.RecordBatch.from_pylist([], schema=schema)
    copies = -(-opts.batch_rows // first.num_rows)
    table = pa.Table.from_batches([first] * copies, schema).combine_chunks()
    return table.slice(0, opts.batch_rows).to_batches()[0]


class CeilingReader(DataSourceReader):
    """Partitions as a rocketstore batch read; ``read`` yields prepared batches."""

    def __init__(self, opts: SourceOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        with open_reader(self.opts) as reader:
            return [RangePartition(r) for r in plan_batch(reader, self.opts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return
        r = partition.range
        batch = template(self.opts, r, self.schema)
        if not batch.num_rows:
            return
        left = r.end - r.begin
        while left > 0:
            yield batch if left >= batch.num_rows else batch.slice(0, left)
            left -= batch.num_rows


@dataclass
class Discarded(WriterCommitMessage):
    rows: int = 0


class DiscardWriter(DataSourceArrowWriter):
    """Counts the rows of its Arrow batches and keeps nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Discarded:
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return Discarded(rows)


class CeilingDataSource(DataSource):
    """``spark.read.format("rocketstore_ceiling").option("path", DIR)`` and
    ``df.write.format("rocketstore_ceiling")``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        opts = SourceOptions.parse(self.options)
        return schema_ddl(opts.columns) if opts.columns else SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = SourceOptions.parse(self.options)
        return CeilingReader(opts, arrow_schema(schema, opts))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        return DiscardWriter()
