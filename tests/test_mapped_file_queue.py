"""MappedFileQueue: creation, lookups (first files gone), load, flush/commit, truncate, delete."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import CorruptFileError, ManualClock
from rocketstore.store.log._mapped_file import OS_PAGE_SIZE, MappedFile, file_name_for
from rocketstore.store.log._mapped_file_queue import DELETE_FILES_BATCH_MAX, MappedFileQueue

SIZE = 64 * 1024


def fill(q: MappedFileQueue, nfiles: int, last_wrote: int = 100, start: int = 0) -> None:
    """Create ``nfiles`` files from ``start``; all full but the last (``last_wrote`` bytes)."""
    for i in range(nfiles):
        mf = q.get_last_mapped_file(start)
        assert mf is not None
        n = q.file_size if i < nfiles - 1 else last_wrote
        assert mf.append(bytes([i % 251 + 1]) * n)


@pytest.fixture
def queue(tmp_path: Path):  # type: ignore[no-untyped-def]
    q = MappedFileQueue(tmp_path / "log", SIZE)
    yield q
    q.shutdown(0)


def test_get_last_mapped_file_creates_and_rolls(queue: MappedFileQueue) -> None:
    assert queue.get_last_mapped_file(0, need_create=False) is None
    first = queue.get_last_mapped_file(3 * SIZE + 17)
    assert first is not None
    assert first.from_offset == 3 * SIZE  # rounded down to the file size
    assert first.first_create_in_queue
    assert queue.get_last_mapped_file(0) is first  # not full: the same file
    first.append(b"x" * SIZE)
    second = queue.get_last_mapped_file(0)
    assert second is not None and second is not first
    assert second.from_offset == 4 * SIZE
    assert not second.first_create_in_queue
    assert sorted(os.listdir(queue.store_path)) == [
        file_name_for(3 * SIZE),
        file_name_for(4 * SIZE),
    ]
    assert queue.get_min_offset() == 3 * SIZE
    assert queue.get_max_offset() == 4 * SIZE
    assert queue.total_file_size() == 2 * SIZE


def test_min_max_offsets(queue: MappedFileQueue) -> None:
    assert queue.get_min_offset() == -1
    assert queue.get_max_offset() == 0
    fill(queue, 3, last_wrote=123)
    assert queue.get_min_offset() == 0
    assert queue.get_max_offset() == 2 * SIZE + 123
    assert queue.get_max_wrote_position() == 2 * SIZE + 123


def test_find_by_offset_after_first_files_deleted(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=int(time.time() * 1000))
    q = MappedFileQueue(tmp_path / "log", SIZE, clock=clock)
    try:
        fill(q, 6, last_wrote=50)
        gone = q.delete_expired_files_by_time(0, 0, 0, clean_immediately=True)
        assert gone == 5  # never the last file
        # put 2 files back in front of the last by creating a new queue over older names
        assert q.get_min_offset() == 5 * SIZE
        assert q.find_mapped_file_by_offset(5 * SIZE + 10) is q.last_file()
        assert q.find_mapped_file_by_offset(4 * SIZE) is None
        assert (
            q.find_mapped_file_by_offset(4 * SIZE, return_first_on_not_found=True) is q.first_file()
        )
        assert q.find_mapped_file_by_offset(6 * SIZE) is None
    finally:
        q.shutdown(0)


def test_load_starting_at_a_later_file(tmp_path: Path) -> None:
    d = tmp_path / "log"
    q = MappedFileQueue(d, SIZE)
    fill(q, 5)
    q.shutdown(0)
    for i in range(2):
        os.unlink(d / file_name_for(i * SIZE))
    (d / "00000000000000000000.tmp").write_bytes(b"junk")  # left-overs are skipped
    q2 = MappedFileQueue(d, SIZE)
    try:
        q2.load()
        assert [mf.from_offset for mf in q2.files] == [2 * SIZE, 3 * SIZE, 4 * SIZE]
        for off in (2 * SIZE, 3 * SIZE + 5, 4 * SIZE - 1, 4 * SIZE + 99):
            mf = q2.find_mapped_file_by_offset(off)
            assert mf is not None and mf.from_offset <= off < mf.from_offset + SIZE
            assert mf.mm[off - mf.from_offset] == (mf.from_offset // SIZE) % 251 + 1
        assert all(mf.wrote_position == SIZE for mf in q2.files)
    finally:
        q2.shutdown(0)


def test_load_refuses_wrong_size(tmp_path: Path) -> None:
    d = tmp_path / "log"
    d.mkdir()
    (d / file_name_for(0)).write_bytes(bytes(SIZE))
    (d / file_name_for(SIZE)).write_bytes(bytes(SIZE // 2))
    q = MappedFileQueue(d, SIZE)
    with pytest.raises(CorruptFileError, match="size"):
        q.load()


@pytest.mark.parametrize(
    "names",
    [["notanumber"], [file_name_for(0), file_name_for(2 * SIZE)], [file_name_for(100)]],
)
def test_load_refuses_bad_names_and_gaps(tmp_path: Path, names: list[str]) -> None:
    d = tmp_path / "log"
    d.mkdir()
    for name in names:
        (d / name).write_bytes(bytes(SIZE))
    with pytest.raises(CorruptFileError):
        MappedFileQueue(d, SIZE).load()


def test_load_of_missing_directory_is_empty(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "nothing", SIZE)
    q.load()
    assert q.files == []


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(16, 4096),
    nfiles=st.integers(1, 5),
    first_index=st.integers(0, 10_000),
    last_wrote=st.integers(0, 4096),
    probes=st.lists(st.integers(-2, 8 * 4096), max_size=30),
)
def test_offset_arithmetic_property(
    size: int, nfiles: int, first_index: int, last_wrote: int, probes: list[int]
) -> None:
    last_wrote = min(last_wrote, size)
    start = first_index * size
    with tempfile.TemporaryDirectory() as d:
        q = MappedFileQueue(d, size)
        try:
            fill(q, nfiles, last_wrote=last_wrote, start=start + size // 2)
            assert [mf.from_offset for mf in q.files] == [start + i * size for i in range(nfiles)]
            assert q.get_min_offset() == start
            end = start + (nfiles - 1) * size + last_wrote
            assert q.get_max_offset() == end
            assert q.get_max_wrote_position() == end
            for rel in probes:
                off = start + rel
                mf = q.find_mapped_file_by_offset(off)
                if start <= off < start + nfiles * size:
                    assert mf is not None
                    assert mf.from_offset <= off < mf.from_offset + size
                    assert mf.from_offset == off - off % size
                else:
                    assert mf is None
                    assert q.find_mapped_file_by_offset(off, True) is q.files[0]
            # flushing everything reaches the end of the data, file by file
            q.set_flushed_where(start)
            assert q.flush_all(0) == end
        finally:
            q.shutdown(0)


def test_flush_across_files_and_least_pages(queue: MappedFileQueue) -> None:
    fill(queue, 3, last_wrote=OS_PAGE_SIZE + 1)
    assert queue.remaining_to_flush() == 2 * SIZE + OS_PAGE_SIZE + 1
    assert queue.flush(0) == SIZE  # one file per call
    assert queue.flush(0) == 2 * SIZE
    assert queue.flush(4) == 2 * SIZE  # one page dirty in the last file: not enough
    assert queue.flush(1) == 2 * SIZE + OS_PAGE_SIZE + 1
    assert queue.remaining_to_flush() == 0


def test_commit_across_files_with_pool(tmp_path: Path) -> None:
    from rocketstore.store.log._transient_pool import TransientStorePool

    pool = TransientStorePool(3, SIZE, lock_memory=False)
    pool.init()
    q = MappedFileQueue(tmp_path / "log", SIZE, pool=pool)
    try:
        fill(q, 2, last_wrote=10)
        # readable data ends where the last file's committed data ends (none yet)
        assert q.get_max_offset() == SIZE
        assert q.remaining_to_commit() == SIZE + 10
        assert q.commit_all() == SIZE + 10
        assert q.get_max_offset() == SIZE + 10
        assert pool.available_count() == 2  # the full file gave its buffer back
        assert q.flush_all() == SIZE + 10
    finally:
        q.shutdown(0)
        pool.destroy()


def test_truncate_dirty_files(queue: MappedFileQueue) -> None:
    fill(queue, 4, last_wrote=SIZE // 2)
    names = [mf.file_name for mf in queue.files]
    cut = SIZE + 1000
    removed = queue.truncate_dirty_files(cut)
    assert removed == names[2:]
    assert [mf.file_name for mf in queue.files] == names[:2]
    assert not (queue.store_path / names[2]).exists()
    assert not (queue.store_path / names[3]).exists()
    last = queue.files[-1]
    assert last.wrote_position == 1000
    assert bytes(last.mm[1000:2000]) == bytes(1000)
    assert last.mm[999] != 0
    assert queue.files[0].wrote_position == SIZE
    assert queue.get_max_offset() == cut
    # appending goes on right at the cut
    mf = queue.get_last_mapped_file(0)
    assert mf is last


def test_truncate_at_a_file_start_keeps_an_empty_file(queue: MappedFileQueue) -> None:
    fill(queue, 3)
    queue.truncate_dirty_files(SIZE)
    assert len(queue.files) == 2
    assert queue.files[-1].wrote_position == 0
    assert queue.get_max_offset() == SIZE


def age_files(q: MappedFileQueue, now_ms: int, ages_s: list[float]) -> None:
    for mf, age in zip(q.files, ages_s, strict=True):
        t = now_ms / 1000 - age
        os.utime(mf.path, (t, t))


def test_delete_expired_files_by_time_batch_limit_and_last_file(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=int(time.time() * 1000))
    q = MappedFileQueue(tmp_path / "log", SIZE, clock=clock)
    try:
        fill(q, 14)
        now = clock.now_ms()
        age_files(q, now, [10_000.0] * 14)
        sleeps: list[float] = []
        n = q.delete_expired_files_by_time(3_600_000, 100, 1000, False, sleep=sleeps.append)
        assert n == DELETE_FILES_BATCH_MAX == 10
        assert sleeps and all(s == 0.1 for s in sleeps)
        assert q.get_min_offset() == 10 * SIZE
        assert len(os.listdir(q.store_path)) == 4
        n = q.delete_expired_files_by_time(3_600_000, 0, 1000, False)
        assert n == 3  # never the last file
        assert len(q.files) == 1 and q.files[0].from_offset == 13 * SIZE
        assert q.delete_expired_files_by_time(0, 0, 0, True) == 0
        assert os.listdir(q.store_path) == [file_name_for(13 * SIZE)]
    finally:
        q.shutdown(0)


def test_delete_expired_stops_at_a_young_file(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=int(time.time() * 1000))
    q = MappedFileQueue(tmp_path / "log", SIZE, clock=clock)
    try:
        fill(q, 5)
        # old, old, young, old, last
        age_files(q, clock.now_ms(), [7200.0, 7200.0, 10.0, 7200.0, 7200.0])
        assert q.delete_expired_files_by_time(3_600_000, 0, 1000, False) == 2
        assert q.get_min_offset() == 2 * SIZE
        clock.advance(3600)  # now the young one is old too
        assert q.delete_expired_files_by_time(3_600_000, 0, 1000, False) == 2
        assert q.get_min_offset() == 4 * SIZE
        # clean_immediately ignores age but keeps the last file
        assert q.delete_expired_files_by_time(10**12, 0, 1000, True) == 0
    finally:
        q.shutdown(0)


def test_delete_expired_waits_for_a_held_file(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=int(time.time() * 1000))
    q = MappedFileQueue(tmp_path / "log", SIZE, clock=clock)
    try:
        fill(q, 3)
        held = q.files[0]
        view = held.select_mapped_buffer(0, 10)
        assert view is not None
        assert q.delete_expired_files_by_time(0, 0, 120_000, True) == 0
        assert held.path.exists() and q.files[0] is held
        assert q.retry_delete_first_file(120_000) is False
        clock.advance(121)  # past the forcible interval
        assert q.retry_delete_first_file(120_000) is True
        assert not held.path.exists()
        assert q.get_min_offset() == SIZE
        view.release()
    finally:
        q.shutdown(0)


def test_delete_expired_files_by_offset(queue: MappedFileQueue) -> None:
    fill(queue, 4)

    def last_phy(mf: MappedFile) -> int:
        return mf.from_offset * 10  # a stand-in for "the last unit's commit-log offset"

    assert queue.delete_expired_files_by_offset(10 * SIZE + 1, 20, last_phy) == 2
    assert queue.get_min_offset() == 2 * SIZE
    assert queue.delete_expired_files_by_offset(10**12, 20, last_phy) == 1  # never the last
    assert len(queue.files) == 1


def test_get_mapped_file_by_time(queue: MappedFileQueue) -> None:
    fill(queue, 3)
    now = int(time.time() * 1000)
    age_files(queue, now, [300.0, 200.0, 100.0])
    assert queue.get_mapped_file_by_time(now - 250_000) is queue.files[1]
    assert queue.get_mapped_file_by_time(now - 1_000_000) is queue.files[0]
    assert queue.get_mapped_file_by_time(now + 10_000) is queue.files[-1]


def test_destroy_removes_everything(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "log", SIZE)
    fill(q, 3)
    q.destroy()
    assert q.files == []
    assert not (tmp_path / "log").exists()
