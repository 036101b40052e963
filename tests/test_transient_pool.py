"""TransientStorePool and the write-buffer path of the store, end to end."""

from __future__ import annotations

import mmap
import time
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreError
from rocketstore.store.log._mapped_file import MappedFile, file_name_for, mapped_counters
from rocketstore.store.log._transient_pool import TransientStorePool

SIZE = 64 * 1024


def test_pool_lends_and_takes_back_buffers() -> None:
    pool = TransientStorePool(3, SIZE, lock_memory=True)
    pool.init()
    try:
        assert pool.available_count() == 3
        assert 0 <= pool.locked <= 3
        bufs = [pool.borrow_buffer() for _ in range(3)]
        assert all(isinstance(b, mmap.mmap) and len(b) == SIZE for b in bufs)
        assert len({id(b) for b in bufs}) == 3
        assert pool.available_count() == 0
        with pytest.raises(StoreError):
            pool.borrow_buffer()
        for b in bufs:
            pool.return_buffer(b)
        assert pool.available_count() == 3
    finally:
        pool.destroy()
    assert pool.available_count() == 0


def test_file_without_a_free_buffer_writes_to_the_mapping(tmp_path: Path) -> None:
    # RocketMQ's borrowBuffer hands out null when the pool is empty and the file is written
    # directly; a file must not fail to open (and must not leak its mapping) for want of one.
    pool = TransientStorePool(1, SIZE, lock_memory=False)
    pool.init()
    first = MappedFile(tmp_path / file_name_for(0), SIZE, pool=pool)
    counters = mapped_counters()
    second = MappedFile(tmp_path / file_name_for(SIZE), SIZE, pool=pool)
    try:
        assert first.write_buffer is not None
        assert second.write_buffer is None
        assert mapped_counters()[0] == counters[0] + 1
        assert second.append(b"direct")
        assert second.read_position == 6
        assert bytes(second.mm[:6]) == b"direct"
    finally:
        second.close()
        first.close()
        pool.destroy()


def pool_config(make_config, **kw):  # type: ignore[no-untyped-def]
    return make_config(
        transient_store_pool_enable=True,
        transient_store_pool_size=kw.pop("size", 3),
        mlock_write_buffers=False,
        commit_interval_commit_log=5,
        flush_interval_commit_log=5,
        commit_commit_log_least_pages=0,
        **kw,
    )


def wait_readable(store: MessageStore, end: int, timeout: float = 5.0) -> None:
    """Wait until the commit service has copied everything below ``end`` into the files."""
    queue = store.commit_log.queue
    deadline = time.monotonic() + timeout
    while queue.committed_where < end and time.monotonic() < deadline:
        time.sleep(0.005)
    assert queue.committed_where >= end
    assert store.max_phy_offset == end


@pytest.mark.parametrize("pool_size", [1, 2, 5])
def test_transient_pool_end_to_end(open_store, make_config, pool_size: int) -> None:  # type: ignore[no-untyped-def]
    cfg = pool_config(make_config, size=pool_size)
    store = open_store(cfg)
    assert store.pool is not None and store.commit_log.commit_service is not None
    results = []
    for i in range(300):  # about 6 files of 64 KiB
        r = store.put_message(Message("PoolTopic", f"body-{i}-".encode() * 20, i % 2, tags="t"))
        assert r.status is PutMessageStatus.PUT_OK, (i, r)
        results.append(r)
    last = results[-1]
    wait_readable(store, last.wrote_offset + last.wrote_bytes)
    for i, r in enumerate(results):
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None, i
        assert m.body == f"body-{i}-".encode() * 20
        assert m.queue_offset == i // 2
    store.shutdown()
    # reopen without the pool: everything was committed and flushed at shutdown
    plain = open_store(make_config())
    assert plain.max_phy_offset == last.wrote_offset + last.wrote_bytes
    for i, r in enumerate(results):
        m = plain.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == f"body-{i}-".encode() * 20


def test_pool_not_used_with_sync_flush(open_store, make_config) -> None:  # type: ignore[no-untyped-def]
    store = open_store(pool_config(make_config, flush_disk_type="SYNC_FLUSH"))
    assert store.pool is None
    assert store.put_message(Message("T", b"x")).status is PutMessageStatus.PUT_OK


def test_fast_fail_when_no_write_buffer_is_free(open_store, make_config) -> None:  # type: ignore[no-untyped-def]
    cfg = make_config(
        transient_store_pool_enable=True,
        transient_store_pool_size=1,
        mlock_write_buffers=False,
        fast_fail_if_no_buffer_in_store_pool=True,
        commit_interval_commit_log=60_000,
        commit_commit_log_thorough_interval=60_000,
        commit_commit_log_least_pages=10_000,
    )
    store = open_store(cfg)
    body = b"f" * 2000
    results = []
    for _ in range(2 * SIZE // len(body)):  # bounded: a regression must not loop forever
        r = store.put_message(Message("FF", body))
        if r.status is not PutMessageStatus.PUT_OK:
            break
        results.append(r)
    # the only buffer belongs to the first file until it is committed: no second file
    assert r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert results[-1].wrote_offset < SIZE
    assert not (Path(cfg.commit_log_dir) / file_name_for(SIZE)).exists()
    store.commit_log.queue.commit_all()  # the full first file gives its buffer back
    assert store.pool is not None and store.pool.available_count() == 1
    r = store.put_message(Message("FF", body))
    assert r.status is PutMessageStatus.PUT_OK
    assert r.wrote_offset == SIZE and r.queue_offset == len(results)
