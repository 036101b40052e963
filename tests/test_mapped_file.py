"""MappedFile: positions, flush/commit thresholds, buffers, reference counting, counters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocketstore import CorruptFileError, ManualClock
from rocketstore.store.log._mapped_file import (
    OS_PAGE_SIZE,
    MappedFile,
    file_name_for,
    mapped_counters,
)
from rocketstore.store.log._transient_pool import TransientStorePool

SIZE = 64 * 1024


def new_file(tmp_path: Path, offset: int = 0, size: int = SIZE, **kw: object) -> MappedFile:
    return MappedFile(tmp_path / file_name_for(offset), size, **kw)  # type: ignore[arg-type]


def test_create_names_and_sizes(tmp_path: Path) -> None:
    mf = new_file(tmp_path, 3 * SIZE)
    try:
        assert mf.file_name == "00000000000000196608"
        assert mf.from_offset == 3 * SIZE
        assert os.path.getsize(mf.path) == SIZE
        assert mf.created
        assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (0, 0, 0)
        assert mf.ref_count == 1 and mf.available
    finally:
        mf.close()


def test_counters_follow_mapping_and_unmapping(tmp_path: Path) -> None:
    files0, bytes0 = mapped_counters()
    a = new_file(tmp_path, 0)
    b = new_file(tmp_path, SIZE)
    assert mapped_counters() == (files0 + 2, bytes0 + 2 * SIZE)
    a.close()
    assert mapped_counters() == (files0 + 1, bytes0 + SIZE)
    a.close()  # a second close counts nothing
    assert mapped_counters() == (files0 + 1, bytes0 + SIZE)
    assert b.destroy()
    assert mapped_counters() == (files0, bytes0)


def test_wrong_size_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / file_name_for(0)
    path.write_bytes(b"\x00" * (SIZE - 1))
    files0 = mapped_counters()
    with pytest.raises(CorruptFileError, match="size"):
        MappedFile(path, SIZE, create=False)
    with pytest.raises(CorruptFileError, match="size"):
        MappedFile(path, SIZE)
    assert mapped_counters() == files0
    assert os.path.getsize(path) == SIZE - 1  # left as it was


def test_bad_name_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CorruptFileError):
        MappedFile(tmp_path / "commitlog.dat", SIZE)
    with pytest.raises(CorruptFileError):
        MappedFile(tmp_path / file_name_for(0), SIZE, create=False)
    with pytest.raises(CorruptFileError):
        MappedFile(tmp_path / file_name_for(0), SIZE, read_only=True)
    assert not (tmp_path / file_name_for(0)).exists()


def test_reopen_keeps_data(tmp_path: Path) -> None:
    mf = new_file(tmp_path)
    assert mf.append(b"abc")
    mf.flush(0)
    mf.close()
    again = MappedFile(mf.path, SIZE, create=False)
    try:
        assert not again.created
        assert bytes(again.mm[:3]) == b"abc"
    finally:
        again.close()


def test_append_positions_and_overflow(tmp_path: Path) -> None:
    mf = new_file(tmp_path)
    try:
        assert mf.append(b"0123456789", 2, 5)
        assert mf.wrote_position == 5
        assert bytes(mf.mm[:5]) == b"23456"
        assert mf.read_position == 5
        assert not mf.append(b"x" * (SIZE - 4))
        assert mf.wrote_position == 5
        assert mf.append(b"y" * (SIZE - 5))
        assert mf.is_full()
        assert not mf.append(b"z")
    finally:
        mf.close()


def test_flush_waits_for_least_pages(tmp_path: Path) -> None:
    mf = new_file(tmp_path)
    try:
        mf.append(b"a" * (3 * OS_PAGE_SIZE + 100))
        assert mf.flush(4) == 0  # 3 pages dirty: not enough
        assert mf.flushed_position == 0
        mf.append(b"b" * OS_PAGE_SIZE)
        end = mf.wrote_position
        assert mf.flush(4) == end
        mf.append(b"c" * 10)
        assert mf.flush(1) == end  # not a whole page more
        assert mf.flush(0) == end + 10  # 0: anything
        assert mf.flush(0) == end + 10  # nothing new: unchanged
    finally:
        mf.close()


def test_flush_syncs_exactly_the_new_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush makes [flushed, readable) durable with msync of those pages only (from the
    page holding the flushed position); a failing msync is an error and moves nothing."""
    import ctypes

    from rocketstore import StoreIOError
    from rocketstore.store.log import _mapped_file as module

    real = module.msync_function()
    if real is None:
        pytest.skip("no msync here")
    calls: list[tuple[int, int]] = []
    fail = {"on": False}

    def recording(addr: int, length: int, flags: int) -> int:
        calls.append((addr, length))
        if fail["on"]:
            ctypes.set_errno(5)
            return -1
        return real(addr, length, flags)  # type: ignore[misc]

    monkeypatch.setattr(module, "msync_function", lambda: recording)
    mf = new_file(tmp_path)
    try:
        mf.append(b"a" * (OS_PAGE_SIZE + 100))
        assert mf.flush(0) == OS_PAGE_SIZE + 100
        base = calls[0][0]
        assert calls == [(base, OS_PAGE_SIZE + 100)]
        mf.append(b"b" * (2 * OS_PAGE_SIZE))
        end = mf.wrote_position
        assert mf.flush(0) == end
        assert calls[1] == (base + OS_PAGE_SIZE, end - OS_PAGE_SIZE)  # the partial page again
        assert base % OS_PAGE_SIZE == 0
        mf.append(b"c" * 10)
        fail["on"] = True
        with pytest.raises(StoreIOError):
            mf.flush(0)
        assert mf.flushed_position == end
        fail["on"] = False
        assert mf.flush(0) == end + 10
    finally:
        mf.close()
    with open(tmp_path / file_name_for(0), "rb") as f:
        assert (
            f.read(end + 10) == b"a" * (OS_PAGE_SIZE + 100) + b"b" * (2 * OS_PAGE_SIZE) + b"c" * 10
        )


def test_truncation_makes_its_zeroes_durable_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flushes sync only what they add, so zeroes written below the flushed position must be
    synced when they are written, or a crash could bring the cut data back."""
    synced: list[tuple[int, int]] = []
    original = MappedFile._sync

    def recording(self: MappedFile, start: int, end: int) -> None:
        synced.append((start, end))
        original(self, start, end)

    monkeypatch.setattr(MappedFile, "_sync", recording)
    mf = new_file(tmp_path)
    try:
        mf.append(b"a" * 3000)
        mf.flush(0)
        mf.truncate_to(1000)
        assert synced[-1] == (1000, SIZE)
        assert (mf.wrote_position, mf.flushed_position) == (1000, 1000)
    finally:
        mf.close()
    assert (tmp_path / file_name_for(0)).read_bytes()[:3000] == b"a" * 1000 + bytes(2000)


def test_flush_falls_back_to_fdatasync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rocketstore.store.log import _mapped_file as module

    synced: list[int] = []
    monkeypatch.setattr(module, "msync_function", lambda: None)
    monkeypatch.setattr(module.os, "fdatasync", synced.append)
    mf = new_file(tmp_path)
    try:
        mf.append(b"a" * 100)
        assert mf.flush(0) == 100
        assert len(synced) == 1
    finally:
        mf.close()


def test_full_file_flushes_regardless_of_least_pages(tmp_path: Path) -> None:
    mf = new_file(tmp_path)
    try:
        mf.append(b"a" * (SIZE - 10))
        mf.flush(0)
        mf.append(b"b" * 10)
        assert mf.is_full()
        assert mf.flush(1000) == SIZE
    finally:
        mf.close()


def test_select_mapped_buffer_bounds(tmp_path: Path) -> None:
    mf = new_file(tmp_path, 2 * SIZE)
    try:
        mf.append(bytes(range(100)))
        for pos, size in [(-1, None), (101, None), (0, 101), (50, 51), (10, -1), (-1, 5)]:
            assert mf.select_mapped_buffer(pos, size) is None, (pos, size)
        assert mf.ref_count == 1
        with mf.select_mapped_buffer(10) as r:  # type: ignore[union-attr]
            assert r.start_offset == 2 * SIZE + 10
            assert r.size == 90
            assert bytes(r.buffer) == bytes(range(10, 100))
            assert mf.ref_count == 2
        assert mf.ref_count == 1
        r2 = mf.select_mapped_buffer(95, 5)
        assert r2 is not None
        assert bytes(r2.buffer) == bytes(range(95, 100))
        r2.release()
        r2.release()  # idempotent
        assert mf.ref_count == 1
    finally:
        mf.close()


def test_held_file_is_not_unmapped_until_released(tmp_path: Path) -> None:
    clock = ManualClock()
    files0 = mapped_counters()
    mf = new_file(tmp_path, clock=clock)
    mf.append(b"data")
    view = mf.select_mapped_buffer(0)
    assert view is not None
    mf.shutdown(1000)
    assert not mf.available
    assert not mf.hold()  # no new readers
    assert mf.select_mapped_buffer(0) is None
    assert not mf.cleanup_over
    assert bytes(view.buffer) == b"data"  # still mapped for the reader
    view.release()
    assert mf.cleanup_over
    assert mapped_counters() == files0
    assert mf.path.exists()  # shutdown does not delete


def test_forced_unmap_after_interval(tmp_path: Path) -> None:
    clock = ManualClock()
    files0 = mapped_counters()
    mf = new_file(tmp_path, clock=clock)
    mf.append(b"data")
    assert mf.hold()  # a reader that never comes back
    mf.shutdown(1000)
    assert not mf.cleanup_over
    clock.advance(0.5)
    mf.shutdown(1000)
    assert not mf.cleanup_over  # interval not over yet
    clock.advance(0.6)
    mf.shutdown(1000)
    assert mf.cleanup_over
    assert mapped_counters() == files0
    mf.release()  # the late reader: no harm, no double count
    assert mapped_counters() == files0


def test_destroy_waits_for_readers_then_deletes(tmp_path: Path) -> None:
    clock = ManualClock()
    mf = new_file(tmp_path, clock=clock)
    mf.append(b"x")
    r = mf.select_mapped_buffer(0)
    assert r is not None
    assert mf.destroy(60_000) is False
    assert mf.path.exists()
    r.release()
    assert mf.destroy(60_000) is True
    assert not mf.path.exists()


def test_destroy_forced_after_interval(tmp_path: Path) -> None:
    clock = ManualClock()
    mf = new_file(tmp_path, clock=clock)
    assert mf.hold()
    assert mf.destroy(1000) is False
    clock.advance(1.0)
    assert mf.destroy(1000) is True
    assert not mf.path.exists()


def test_destroy_of_a_file_already_deleted(tmp_path: Path) -> None:
    # e.g. a pre-allocated commit-log file removed before the allocator's stop deletes it
    mf = new_file(tmp_path)
    mf.path.unlink()
    assert mf.destroy() is True
    assert not mf.path.exists()


def test_warm_touches_pages_and_keeps_positions(tmp_path: Path) -> None:
    mf = new_file(tmp_path)
    try:
        mf.warm(lock_memory=True)
        assert mf.wrote_position == 0
        assert bytes(mf.mm[:]) == bytes(SIZE)
        assert os.path.getsize(mf.path) == SIZE
        assert mf.append(b"after warm")
        assert bytes(mf.mm[:10]) == b"after warm"
    finally:
        mf.close()


def test_truncate_to_zeroes_the_tail(tmp_path: Path) -> None:
    mf = new_file(tmp_path)
    try:
        mf.append(b"k" * 1000)
        mf.truncate_to(300)
        assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (300, 300, 300)
        assert bytes(mf.mm[:300]) == b"k" * 300
        assert bytes(mf.mm[300:1000]) == bytes(700)
    finally:
        mf.close()


def test_write_buffer_commit_and_read_position(tmp_path: Path) -> None:
    pool = TransientStorePool(2, SIZE, lock_memory=False)
    pool.init()
    mf = new_file(tmp_path, pool=pool)
    try:
        assert pool.available_count() == 1
        mf.append(b"p" * (2 * OS_PAGE_SIZE))
        assert mf.read_position == 0  # readers see committed data only
        assert mf.select_mapped_buffer(0, 1) is None
        assert bytes(mf.mm[:4]) == bytes(4)  # not in the file yet
        assert mf.commit(4) == 0  # fewer than 4 pages waiting
        assert mf.flush(0) == 0  # nothing committed, nothing to flush
        assert mf.commit(0) == 2 * OS_PAGE_SIZE
        assert bytes(mf.mm[: 2 * OS_PAGE_SIZE]) == b"p" * (2 * OS_PAGE_SIZE)
        assert mf.read_position == 2 * OS_PAGE_SIZE
        assert mf.flush(0) == 2 * OS_PAGE_SIZE
        mf.append(b"q" * (SIZE - mf.wrote_position))
        assert mf.commit(1000) == SIZE  # a full file commits regardless
        assert mf.write_buffer is None  # buffer back in the pool
        assert pool.available_count() == 2
        assert mf.read_position == SIZE
    finally:
        mf.close()
        pool.destroy()


def test_closing_a_file_returns_its_write_buffer(tmp_path: Path) -> None:
    pool = TransientStorePool(1, SIZE, lock_memory=False)
    pool.init()
    mf = new_file(tmp_path, pool=pool)
    assert pool.available_count() == 0
    mf.close()
    assert pool.available_count() == 1
    pool.destroy()
