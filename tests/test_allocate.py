"""AllocateMappedFileService: files made ahead, de-duplicated, timeouts, clean-up at stop."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore import PutMessageStatus
from rocketstore.store.log._allocate import AllocateMappedFileService
from rocketstore.store.log._mapped_file import MappedFile, file_name_for
from rocketstore.store.log._mapped_file_queue import MappedFileQueue
from support.waits import wait_until

SIZE = 64 * 1024  # the commit-log file size of the conftest stores


@pytest.fixture
def allocator() -> Iterator[AllocateMappedFileService]:
    svc = AllocateMappedFileService(wait_timeout=5.0)
    svc.start()
    yield svc
    svc.stop()


def p(d: Path, i: int) -> Path:
    return d / file_name_for(i * SIZE)


def test_next_and_next_next_made_ahead(
    tmp_path: Path, allocator: AllocateMappedFileService
) -> None:
    made: list[Path] = []
    real_make = allocator._make

    def spy(path: Path, size: int) -> MappedFile:
        made.append(path)
        return real_make(path, size)

    allocator._make = spy  # type: ignore[method-assign]
    mf0 = allocator.request(p(tmp_path, 0), p(tmp_path, 1), SIZE)
    assert mf0 is not None and mf0.path == p(tmp_path, 0)
    assert wait_until(lambda: p(tmp_path, 1).exists())  # made in the background
    assert wait_until(lambda: len(made) == 2)
    mf1 = allocator.request(p(tmp_path, 1), p(tmp_path, 2), SIZE)
    assert mf1 is not None and mf1.path == p(tmp_path, 1)
    assert made[:2] == [p(tmp_path, 0), p(tmp_path, 1)]  # file 1 existed before it was asked for
    assert wait_until(lambda: p(tmp_path, 2).exists())
    mf0.close()
    mf1.close()


def test_requests_are_deduplicated(tmp_path: Path, allocator: AllocateMappedFileService) -> None:
    gate = threading.Event()
    made: list[Path] = []
    real_make = allocator._make

    def slow(path: Path, size: int) -> MappedFile:
        made.append(path)
        gate.wait(5)
        return real_make(path, size)

    allocator._make = slow  # type: ignore[method-assign]
    results: list[MappedFile | None] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(allocator.request(p(tmp_path, 0), p(tmp_path, 1), SIZE))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    time.sleep(0.05)
    gate.set()
    for t in threads:
        t.join(60)
    assert len(results) == 3 and all(r is results[0] for r in results) and results[0] is not None
    assert wait_until(lambda: len(made) == 2)
    time.sleep(0.05)
    assert sorted(made) == [p(tmp_path, 0), p(tmp_path, 1)]  # each path made once
    assert allocator.created == 2
    results[0].close()


def test_priority_largest_then_lowest_offset(tmp_path: Path) -> None:
    svc = AllocateMappedFileService()  # not started: inspect the queue order only
    with svc._lock:
        svc._submit(tmp_path / file_name_for(3 * SIZE), SIZE)
        svc._submit(tmp_path / file_name_for(1 * SIZE), SIZE)
        svc._submit(tmp_path / file_name_for(2 * SIZE), 2 * SIZE)
        svc._submit(tmp_path / file_name_for(1 * SIZE), SIZE)  # duplicate
        order = [heapq.heappop(svc._heap).path.name for _ in range(len(svc._heap))]
    assert order == [file_name_for(2 * SIZE), file_name_for(SIZE), file_name_for(3 * SIZE)]


def test_timeout_returns_none_then_recovers(tmp_path: Path) -> None:
    svc = AllocateMappedFileService(wait_timeout=0.05)
    gate = threading.Event()
    real_make = svc._make

    def blocked(path: Path, size: int) -> MappedFile:
        gate.wait(5)
        return real_make(path, size)

    svc._make = blocked  # type: ignore[method-assign]
    svc.start()
    try:
        assert svc.request(p(tmp_path, 0), p(tmp_path, 1), SIZE) is None
        gate.set()
        svc.wait_timeout = 5.0
        mf = svc.request(p(tmp_path, 0), p(tmp_path, 1), SIZE)
        assert mf is not None and mf.path == p(tmp_path, 0)
        mf.close()
    finally:
        svc.stop()


def test_creation_error_returns_none(tmp_path: Path, allocator: AllocateMappedFileService) -> None:
    blocker = tmp_path / "file-not-dir"
    blocker.write_bytes(b"")
    assert (
        allocator.request(blocker / file_name_for(0), blocker / file_name_for(SIZE), SIZE) is None
    )


def test_preallocated_files_deleted_at_stop(tmp_path: Path) -> None:
    svc = AllocateMappedFileService()
    svc.start()
    mf0 = svc.request(p(tmp_path, 0), p(tmp_path, 1), SIZE)
    assert mf0 is not None
    assert wait_until(lambda: svc.created == 2)
    assert p(tmp_path, 1).exists()
    svc.stop()
    assert not p(tmp_path, 1).exists()  # made ahead, never handed out
    assert p(tmp_path, 0).exists()  # handed out: the caller's
    mf0.close()


def test_not_running_creates_in_the_caller(tmp_path: Path) -> None:
    svc = AllocateMappedFileService()
    mf = svc.request(p(tmp_path, 0), p(tmp_path, 1), SIZE)
    assert mf is not None and mf.path.exists()
    assert not p(tmp_path, 1).exists()
    mf.close()


def test_queue_uses_the_allocator(tmp_path: Path, allocator: AllocateMappedFileService) -> None:
    q = MappedFileQueue(tmp_path / "log", SIZE, allocator=allocator)
    try:
        first = q.get_last_mapped_file(0)
        assert first is not None
        assert wait_until(lambda: p(tmp_path / "log", 1).exists())
        first.append(bytes(SIZE))
        second = q.get_last_mapped_file(0)
        assert second is not None and second.from_offset == SIZE
    finally:
        q.shutdown(0)


def test_store_reports_create_mapped_file_failed_and_keeps_working(open_store) -> None:  # type: ignore[no-untyped-def]
    from rocketstore import Message

    store = open_store()
    alloc = store.allocator
    assert alloc is not None
    # fill the first file, then make the allocator hang
    body = b"b" * 1000
    count = 0
    while store.max_phy_offset < SIZE - 3000:
        assert store.put_message(Message("T", body)).ok
        count += 1
    before = store.max_phy_offset
    gate = threading.Event()
    real_make = alloc._make

    def blocked(path: Path, size: int) -> MappedFile:
        gate.wait(10)
        return real_make(path, size)

    # forget the file made ahead so the roll must wait for a fresh one
    alloc.stop()
    alloc._make = blocked  # type: ignore[method-assign]
    alloc.wait_timeout = 0.1
    alloc.start()
    big = b"x" * 4000
    r = store.put_message(Message("T", big))
    assert r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert not r.ok and r.wrote_offset == -1
    assert store.commit_log.topic_queue_table[("T", 0)] == count  # no queue offset used
    assert store.look_message_by_offset(before) is None  # nothing readable written
    gate.set()
    alloc.wait_timeout = 5.0
    r2 = store.put_message(Message("T", big))
    assert r2.status is PutMessageStatus.PUT_OK
    assert r2.wrote_offset == SIZE  # in the next file, after the BLANK
    assert r2.queue_offset == count
    m = store.look_message_by_offset(r2.wrote_offset)
    assert m is not None and m.body == big
