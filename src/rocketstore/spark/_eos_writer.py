"""The Spark writers of exactly-once writes through brokers (option ``exactlyOnce=true``):
the tasks send half messages (``_eos_send``), the driver's commit writes the batch's decision
and commits the halves, abort rolls them back (``_eos``).

Commit, in this order (a crash anywhere leaves a state the next run finishes):

1. the decision already exists (the batch ran before and was decided): the halves of this
   run's writers, if any, are rolled back and the decision's halves committed again;
2. else the decision is written (the durable point of the batch), then every half of it is
   committed (END_TRANSACTION), each queue in order.

Abort rolls back the halves of the writers that reported, unless the batch has a decision.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, fields

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..client._admin import AdminClient
from ._broker_send import RemoteWriteSettings
from ._eos import (
    Decision,
    ExactlyOnceError,
    end_halves,
    ensure_decision_topic,
    find_decision,
    write_decision,
)
from ._eos_send import HalfReport, task_ids, write_halves
from ._eos_store import StoreOnceReport, write_once
from ._faults import reach
from ._options import SourceOptionError, _bool, _get
from ._store_put import WriteSettings

log = logging.getLogger(__name__)


@dataclass
class HalfTaskReport(HalfReport, WriterCommitMessage):
    """What one exactly-once write task sent (``HalfReport``), as Spark's commit message."""


def exactly_once(options: dict[str, str]) -> bool:
    return _bool(options, "exactlyOnce", False)


class _ExactlyOnce:
    def __init__(self, options: dict[str, str], settings: RemoteWriteSettings) -> None:
        self.settings = settings
        self.write_id = _write_id(options)
        if not settings.remote.namesrv:
            raise SourceOptionError("exactlyOnce=true writes through name servers: give namesrv")
        with self._admin() as admin:
            ensure_decision_topic(admin)

    def _admin(self) -> AdminClient:
        remote = self.settings.remote
        return AdminClient(
            ";".join(remote.namesrv), timeout=self.settings.timeout_s, signer=remote.signer()
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> HalfTaskReport:
        ids = task_ids(self.write_id)
        report = write_halves(self.settings, iterator, ids, HalfTaskReport())
        assert isinstance(report, HalfTaskReport)
        return report

    def decide(self, messages: list[WriterCommitMessage | None], batch: int | None) -> None:
        reports = _reports(messages)
        if not reports:
            return
        query = reports[0].query
        if batch is None:
            batch = reports[0].batch
        reach("precommit", batch)
        timeout = self.settings.timeout_s
        with self._admin() as admin:
            fresh = [r.halves for r in reports if r.halves is not None]
            decision = find_decision(admin, query, batch)
            if decision is not None:
                stale = [w for w in fresh if w.writer not in decision.writer_ids]
                end_halves(admin, stale, False, timeout)
                n = end_halves(admin, decision.writers, True, timeout, batch=batch)
                log.info("rocketstore batch %s:%d was decided before: %d halves", query, batch, n)
            else:
                decision = Decision(query, batch, fresh)
                write_decision(admin, decision, timeout)
                n = end_halves(admin, fresh, True, timeout, batch=batch)
                log.info("rocketstore batch %s:%d committed: %d rows", query, batch, n)
        reach("postcommit", batch)

    def undo(self, messages: list[WriterCommitMessage | None], batch: int | None) -> None:
        reports = _reports(messages)
        if not reports:
            return
        query = reports[0].query
        if batch is None:
            batch = reports[0].batch
        with self._admin() as admin:
            try:
                decision = find_decision(admin, query, batch)
            except ExactlyOnceError as exc:
                log.warning("batch %s:%d aborted, its halves left to checks: %s", query, batch, exc)
                return
            fresh = [r.halves for r in reports if r.halves is not None]
            keep = decision.writer_ids if decision is not None else frozenset()
            n = end_halves(
                admin, [w for w in fresh if w.writer not in keep], False, self.settings.timeout_s
            )
        log.warning("rocketstore batch %s:%d aborted: %d halves rolled back", query, batch, n)


def _reports(messages: list[WriterCommitMessage | None]) -> list[HalfReport]:
    out: list[HalfReport] = []
    for m in messages:
        if isinstance(m, HalfReport):
            out.append(m)
    return out


class ExactlyOnceBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketstore").option("namesrv", ADDR).option("exactlyOnce", "true")
    .option("exactlyOnceId", ID)``: a re-run with the same id writes nothing it wrote before."""

    def __init__(self, options: dict[str, str], settings: RemoteWriteSettings) -> None:
        self.eos = _ExactlyOnce(options, settings)
        if self.eos.write_id is None:
            raise SourceOptionError(
                "exactlyOnce=true on a batch write needs option exactlyOnceId: an id of the "
                "job that stays the same when the job is run again"
            )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> HalfTaskReport:
        return self.eos.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.eos.decide(messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.eos.undo(messages, None)


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketstore").option("namesrv", ADDR)
    .option("exactlyOnce", "true")``: every micro-batch is committed once, replays included."""

    def __init__(self, options: dict[str, str], settings: RemoteWriteSettings) -> None:
        self.eos = _ExactlyOnce(options, settings)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> HalfTaskReport:
        return self.eos.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.eos.decide(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.eos.undo(messages, batchId)


@dataclass
class StoreOnceTaskReport(StoreOnceReport, WriterCommitMessage):
    """What one exactly-once task stored into a store path, as Spark's commit message."""


def _store_once_task(
    settings: WriteSettings, write_id: str | None, iterator: Iterator[pa.RecordBatch]
) -> StoreOnceTaskReport:
    r = write_once(settings, iterator, write_id)
    return StoreOnceTaskReport(**{f.name: getattr(r, f.name) for f in fields(r)})


class StoreOnceBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketstore").option("path", DIR).option("exactlyOnce", "true")
    .option("exactlyOnceId", ID)``: a re-run with the same id completes what a failed run
    left and writes nothing twice (``_eos_store``)."""

    def __init__(self, options: dict[str, str], settings: WriteSettings) -> None:
        self.settings = settings
        self.write_id = _write_id(options)
        if self.write_id is None:
            raise SourceOptionError(
                "exactlyOnce=true on a batch write needs option exactlyOnceId: an id of the "
                "job that stays the same when the job is run again"
            )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StoreOnceTaskReport:
        return _store_once_task(self.settings, self.write_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("rocketstore exactly-once write into %s committed", self.settings.path)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "rocketstore exactly-once write into %s aborted: a run with the same "
            "exactlyOnceId completes it",
            self.settings.path,
        )


class StoreOnceStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketstore").option("path", DIR).option("exactlyOnce",
    "true")``: a replayed micro-batch completes its partitions, never doubles them."""

    def __init__(self, options: dict[str, str], settings: WriteSettings) -> None:
        self.settings = settings
        self.write_id = _write_id(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StoreOnceTaskReport:
        return _store_once_task(self.settings, self.write_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("rocketstore exactly-once micro-batch %d committed", batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "rocketstore exactly-once micro-batch %d aborted (its replay completes it)", batchId
        )


def _write_id(options: dict[str, str]) -> str | None:
    write_id = (_get(options, "exactlyOnceId") or "").strip() or None
    if write_id is not None and (":" in write_id or " " in write_id):
        raise SourceOptionError("option exactlyOnceId: no ':' or spaces")
    return write_id
