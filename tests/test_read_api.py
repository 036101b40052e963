"""The read API: get_message statuses and paging, limits, filters, lookups, bad input, CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketstore import (
    CorruptRecordError,
    GetMessageStatus,
    ManualClock,
    Message,
    MessageStore,
    StoreConfig,
)
from rocketstore.cli import main
from rocketstore.store.queue._consume_queue import UNIT, UNIT_SIZE
from rocketstore.store.queue._filter import TagFilter
from support.waits import wait_dispatched

S = GetMessageStatus
SMALL = {
    "mapped_file_size_consume_queue": 40 * UNIT_SIZE,
    "max_hash_slot_num": 16,
    "max_index_num": 64,
}
OpenStore = Callable[..., MessageStore]
MakeConfig = Callable[..., StoreConfig]


@pytest.fixture
def store(open_store: OpenStore, make_config: MakeConfig) -> MessageStore:
    s = open_store(make_config(**SMALL))
    for i in range(100):
        tags = ("A", "B", "Aa", "BB")[i % 4]  # "Aa" and "BB" share one hash code
        s.put_message(Message("T", f"m{i}".encode(), 0, tags=tags, keys=[f"k{i}", "all"]))
    wait_dispatched(s)
    return s


def test_paging_through_a_queue(store: MessageStore) -> None:
    offset, bodies = 0, []
    while True:
        g = store.get_message("g", "T", 0, offset, 7)
        if g.status is not S.FOUND:
            assert g.status is S.OFFSET_OVERFLOW_ONE and g.next_begin_offset == 100
            break
        assert (g.min_offset, g.max_offset) == (0, 100)
        assert g.next_begin_offset == offset + len(g.messages)
        bodies += [m.body for m in g.messages]
        offset = g.next_begin_offset
    assert bodies == [f"m{i}".encode() for i in range(100)]
    # a batch never crosses a consume-queue file (40 units a file)
    g = store.get_message("g", "T", 0, 35, 32)
    assert len(g.messages) == 5 and g.next_begin_offset == 40


def test_statuses_out_of_range(
    store: MessageStore, open_store: OpenStore, make_config: MakeConfig
) -> None:
    g = store.get_message("g", "Nope", 0, 0, 32)
    assert (g.status, g.next_begin_offset) == (S.NO_MATCHED_LOGIC_QUEUE, 0)
    assert store.get_message("g", "T", 9, 5, 32).status is S.NO_MATCHED_LOGIC_QUEUE
    assert store.get_message("g", "bad topic!", 0, 0, 1).status is S.NO_MATCHED_LOGIC_QUEUE
    g = store.get_message("g", "T", 0, 100, 32)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, 100)
    g = store.get_message("g", "T", 0, 10**12, 32)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 0)  # min is 0
    g = store.get_message("g", "T", 0, -5, 32)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_TOO_SMALL, 0)
    store.consume_queues.find_or_create("Empty", 0)
    g = store.get_message("g", "Empty", 0, 3, 32)
    assert (g.status, g.next_begin_offset) == (S.NO_MESSAGE_IN_QUEUE, 0)


def test_statuses_after_the_queue_start_moves(store: MessageStore) -> None:
    # a queue that starts at 45: its first file is blank-filled up to it
    store.commit_log.topic_queue_table[("Late", 0)] = 45
    store.put_message(Message("Late", b"x", 0))
    wait_dispatched(store)
    g = store.get_message("g", "Late", 0, 3, 32)
    assert (g.status, g.next_begin_offset, g.min_offset, g.max_offset) == (
        S.OFFSET_TOO_SMALL,
        45,
        45,
        46,
    )
    g = store.get_message("g", "Late", 0, 99, 32)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 46)  # min > 0: max
    assert [m.body for m in store.get_message("g", "Late", 0, 45, 32).messages] == [b"x"]
    # units below the first file: no data
    cq = store.consume_queues.find("Late", 0)
    assert cq is not None
    cq.min_logic_offset = 0
    g = store.get_message("g", "Late", 0, 3, 32)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_FOUND_NULL, 40)
    # blank units read as removed messages
    g = store.get_message("g", "Late", 0, 40, 32)
    assert g.status is S.FOUND and g.next_begin_offset == 46


def test_removed_commit_log_files(open_store: OpenStore, make_config: MakeConfig) -> None:
    s = open_store(make_config(**SMALL))
    for _ in range(200):
        s.put_message(Message("T", b"x" * 1000, 0))
    wait_dispatched(s)
    files = s.commit_log.queue.files
    assert len(files) >= 3
    s.commit_log.queue.delete_expired_files_by_time(0, 0, 0, True)  # drops all but the last
    g = s.get_message("g", "T", 0, 0, 32)
    assert g.status is S.MESSAGE_WAS_REMOVING
    assert g.next_begin_offset > 0
    # the units of a deleted file are skipped at once, up to the first message still there
    first_kept = next(
        i
        for i in range(200)
        if s.get_commit_log_offset_in_queue("T", 0, i) >= s.commit_log.min_offset
    )
    offset = 0
    while (g := s.get_message("g", "T", 0, offset, 32)).status is S.MESSAGE_WAS_REMOVING:
        offset = g.next_begin_offset
    assert g.status is S.FOUND and g.messages[0].queue_offset == first_kept
    s.consume_queues.correct_min_offset(s.commit_log.min_offset)
    assert 0 < s.get_min_offset_in_queue("T", 0) <= first_kept


def test_max_msg_nums_must_be_positive(store: MessageStore) -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_msg_nums"):
            store.get_message("g", "T", 0, 0, bad)


def test_transfer_limits(open_store: OpenStore, make_config: MakeConfig) -> None:
    s = open_store(
        make_config(
            max_transfer_count_on_message_in_memory=4,
            max_transfer_bytes_on_message_in_memory=10_000,
            **SMALL,
        )
    )
    for _ in range(30):
        s.put_message(Message("T", b"x" * 1000, 0))
    wait_dispatched(s)
    g = s.get_message("g", "T", 0, 0, 32)
    assert len(g.messages) == 4 and g.next_begin_offset == 4 and not g.suggest_pulling_from_slave
    s.reader.max_count_memory = 32
    g = s.get_message("g", "T", 0, 0, 32)
    assert len(g.messages) == 9  # 9 records of ~1.1 KB fit in 10,000 bytes
    assert g.buffer_total_size == sum(m.store_size for m in g.messages) <= 10_000
    # everything counts as "on disk" when no memory may be used: the disk limits apply
    s.reader.memory = 0
    g = s.get_message("g", "T", 0, 0, 32)
    assert len(g.messages) == 8  # max_transfer_count_on_message_in_disk
    assert g.suggest_pulling_from_slave


def test_tag_filter_by_code_then_string(store: MessageStore) -> None:
    g = store.get_message("g", "T", 0, 0, 32, TagFilter("A"))
    assert [m.tags for m in g.messages] == ["A"] * 10  # 40 units a file, one in four
    g = store.get_message("g", "T", 0, 0, 32, TagFilter("Aa"))
    assert {m.tags for m in g.messages} == {"Aa"}  # "BB" has the same code, and is dropped
    g = store.get_message("g", "T", 0, 0, 32, TagFilter("A || B"))
    assert len(g.messages) == 20
    assert len(store.get_message("g", "T", 0, 0, 32, TagFilter("*")).messages) == 32
    g = store.get_message("g", "T", 0, 0, 32, TagFilter("Z"))
    assert (g.status, g.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 40)


def test_slave_does_not_correct_offsets(open_store: OpenStore, make_config: MakeConfig) -> None:
    config = make_config(**SMALL)
    s = open_store(config)
    s.put_message(Message("T", b"x", 0))
    s.shutdown()
    slave = open_store(make_config(broker_role="SLAVE", **SMALL))
    g = slave.get_message("g", "T", 0, 50, 4)
    assert (g.status, g.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 50)


def corrupt_body(store: MessageStore, offset: int) -> None:
    phys = store.get_commit_log_offset_in_queue("T", 0, offset)
    mf = store.commit_log.queue.find_mapped_file_by_offset(phys)
    assert mf is not None
    pos = phys - mf.from_offset + 88  # first body byte of a V1 IPv4 record
    mf.mm[pos] ^= 0xFF


def test_bad_crc_is_never_returned(store: MessageStore) -> None:
    corrupt_body(store, 5)
    g = store.get_message("g", "T", 0, 0, 32)
    assert [m.queue_offset for m in g.messages] == [0, 1, 2, 3, 4]
    assert g.next_begin_offset == 5
    with pytest.raises(CorruptRecordError, match="T/0 offset 5"):
        store.get_message("g", "T", 0, 5, 32)
    assert store.get_message("g", "T", 0, 6, 1).messages[0].queue_offset == 6
    assert store.look_message_by_offset(store.get_commit_log_offset_in_queue("T", 0, 5)) is None


def test_corrupt_units(store: MessageStore) -> None:
    cq = store.consume_queues.find("T", 0)
    assert cq is not None
    mf = cq.queue.files[0]
    phys, size, code = cq.get_unit(3)  # type: ignore[misc]
    UNIT.pack_into(mf.mm, 3 * UNIT_SIZE, phys + 7, size, code)  # points into a record
    with pytest.raises(CorruptRecordError):
        store.get_message("g", "T", 0, 3, 1)
    UNIT.pack_into(mf.mm, 3 * UNIT_SIZE, -1, 0, 0)  # nonsense
    g = store.get_message("g", "T", 0, 3, 1)
    assert g.status is S.MESSAGE_WAS_REMOVING or g.messages[0].queue_offset == 4
    next_phys = store.get_commit_log_offset_in_queue("T", 0, 4)
    UNIT.pack_into(mf.mm, 3 * UNIT_SIZE, next_phys, size, code)  # another message's record
    g = store.get_message("g", "T", 0, 0, 32)
    assert [m.queue_offset for m in g.messages] == [0, 1, 2]
    UNIT.pack_into(mf.mm, 3 * UNIT_SIZE, 10**12, size, code)  # past the commit log
    g = store.get_message("g", "T", 0, 3, 2)
    assert [m.queue_offset for m in g.messages] == [4, 5]


def test_lookups(store: MessageStore) -> None:
    phys = store.get_commit_log_offset_in_queue("T", 0, 10)
    m = store.look_message_by_offset(phys)
    assert m is not None and m.body == b"m10" and m.queue_offset == 10
    assert store.look_message_by_offset(phys, m.store_size).body == b"m10"  # type: ignore[union-attr]
    assert store.look_message_by_offset(phys + 3) is None
    assert store.look_message_by_offset(10**12) is None
    assert store.get_commit_log_offset_in_queue("T", 0, 10**6) == 0
    assert store.get_min_offset_in_queue("Nope", 0) == -1
    assert store.get_max_offset_in_queue("Nope", 0) == 0
    assert store.get_message_store_timestamp("T", 0, 10) == m.store_timestamp
    assert store.get_message_store_timestamp("T", 0, 1000) == -1
    first = store.look_message_by_offset(0)
    assert first is not None
    assert store.get_earliest_message_time("T", 0) == first.store_timestamp
    assert store.get_earliest_message_time() == first.store_timestamp
    assert store.get_earliest_message_time("Nope", 0) == -1


def test_query_by_key_rechecks_messages(store: MessageStore) -> None:
    r = store.query_message("T", "k42")
    assert [m.body for m in r.messages] == [b"m42"]
    assert r.index_last_update_phyoffset == store.get_commit_log_offset_in_queue("T", 0, 99)
    r = store.query_message("T", "all", max_num=5)
    assert [m.queue_offset for m in r.messages] == [95, 96, 97, 98, 99]
    assert len(store.query_message("T", "all", max_num=1000).messages) == 64  # RocketMQ's cap
    assert store.query_message("Other", "k42").messages == []  # another topic's key
    assert store.query_message("T", "k4").messages[0].keys == ["k4", "all"]  # not k42 etc.
    assert store.query_message("T", "k42", max_num=0).messages == []
    ts = store.look_message_by_offset(0).store_timestamp  # type: ignore[union-attr]
    assert store.query_message("T", "k0", begin=ts + 10**6).messages == []


def test_offset_by_time_on_boundaries(open_store: OpenStore, make_config: MakeConfig) -> None:
    clock = ManualClock(1_700_000_000_000)
    s = open_store(make_config(**SMALL), clock=clock)
    times = []
    for i in range(90):  # three queue files
        times.append(clock.now_ms())
        s.put_message(Message("T", b"x", 0))
        if i % 3 == 2:
            clock.advance(1.0)  # three messages a second
    wait_dispatched(s)
    t0 = times[0]
    assert s.get_offset_in_queue_by_time("T", 0, t0) == 0
    assert s.get_offset_in_queue_by_time("T", 0, t0 + 1000) == 3  # the first at that time
    assert s.get_offset_in_queue_by_time("T", 0, t0 + 29_000) == 87
    assert s.get_offset_in_queue_by_time("T", 0, t0 + 1200) == 5  # nearer to +1000: the last there
    assert s.get_offset_in_queue_by_time("T", 0, t0 + 1800) == 6  # nearer to +2000
    assert s.get_offset_in_queue_by_time("T", 0, t0 - 10_000) == 0
    assert s.get_offset_in_queue_by_time("T", 0, t0 + 10**9) == 89
    assert s.get_offset_in_queue_by_time("Nope", 0, t0) == 0


def test_reads_need_a_running_store(make_config: MakeConfig) -> None:
    from rocketstore import StoreClosedError

    s = MessageStore(make_config(**SMALL))
    with pytest.raises(StoreClosedError):
        s.get_message("g", "T", 0, 0, 1)


def test_cli_get_and_query(make_config: MakeConfig) -> None:
    config = make_config(**SMALL)
    with MessageStore(config) as s:
        for i in range(40):
            s.put_message(Message("T", f"body{i}".encode(), 1, tags="A", keys=[f"k{i}"]))
    root = config.store_path_root_dir
    runner = CliRunner()
    res = runner.invoke(main, ["get", "--store", root, "T", "1", "38", "--count", "5", "--json"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [d.get("body") for d in lines[:2]] == ["body38", "body39"]
    assert lines[-1]["status"] == "OFFSET_OVERFLOW_ONE"
    res = runner.invoke(main, ["get", "--store", root, "Nope", "0", "0"])
    assert res.exit_code == 1
    res = runner.invoke(
        main,
        [
            "query",
            "--store",
            root,
            "--topic",
            "T",
            "--key",
            "k7",
            "--json",
            "--max-hash-slot-num",
            "16",
            "--max-index-num",
            "64",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.splitlines()[0])["body"] == "body7"
    assert Path(root, "consumequeue").is_dir()
