"""Puts racing shutdown, fsync of new files' directories, OS page cache busy, the flusher's
timed and woken modes, flushes while warming a file."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from rocketstore.store import (
    Message,
    MessageStore,
    PutMessageStatus,
    StoreConfig,
)
from rocketstore.store._clock import ManualClock
from rocketstore.store.log import _allocate, _mapped_file_queue
from rocketstore.store.log._mapped_file import MappedFile, file_name_for
from rocketstore.store.queue import _index

OK = PutMessageStatus.PUT_OK
REFUSED = PutMessageStatus.SERVICE_NOT_AVAILABLE


def small(root: Path, **kw: object) -> StoreConfig:
    base: dict[str, object] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": 64 * 1024,
        "mapped_file_size_consume_queue": 600,
        "max_hash_slot_num": 64,
        "max_index_num": 256,
    }
    base.update(kw)
    return StoreConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_puts_racing_shutdown_are_ok_before_it_and_refused_after(
    tmp_path: Path, flush: str
) -> None:
    rng = random.Random(1234)
    for it in range(15):
        store = MessageStore(small(tmp_path / f"s{it}", flush_disk_type=flush))
        store.load()
        store.start()
        results: list[tuple[float, PutMessageStatus]] = []
        errors: list[BaseException] = []
        go = threading.Event()

        def hammer(
            store: MessageStore = store,
            go: threading.Event = go,
            results: list[tuple[float, PutMessageStatus]] = results,
            errors: list[BaseException] = errors,
        ) -> None:
            go.wait()
            try:
                for i in range(3000):
                    r = store.put_message(Message("Race", b"x" * rng.randint(1, 300), i % 2))
                    results.append((time.monotonic(), r.status))
                    if r.status is not OK:
                        break
            except BaseException as exc:  # a TypeError here is the defect
                errors.append(exc)

        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for t in threads:
            t.start()
        go.set()
        time.sleep(rng.uniform(0.0, 0.02))
        began = time.monotonic()
        store.shutdown()
        for t in threads:
            t.join(30)
        assert not errors, errors
        statuses = {s for _, s in results}
        assert statuses <= {OK, REFUSED}, statuses
        ended = time.monotonic()
        assert all(s is REFUSED for t, s in results if t > ended)
        assert all(s is OK for t, s in results if t < began)
        # after shutdown: refused, never an exception
        assert store.put_message(Message("Race", b"late")).status is REFUSED


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@pytest.mark.sources_only
def test_a_put_that_reaches_the_lock_after_shutdown_began_is_refused(
    tmp_path: Path, flush: str
) -> None:
    """The refusal is checked again under the put lock: a put that passed the first check
    before shutdown began and takes the lock after it appends nothing."""
    store = MessageStore(small(tmp_path / "s", flush_disk_type=flush))
    store.load()
    store.start()
    assert store.put_message(Message("Late", b"before", 0)).status is OK
    end_before = store.max_phy_offset
    cl = store.commit_log
    real_prepare = cl._prepare
    checked = threading.Event()

    def prepare_then_wait(msg: Message) -> object:
        p = real_prepare(msg)
        checked.set()  # past the first refusal check
        deadline = time.monotonic() + 10
        while cl.refusal() is None and time.monotonic() < deadline:
            time.sleep(0.001)  # until shutdown has begun
        return p

    cl._prepare = prepare_then_wait  # type: ignore[method-assign,assignment]
    out: list[object] = []

    def put() -> None:
        try:
            out.append(store.put_message(Message("Late", b"after", 0)).status)
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=put)
    t.start()
    assert checked.wait(10)
    store.shutdown()
    t.join(10)
    assert out == [REFUSED]
    with MessageStore(small(tmp_path / "s", flush_disk_type=flush)) as again:
        assert again.max_phy_offset == end_before  # nothing appended after shutdown began


def test_new_files_and_directories_are_fsynced_into_their_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    for mod in (_allocate, _index, _mapped_file_queue):
        real = mod.fsync_dir  # type: ignore[attr-defined]
        monkeypatch.setattr(
            mod, "fsync_dir", lambda d, real=real: (synced.append(Path(d)), real(d))[1]
        )
    import rocketstore.store._durable as durable

    real_durable = durable.fsync_dir
    monkeypatch.setattr(
        durable, "fsync_dir", lambda d: (synced.append(Path(d)), real_durable(d))[1]
    )
    root = tmp_path / "s"
    with MessageStore(small(root)) as store:
        assert store.put_message(Message("Dirs", b"x", 0, keys=["k"])).status is OK
        deadline = time.monotonic() + 10
        while store.dispatch_behind_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        if store.allocator is not None:
            store.allocator.wait_idle(10)
    assert root / "commitlog" in synced  # commit-log files (the first and the one ahead)
    assert root / "consumequeue" / "Dirs" / "0" in synced  # the consume-queue file
    assert root / "consumequeue" / "Dirs" in synced  # the new queue directory
    assert root / "consumequeue" in synced  # the new topic directory
    assert root / "index" in synced  # the index file


def test_put_lock_held_too_long_answers_os_page_cache_busy(tmp_path: Path) -> None:
    clock = ManualClock()
    cfg = small(tmp_path / "s", os_page_cache_busy_timeout_mills=1000)
    with MessageStore(cfg, clock=clock) as store:
        cl = store.commit_log
        entered, release = threading.Event(), threading.Event()
        real = cl.queue.get_last_mapped_file

        def slow(*a: object, **kw: object) -> MappedFile | None:
            entered.set()
            release.wait(10)
            return real(*a, **kw)  # type: ignore[arg-type]

        # the first put creates the first file, inside the put lock, slowly
        cl.queue.get_last_mapped_file = slow  # type: ignore[method-assign]
        t = threading.Thread(target=store.put_message, args=(Message("Busy", b"slow"),))
        t.start()
        assert entered.wait(10)
        assert not store.commit_log.is_os_page_cache_busy()
        clock.advance(1.5)  # the put has held the lock for 1.5 s
        assert store.is_os_page_cache_busy()
        r = store.put_message(Message("Busy", b"refused"))
        assert r.status is PutMessageStatus.OS_PAGECACHE_BUSY
        release.set()
        t.join(10)
        assert not store.commit_log.is_os_page_cache_busy()
        assert store.put_message(Message("Busy", b"fine")).status is OK


@pytest.mark.parametrize("timed", [True, False])
def test_flush_commit_log_timed_sleeps_or_is_woken_by_puts(tmp_path: Path, timed: bool) -> None:
    cfg = small(
        tmp_path / "s",
        flush_commit_log_timed=timed,
        flush_interval_commit_log=120_000,  # an interval no wait below comes near
        flush_commit_log_least_pages=0,
    )
    with MessageStore(cfg) as store:
        time.sleep(0.05)
        r = store.put_message(Message("Timed", b"x" * 100))
        end = r.wrote_offset + r.wrote_bytes
        # timed: a second of not flushing; woken: a flush long before the interval
        deadline = time.monotonic() + (1.0 if timed else 60.0)
        while store.flushed_phy_offset() < end and time.monotonic() < deadline:
            time.sleep(0.01)
        if timed:
            assert store.flushed_phy_offset() < end  # asleep for its whole interval
        else:
            assert store.flushed_phy_offset() >= end  # woken by the put


def test_flush_commit_log_timed_defaults_to_true() -> None:
    assert StoreConfig().flush_commit_log_timed is True


@pytest.mark.parametrize("sync_flush,expected", [(True, 4), (False, 0)])
def test_warm_up_flushes_every_n_pages_under_sync_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync_flush: bool, expected: int
) -> None:
    mf = MappedFile(tmp_path / file_name_for(0), 64 * 4096 + 100 * 4096)
    syncs: list[tuple[int, int]] = []
    monkeypatch.setattr(mf, "_sync", lambda a, b: syncs.append((a, b)))
    try:
        mf.warm(sync_flush=sync_flush, flush_least_pages=41)
    finally:
        mf.close()
    # 164 pages in steps of 41: a flush after each step, none left for the end
    assert len(syncs) == expected
    if sync_flush:
        assert syncs[0] == (0, 41 * 4096) and syncs[-1][1] == 164 * 4096
