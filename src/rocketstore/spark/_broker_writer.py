"""The Spark writers through brokers (option ``namesrv`` or ``broker``): batch and streaming,
over ``_broker_send``.

Every write task sends its own rows, so throughput grows with tasks (no task owns a store);
how rows become requests and which queues they go to: ``_broker_send``.

At-least-once: a batch the broker stored whose answer was lost is stored again by the retry,
and a failed task that Spark runs again sends all of its rows again. The commit message of a
task says what it sent: per queue, the first offset and the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ._broker_send import RemoteWriteReport, RemoteWriteSettings, send_settings, write_remote
from ._options import SourceOptionError
from ._write_common import check_schema

log = logging.getLogger(__name__)


@dataclass
class RemoteTaskReport(RemoteWriteReport, WriterCommitMessage):
    """What one write task sent (``RemoteWriteReport``), as Spark's commit message."""


def remote_write_settings(options: Mapping[str, str], schema: StructType) -> RemoteWriteSettings:
    return send_settings(options, check_schema(schema))


def _task(s: RemoteWriteSettings, iterator: Iterator[pa.RecordBatch]) -> RemoteTaskReport:
    report = write_remote(s, iterator, RemoteTaskReport)
    assert isinstance(report, RemoteTaskReport)
    return report


def _summary(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    reports = [m for m in messages if isinstance(m, RemoteTaskReport)]
    return sum(m.rows for m in reports), sum(1 for m in messages if m is None)


class RemoteBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketstore").option("namesrv", ADDR).mode("append").save()``."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise SourceOptionError(
                "rocketstore topics are append-only: use mode('append'), not overwrite"
            )
        self.settings = remote_write_settings(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RemoteTaskReport:
        return _task(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, _ = _summary(messages)
        log.info(
            "rocketstore write committed: %d rows through %s", rows, self.settings.remote.where
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, failed = _summary(messages)
        log.warning(
            "rocketstore write aborted (%d task(s) failed); %d rows sent by the tasks that "
            "finished stay on the brokers (at-least-once)",
            failed,
            rows,
        )


class RemoteStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketstore").option("namesrv", ADDR)``: each micro-batch is
    sent like a batch write (a micro-batch replayed after a failure is sent again)."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.settings = remote_write_settings(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RemoteTaskReport:
        return _task(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, _ = _summary(messages)
        log.info("rocketstore micro-batch %d committed: %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, failed = _summary(messages)
        log.warning(
            "rocketstore micro-batch %d aborted (%d task(s) failed); %d rows stay sent",
            batchId,
            failed,
            rows,
        )
