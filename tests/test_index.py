"""The key index: Java hashing, the file layout, rolling to a new file, queries, loading."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore import CorruptFileError, ManualClock
from rocketstore.store._java_hash import index_key_hash, java_string_hash
from rocketstore.store.log._record import DispatchRequest
from rocketstore.store.log._record import java_string_hash as slow_java_hash
from rocketstore.store.queue._index import (
    ENTRY,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    SLOT,
    SLOT_SIZE,
    IndexFile,
    IndexService,
    KeyHasher,
    index_file_name,
    index_file_size,
)

JAVA_VALUES = {
    "": 0,
    "hello": 99162322,
    "Aa": 2112,
    "BB": 2112,
    "polygenelubricants": -2147483648,
    "TagA": 2598919,
    "\U0001f600": 1772899,  # a surrogate pair
    "标签-ü": 823746822,  # RocketMQ's tags code for it in the 4.9.8 fixture
    "TopicA#k0": java_string_hash("TopicA#k0"),
}


@pytest.mark.parametrize(("text", "expected"), list(JAVA_VALUES.items())[:-1])
def test_java_hash_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@given(st.text(max_size=300))
def test_java_hash_agrees_with_the_plain_loop(text: str) -> None:
    assert java_string_hash(text) == slow_java_hash(text)


@given(st.text(max_size=50), st.text(max_size=50))
def test_key_hasher_extends_the_topic_prefix(topic: str, key: str) -> None:
    assert KeyHasher()(topic, key) == index_key_hash(java_string_hash(topic + "#" + key))


def test_index_key_hash_is_abs_with_min_to_zero() -> None:
    assert index_key_hash(-2147483648) == 0
    assert index_key_hash(-5) == 5
    assert index_key_hash(7) == 7


def test_file_name_is_local_time_with_millis() -> None:
    import datetime

    ms = 1_795_254_347_855
    name = index_file_name(ms)
    assert len(name) == 17 and name.endswith("855")
    assert name[:14] == datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y%m%d%H%M%S")


def req(
    phys: int,
    ts: int,
    keys: str | None = None,
    uniq: str | None = None,
    topic: str = "T",
    sys_flag: int = 0,
) -> DispatchRequest:
    return DispatchRequest(topic, 0, phys, 100, 0, ts, 0, keys, uniq, sys_flag, 0)


def test_entries_slots_and_header_layout(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", 7, 10)
    assert f.file_size == index_file_size(7, 10) == HEADER_SIZE + 7 * SLOT_SIZE + 10 * ENTRY_SIZE
    assert f.put_key(14, 100, 5_000)  # slot 0
    assert f.put_key(3, 200, 7_500)  # slot 3
    assert f.put_key(21, 300, 9_999)  # slot 0 again: chains to entry 1
    f.write_header()
    data = (tmp_path / "20240101000000000").read_bytes()
    assert HEADER.unpack_from(data, 0) == (5_000, 9_999, 100, 300, 2, 4)
    slot = lambda n: SLOT.unpack_from(data, HEADER_SIZE + n * SLOT_SIZE)[0]  # noqa: E731
    assert (slot(0), slot(3), slot(1)) == (3, 2, 0)
    entry = lambda n: ENTRY.unpack_from(data, HEADER_SIZE + 7 * SLOT_SIZE + n * ENTRY_SIZE)  # noqa: E731
    assert entry(0) == (0, 0, 0, 0)  # entry 0 is never used
    assert entry(1) == (14, 100, 0, 0)
    assert entry(2) == (3, 200, 2, 0)  # (7500 - 5000) // 1000
    assert entry(3) == (21, 300, 4, 1)
    out: list[int] = []
    f.select(21, 0, 2**63 - 1, lambda _p: True, out, 10)
    assert out == [300]
    f.close()


def test_index_full_rolls_to_a_new_file(tmp_path: Path) -> None:
    clock = ManualClock(1_795_254_347_855)
    svc = IndexService(tmp_path / "index", slot_num=4, index_num=5, clock=clock)
    for i in range(10):  # 2 keys each, 4 entries a file
        svc.build_index(req(i * 100, 1_795_254_347_855 + i * 1000, keys=f"k{i}", uniq=f"u{i}"))
    assert len(svc.files) == 5
    names = [f.name for f in svc.files]
    assert names == sorted(names) and len(set(names)) == 5  # one clock tick: names made unique
    second = svc.files[1]
    assert second.index_count == 5 and second.begin_phy_offset == 200
    assert svc.files[-1].end_phy_offset == 900
    for i in range(10):
        offsets, ts, phy = svc.query("T", f"k{i}", 32, 0, 2**63 - 1)
        assert offsets == [i * 100]
        assert (ts, phy) == (1_795_254_347_855 + 9000, 900)
        assert svc.query("T", f"u{i}", 32, 0, 2**63 - 1)[0] == [i * 100]
    svc.shutdown()
    # reloaded from disk, the same answers
    again = IndexService(tmp_path / "index", slot_num=4, index_num=5, clock=clock)
    again.load()
    assert [f.name for f in again.files] == names
    assert again.query("T", "k3", 32, 0, 2**63 - 1)[0] == [300]
    again.shutdown()


def test_query_newest_first_limited_and_sorted(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", slot_num=3, index_num=8, clock=ManualClock())
    base = 1_700_000_000_000
    for i in range(20):
        svc.build_index(req(i * 100, base + i * 1000, keys=f"common k{i}"))
        svc.build_index(req(i * 100 + 50, base + i * 1000, keys="common", topic="Other"))
    offsets, _, _ = svc.query("T", "common", 5, 0, 2**63 - 1)
    assert offsets == [1500, 1600, 1700, 1800, 1900]  # the newest five, ascending
    assert svc.query("T", "common", 500, 0, 2**63 - 1)[0] == [i * 100 for i in range(20)]
    assert svc.query("T", "common", 0, 0, 2**63 - 1)[0] == []
    # the time range works on whole seconds from each file's begin time
    offsets, _, _ = svc.query("T", "common", 64, base + 5000, base + 7000)
    assert offsets == [500, 600, 700]
    # accept() re-checks candidates (hash collisions)
    offsets, _, _ = svc.query("T", "common", 64, 0, 2**63 - 1, accept=lambda p: p % 200 == 0)
    assert offsets == [i * 100 for i in range(0, 20, 2)]
    assert svc.query("T", "nothing", 64, 0, 2**63 - 1)[0] == []
    svc.shutdown()


def test_rollbacks_are_not_indexed_and_reindexing_is_skipped(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", slot_num=11, index_num=50, clock=ManualClock())
    svc.build_index(req(0, 1, keys="a", uniq="U0"))
    svc.build_index(req(100, 2, keys="b", sys_flag=0xC))  # rollback
    svc.build_index(req(200, 3, keys="c", sys_flag=0x4))  # prepared: indexed
    count = svc.files[-1].index_count
    svc.build_index(req(0, 1, keys="a", uniq="U0"))
    svc.build_index(req(200, 3, keys="c", sys_flag=0x4))
    assert svc.files[-1].index_count == count == 4
    assert svc.query("T", "b", 32, 0, 2**63 - 1)[0] == []
    assert svc.query("T", "c", 32, 0, 2**63 - 1)[0] == [200]
    svc.shutdown()


def test_disabled_index_writes_nothing(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", slot_num=11, index_num=50, enabled=False)
    svc.build_index(req(0, 1, keys="a"))
    assert svc.files == [] and not (tmp_path / "index").exists()


def test_load_after_crash_and_damaged_files(tmp_path: Path) -> None:
    clock = ManualClock()
    svc = IndexService(tmp_path / "index", slot_num=4, index_num=3, clock=clock)
    for i in range(6):
        svc.build_index(req(i * 100, 10_000 + i * 1000, keys=f"k{i}"))
    svc.shutdown()
    names = sorted(p.name for p in (tmp_path / "index").iterdir())
    assert len(names) == 3
    # abnormal exit: files whose last entry is newer than the checkpoint go
    svc = IndexService(tmp_path / "index", slot_num=4, index_num=3, clock=clock)
    svc.load(last_exit_ok=False, index_checkpoint_ms=13_000)
    assert [f.name for f in svc.files] == names[:2]
    svc.shutdown()
    # a half-created newest file is set aside; a wrong size elsewhere is an error
    newest = tmp_path / "index" / "99999999999999999"
    newest.write_bytes(bytes(100))
    svc = IndexService(tmp_path / "index", slot_num=4, index_num=3, clock=clock)
    svc.load()
    assert len(svc.files) == 2 and (tmp_path / "index" / "99999999999999999.corrupt").exists()
    svc.shutdown()
    with pytest.raises(CorruptFileError, match="max_hash_slot_num"):
        IndexService(tmp_path / "index", slot_num=5, index_num=3, clock=clock).load()


def test_damaged_chain_never_loops(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", 1, 10)
    for i in range(4):
        f.put_key(9, i * 10, 0)
    # entry 2 points back to entry 4: a cycle
    pos = HEADER_SIZE + 1 * SLOT_SIZE + 2 * ENTRY_SIZE
    ENTRY.pack_into(f.mf.mm, pos, 9, 10, 0, 4)
    out: list[int] = []
    f.select(9, 0, 2**63 - 1, lambda _p: True, out, 1000)
    assert len(out) <= f.index_count
    f.close()


def test_delete_expired_files(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", slot_num=4, index_num=3, clock=ManualClock())
    for i in range(6):
        svc.build_index(req(i * 100, 10_000 + i, keys=f"k{i}"))
    assert len(svc.files) == 3
    assert svc.delete_expired_files(250) == 1  # the first file ends at 100
    assert len(svc.files) == 2
    assert svc.delete_expired_files(10**9) == 1  # never the last
    svc.shutdown()
