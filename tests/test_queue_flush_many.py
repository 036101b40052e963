"""A thorough flush of many queues at once (a burst of new queues: their files and
directories) makes them durable with one sync of their file system, not one fsync each (a
journal commit each: at 100,000 new queues the flush service ran past its 90 s stop and the
next start recovered abnormally). Every queue's flushed position then moves to what it held
before the sync, never further; a failed sync moves nothing and leaves every queue and
directory to flush again; without the call the queues are flushed one by one as before."""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store import _durable, _memory
from rocketstore.store._errors import StoreIOError
from rocketstore.store.log._mapped_file import MappedFile
from rocketstore.store.queue import _queue_checkpoint
from rocketstore.store.queue._consume_queue import UNIT_SIZE, ConsumeQueueTable
from support.waits import wait_dispatched

FILE = 1000 * UNIT_SIZE
MANY = _durable.MANY_AT_ONCE * 2


class FileSystemSyncs:
    """Stands in for libc's syncfs: counts the calls, runs ``during`` (a write racing the
    sync) before the real one, or fails with ``fail`` as errno."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = 0
        self.during: Callable[[], None] | None = None
        self.real = _memory.syncfs_function.__wrapped__()

    def __call__(self, fd: int) -> int:
        self.calls += 1
        if self.during is not None:
            self.during()
        if self.fail:
            ctypes.set_errno(self.fail)
            return -1
        return self.real(fd) if self.real is not None else 0


@pytest.fixture
def syncfs(monkeypatch: pytest.MonkeyPatch) -> FileSystemSyncs:
    fake = FileSystemSyncs()
    monkeypatch.setattr(_memory, "syncfs_function", lambda: fake)
    return fake


@pytest.fixture
def one_by_one(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every file or directory synced alone (a file's msync or fdatasync, a directory's
    fsync): the plain Python classes and helpers, also under the compiled core."""
    calls: list[str] = []
    real_sync, real_dir = MappedFile._sync, _durable.fsync_dir

    def sync(self: MappedFile, start: int, end: int) -> None:
        calls.append(str(self.path))
        real_sync(self, start, end)

    def sync_dir(directory: str) -> None:
        calls.append(str(directory))
        real_dir(directory)

    monkeypatch.setattr(MappedFile, "_sync", sync)
    monkeypatch.setattr(_durable, "fsync_dir", sync_dir)
    return calls


@pytest.fixture
def table(tmp_path: Path) -> Iterator[ConsumeQueueTable]:
    t = ConsumeQueueTable(tmp_path / "consumequeue", FILE)
    t.root.mkdir()
    try:
        yield t
    finally:
        t.shutdown()


def queues(count: int) -> list[tuple[str, int]]:
    return [(f"T{i // 8}", i % 8) for i in range(count)]


def write(table: ConsumeQueueTable, topic: str, qid: int) -> None:
    cq = table.find_or_create(topic, qid)
    n = cq.max_offset
    assert cq.put_unit(1000 + n * 100, 100, 0, n)


def flushed_where(table: ConsumeQueueTable, topic: str, qid: int) -> int:
    cq = table.find(topic, qid)
    assert cq is not None
    return cq.queue.flushed_where


def test_many_new_queues_are_made_durable_with_one_sync(
    table: ConsumeQueueTable, syncfs: FileSystemSyncs, one_by_one: list[str]
) -> None:
    if syncfs.real is None:
        pytest.skip("this C library has no syncfs")
    for topic, qid in queues(MANY):
        write(table, topic, qid)
    assert table.dir_sync.pending
    assert table.flush(0) == MANY
    # the directories (one sync: many of them) and the units (one sync), nothing alone
    assert syncfs.calls == 2 and one_by_one == []
    assert not table.dir_sync.pending
    assert all(flushed_where(table, t, q) == UNIT_SIZE for t, q in queues(MANY))
    assert table.flush(0) == 0 and syncfs.calls == 2  # nothing left: nothing synced

    # a round with fewer queues than that flushes each alone, as before
    for topic, qid in queues(3):
        write(table, topic, qid)
    assert table.flush(0) == 3
    assert syncfs.calls == 2 and len(one_by_one) == 3
    assert all(flushed_where(table, t, q) == 2 * UNIT_SIZE for t, q in queues(3))


def test_a_unit_written_during_the_sync_is_flushed_by_the_next_round(
    table: ConsumeQueueTable, syncfs: FileSystemSyncs
) -> None:
    for topic, qid in queues(MANY):
        write(table, topic, qid)
    table.dir_sync.sync()
    syncfs.calls = 0
    syncfs.during = lambda: write(table, "T0", 0)  # dispatch goes on while the flush syncs
    assert table.flush(0) == MANY
    syncfs.during = None
    # flushed as far as it held before the sync, and marked again for the rest
    assert flushed_where(table, "T0", 0) == UNIT_SIZE
    cq = table.find("T0", 0)
    assert cq is not None and cq.flush_pending and cq.unflushed()
    assert table.flush(0) == 1
    assert flushed_where(table, "T0", 0) == 2 * UNIT_SIZE and not cq.unflushed()


def test_a_failed_sync_moves_nothing_and_leaves_everything_to_flush_again(
    table: ConsumeQueueTable, syncfs: FileSystemSyncs
) -> None:
    for topic, qid in queues(MANY):
        write(table, topic, qid)
    syncfs.fail = errno.EIO
    with pytest.raises(StoreIOError, match="Input/output error"):
        table.flush(0)
    assert table.dir_sync.pending  # the directories too
    assert all(flushed_where(table, t, q) == 0 for t, q in queues(MANY))
    assert len(table.written) == MANY
    syncfs.fail = 0
    assert table.flush(0) == MANY
    assert not table.dir_sync.pending
    assert all(flushed_where(table, t, q) == UNIT_SIZE for t, q in queues(MANY))


def test_without_the_call_each_queue_is_flushed_alone(
    table: ConsumeQueueTable, monkeypatch: pytest.MonkeyPatch, one_by_one: list[str]
) -> None:
    monkeypatch.setattr(_memory, "syncfs_function", lambda: None)
    for topic, qid in queues(MANY):
        write(table, topic, qid)
    assert table.flush(0) == MANY
    assert not table.dir_sync.pending
    assert all(flushed_where(table, t, q) == UNIT_SIZE for t, q in queues(MANY))
    files = [p for p in one_by_one if Path(p).is_file()]
    assert len(files) == MANY  # every queue's file synced alone


def test_a_directory_deleted_before_the_sync_is_passed_over(
    tmp_path: Path, syncfs: FileSystemSyncs
) -> None:
    made = _durable.DeferredDirSync()
    for i in range(MANY):
        made.make_dirs(tmp_path / f"t{i}" / "0")
    (tmp_path / "t0" / "0").rmdir()
    (tmp_path / "t0").rmdir()
    made.sync()
    assert not made.pending and syncfs.calls == 1


def test_a_store_stopped_after_many_new_queues_stops_clean(
    make_config: Callable[..., StoreConfig], syncfs: FileSystemSyncs, one_by_one: list[str]
) -> None:
    """The shutdown's last round flushes the burst's queues at once: the store records a
    clean stop and the per-queue checkpoint, and starts again without reading a queue file."""
    # the flush service's interval is an hour: its last round at the stop flushes the burst
    cfg = make_config(flush_interval_consume_queue=3_600_000)
    root = Path(cfg.store_path_root_dir)
    store = MessageStore(cfg)
    store.load()
    store.start()
    try:
        for topic, qid in queues(MANY):
            assert store.put_message(Message(topic, b"x", qid)).ok
        wait_dispatched(store)
        syncfs.calls = 0
        one_by_one.clear()
    finally:
        store.shutdown()
    assert not (root / "abort").exists()
    if syncfs.real is not None:
        assert syncfs.calls >= 1
        assert not [p for p in one_by_one if "consumequeue" in p and Path(p).is_file()]
    cp = _queue_checkpoint.read(root)
    assert cp is not None and cp.clean and len(cp.queues) == MANY
    again = MessageStore(cfg)
    again.load()
    again.start()
    try:
        result = again.load_result
        assert result is not None and result.mode == "clean" and result.queues_opened == 0
        assert all(again.get_max_offset_in_queue(t, q) == 1 for t, q in queues(MANY))
    finally:
        again.shutdown()
