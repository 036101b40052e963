"""Consume-queue files keep no descriptor once mapped, and are mapped within a bound: idle ones
are unmapped (MappingLRU) and mapped again when read, byte for byte as they were; a file a
reader holds is never unmapped. Descriptors are counted in /proc/self/fd."""

from __future__ import annotations

import dataclasses
import json
import logging
import mmap
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store._disk import WRITE_FAILED_PREFIX
from rocketstore.store.log._mapped_file import MappedFile, mapped_counters
from rocketstore.store.log._mapping import descriptors_kept, map_file
from rocketstore.store.log._mapping_lru import MappingLRU
from rocketstore.store.queue._consume_queue import UNIT_SIZE
from support.waits import wait_dispatched

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="descriptors are counted in /proc/self/fd"
)

FILES = 40


def open_descriptors() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def descriptors_per_file(make: Callable[[Path], object], tmp_path: Path) -> float:
    """Descriptors the process holds for each of FILES mapped files ``make`` opens."""
    before = open_descriptors()
    kept = [make(tmp_path / f"{i * 4096:020d}") for i in range(FILES)]
    added = len(open_descriptors() - before)
    for obj in kept:
        if isinstance(obj, (MappedFile, mmap.mmap)):
            obj.close()
    return added / FILES


def _plain_mmap(path: Path) -> tuple[int, mmap.mmap]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4096)
    return fd, mmap.mmap(fd, 4096)


def test_descriptors_per_mapped_file(tmp_path: Path) -> None:
    # what a mapped file cost before: its own descriptor and the one mmap duplicates
    held: list[int] = []

    def plain(path: Path) -> mmap.mmap:
        fd, mm = _plain_mmap(path)
        held.append(fd)
        return mm

    (tmp_path / "plain").mkdir()
    assert descriptors_per_file(plain, tmp_path / "plain") == 2
    for fd in held:
        os.close(fd)
    # a commit-log file keeps its own (its writes go through it), the mapping none
    (tmp_path / "log").mkdir()
    kept = descriptors_kept()
    assert descriptors_per_file(lambda p: MappedFile(p, 4096), tmp_path / "log") == 1 + kept
    # a consume-queue or index file keeps none once mapped
    (tmp_path / "queue").mkdir()
    assert (
        descriptors_per_file(lambda p: MappedFile(p, 4096, keep_fd=False), tmp_path / "queue")
        == kept
    )


def test_descriptors_kept_is_none_on_this_interpreter() -> None:
    # CPython 3.11 / 3.12 (the descriptor handed back) and 3.13+ (trackfd=False) alike
    assert descriptors_kept() == 0


def test_a_mapping_without_a_descriptor_closes_no_descriptor_of_another_file(
    tmp_path: Path,
) -> None:
    fd, _ = _plain_mmap(tmp_path / "a")
    mm, detached = map_file(fd, 4096, mmap.ACCESS_WRITE)
    os.close(fd)
    assert detached
    mm[:5] = b"hello"
    # the numbers freed are taken by other files; closing the mapping must leave them open
    others = [os.open(tmp_path / f"other{i}", os.O_RDWR | os.O_CREAT, 0o644) for i in range(4)]
    try:
        mm.flush()
        mm.close()
        for other in others:
            os.fstat(other)  # still open: EBADF otherwise
            assert os.write(other, b"x") == 1
    finally:
        for other in others:
            os.close(other)
    assert (tmp_path / "a").read_bytes()[:5] == b"hello"


def test_a_read_only_mapping_without_a_descriptor(tmp_path: Path) -> None:
    (tmp_path / "r").write_bytes(b"abc" + bytes(4093))
    before = open_descriptors()
    fd = os.open(tmp_path / "r", os.O_RDONLY)
    mm, detached = map_file(fd, 4096, mmap.ACCESS_READ)
    os.close(fd)
    assert detached and open_descriptors() == before
    assert mm[:3] == b"abc"
    mm.close()


# ---- the LRU over a store's consume queues ---------------------------------------------------

QUEUES = 60
BOUND = 16


@pytest.fixture
def small_lru_config(make_config: Callable[..., StoreConfig]) -> StoreConfig:
    cfg: StoreConfig = make_config(
        mapped_file_size_consume_queue=UNIT_SIZE * 50, max_mapped_queue_files=BOUND
    )
    return cfg


def fill(store: MessageStore, per_queue: int = 3) -> None:
    for n in range(per_queue):
        for q in range(QUEUES):
            r = store.put_message(Message(f"Lru{q % 6}", b"%d-%d" % (q, n), q // 6))
            assert r.ok, r
    wait_dispatched(store)


def queue_file(store: MessageStore, q: int) -> MappedFile:
    cq = store.consume_queues.find(f"Lru{q % 6}", q // 6)
    assert cq is not None
    return cq.queue.files[0]


def units(store: MessageStore, q: int) -> bytes:
    cq = store.consume_queues.find(f"Lru{q % 6}", q // 6)
    assert cq is not None
    with cq.units_from(0) as found:
        assert found is not None
        return bytes(found[0])


def read_every_queue(store: MessageStore, per_queue: int = 3) -> None:
    for q in range(QUEUES):
        got = store.get_message("g", f"Lru{q % 6}", q // 6, 0, 32)
        assert [m.body for m in got.messages] == [b"%d-%d" % (q, n) for n in range(per_queue)]


def test_an_idle_queue_unmapped_reads_back_byte_for_byte(
    open_store: Callable[..., MessageStore], small_lru_config: StoreConfig
) -> None:
    store = open_store(small_lru_config)
    fill(store)
    first = units(store, 0)
    assert len(first) == 3 * UNIT_SIZE
    read_every_queue(store)  # pressure: every queue's file mapped in turn
    lru = store.queue_mappings.statistics()
    assert lru.bound == BOUND and lru.evictions > 0
    assert lru.mapped <= BOUND
    mf = queue_file(store, 0)
    assert not mf.mapped  # idle since its first read: unmapped
    on_disk = mf.path.read_bytes()[: 3 * UNIT_SIZE]
    assert units(store, 0) == first == on_disk  # mapped again, the same bytes
    assert mf.mapped
    read_every_queue(store)
    # and it is written on after being unmapped
    assert store.put_message(Message("Lru0", b"0-3", 0)).queue_offset == 3
    wait_dispatched(store)
    assert [m.body for m in store.get_message("g", "Lru0", 0, 0, 32).messages] == [
        b"0-0",
        b"0-1",
        b"0-2",
        b"0-3",
    ]


def test_the_lru_never_unmaps_a_file_a_reader_holds(
    open_store: Callable[..., MessageStore], small_lru_config: StoreConfig
) -> None:
    store = open_store(small_lru_config)
    fill(store)
    cq = store.consume_queues.find("Lru0", 0)
    assert cq is not None
    held = cq.select_units(0)
    assert held is not None
    try:
        before = bytes(held.buffer)
        evictions = store.queue_mappings.evictions
        for _ in range(3):  # eviction pressure: every other queue read, again and again
            read_every_queue(store)
        assert store.queue_mappings.evictions > evictions
        assert queue_file(store, 0).mapped
        assert bytes(held.buffer) == before  # the view reads on, the same bytes
    finally:
        held.release()
    read_every_queue(store)  # idle now: it goes like the others
    assert not queue_file(store, 0).mapped


def test_an_unmapped_file_is_flushed_without_mapping_it_again(
    open_store: Callable[..., MessageStore], small_lru_config: StoreConfig
) -> None:
    store = open_store(
        dataclasses.replace(small_lru_config, flush_interval_consume_queue=3_600_000)
    )
    fill(store)
    read_every_queue(store)
    unmapped = [
        mf
        for q in range(QUEUES)
        if not (mf := queue_file(store, q)).mapped and mf.flushed_position < mf.wrote_position
    ]
    assert unmapped  # written, unmapped, not flushed yet
    for mf in unmapped:
        assert mf.flush(0) == mf.wrote_position
        assert not mf.mapped


def test_the_writer_keeps_writing_under_pressure_and_a_restart_reads_everything(
    make_config: Callable[..., StoreConfig], small_lru_config: StoreConfig
) -> None:
    # dispatch in the put path and on its thread, each unit write racing the readers' maps
    for inline in (True, False):
        cfg = dataclasses.replace(
            small_lru_config,
            dispatch_in_put_path=inline,
            store_path_root_dir=small_lru_config.store_path_root_dir + f"-{inline}",
        )
        with MessageStore(cfg) as store:
            fill(store)
            read_every_queue(store)
            assert store.queue_mappings.statistics().mapped <= BOUND
        with MessageStore(cfg) as store:
            read_every_queue(store)
            assert store.consume_queues.file_count() == QUEUES
            assert store.queue_mappings.statistics().mapped <= BOUND


def test_a_store_with_more_queue_files_than_the_bound_says_so_once_at_start(
    small_lru_config: StoreConfig, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore(small_lru_config) as store:
        fill(store)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rocketstore"), MessageStore(small_lru_config):
        pass
    lines = [r.getMessage() for r in caplog.records if "mapped at once" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{QUEUES} consume-queue files, at most {BOUND} mapped at once")
    assert "\n" not in lines[0]
    caplog.clear()
    roomy = dataclasses.replace(small_lru_config, max_mapped_queue_files=QUEUES)
    with caplog.at_level(logging.WARNING, logger="rocketstore"), MessageStore(roomy):
        pass
    assert not [r for r in caplog.records if "mapped at once" in r.getMessage()]


def test_shutdown_unmaps_every_queue_file(small_lru_config: StoreConfig) -> None:
    mapped_before = mapped_counters()[0]
    with MessageStore(small_lru_config) as store:
        fill(store)
        assert mapped_counters()[0] > mapped_before
    assert mapped_counters()[0] == mapped_before


def test_file_statistics_name_the_limits(
    open_store: Callable[..., MessageStore], small_lru_config: StoreConfig
) -> None:
    store = open_store(small_lru_config)
    fill(store)
    files = store.file_statistics()
    assert files.queue_files == QUEUES
    assert files.mapped_queue_files_bound == BOUND
    assert 0 < files.mapped_queue_files <= BOUND
    assert files.open_files > 0 and files.mappings > files.mapped_files > 0
    assert files.max_map_count > 0 and files.descriptors_per_mapping == 0


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        MappingLRU(0)


# ---- a low open-file limit, in a child process -------------------------------------------------

CHILD = Path(__file__).resolve().parent / "support" / "low_limit_child.py"
LIMIT = 64  # open files of the child: fewer than its queues


def run_child(*args: object) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(CHILD), *map(str, args)],
        capture_output=True,
        timeout=600,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("bound", [0, 24], ids=["default-bound", "small-bound"])
def test_more_queues_than_open_files_put_read_restart_read(tmp_path: Path, bound: int) -> None:
    queues = 5 * LIMIT  # each with its own consume-queue file
    root = tmp_path / "store"
    for rnd in range(2):  # the second round opens the store again under the same limit
        out = run_child("e2e", root, LIMIT, queues, rnd, bound)
        assert out["refused"] == [] and out["wrong"] == [], out
        assert out["queue_files"] == queues and out["limit"] == LIMIT
        assert out["open_files"] < LIMIT
        if bound:
            assert out["bound"] == bound and out["mapped_queue_files"] <= bound


def test_an_abnormal_recovery_through_more_queues_than_the_bound(tmp_path: Path) -> None:
    # the process ends with the abort file left; recovery checks every record against its
    # unit, in more queues than may be mapped at once and than the process may open files
    queues = 5 * LIMIT
    root = tmp_path / "store"
    out = run_child("e2e", root, LIMIT, queues, 0, 24, "crash")
    assert out["refused"] == [] and out["wrong"] == [], out
    assert (root / "abort").exists()
    out = run_child("e2e", root, LIMIT, queues, 1, 24)
    assert out["recovery"] == "abnormal"
    assert out["refused"] == [] and out["wrong"] == [], out
    assert out["mapped_queue_files"] <= 24


def test_too_many_open_files_is_refused_in_its_own_words(tmp_path: Path) -> None:
    out = run_child("emfile", tmp_path / "store", LIMIT)
    assert out["first"] == "PUT_OK"  # in the commit log: its queue waits for a descriptor
    assert out["saw_refusal"], out
    for refusal in out["refusals"]:
        assert refusal.startswith(WRITE_FAILED_PREFIX), refusal
        assert "too many open files: the process's open-file limit (64) is reached" in refusal
        assert "disk is full" not in refusal
    errors = [line for line in out["lines"] if line.startswith("ERROR")]
    assert len([e for e in errors if "too many open files" in e]) == 1, out["lines"]
    assert not any("disk is full" in line for line in out["lines"]), out["lines"]
    # the descriptors given back: dispatch goes on, nothing stored was lost
    assert out["writable"] and out["dispatched"], out
    assert out["after"] == ["a0", "a1"], out


# ---- index files in the LRU -----------------------------------------------------------------


def keyed_fill(store: MessageStore, records: int) -> None:
    for i in range(records):
        q = i % QUEUES
        msg = Message(f"Lru{q % 6}", b"k%d" % i, q // 6, keys=[f"key{i % 40}", f"only{i}"])
        assert store.put_message(msg).ok
    wait_dispatched(store)


def answers(store: MessageStore) -> dict[str, list[tuple[int, int, bytes]]]:
    out = {}
    for key in [f"key{k}" for k in range(40)] + [f"only{i}" for i in range(0, 300, 7)]:
        found = []
        for q in range(6):
            r = store.query_message(f"Lru{q}", key, 64)
            found += [(m.queue_id, m.queue_offset, m.body) for m in r.messages]
        out[key] = sorted(found)
    return out


def test_an_unmapped_index_file_answers_queries_identically(
    small_lru_config: StoreConfig,
) -> None:
    # index files of 80 entries: 300 records with two keys each fill several files
    cfg = dataclasses.replace(small_lru_config, max_hash_slot_num=20, max_index_num=80)
    with MessageStore(cfg) as store:
        keyed_fill(store, 300)
        files = store.index.files
        assert len(files) >= 5
        before = answers(store)
        assert all(before[f"key{k}"] for k in range(40))
        assert [body for _q, _o, body in before["only7"]] == [b"k7"]
        read_every_queue_once(store)  # pressure: the queue files push the index files out
        idle = [f for f in files[:-1] if not f.mf.mapped]
        assert idle, [f.mf.mapped for f in files]
        assert files[-1].mf.mapped and files[-1].pinned  # the writer's file stays mapped
        assert answers(store) == before  # mapped again to answer, the same entries
        read_every_queue_once(store)
        keyed_fill(store, 20)  # the writer goes on in its pinned file (or a new one)
        after = answers(store)
        assert store.index.files[-1].pinned
        assert sum(not f.pinned for f in store.index.files[:-1]) == len(store.index.files) - 1
    with MessageStore(cfg) as store:  # loaded files are mapped on demand
        assert not any(f.mf.mapped for f in store.index.files[:-1])
        assert answers(store) == after
        assert store.queue_mappings.statistics().mapped <= BOUND


def read_every_queue_once(store: MessageStore) -> None:
    for q in range(QUEUES):
        got = store.get_message("g", f"Lru{q % 6}", q // 6, 0, 32)
        assert got.messages


# ---- read-only views ------------------------------------------------------------------------


def test_a_read_only_view_over_more_queue_files_than_its_bound_reads_everything(
    small_lru_config: StoreConfig,
) -> None:
    from rocketstore.store.read._reader import StoreReader

    cfg = dataclasses.replace(
        small_lru_config, max_hash_slot_num=20, max_index_num=80, max_mapped_queue_files=4096
    )
    with MessageStore(cfg) as store:
        keyed_fill(store, 300)  # five messages in each of the 60 queues, several index files
        index_files = len(store.index.files)
    assert index_files >= 5
    want = {q: [b"k%d" % i for i in range(q, 300, QUEUES)] for q in range(QUEUES)}
    with StoreReader(cfg.store_path_root_dir, max_mapped_files=BOUND) as reader:
        for _round in range(2):  # the second round maps again what the first unmapped
            for q in range(QUEUES):
                got = [m.body for m in reader.read(f"Lru{q % 6}", q // 6)]
                assert got == want[q], q
                assert reader.max_offset(f"Lru{q % 6}", q // 6) == 5
                assert reader.mappings.statistics().mapped <= BOUND
        assert reader.mappings.evictions > 0
        for i in range(0, 300, 13):  # every index file read through the same bound
            found = reader.lookup_key(f"Lru{i % QUEUES % 6}", f"only{i}")
            assert found == [((i % QUEUES) // 6, i // QUEUES)], i
        assert reader.mappings.statistics().mapped <= BOUND
