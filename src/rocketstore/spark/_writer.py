"""Writing DataFrames into a store: batch and streaming Arrow writers.

Rows need ``topic`` and ``body`` (binary or string); ``tags`` (string), ``keys`` (array of
strings, or one space-separated string), ``properties`` (map of strings) and ``queue_id`` (int;
null or absent: the row's topic queues are used in turn) are optional. Other columns are
refused at planning.

Each write task opens the store at ``path`` as its owner (an embedded MessageStore), appends its
rows in batches per (topic, queue), and shuts the store down cleanly, which flushes everything.
Tasks of one job take turns: a task waits up to ``lockTimeoutMs`` for the store while another
task of the job holds it. At planning the write is refused when a process other than Spark's
tasks owns the store (a running broker): the error names its pid.

Delivery is at-least-once: what a task wrote stays written even when the job then fails and
Spark retries the task; ``commit`` and ``abort`` only report. See docs/spark.md.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from .. import Message, MessageStore, StoreConfig
from .._errors import StoreLockedError
from .._lock import lock_owner
from .._reader import COMMIT_LOG_DIR, CONSUME_QUEUE_DIR, detect_file_size
from ._options import SourceOptionError, _get, _int

log = logging.getLogger(__name__)

DEFAULT_QUEUES = 4
_BATCH_MESSAGES = 1024


@dataclass
class WriteReport(WriterCommitMessage):
    """What one write task stored: rows, bytes and the last offset written per queue."""

    rows: int = 0
    body_bytes: int = 0
    queues: dict[str, int] = field(default_factory=dict)  # "topic/queue" → next offset


@dataclass(frozen=True)
class WriteSettings:
    path: str
    commit_log_file_size: int | None
    consume_queue_file_size: int | None
    queue_counts: dict[str, int]
    default_queues: int
    lock_timeout_ms: int
    columns: tuple[str, ...]
    flush_disk_type: str


def _check_schema(schema: StructType) -> tuple[str, ...]:
    allowed: dict[str, tuple[type, ...]] = {
        "topic": (StringType,),
        "body": (BinaryType, StringType),
        "tags": (StringType,),
        "keys": (ArrayType, StringType),
        "properties": (MapType,),
        "queue_id": (IntegerType, LongType, ShortType),
    }
    names = tuple(f.name for f in schema.fields)
    for required in ("topic", "body"):
        if required not in names:
            raise SourceOptionError(
                f"writing to rocketstore needs a {required!r} column; the DataFrame has "
                f"{', '.join(names) or 'no columns'}"
            )
    for f in schema.fields:
        kinds = allowed.get(f.name)
        if kinds is None:
            raise SourceOptionError(
                f"column {f.name!r} cannot be written to rocketstore (columns: topic, body, "
                "tags, keys, properties, queue_id); drop or rename it"
            )
        if not isinstance(f.dataType, kinds):
            raise SourceOptionError(f"column {f.name!r} has type {f.dataType.simpleString()}")
    return names


def _settings(options: dict[str, str], schema: StructType) -> WriteSettings:
    if _get(options, "broker"):
        raise SourceOptionError("option broker: writing through a broker is not available yet")
    path = _get(options, "path")
    if not path:
        raise SourceOptionError("option path (the store directory to write into) is required")
    columns = _check_schema(schema)
    owner = lock_owner(path)
    if owner is not None:
        raise StoreLockedError(
            f"{path} is owned by process {owner}: stop it (or write through it once brokers "
            "take writes from Spark) before writing into the store directly"
        )
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise SourceOptionError(f"{path} is not a directory")
    counts: dict[str, int] = {}
    cq_dir = root / CONSUME_QUEUE_DIR
    if cq_dir.is_dir():
        for topic_dir in cq_dir.iterdir():
            ids = [int(q.name) for q in topic_dir.iterdir() if q.name.isdigit()]
            if ids:
                counts[topic_dir.name] = max(ids) + 1
    cq_size = _int(options, "consumeQueueFileSize", None, 20)
    if cq_size is None and cq_dir.is_dir():
        for topic_dir in cq_dir.iterdir():
            for qdir in topic_dir.iterdir():
                cq_size = cq_size or detect_file_size(qdir)
    return WriteSettings(
        path=path,
        commit_log_file_size=_int(options, "commitLogFileSize", None, 4096)
        or detect_file_size(root / COMMIT_LOG_DIR),
        consume_queue_file_size=cq_size,
        queue_counts=counts,
        default_queues=_int(options, "defaultQueueNums", DEFAULT_QUEUES, 1) or DEFAULT_QUEUES,
        lock_timeout_ms=_int(options, "lockTimeoutMs", 600_000, 0) or 0,
        columns=columns,
        flush_disk_type=(_get(options, "flushDiskType") or "ASYNC_FLUSH").upper(),
    )


def open_store(s: WriteSettings) -> MessageStore:
    """Own the store, waiting while another task of the job holds it."""
    changes: dict[str, Any] = {"store_path_root_dir": s.path, "flush_disk_type": s.flush_disk_type}
    if s.commit_log_file_size:
        changes["mapped_file_size_commit_log"] = s.commit_log_file_size
    if s.consume_queue_file_size:
        changes["mapped_file_size_consume_queue"] = s.consume_queue_file_size
    config = dataclasses.replace(StoreConfig(), **changes)
    deadline = time.monotonic() + s.lock_timeout_ms / 1000
    delay = 0.02
    while True:
        store = MessageStore(config)
        try:
            store.load()
            store.start()
            return store
        except StoreLockedError:
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    f"{s.path} stayed owned by process {lock_owner(s.path)} for "
                    f"{s.lock_timeout_ms} ms (option lockTimeoutMs)"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def _task_index() -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return ctx.partitionId() if ctx is not None else 0
    except Exception:  # outside a Spark task
        return 0


def write_batches(s: WriteSettings, batches: Iterator[pa.RecordBatch]) -> WriteReport:
    """Put every row of ``batches`` into the store; the work of one write task."""
    report = WriteReport()
    first = next(batches, None)
    if first is None:
        return report
    store = open_store(s)
    try:
        turn: dict[str, int] = {}
        start = _task_index()
        batch: pa.RecordBatch | None = first
        while batch is not None:
            _put_batch(store, s, batch, turn, start, report)
            batch = next(batches, None)
    finally:
        store.shutdown()
    return report


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    idx = batch.schema.get_field_index(name)
    return batch.column(idx).to_pylist() if idx >= 0 else None


def _put_batch(
    store: MessageStore,
    s: WriteSettings,
    batch: pa.RecordBatch,
    turn: dict[str, int],
    start: int,
    report: WriteReport,
) -> None:
    n = batch.num_rows
    topics = _column(batch, "topic") or []
    bodies = _column(batch, "body") or []
    tags = _column(batch, "tags") or [None] * n
    keys = _column(batch, "keys") or [None] * n
    props = _column(batch, "properties") or [None] * n
    qids = _column(batch, "queue_id") or [None] * n
    groups: dict[tuple[str, int], list[Message]] = {}
    for i in range(n):
        topic = topics[i]
        body = bodies[i]
        if topic is None or body is None:
            raise SourceOptionError(f"row {i} of a write batch has a null topic or body")
        if isinstance(body, str):
            body = body.encode()
        qid = qids[i]
        if qid is None:
            count = s.queue_counts.get(topic, s.default_queues)
            k = turn.get(topic, start)
            turn[topic] = k + 1
            qid = k % count
        p = props[i]
        msg = Message(
            topic, body, qid, tags=tags[i], keys=keys[i] or None, properties=dict(p) if p else None
        )
        groups.setdefault((topic, qid), []).append(msg)
        report.body_bytes += len(body)
    limit = max(1, (s.commit_log_file_size or 1 << 30) // 4)
    for msgs in groups.values():
        chunk: list[Message] = []
        size = 0
        for m in msgs:
            if "DELAY" in m.properties:  # the store takes delayed messages one at a time
                _put(store, [m], report)
                continue
            est = len(m.body) + 200
            if chunk and (len(chunk) >= _BATCH_MESSAGES or size + est > limit):
                _put(store, chunk, report)
                chunk, size = [], 0
            chunk.append(m)
            size += est
        if chunk:
            _put(store, chunk, report)


def _put(store: MessageStore, msgs: list[Message], report: WriteReport) -> None:
    r = store.put_messages(msgs) if len(msgs) > 1 else store.put_message(msgs[0])
    if not r.ok:
        raise RuntimeError(
            f"the store refused {len(msgs)} message(s) for {msgs[0].topic}/{msgs[0].queue_id}: "
            f"{r.status.name} {r.error or ''}".strip()
        )
    report.rows += len(msgs)
    report.queues[f"{msgs[0].topic}/{msgs[0].queue_id}"] = r.queue_offset + len(msgs)


def _summary(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    rows = sum(m.rows for m in messages if isinstance(m, WriteReport))
    failed = sum(1 for m in messages if m is None)
    return rows, failed


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketstore").option("path", DIR).mode("append").save()``."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise SourceOptionError(
                "rocketstore topics are append-only: use mode('append'), not overwrite"
            )
        self.settings = _settings(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return write_batches(self.settings, iterator)

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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return write_batches(self.settings, iterator)

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
