"""ConsumeQueue: unit layout, blank fill, rolling, idempotence, recovery, truncation, by-time."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstore import CorruptFileError, ManualClock
from rocketstore.store.queue._consume_queue import (
    BLANK_SIZE,
    BLANK_UNIT,
    UNIT,
    UNIT_SIZE,
    ConsumeQueue,
    ConsumeQueueTable,
    FlushConsumeQueueService,
)

FILE = 10 * UNIT_SIZE  # ten units a file


def make(root: Path, topic: str = "T", qid: int = 0) -> ConsumeQueue:
    cq = ConsumeQueue(topic, qid, root, FILE)
    cq.load()
    cq.recover()
    return cq


def fill(cq: ConsumeQueue, count: int, start: int = 0, size: int = 100) -> None:
    for i in range(start, start + count):
        assert cq.put_unit(i * size, size, i * 7, i)


def test_units_are_20_bytes_big_endian(tmp_path: Path) -> None:
    cq = make(tmp_path)
    cq.put_unit(0, 120, -5, 0)
    cq.put_unit(120, 99, 2598919, 1)
    data = (tmp_path / "T" / "0" / f"{0:020d}").read_bytes()
    assert len(data) == FILE
    assert data[:UNIT_SIZE] == UNIT.pack(0, 120, -5)
    assert data[UNIT_SIZE : 2 * UNIT_SIZE] == (120).to_bytes(8, "big") + (99).to_bytes(4, "big") + (
        2598919
    ).to_bytes(8, "big")
    assert data[2 * UNIT_SIZE :] == bytes(FILE - 2 * UNIT_SIZE)
    assert (cq.min_offset, cq.max_offset) == (0, 2)
    assert cq.get_unit(1) == (120, 99, 2598919)
    assert cq.get_unit(2) is None and cq.get_unit(-1) is None


def test_files_roll_and_are_named_by_byte_offset(tmp_path: Path) -> None:
    cq = make(tmp_path)
    fill(cq, 25)
    names = sorted(p.name for p in (tmp_path / "T" / "0").iterdir())
    assert names == [f"{0:020d}", f"{FILE:020d}", f"{2 * FILE:020d}"]
    assert cq.max_offset == 25
    assert cq.get_unit(10) == (1000, 100, 70)
    assert cq.roll_next_file(13) == 20
    with cq.units_from(13) as units:
        assert units is not None
        view, count = units
        assert count == 7  # to the end of the file's data
        assert UNIT.unpack_from(view, 0) == (1300, 100, 91)


def test_first_file_past_zero_is_blank_filled(tmp_path: Path) -> None:
    cq = make(tmp_path)
    assert cq.put_unit(5000, 50, 1, 13)
    path = tmp_path / "T" / "0" / f"{FILE:020d}"
    data = path.read_bytes()
    assert data[: 3 * UNIT_SIZE] == BLANK_UNIT * 3
    assert UNIT.unpack_from(data, 3 * UNIT_SIZE) == (5000, 50, 1)
    assert UNIT.pack(0, 0x7FFFFFFF, 0) == BLANK_UNIT
    assert (cq.min_offset, cq.max_offset) == (13, 14)
    # after a restart the minimum skips the blanks
    cq.shutdown()
    again = make(tmp_path)
    again.correct_min_offset(0)
    assert (again.min_offset, again.max_offset) == (13, 14)


def test_put_is_idempotent(tmp_path: Path) -> None:
    cq = make(tmp_path)
    fill(cq, 5)
    before = (tmp_path / "T" / "0" / f"{0:020d}").read_bytes()
    fill(cq, 5)  # the same records again
    assert cq.put_unit(200, 100, 14, 2)
    assert (tmp_path / "T" / "0" / f"{0:020d}").read_bytes() == before
    assert cq.max_offset == 5


def test_a_gap_is_filled_with_blank_units(tmp_path: Path) -> None:
    cq = make(tmp_path)
    fill(cq, 2)
    assert cq.put_unit(900, 100, 0, 5)
    assert cq.max_offset == 6
    assert cq.get_unit(3) == (0, BLANK_SIZE, 0)
    assert cq.get_unit(5) == (900, 100, 0)


def test_recover_finds_the_last_valid_unit(tmp_path: Path) -> None:
    cq = make(tmp_path)
    fill(cq, 23)
    cq.shutdown()
    again = make(tmp_path)
    assert again.max_offset == 23
    assert again.max_physic_offset == 2300
    # a damaged unit (size 0) ends the queue there
    last = tmp_path / "T" / "0" / f"{2 * FILE:020d}"
    data = bytearray(last.read_bytes())
    data[UNIT_SIZE + 8 : UNIT_SIZE + 12] = bytes(4)
    last.write_bytes(data)
    again.shutdown()
    third = make(tmp_path)
    assert third.max_offset == 21
    assert third.max_physic_offset == 2100
    assert third.put_unit(2100, 100, 0, 21)
    assert third.get_unit(21) == (2100, 100, 0)


def test_empty_or_partial_last_file_does_not_stop_loading(tmp_path: Path) -> None:
    cq = make(tmp_path)
    fill(cq, 12)
    cq.shutdown()
    last = tmp_path / "T" / "0" / f"{FILE:020d}"
    last.write_bytes(last.read_bytes()[:30])  # one unit and a half
    again = make(tmp_path)
    assert again.max_offset == 11
    assert last.stat().st_size == FILE
    again.shutdown()
    last.write_bytes(b"")
    third = make(tmp_path)
    assert third.max_offset == 10


def test_wrong_file_size_is_an_error(tmp_path: Path) -> None:
    qdir = tmp_path / "T" / "0"
    qdir.mkdir(parents=True)
    (qdir / f"{0:020d}").write_bytes(bytes(2 * FILE))
    with pytest.raises(CorruptFileError):
        make(tmp_path)


def test_truncate_dirty_drops_units_of_cut_records(
    tmp_path: Path, synced_ranges: list[tuple[int, int]]
) -> None:
    cq = make(tmp_path)
    fill(cq, 25)
    cq.flush(0)
    assert cq.truncate_dirty(1500) == 10  # units 15..24
    assert synced_ranges == [(15 * UNIT_SIZE, 20 * UNIT_SIZE)]  # the zeroed units, durable at once
    assert cq.max_offset == 15
    assert cq.max_physic_offset == 1500
    assert not (tmp_path / "T" / "0" / f"{2 * FILE:020d}").exists()
    data = (tmp_path / "T" / "0" / f"{FILE:020d}").read_bytes()
    assert data[5 * UNIT_SIZE :] == bytes(5 * UNIT_SIZE)
    assert cq.truncate_dirty(1000) == 5  # the whole second file
    assert cq.max_offset == 10 and cq.max_physic_offset == 1000
    fill(cq, 3, start=10)
    assert cq.max_offset == 13


def test_correct_min_offset_follows_the_commit_log(tmp_path: Path) -> None:
    cq = make(tmp_path)
    fill(cq, 8)
    cq.correct_min_offset(350)
    assert cq.min_offset == 4
    assert cq.get_unit(3) is None
    assert cq.get_unit(4) == (400, 100, 28)
    cq.correct_min_offset(10_000)
    assert cq.min_offset == cq.max_offset == 8


def test_offset_by_time(tmp_path: Path) -> None:
    cq = make(tmp_path)
    fill(cq, 25)
    times = {i * 100: 1000 + (i // 2) * 10 for i in range(25)}  # two messages per 10 ms

    def store_time(phys: int, _size: int) -> int:
        return times[phys]

    assert cq.get_offset_in_queue_by_time(1000, store_time, 0) == 0
    assert cq.get_offset_in_queue_by_time(1010, store_time, 0) == 2  # first of two equal
    assert cq.get_offset_in_queue_by_time(1013, store_time, 0) == 3  # nearer: 1010 (unit 3)
    assert cq.get_offset_in_queue_by_time(1017, store_time, 0) == 4  # nearer: 1020
    assert cq.get_offset_in_queue_by_time(1015, store_time, 0) == 3  # tie: the earlier
    assert cq.get_offset_in_queue_by_time(0, store_time, 0) == 0
    assert cq.get_offset_in_queue_by_time(10**13, store_time, 0) == 24
    assert cq.get_offset_in_queue_by_time(0, store_time, 1000) == 10  # below the minimum skipped
    empty = make(tmp_path, "E")
    assert empty.get_offset_in_queue_by_time(1000, store_time, 0) == 0


def test_table_loads_every_queue_and_builds_the_offset_table(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path, FILE)
    fill(table.find_or_create("A", 0), 3)
    fill(table.find_or_create("A", 3), 12)
    fill(table.find_or_create("B", 1), 1, start=40)
    table.shutdown()
    (tmp_path / "A" / "junk").mkdir()
    again = ConsumeQueueTable(tmp_path, FILE)
    again.load()
    assert again.recover() == 4100
    assert again.offset_table() == {("A", 0): 3, ("A", 3): 12, ("B", 1): 41}
    assert again.find("A", 1) is None and again.find("C", 0) is None
    assert again.truncate_dirty(500) == 7 + 1
    assert again.offset_table() == {("A", 0): 3, ("A", 3): 5, ("B", 1): 40}


def test_flush_service_reports_logics_time(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path, FILE)
    fill(table.find_or_create("A", 0), 3)
    table.last_store_timestamp = 1234
    seen: list[int] = []
    svc = FlushConsumeQueueService(
        table,
        ManualClock(),
        interval_ms=10,
        least_pages=2,
        thorough_interval_ms=100,
        on_flushed=seen.append,
    )
    svc.step(2)
    assert seen == []  # not enough dirty pages, no thorough flush
    svc.step(0)
    assert seen == [1234]
    assert table.find("A", 0).queue.flushed_where == 3 * UNIT_SIZE  # type: ignore[union-attr]
    svc.start()
    svc.stop()
    assert svc.error is None
