"""A consume queue's new directories and files are made durable in their parents before the
first flush of its units, all together, not with an fsync of a directory each in the put path
(where the dispatcher makes queues): no directory fsync while queues are made; every directory
made, and each one a file was made in, synced at the next flush; a failed directory sync stops
the flush before any unit is flushed and leaves the directories to sync again."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store import _durable
from rocketstore.store.log import _mapped_file_queue
from rocketstore.store.queue._consume_queue import UNIT_SIZE, ConsumeQueueTable
from support.waits import wait_dispatched

FILE = 1000 * UNIT_SIZE


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every directory fsynced, in order (the deferred and the immediate helpers alike)."""
    calls: list[Path] = []
    real = _durable.fsync_dir

    def spy(directory: str | os.PathLike[str]) -> None:
        calls.append(Path(directory))
        real(directory)

    monkeypatch.setattr(_durable, "fsync_dir", spy)
    monkeypatch.setattr(_mapped_file_queue, "fsync_dir", spy)
    return calls


@pytest.fixture
def table(tmp_path: Path) -> Iterator[ConsumeQueueTable]:
    t = ConsumeQueueTable(tmp_path / "consumequeue", FILE)
    try:
        yield t
    finally:
        t.shutdown()


def test_new_queues_sync_their_directories_at_the_next_flush(
    table: ConsumeQueueTable, synced: list[Path]
) -> None:
    root = table.root
    root.mkdir()
    for topic in ("A", "B"):
        for qid in range(3):
            assert table.find_or_create(topic, qid).put_unit(1000 + qid, 100, 0, 0)
    assert synced == []  # nothing synced while the queues were made
    assert table.dir_sync.pending

    assert table.flush(0) == 6
    expected = {root, root / "A", root / "B"}
    expected |= {root / t / str(q) for t in ("A", "B") for q in range(3)}
    assert set(synced) == expected
    assert len(synced) == len(expected)  # each once
    # a parent before the directories made in it
    assert synced.index(root) < synced.index(root / "A") < synced.index(root / "A" / "0")
    assert not table.dir_sync.pending

    synced.clear()
    assert table.find_or_create("A", 0).put_unit(2000, 100, 0, 1)
    table.flush(0)
    assert synced == []  # a queue with its files already made syncs no directory


def test_a_failed_directory_sync_flushes_no_unit(
    table: ConsumeQueueTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    table.root.mkdir()
    cq = table.find_or_create("T", 0)
    assert cq.put_unit(1000, 100, 0, 0)

    def refuse(directory: str | os.PathLike[str]) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_durable, "fsync_dir", refuse)
    with pytest.raises(OSError):
        table.flush(0)
    assert cq.queue.flushed_where == 0  # no unit counted flushed
    assert table.dir_sync.pending  # still to sync

    monkeypatch.undo()
    assert table.flush(0) == 1
    assert cq.queue.flushed_where == UNIT_SIZE
    assert not table.dir_sync.pending


def test_a_store_makes_queues_without_a_directory_sync_each(
    tmp_path: Path, synced: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the store's put path (inline dispatch: the queues are made by the putting
    thread): 40 new queues and no directory synced on that thread; a flush of the consume
    queues has synced each queue's directory; every unit is there."""
    threads: list[int] = []  # the thread of each directory sync
    spy = _durable.fsync_dir

    def on_thread(directory: str | os.PathLike[str]) -> None:
        threads.append(threading.get_ident())
        spy(directory)

    monkeypatch.setattr(_durable, "fsync_dir", on_thread)
    monkeypatch.setattr(_mapped_file_queue, "fsync_dir", on_thread)
    config = StoreConfig(store_path_root_dir=str(tmp_path / "store"))
    store = MessageStore(config)
    store.load()
    store.start()
    try:
        assert store.reput.inline  # the premise: queues are made by the putting thread
        store.put_message(Message("Warm", b"x", queue_id=0))  # the store's own directories
        wait_dispatched(store)
        store.consume_queues.flush(0)
        synced.clear()
        threads.clear()
        for i in range(40):
            store.put_message(Message(f"T{i // 8}", b"x", queue_id=i % 8))
        wait_dispatched(store)
        assert threading.get_ident() not in threads
        store.consume_queues.flush(0)
        root = Path(config.store_path_root_dir) / "consumequeue"
        for i in range(40):
            assert root / f"T{i // 8}" / str(i % 8) in synced
        for i in range(40):
            cq = store.consume_queues.find(f"T{i // 8}", i % 8)
            assert cq is not None and cq.max_offset == 1
    finally:
        store.shutdown()
