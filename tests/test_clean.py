"""Retention: by time, by disk ratio, manually, with a reader holding a file; the full-disk flag."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstore import GetMessageStatus, ManualClock, Message, MessageStore, PutMessageStatus
from rocketstore.store._disk import DISK_FULL_BIT, RunningFlags, disk_used_ratio
from rocketstore.store.log._mapped_file_queue import DELETE_FILES_BATCH_MAX
from rocketstore.store.services._clean import MANUAL_DELETE_RUNS

BODY = b"x" * 1000
HOUR_MS = 3_600_000


class Disk:
    """An injectable disk-usage probe: every partition reports ``ratio``."""

    def __init__(self, ratio: float = 0.10) -> None:
        self.ratio = ratio
        self.paths: set[str] = set()

    def __call__(self, path: str) -> float:
        self.paths.add(path)
        return self.ratio


def hour_of(clock: ManualClock) -> int:
    return time.localtime(clock.now_ms() / 1000).tm_hour


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(time.time_ns() // 1_000_000)  # file times are real: start at real now


def open_clean(
    make_config: Any, clock: ManualClock, disk: Disk, *, at_delete_hour: bool, **kw: Any
) -> MessageStore:
    hour = hour_of(clock) if at_delete_hour else (hour_of(clock) + 12) % 24
    config = make_config(
        delete_when=f"{hour:02d}",
        file_reserved_time=1,
        delete_commit_log_files_interval=0,
        delete_consume_queue_files_interval=0,
        mapped_file_size_consume_queue=50 * 20,
        max_hash_slot_num=64,
        max_index_num=100,
        **kw,
    )
    store = MessageStore(config, clock=clock, disk_usage=disk)
    store.load()
    store.start()
    store.cleaner.stop()  # the test runs the passes
    return store


def fill(store: MessageStore, files: int) -> int:
    """Put messages until the commit log has ``files`` files; returns how many were put."""
    n = 0
    while len(store.commit_log.queue.files) < files:
        r = store.put_message(Message("C", BODY, n % 2, keys=[f"k{n}"]))
        assert r.ok
        n += 1
    # dispatched, and every full file flushed: the flush thread holds a file while it syncs it,
    # and a held file is not deleted in that pass (RocketMQ's rule too)
    last = store.commit_log.queue.files[-1].from_offset
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        store.dispatch_behind_bytes() or store.commit_log.queue.flushed_where < last
    ):
        time.sleep(0.005)
    return n


def age(store: MessageStore, count: int, hours: float) -> None:
    """Make the first ``count`` commit-log files ``hours`` old (modification time)."""
    old = (store.clock.now_ms() - hours * HOUR_MS) / 1000
    for mf in store.commit_log.queue.files[:count]:
        os.utime(mf.path, (old, old))


def names(store: MessageStore) -> list[str]:
    return [mf.file_name for mf in store.commit_log.queue.files]


@pytest.fixture
def stores() -> Any:
    opened: list[MessageStore] = []
    yield opened
    for s in opened:
        s.shutdown()


# ---- by time -------------------------------------------------------------------------------


def test_by_time_at_the_delete_hour(
    make_config: Any, clock: ManualClock, stores: list[MessageStore]
) -> None:
    store = open_clean(make_config, clock, Disk(), at_delete_hour=True)
    stores.append(store)
    fill(store, 5)
    files = names(store)
    age(store, 3, hours=2)
    assert store.cleaner.run_once() > 0
    assert names(store) == files[3:]
    min_phys = store.commit_log.min_offset
    assert min_phys == int(files[3])
    assert not any((Path(store.config.commit_log_dir) / n).exists() for n in files[:3])
    # consume queues: minimum corrected, files below the minimum gone, reads below it refused
    for qid in (0, 1):
        cq = store.consume_queues.find("C", qid)
        assert cq is not None
        unit = cq.get_unit(cq.min_offset)
        assert unit is not None and unit[0] >= min_phys
        assert cq.queue.files[0].from_offset > 0
        r = store.get_message("g", "C", qid, 0, 8)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert r.next_begin_offset == cq.min_offset
        assert store.get_message("g", "C", qid, cq.min_offset, 8).status is GetMessageStatus.FOUND
    # index files below the minimum are gone too, the newest one is kept
    assert all(f.end_phy_offset >= min_phys for f in store.index.files[:-1])
    # a second run finds nothing more to do
    assert store.cleaner.run_once() == 0


def test_young_files_and_other_hours_are_kept(
    make_config: Any, clock: ManualClock, stores: list[MessageStore]
) -> None:
    store = open_clean(make_config, clock, Disk(), at_delete_hour=False)
    stores.append(store)
    fill(store, 4)
    files = names(store)
    age(store, 2, hours=5)
    assert store.cleaner.run_once() == 0  # old files, but not the delete hour
    assert names(store) == files
    store.shutdown()
    stores.remove(store)
    store = open_clean(make_config, clock, Disk(), at_delete_hour=True)
    stores.append(store)
    age(store, 2, hours=0.5)  # the delete hour, but younger than file_reserved_time
    assert store.cleaner.run_once() == 0
    assert names(store) == files


def test_at_most_ten_files_per_run(
    make_config: Any, clock: ManualClock, stores: list[MessageStore]
) -> None:
    store = open_clean(make_config, clock, Disk(), at_delete_hour=True)
    stores.append(store)
    fill(store, DELETE_FILES_BATCH_MAX + 3)
    files = names(store)
    age(store, len(files), hours=3)
    store.clean_commit_log.run()
    assert names(store) == files[DELETE_FILES_BATCH_MAX:]
    store.clean_commit_log.run()
    assert names(store) == files[-1:]  # never the newest


# ---- by disk ratio -------------------------------------------------------------------------


def test_by_disk_ratio(make_config: Any, clock: ManualClock, stores: list[MessageStore]) -> None:
    disk = Disk(0.80)  # above disk_max_used_space_ratio 75: old files go at any hour
    store = open_clean(make_config, clock, disk, at_delete_hour=False)
    stores.append(store)
    fill(store, 5)
    files = names(store)
    age(store, 1, hours=2)
    store.cleaner.run_once()
    assert names(store) == files[1:]
    assert store.commit_log.refusal() is None  # below the warning level: writes go on
    disk.ratio = 0.87  # above the clean-forcibly ratio: the oldest go whatever their age
    store.cleaner.run_once()
    assert names(store) == files[-1:]
    assert store.put_message(Message("C", b"still writable")).ok
    assert {
        store.config.commit_log_dir,
        str(Path(store.config.store_path_root_dir) / "consumequeue"),
    } <= disk.paths


def test_full_disk_refuses_puts_until_space_is_freed(
    make_config: Any, clock: ManualClock, stores: list[MessageStore]
) -> None:
    disk = Disk()
    store = open_clean(make_config, clock, disk, at_delete_hour=False)
    stores.append(store)
    n = fill(store, 4)
    disk.ratio = 0.95
    store.cleaner.run_once()  # deletes at once (above the forcible ratio) and marks the disk full
    assert store.running_flags.bits & DISK_FULL_BIT
    r = store.put_message(Message("C", b"no room"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "disk is full" in (r.error or "") and "95.0%" in (r.error or "")
    assert (
        store.put_messages([Message("C", b"a"), Message("C", b"b")]).status
        is PutMessageStatus.SERVICE_NOT_AVAILABLE
    )
    assert store.runtime_info()["runningFlags"] == str(DISK_FULL_BIT)
    # messages already stored in the kept file are still readable
    readable = 0
    for qid in (0, 1):
        cq = store.consume_queues.find("C", qid)
        assert cq is not None
        readable += len(store.get_message("g", "C", qid, cq.min_offset, 64).messages)
    assert readable >= 1
    disk.ratio = 0.50
    store.cleaner.run_once()
    assert not store.running_flags.disk_full
    r = store.put_message(Message("C", b"room again"))
    assert r.ok and r.queue_offset == (n + 1) // 2


def test_full_disk_at_start(
    make_config: Any, clock: ManualClock, stores: list[MessageStore]
) -> None:
    store = open_clean(make_config, clock, Disk(0.99), at_delete_hour=False)
    stores.append(store)
    r = store.put_message(Message("C", b"x"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk is full" in (r.error or "")


# ---- manually --------------------------------------------------------------------------------


def test_manual_deletion(make_config: Any, clock: ManualClock, stores: list[MessageStore]) -> None:
    store = open_clean(make_config, clock, Disk(), at_delete_hour=False)
    stores.append(store)
    fill(store, 4)
    files = names(store)
    age(store, 2, hours=2)
    assert store.cleaner.run_once() == 0
    store.execute_delete_files_manually()
    assert store.clean_commit_log.manual_runs == MANUAL_DELETE_RUNS
    store.cleaner.run_once()
    assert names(store) == files[2:]  # only files past file_reserved_time
    assert store.clean_commit_log.manual_runs <= MANUAL_DELETE_RUNS - 1
    for _ in range(MANUAL_DELETE_RUNS):
        store.clean_commit_log.run()
    assert store.clean_commit_log.manual_runs == 0


# ---- a reader holding a file -----------------------------------------------------------------


def test_reader_holding_the_oldest_file(
    make_config: Any, clock: ManualClock, stores: list[MessageStore]
) -> None:
    store = open_clean(make_config, clock, Disk(), at_delete_hour=True)
    stores.append(store)
    fill(store, 4)
    files = names(store)
    age(store, 2, hours=2)
    first = store.commit_log.queue.files[0]
    held = first.select_mapped_buffer(0, 64)
    assert held is not None
    store.cleaner.run_once()
    # not unmapped while held: still listed, no longer readable, the minimum moved past it
    assert names(store) == files
    assert not first.available and first.path.exists()
    assert bytes(held.buffer[:4]) == first.mm[:4]
    assert store.commit_log.min_offset == int(files[1])
    held.release()  # the last reference goes: the mapping is closed
    store.cleaner.run_once()
    assert names(store) == files[2:]
    assert not first.path.exists()


def test_hanged_file_is_destroyed_forcibly(
    make_config: Any, clock: ManualClock, stores: list[MessageStore]
) -> None:
    store = open_clean(make_config, clock, Disk(), at_delete_hour=False)
    stores.append(store)
    fill(store, 3)
    files = names(store)
    age(store, 1, hours=2)
    first = store.commit_log.queue.files[0]
    assert first.hold()  # a reader that never comes back
    store.execute_delete_files_manually()
    store.cleaner.run_once()
    assert names(store) == files and first.path.exists()
    clock.advance(store.config.redelete_hanged_file_interval / 1000 + 1)
    store.cleaner.run_once()  # past destroy_mapped_file_interval_forcibly: gone anyway
    assert names(store) == files[1:]
    assert not first.path.exists()


# ---- the probe and the flags -----------------------------------------------------------------


def test_real_disk_probe_and_flags(tmp_path: Path) -> None:
    ratio = disk_used_ratio(str(tmp_path / "not" / "yet" / "created"))
    assert 0.0 < ratio < 1.0
    st = os.statvfs(tmp_path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize  # RocketMQ's: the root-reserved blocks count as used
    assert abs(ratio - used / entire) <= 0.011 and round(ratio * 100, 6).is_integer()
    flags = RunningFlags()
    assert flags.is_writeable() and flags.make_disk_full() and not flags.make_disk_full()
    assert not flags.is_writeable() and flags.bits == DISK_FULL_BIT
    assert flags.make_disk_ok() and flags.is_writeable() and not flags.make_disk_ok()
