"""Writing Arrow batches into a store directory: the store opened as its owner, a store thread
putting the batches (``_store_put``), a clean shutdown that flushes everything.

A write opens the store at ``path`` as its owner (an embedded MessageStore), appends its rows in
batches per (topic, queue), and shuts the store down cleanly. Writers of one job take turns: a
writer waits up to ``lock_timeout_ms`` for the store while another holds it. The settings are
read once, before any writer runs (``store_write_settings``): a store that a process owns
(a running broker) is refused there, naming its pid.

No pyspark: the Spark writers (``_path_writer``) and ``rocketstore import`` without Spark both
call ``write_batches``.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import MessageStore, StoreConfig
from ..store._errors import StoreLockedError
from ..store._lock import lock_owner
from ..store.read._reader import COMMIT_LOG_DIR, CONSUME_QUEUE_DIR, detect_file_size
from ._options import SourceOptionError, WriteOptions, write_path
from ._store_put import WriteReport, WriteSettings, put_batch
from ._write_common import task_index

log = logging.getLogger(__name__)

WRITE_COMMIT_INTERVAL_MS = 20
WRITE_FLUSH_INTERVAL_MS = 100


def store_write_settings(options: Mapping[str, str], columns: tuple[str, ...]) -> WriteSettings:
    """The settings of a write of ``columns`` into option path, read off the store's files
    (queue counts, file sizes); StoreLockedError when a process owns the store."""
    path = write_path(options)
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
                put_batch(self.store, self.settings, batch, turn, start, self.report)
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


def write_batches(
    s: WriteSettings,
    batches: Iterator[pa.RecordBatch],
    report_type: Callable[[], WriteReport] = WriteReport,
) -> WriteReport:
    """Put every row of ``batches`` into the store; the work of one write task. The task's
    thread takes batches from Spark, a store thread (``_StoreThread``) stores them."""
    report = report_type()
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
