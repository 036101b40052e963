"""The Spark writers of a store directory (option ``path``): batch and streaming Arrow writers
over ``_store_write``.

Rows need ``topic`` and ``body`` (binary or string); ``tags`` (string), ``keys`` (array of
strings, or one space-separated string), ``properties`` (map of strings) and ``queue_id`` (int;
null or absent: the row's topic queues are used in turn) are optional. The other columns of a
rocketstore read (offsets, ids, times, hosts, flags) are ignored, so a frame read from a store
is written as it is; any other column is refused at planning. System keys in ``properties``
(UNIQ_KEY, WAIT, TAGS, KEYS, REAL_TOPIC, ...) are left out unless option
``keepSystemProperties`` is true (see ``_system_props``).

Each write task opens the store at ``path`` as its owner (an embedded MessageStore), appends its
rows in batches per (topic, queue), and shuts the store down cleanly, which flushes everything.
Tasks of one job take turns: a task waits up to ``lockTimeoutMs`` for the store while another
task of the job holds it. At planning the write is refused when a process other than Spark's
tasks owns the store (a running broker): the error names its pid.

Delivery is at-least-once: what a task wrote stays written even when the job then fails and
Spark retries the task; ``commit`` and ``abort`` only report. See docs/spark.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ._options import SourceOptionError
from ._store_put import WriteReport, WriteSettings
from ._store_write import open_store, store_write_settings, write_batches
from ._write_common import check_schema

__all__ = [
    "BatchWriter",
    "StreamWriter",
    "TaskReport",
    "WriteSettings",
    "open_store",
    "write_batches",
]

log = logging.getLogger(__name__)


@dataclass
class TaskReport(WriteReport, WriterCommitMessage):
    """What one write task stored (``WriteReport``), as Spark's commit message."""


def _settings(options: dict[str, str], schema: StructType) -> WriteSettings:
    return store_write_settings(options, check_schema(schema))


def _task(s: WriteSettings, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
    report = write_batches(s, iterator, TaskReport)
    assert isinstance(report, TaskReport)
    return report


def _summary(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    reports = [m for m in messages if isinstance(m, TaskReport)]
    rows = sum(m.rows for m in reports)
    failed = sum(1 for m in messages if m is None)
    if reports:
        log.info(
            "rocketstore write tasks: %.2fs waiting for input, %.2fs putting, %.2fs closing",
            sum(m.input_s for m in reports),
            sum(m.put_s for m in reports),
            sum(m.close_s for m in reports),
        )
    return rows, failed


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketstore").option("path", DIR).mode("append").save()``."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise SourceOptionError(
                "rocketstore topics are append-only: use mode('append'), not overwrite"
            )
        self.settings = _settings(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        return _task(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, _ = _summary(messages)
        log.info("rocketstore write committed: %d rows into %s", rows, self.settings.path)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, failed = _summary(messages)
        log.warning(
            "rocketstore write aborted (%d task(s) failed); %d rows written by the tasks that "
            "finished stay in %s (at-least-once)",
            failed,
            rows,
            self.settings.path,
        )


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketstore").option("path", DIR)``: each micro-batch is
    written like a batch write (at-least-once: a batch replayed after a failure is written
    again)."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.settings = _settings(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        return _task(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, _ = _summary(messages)
        log.info("rocketstore micro-batch %d committed: %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, failed = _summary(messages)
        log.warning(
            "rocketstore micro-batch %d aborted (%d task(s) failed); %d rows stay written",
            batchId,
            failed,
            rows,
        )
