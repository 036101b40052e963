"""Writing DataFrames into a store: batch and streaming Arrow writers.

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

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    StructType,
)

from .. import Message, MessageStore, StoreConfig
from ..store._errors import StoreLockedError
from ..store._lock import lock_owner
from ..store.log._batch_encode import EncodedBatch, encode_plain_batch, put_encoded
from ..store.log._message import PutMessageResult
from ..store.log._record import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    tags_code,
)
from ..store.read._reader import COMMIT_LOG_DIR, CONSUME_QUEUE_DIR, detect_file_size
from ._options import WRITE_BUFFERS, SourceOptionError, WriteOptions, write_path
from ._write_common import check_schema, task_index, without_system_properties

log = logging.getLogger(__name__)

WRITE_COMMIT_INTERVAL_MS = 20
WRITE_FLUSH_INTERVAL_MS = 100
_BATCH_MESSAGES = 1024
_ENCODED_ROWS = 16384  # rows a column-wise put takes at most


@dataclass
class WriteReport(WriterCommitMessage):
    """What one write task stored: rows, bytes and the last offset written per queue."""

    rows: int = 0
    body_bytes: int = 0
    queues: dict[str, int] = field(default_factory=dict)  # "topic/queue" → next offset
    # where the task's time went (seconds): waiting for input batches, putting them, and
    # closing the store (which waits for dispatch and the key index to catch up)
    input_s: float = 0.0
    put_s: float = 0.0
    close_s: float = 0.0


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
    write_buffers: int = WRITE_BUFFERS
    keep_system_properties: bool = False


def _settings(options: dict[str, str], schema: StructType) -> WriteSettings:
    path = write_path(options)
    columns = check_schema(schema)
    owner = lock_owner(path)
    if owner is not None:
        raise StoreLockedError(
            f"{path} is owned by process {owner}: stop it before writing into the store "
            "directly, or write through the broker (option namesrv or broker)"
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
    opts = WriteOptions.parse(options)
    cq_size = opts.consume_queue_file_size
    if cq_size is None and cq_dir.is_dir():
        for topic_dir in cq_dir.iterdir():
            for qdir in topic_dir.iterdir():
                cq_size = cq_size or detect_file_size(qdir)
    return WriteSettings(
        path=path,
        commit_log_file_size=opts.commit_log_file_size or detect_file_size(root / COMMIT_LOG_DIR),
        consume_queue_file_size=cq_size,
        queue_counts=counts,
        default_queues=opts.default_queues,
        lock_timeout_ms=opts.lock_timeout_ms,
        columns=columns,
        flush_disk_type=opts.flush_disk_type,
        write_buffers=opts.write_buffers,
        keep_system_properties=opts.keep_system_properties,
    )


def open_store(s: WriteSettings) -> MessageStore:
    """Own the store, waiting while another task of the job holds it."""
    changes: dict[str, Any] = {"store_path_root_dir": s.path, "flush_disk_type": s.flush_disk_type}
    if s.commit_log_file_size:
        changes["mapped_file_size_commit_log"] = s.commit_log_file_size
    if s.consume_queue_file_size:
        changes["mapped_file_size_consume_queue"] = s.consume_queue_file_size
    if s.write_buffers > 0:
        # RocketMQ's write buffers (TransientStorePool, ASYNC_FLUSH only): puts go into
        # anonymous memory, and the commit thread hands them to the file with pwrite, outside
        # the interpreter lock, so the file's page-cache work runs beside the put path. Short
        # commit and flush intervals keep the flush at shutdown small.
        changes.update(
            transient_store_pool_enable=True,
            transient_store_pool_size=s.write_buffers,
            mlock_write_buffers=False,
            commit_interval_commit_log=WRITE_COMMIT_INTERVAL_MS,
            flush_interval_commit_log=WRITE_FLUSH_INTERVAL_MS,
        )
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


class _StoreThread:
    """Puts batches into the store in a thread of its own, so that the task's thread goes
    back to Spark for the next batch at once: the JVM produces batch k + 1 while batch k is
    stored (it can only run ahead of its reader by a socket buffer). At most ``depth``
    batches wait. An error in the thread is raised in the task's thread by the next ``put``
    or by ``close``."""

    def __init__(
        self, store: MessageStore, s: WriteSettings, report: WriteReport, depth: int = 2
    ) -> None:
        self.start = task_index()  # Spark's task context belongs to the task's thread
        self.store = store
        self.settings = s
        self.report = report
        self.queue: queue.Queue[pa.RecordBatch | None] = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="rocketstore-write", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        """The store thread: puts each batch in arrival order."""
        turn: dict[str, int] = {}
        start = self.start
        clock = time.perf_counter
        while True:
            batch = self.queue.get()
            if batch is None:
                return
            if self.error is not None:
                continue  # drain: the task's thread raises the error
            began = clock()
            try:
                _put_batch(self.store, self.settings, batch, turn, start, self.report)
            except BaseException as exc:  # handed to the task's thread
                self.error = exc
            self.report.put_s += clock() - began

    def put(self, batch: pa.RecordBatch) -> None:
        """Task's thread: hand over a batch (waits while ``depth`` batches wait)."""
        if self.error is not None:
            raise self.error
        self.queue.put(batch)

    def close(self, *, check: bool = True) -> None:
        """Task's thread: wait until every batch handed over is stored; raise its error
        (unless ``check`` is false: another error is on its way)."""
        self.queue.put(None)
        self.thread.join()
        if check and self.error is not None:
            raise self.error


def write_batches(s: WriteSettings, batches: Iterator[pa.RecordBatch]) -> WriteReport:
    """Put every row of ``batches`` into the store; the work of one write task. The task's
    thread takes batches from Spark, a store thread (``_StoreThread``) stores them."""
    report = WriteReport()
    clock = time.perf_counter
    began = clock()
    first = next(batches, None)
    report.input_s = clock() - began
    if first is None:
        return report
    store = open_store(s)
    try:
        writer = _StoreThread(store, s, report)
        try:
            batch: pa.RecordBatch | None = first
            while batch is not None:
                writer.put(batch)
                began = clock()
                batch = next(batches, None)
                report.input_s += clock() - began
        except BaseException:
            writer.close(check=False)
            raise
        writer.close()
    finally:
        began = clock()
        store.shutdown()
        report.close_s = clock() - began
    log.debug(
        "write task: %d rows, %.2fs waiting for input, %.2fs putting, %.2fs closing",
        report.rows,
        report.input_s,
        report.put_s,
        report.close_s,
    )
    return report


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    idx = batch.schema.get_field_index(name)
    return batch.column(idx) if idx >= 0 else None


def _first_null(col: pa.Array) -> int:
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def _queue_ids(
    s: WriteSettings,
    topic_codes: np.ndarray,
    topics: list[str],
    qid_col: pa.Array | None,
    turn: dict[str, int],
    start: int,
) -> np.ndarray:
    """Each row's queue: its queue_id, else the next of its topic's queues in turn."""
    n = len(topic_codes)
    if qid_col is None:
        qids = np.zeros(n, dtype=np.int64)
        unset = np.ones(n, dtype=bool)
    else:
        unset = qid_col.is_null().to_numpy(zero_copy_only=False)
        qids = qid_col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if unset.any():
        for code, topic in enumerate(topics):
            rows = np.flatnonzero(unset & (topic_codes == code))
            if not len(rows):
                continue
            count = s.queue_counts.get(topic, s.default_queues)
            k = turn.get(topic, start)
            turn[topic] = k + len(rows)
            qids[rows] = (k + np.arange(len(rows), dtype=np.int64)) % count
    return qids


def _plain_properties(tags: pa.Array | None, keys: pa.Array | None, n: int) -> pa.Array:
    """The PROPERTIES field of rows without a properties map: TAGS then KEYS, as Message
    orders them (empty tags / keys are left out)."""
    parts = []
    for name, col in ((PROPERTY_TAGS, tags), (PROPERTY_KEYS, keys)):
        if col is not None:
            col = pc.if_else(pc.equal(pc.binary_length(col), 0), None, col)
            parts.append(pc.binary_join_element_wise(name + NAME_VALUE_SEPARATOR, col, ""))
    if not parts:
        return pa.array([b""] * n, pa.binary())
    # (not null_handling="skip": pyarrow drops rows where every part is null)
    both = pc.binary_join_element_wise(*parts, PROPERTY_SEPARATOR) if len(parts) == 2 else None
    joined = pc.coalesce(*([both] if both is not None else []), *parts, pa.scalar(""))
    return joined.cast(pa.binary())


def _has_separator(col: pa.Array | None) -> bool:
    if col is None:
        return False
    found = pc.or_(pc.match_substring(col, "\x01"), pc.match_substring(col, "\x02"))
    return bool(pc.any(found).as_py())


def _chunks(est: np.ndarray, limit: int, most: int = _BATCH_MESSAGES) -> list[tuple[int, int]]:
    """Where the batch puts of a run of rows start and end: up to ``most`` rows, and rows are
    added while the estimated size so far is under ``limit``."""
    total = np.zeros(len(est) + 1, dtype=np.int64)
    np.cumsum(est, out=total[1:])
    out = []
    lo = 0
    while lo < len(est):
        hi = int(np.searchsorted(total, total[lo] + limit, side="left"))
        hi = max(lo + 1, min(hi, lo + most, len(est)))
        out.append((lo, hi))
        lo = hi
    return out


class _ObjectColumns:
    """The Python values of a batch's bodies, properties, tags and keys, taken by row numbers
    (contiguous ones as slices); each column converted from Arrow on first use."""

    def __init__(self, *columns: pa.Array | None) -> None:
        self.columns = columns
        self.lists: list[list[Any] | None] = [None] * len(columns)
        self.arrays: list[np.ndarray | None] = [None] * len(columns)

    def _list(self, k: int) -> list[Any]:
        values = self.lists[k]
        if values is None:
            col = self.columns[k]
            values = col.to_pylist() if col is not None else [None] * self.n
            self.lists[k] = values
        return values

    @property
    def n(self) -> int:
        return next(len(c) for c in self.columns if c is not None)

    def column(self, k: int, idx: np.ndarray) -> list[Any]:
        first = int(idx[0])
        if int(idx[-1]) - first + 1 == len(idx):  # input order (idx ascends within a group)
            return self._list(k)[first : first + len(idx)]
        a = self.arrays[k]
        if a is None:
            a = np.empty(self.n, dtype=object)
            a[:] = self._list(k)
            self.arrays[k] = a
        return a[idx].tolist()  # type: ignore[no-any-return]

    def rows(self, idx: np.ndarray) -> list[list[Any]]:
        return [self.column(k, idx) for k in range(len(self.columns))]


def _tag_codes(tags: pa.Array | None, n: int) -> np.ndarray:
    """Each row's consume-queue tags code (0 without tags), hashed once per distinct tag."""
    if tags is None:
        return np.zeros(n, dtype=np.int64)
    enc = pc.dictionary_encode(tags)
    names = enc.dictionary.to_pylist()
    codes = np.array([tags_code(t or None) for t in names] + [0], dtype=np.int64)
    picked: np.ndarray = codes[enc.indices.fill_null(len(names)).to_numpy(zero_copy_only=False)]
    return picked


def _append(store: MessageStore, batch: EncodedBatch) -> PutMessageResult:
    """Store an encoded batch (the store's own entry point once it has one)."""
    put = getattr(store, "put_encoded_batch", None)
    if put is not None:
        return put(batch)  # type: ignore[no-any-return]
    return put_encoded(store.commit_log, batch)


def _put_batch(
    store: MessageStore,
    s: WriteSettings,
    batch: pa.RecordBatch,
    turn: dict[str, int],
    start: int,
    report: WriteReport,
) -> None:
    """Rows are grouped by (topic, queue) (input order kept within a group). Rows without a
    properties map are encoded column-wise (``encode_plain_batch``: heads for the whole run
    at once, records joined by one Arrow kernel) and appended one run at a time; rows with
    one go through Message objects and ``put_messages`` (DELAY ones one at a time)."""
    n = batch.num_rows
    if not n:
        return
    batch = without_system_properties(batch, s.keep_system_properties)
    topic_col = _column(batch, "topic")
    body_col = _column(batch, "body")
    assert topic_col is not None and body_col is not None
    for col in (topic_col, body_col):
        if col.null_count:
            raise SourceOptionError(
                f"row {_first_null(col)} of a write batch has a null topic or body"
            )
    if not pa.types.is_binary(body_col.type):
        body_col = body_col.cast(pa.binary())
    tags_col = _column(batch, "tags")
    keys_col = _column(batch, "keys")
    props_col = _column(batch, "properties")
    if keys_col is not None and pa.types.is_list(keys_col.type):
        if pc.list_flatten(keys_col).null_count:  # Message refuses null keys: keep its error
            _put_rows(store, s, batch, turn, start, report)
            return
        keys_col = pc.binary_join(keys_col, KEY_SEPARATOR)
    if _has_separator(tags_col) or _has_separator(keys_col):
        _put_rows(store, s, batch, turn, start, report)  # refused there, as before
        return
    enc = pc.dictionary_encode(topic_col)
    topics = enc.dictionary.to_pylist()
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    qids = _queue_ids(s, codes, topics, _column(batch, "queue_id"), turn, start)
    with_map = (
        ~props_col.is_null().to_numpy(zero_copy_only=False)
        if props_col is not None and props_col.null_count < n
        else np.zeros(n, dtype=bool)
    )
    plain_props = _plain_properties(tags_col, keys_col, n)
    host = store.commit_log.store_host
    encoded = len(host) == 8  # an IPv6 store host: put_plain_batch's general path
    tag_codes = _tag_codes(tags_col, n)
    # the size estimate of each row (body + 200) decides where a batch put ends
    est = pc.binary_length(body_col).to_numpy(zero_copy_only=False).astype(np.int64)
    report.body_bytes += int(est.sum())
    est += 200
    columns = _ObjectColumns(body_col, plain_props, tags_col, keys_col)
    group_key = codes * (1 << 32) + qids
    if len(topics) == 1 and (qids == qids[0]).all():  # one (topic, queue): input order
        order, bounds = np.arange(n), np.zeros(0, dtype=np.int64)
    else:
        order = np.argsort(group_key, kind="stable")
        bounds = np.flatnonzero(np.diff(group_key[order])) + 1
    limit = max(1, (s.commit_log_file_size or 1 << 30) // 4)
    for rows in np.split(order, bounds):
        topic = topics[int(codes[rows[0]])]
        qid = int(qids[rows[0]])
        flags = with_map[rows]
        # runs of rows with and without a properties map, in input order
        cuts = np.flatnonzero(np.diff(flags.astype(np.int8))) + 1
        for run in np.split(rows, cuts):
            if with_map[run[0]]:
                bodies, _props, tags, keys = columns.rows(run)
                props = props_col.take(pa.array(run)).to_pylist()  # type: ignore[union-attr]
                msgs = [
                    Message(
                        topic,
                        body,
                        qid,
                        tags=tag or None,
                        keys=key or None,
                        properties=dict(p) if p else None,
                    )
                    for body, tag, key, p in zip(bodies, tags, keys, props, strict=True)
                ]
                _put_messages(store, msgs, limit, report)
                continue
            if not encoded or not 0 < len(topic.encode()) <= 127:  # the store refuses it
                for lo, hi in _chunks(est[run], limit):
                    r = store.put_plain_batch(topic, qid, *columns.rows(run[lo:hi]))
                    _report(r, topic, qid, hi - lo, report)
                continue
            for lo, hi in _chunks(est[run], limit, _ENCODED_ROWS):
                part = run[lo:hi]
                row_keys = columns.column(3, part) if keys_col is not None else ()
                batch_ = encode_plain_batch(
                    topic,
                    qid,
                    body_col,
                    plain_props,
                    tag_codes[part].tolist(),
                    host,
                    rows=part,
                    keys=row_keys,
                )
                _report(_append(store, batch_), topic, qid, hi - lo, report)


def _put_rows(
    store: MessageStore,
    s: WriteSettings,
    batch: pa.RecordBatch,
    turn: dict[str, int],
    start: int,
    report: WriteReport,
) -> None:
    """The row-by-row path: every row becomes a Message (used when a batch has values the
    column-wise path does not take, so that the store refuses them as it always has)."""
    n = batch.num_rows

    def values(name: str) -> list[Any]:
        col = _column(batch, name)
        return col.to_pylist() if col is not None else [None] * n

    topics, bodies, tags, keys = values("topic"), values("body"), values("tags"), values("keys")
    props, qids = values("properties"), values("queue_id")
    groups: dict[tuple[str, int], list[Message]] = {}
    for i in range(n):
        topic = topics[i]
        body = bodies[i]
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
        _put_messages(store, msgs, limit, report)


def _put_messages(
    store: MessageStore, msgs: list[Message], limit: int, report: WriteReport
) -> None:
    """Messages of one (topic, queue) in batches; DELAY ones one at a time."""
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


def _report(r: PutMessageResult, topic: str, qid: int, count: int, report: WriteReport) -> None:
    if not r.ok:
        raise RuntimeError(
            f"the store refused {count} message(s) for {topic}/{qid}: "
            f"{r.status.name} {r.error or ''}".strip()
        )
    report.rows += count
    report.queues[f"{topic}/{qid}"] = r.queue_offset + count


def _put(store: MessageStore, msgs: list[Message], report: WriteReport) -> None:
    r = store.put_messages(msgs) if len(msgs) > 1 else store.put_message(msgs[0])
    _report(r, msgs[0].topic, msgs[0].queue_id, len(msgs), report)


def _summary(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    reports = [m for m in messages if isinstance(m, WriteReport)]
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
