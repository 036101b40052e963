"""The commit log's put path: records at the byte level, rolls, batches, statuses, flush."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus
from rocketstore.store._clock import ManualClock
from rocketstore.store.log._commit_log import MAX_TOPIC_LENGTH
from rocketstore.store.log._mapped_file import file_name_for
from rocketstore.store.log._record import (
    BLANK,
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    INT32,
    OFFSET_QUEUE_OFFSET,
    OFFSET_TOTAL_SIZE,
    SYSFLAG_STOREHOST_V6,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    DispatchRequest,
    check_record,
    encode_record,
    make_msg_id,
    pack_host,
    properties_to_string,
    record_length,
)
from support.waits import wait_dispatched

SIZE = 64 * 1024


def commitlog_files(store: MessageStore) -> list[Path]:
    return sorted(Path(store.config.commit_log_dir).iterdir())


def raw_log(store: MessageStore) -> bytes:
    """The commit log as the files hold it (readable part of the mapping, straight from disk)."""
    store.commit_log.queue.flush_all(0)
    return b"".join(p.read_bytes() for p in commitlog_files(store))


def expected_record(store: MessageStore, r, msg: Message, queue_offset: int | None = None) -> bytes:  # type: ignore[no-untyped-def]
    """What RocketMQ would write for ``msg`` given the put result, built by the encoder."""
    return encode_record(
        topic=msg.topic,
        body=msg.body,
        queue_id=msg.queue_id,
        flag=msg.flag,
        queue_offset=r.queue_offset if queue_offset is None else queue_offset,
        phys_offset=r.wrote_offset,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp or r.store_timestamp,
        born_host=pack_host(msg.born_host) if msg.born_host else pack_host("127.0.0.1:0"),
        store_timestamp=r.store_timestamp,
        store_host=pack_host(f"{store.config.store_host}:{store.config.store_port}"),
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        properties=properties_to_string(msg.properties),
    )


# ---- byte-level records and rolls -----------------------------------------------------------


def test_record_bytes_equal_the_encoder(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    msgs = [
        Message(
            "TopicA",
            b"hello",
            1,
            tags="TagA",
            keys=["k1", "k2"],
            flag=7,
            properties={"color": "蓝色"},
        ),
        Message(
            "TopicA",
            b"",
            1,
            born_timestamp=1_700_000_000_123,
            born_host="10.0.0.9:5000",
            reconsume_times=3,
        ),
        Message("T" * MAX_TOPIC_LENGTH, b"\x00\xff" * 100, 0),
        Message("TopicB", b"v6 born host", 2, born_host="[fe80::1]:7000"),
    ]
    raw = b""
    for m in msgs:
        r = store.put_message(m)
        assert r.status is PutMessageStatus.PUT_OK, r
        assert r.wrote_offset == len(raw)
        want = expected_record(store, r, m)
        assert r.wrote_bytes == len(want)
        raw += want
        assert r.msg_id == make_msg_id(pack_host("127.0.0.1:10911"), r.wrote_offset)
    assert raw_log(store)[: len(raw)] == raw
    assert store.max_phy_offset == len(raw)


def test_roll_writes_a_blank_record(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    body = b"r" * 1500
    results = []
    while True:
        r = store.put_message(Message("RollTopic", body, 0))
        assert r.status is PutMessageStatus.PUT_OK
        results.append(r)
        if r.wrote_offset >= SIZE:
            break
    last_in_first = results[-2]
    end = last_in_first.wrote_offset + last_in_first.wrote_bytes
    new = results[-1]
    assert new.wrote_offset == SIZE  # the message went whole into the next file
    assert end + new.wrote_bytes + END_FILE_MIN_BLANK_LENGTH > SIZE  # it did not fit
    files = commitlog_files(store)
    assert [p.name for p in files[:2]] == [file_name_for(0), file_name_for(SIZE)]
    store.commit_log.queue.flush_all(0)
    first = files[0].read_bytes()
    assert BLANK.unpack_from(first, end) == (SIZE - end, BLANK_MAGIC)
    assert check_record(first, end, SIZE, check_crc=True) == SIZE - end
    # the records before it are intact and contiguous
    pos = 0
    for r in results[:-1]:
        rec = check_record(first, pos, SIZE, check_crc=True)
        assert isinstance(rec, DispatchRequest)
        assert (rec.commitlog_offset, rec.msg_size) == (r.wrote_offset, r.wrote_bytes)
        pos += rec.msg_size
    assert pos == end
    m = store.look_message_by_offset(new.wrote_offset)
    assert m is not None and m.body == body and m.queue_offset == len(results) - 1
    assert store.look_message_by_offset(end) is None  # a BLANK is not a message


def test_record_that_leaves_exactly_a_blank_header(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    topic = "Exact"
    overhead = record_length(0, len(topic), 0)
    r1 = store.put_message(Message(topic, b"a" * 1000))
    pos = r1.wrote_offset + r1.wrote_bytes
    # a body that ends the record exactly END_FILE_MIN_BLANK_LENGTH bytes before the file end
    body = b"b" * (SIZE - pos - END_FILE_MIN_BLANK_LENGTH - overhead)
    r2 = store.put_message(Message(topic, body))
    assert r2.status is PutMessageStatus.PUT_OK
    assert r2.wrote_offset == pos  # it fits
    assert r2.wrote_offset + r2.wrote_bytes == SIZE - END_FILE_MIN_BLANK_LENGTH
    r3 = store.put_message(Message(topic, b"c"))
    assert r3.wrote_offset == SIZE
    first = commitlog_files(store)[0]
    store.commit_log.queue.flush_all(0)
    data = first.read_bytes()
    assert BLANK.unpack_from(data, SIZE - END_FILE_MIN_BLANK_LENGTH) == (
        END_FILE_MIN_BLANK_LENGTH,
        BLANK_MAGIC,
    )


def test_one_byte_too_many_rolls(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    topic = "Exact"
    overhead = record_length(0, len(topic), 0)
    body = b"z" * (SIZE - END_FILE_MIN_BLANK_LENGTH - overhead + 1)
    r = store.put_message(Message(topic, body))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL  # cannot fit in any file
    assert store.max_phy_offset == 0
    body = body[:-1]
    r = store.put_message(Message(topic, body))
    assert r.status is PutMessageStatus.PUT_OK and r.wrote_offset == 0


# ---- batches --------------------------------------------------------------------------------


def test_batch_put(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    assert store.put_message(Message("B", b"single", 3)).queue_offset == 0
    msgs = [
        Message("B", f"m{i}".encode() * (i + 1), 3, tags=f"t{i}", keys=[f"k{i}"]) for i in range(10)
    ]
    r = store.put_messages(msgs)
    assert r.status is PutMessageStatus.PUT_OK
    assert r.msg_count == 10
    assert r.queue_offset == 1
    assert len(r.offsets) == 10 and r.offsets[0] == r.wrote_offset
    assert r.msg_ids == [make_msg_id(pack_host("127.0.0.1:10911"), o) for o in r.offsets]
    assert r.msg_id == r.msg_ids[0]
    pos = r.wrote_offset
    for i, (off, m) in enumerate(zip(r.offsets, msgs, strict=True)):
        assert off == pos  # contiguous: one append
        got = store.look_message_by_offset(off)
        assert got is not None
        assert (got.body, got.tags, got.keys, got.queue_id) == (m.body, f"t{i}", [f"k{i}"], 3)
        assert got.queue_offset == 1 + i  # dense
        assert got.store_timestamp == r.store_timestamp
        pos += got.store_size
    assert pos == r.wrote_offset + r.wrote_bytes == store.max_phy_offset
    assert store.put_message(Message("B", b"after", 3)).queue_offset == 11


def test_plain_batch_stores_what_put_messages_stores(open_store) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("numpy")
    store = open_store()
    rows = [
        (f"b{i}".encode() * (i + 1), f"t{i % 3}" if i % 4 else None, f"k{i} x") for i in range(9)
    ]
    msgs = [Message("P", body, 2, tags=tags, keys=keys) for body, tags, keys in rows]
    props = [properties_to_string(m.properties).encode() for m in msgs]
    r = store.put_plain_batch(
        "P", 2, [b for b, _t, _k in rows], props, [t for _b, t, _k in rows], [k for *_x, k in rows]
    )
    assert r.status is PutMessageStatus.PUT_OK
    assert (r.msg_count, r.queue_offset, r.offsets[0]) == (9, 0, r.wrote_offset)
    log = raw_log(store)
    for i, (off, m) in enumerate(zip(r.offsets, msgs, strict=True)):
        want = expected_record(store, r._replace(wrote_offset=off), m, queue_offset=i)
        assert log[off : off + len(want)] == want
    assert r.wrote_offset + r.wrote_bytes == store.max_phy_offset
    assert store.put_message(Message("P", b"after", 2)).queue_offset == 9
    store.reput.stop()  # one dispatcher at a time: stop the service, then catch up here
    store.reput.catch_up()
    got = store.get_message("g", "P", 2, 0, 32)
    assert [m.body for m in got.messages] == [b for b, _t, _k in rows] + [b"after"]
    assert store.query_message("P", "k3", 10, 0, 2**62).messages[0].body == rows[3][0]
    bad = store.put_plain_batch(
        "P", 2, [b"x" * (store.config.max_message_size + 1)], [b""], [None], [None]
    )
    assert bad.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_plain_batch("bad topic", 0, [b"x"], [b""], [None], [None]).status is (
        PutMessageStatus.MESSAGE_ILLEGAL
    )


def test_plain_batch_indexes_keys_as_put_messages_does(  # type: ignore[no-untyped-def]
    open_store, make_config, tmp_path: Path
) -> None:
    """The column-wise batch hands its keys to the index in bulk; the index and consume-queue
    files equal those of the same rows put as Messages (whose keys are indexed one by one),
    across index files that fill up, with rows without keys and several keys a row."""
    pytest.importorskip("numpy")
    rows = [(f"v{i}".encode(), f"k{i} g{i % 3}" if i % 5 else None) for i in range(70)]
    trees = {}
    for way in ("plain", "messages"):
        root = tmp_path / way
        cfg = make_config(store_path_root_dir=str(root), max_hash_slot_num=7, max_index_num=30)
        store = open_store(cfg, clock=ManualClock())
        msgs = [Message("P", body, 1, keys=keys) for body, keys in rows]
        if way == "plain":
            props = [properties_to_string(m.properties).encode() for m in msgs]
            bodies = [body for body, _k in rows]
            r = store.put_plain_batch(
                "P", 1, bodies, props, [None] * len(rows), [k for _b, k in rows]
            )
        else:
            r = store.put_messages(msgs)
        assert r.status is PutMessageStatus.PUT_OK
        wait_dispatched(store)
        assert [m.body for m in store.query_message("P", "k69", 10, 0, 2**62).messages] == [b"v69"]
        assert len(store.query_message("P", "g1", 64, 0, 2**62).messages) == 19
        trees[way] = {
            str(p.relative_to(root)): p.read_bytes()
            for sub in ("index", "consumequeue")
            for p in sorted((root / sub).rglob("*"))
            if p.is_file()
        }
    assert sum(name.startswith("index") for name in trees["plain"]) >= 4  # files filled up
    assert trees["plain"] == trees["messages"]


def test_batch_is_never_split_across_files(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    while store.max_phy_offset < SIZE - 5000:
        store.put_message(Message("B", b"f" * 1000))
    before = store.max_phy_offset
    r = store.put_messages([Message("B", b"x" * 1000) for _ in range(8)])
    assert r.status is PutMessageStatus.PUT_OK
    assert r.wrote_offset == SIZE
    assert r.offsets[-1] + r.wrote_bytes // 8 <= 2 * SIZE
    store.commit_log.queue.flush_all(0)
    first = commitlog_files(store)[0].read_bytes()
    assert BLANK.unpack_from(first, before) == (SIZE - before, BLANK_MAGIC)


@pytest.mark.parametrize(
    "batch",
    [
        [],
        [Message("B", b"1"), Message("C", b"2")],
        [Message("B", b"1", 0), Message("B", b"2", 1)],
        [Message("B", b"1"), Message("B", b"2", properties={"DELAY": "2"})],
        [Message("B", b"1"), Message("B", b"2", sys_flag=TRANSACTION_PREPARED_TYPE)],
        [Message("B", b"1"), Message("../B", b"2")],
        [Message("B", b"1"), Message("B", b"x" * 5000)],
    ],
)
def test_bad_batches_write_nothing(open_store, batch: list[Message]) -> None:  # type: ignore[no-untyped-def]
    store = open_store(max_message_size=4096)
    r = store.put_messages(batch)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert r.error
    assert store.max_phy_offset == 0
    assert store.put_messages([Message("B", b"ok")]).status is PutMessageStatus.PUT_OK


# ---- refused messages -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "topic",
    [
        "",
        "../x",
        "a/b",
        "a.b",
        "..",
        "x" * (MAX_TOPIC_LENGTH + 1),
        "abc\n",
        "tópico",
        "a b",
        "T\x00",
    ],
)
def test_bad_topics_are_illegal(open_store, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    r = store.put_message(Message(topic, b"body"))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL, topic
    assert r.error and r.wrote_offset == -1 and not r.ok
    assert store.max_phy_offset == 0
    assert not (tmp_path / "x").exists()
    assert sorted(os.listdir(tmp_path)) == ["store"]
    assert store.put_message(Message("Good", b"body")).status is PutMessageStatus.PUT_OK


def test_topic_length_limit_is_in_bytes(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    assert store.put_message(Message("%|_-" * 31 + "abc", b"x")).ok  # 127 bytes
    assert store.put_message(Message("a" * 128, b"x")).status is PutMessageStatus.MESSAGE_ILLEGAL


def test_oversized_body_negative_queue_and_bad_properties(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store(max_message_size=1024)
    cases = [
        (Message("T", b"x" * 1025), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", -1), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", properties={"a\x01b": "c"}), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", properties={"a": "b\x02c"}), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", born_host="not-a-host"), PutMessageStatus.MESSAGE_ILLEGAL),
        (
            Message("T", b"x", properties={"big": "v" * 32767}),
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
        ),
        (
            Message("T", b"x", properties={"big": "é" * 16383}),
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
        ),  # 32766 bytes + "big\x01" > 32767
    ]
    for msg, status in cases:
        r = store.put_message(msg)
        assert r.status is status, (msg, r)
        assert not r.ok and r.error
        assert store.max_phy_offset == 0
    ok = store.put_message(Message("T", b"x" * 1024, properties={"p": "v" * 32000}))
    assert ok.status is PutMessageStatus.PUT_OK and ok.queue_offset == 0


def test_closed_store_is_not_available(open_store, make_config) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    assert store.put_message(Message("T", b"1")).ok
    end = store.max_phy_offset
    store.shutdown()
    r = store.put_message(Message("T", b"2"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert store.put_messages([Message("T", b"3")]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    unopened = MessageStore(make_config())
    assert unopened.put_message(Message("T", b"4")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    again = open_store()
    assert again.max_phy_offset == end
    assert again.put_message(Message("T", b"5")).queue_offset == 1


def test_slave_refuses_writes(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store(broker_role="SLAVE")
    assert store.put_message(Message("T", b"1")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


# ---- transactions ---------------------------------------------------------------------------


def test_transaction_types_and_queue_offsets(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    assert store.put_message(Message("Tx", b"n0")).queue_offset == 0
    assert store.put_message(Message("Tx", b"n1")).queue_offset == 1
    prepared = store.put_message(
        Message("Tx", b"half", sys_flag=TRANSACTION_PREPARED_TYPE, properties={"TRAN_MSG": "true"})
    )
    rollback = store.put_message(
        Message(
            "Tx",
            b"rb",
            sys_flag=TRANSACTION_ROLLBACK_TYPE,
            prepared_transaction_offset=prepared.wrote_offset,
        )
    )
    for r in (prepared, rollback):
        assert r.status is PutMessageStatus.PUT_OK
        assert r.queue_offset == 0
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.queue_offset == 0
    assert store.look_message_by_offset(rollback.wrote_offset).prepared_transaction_offset == (  # type: ignore[union-attr]
        prepared.wrote_offset
    )
    commit = store.put_message(
        Message(
            "Tx",
            b"commit",
            sys_flag=TRANSACTION_COMMIT_TYPE,
            prepared_transaction_offset=prepared.wrote_offset,
        )
    )
    assert commit.queue_offset == 2  # prepared and rollback did not advance the queue
    assert store.put_message(Message("Tx", b"n3")).queue_offset == 3
    raw = raw_log(store)
    assert (
        INT32.unpack_from(raw, prepared.wrote_offset + OFFSET_TOTAL_SIZE)[0] == prepared.wrote_bytes
    )
    assert int.from_bytes(raw[commit.wrote_offset + OFFSET_QUEUE_OFFSET :][:8], "big") == 2


# ---- flushing -------------------------------------------------------------------------------


def test_sync_flush_flushed_before_put_ok(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store(flush_disk_type="SYNC_FLUSH")
    for i in range(60):  # crosses a file boundary
        r = store.put_message(Message("S", b"s" * 1500, i % 3))
        assert r.status is PutMessageStatus.PUT_OK
        assert store.flushed_phy_offset() >= r.wrote_offset + r.wrote_bytes
    r = store.put_messages([Message("S", b"b" * 100) for _ in range(5)])
    assert r.status is PutMessageStatus.PUT_OK
    assert store.flushed_phy_offset() >= r.wrote_offset + r.wrote_bytes


def stall_flush(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = store.commit_log.queue
    monkeypatch.setattr(queue, "flush", lambda least_pages: queue.flushed_where)
    monkeypatch.setattr(queue, "flush_all", lambda least_pages=0: queue.flushed_where)


def test_flush_disk_timeout_and_wait_false(open_store, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store = open_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=100)
    stall_flush(store, monkeypatch)
    r = store.put_message(Message("S", b"late"))
    assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert r.ok  # stored, only not flushed in time
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.body == b"late"
    nowait = store.put_message(Message("S", b"nowait", properties={"WAIT": "false"}))
    assert nowait.status is PutMessageStatus.PUT_OK
    assert store.flushed_phy_offset() < nowait.wrote_offset + nowait.wrote_bytes
    assert nowait.queue_offset == 1
    b = store.put_messages([Message("S", b"x", properties={"WAIT": "false"})] * 3)
    assert b.status is PutMessageStatus.PUT_OK
    monkeypatch.undo()
    ok = store.put_message(Message("S", b"flushed"))
    assert ok.status is PutMessageStatus.PUT_OK
    assert store.flushed_phy_offset() >= ok.wrote_offset + ok.wrote_bytes


def test_async_flush_does_not_wait(open_store, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store = open_store(flush_interval_commit_log=60_000)
    stall_flush(store, monkeypatch)
    r = store.put_message(Message("A", b"x"))
    assert r.status is PutMessageStatus.PUT_OK


# ---- IPv6 store host ------------------------------------------------------------------------


def test_ipv6_store_host(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store(store_host="::1")
    r = store.put_message(Message("V6", b"body"))
    assert r.status is PutMessageStatus.PUT_OK
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None
    assert m.sys_flag & SYSFLAG_STOREHOST_V6
    assert m.store_host == pack_host("[::1]:10911")
    assert r.msg_id == make_msg_id(pack_host("[::1]:10911"), r.wrote_offset)


def test_ipv6_store_host_batch_and_ipv6_born_host(open_store) -> None:  # type: ignore[no-untyped-def]
    store = open_store(store_host="::1")
    r = store.put_messages(
        [Message("V6", b"a" * n, born_host="[fe80::2]:7" if n % 2 else None) for n in range(1, 6)]
    )
    assert r.status is PutMessageStatus.PUT_OK
    assert len(r.offsets) == 5
    for i, off in enumerate(r.offsets):
        m = store.look_message_by_offset(off)
        assert m is not None
        assert m.body == b"a" * (i + 1)
        assert m.queue_offset == r.queue_offset + i
        assert m.commitlog_offset == off
        assert m.store_host == pack_host("[::1]:10911")
        assert m.store_timestamp == r.store_timestamp
    single = store.put_message(Message("V6", b"z", born_host="[fe80::2]:7"))
    m = store.look_message_by_offset(single.wrote_offset)
    assert m is not None and m.born_host_str == "fe80::2:7" and m.body == b"z"
