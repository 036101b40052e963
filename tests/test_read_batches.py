"""get_message's batches: the tight loop for plain batches hands over to the general one at the
first record it does not expect, and the messages, offsets and byte counts are the same as
decoding every record on its own. MessageExt is an immutable record."""

from __future__ import annotations

import copy
import pickle
import random
from collections.abc import Callable

import pytest

from rocketstore import GetMessageStatus, Message, MessageExt, MessageStore, StoreConfig
from rocketstore.store.log._record import (
    SYSFLAG_COMPRESSED,
    decode_message,
    decode_stored,
    encode_record,
)
from rocketstore.store.queue._consume_queue import UNIT, UNIT_SIZE
from support.waits import wait_dispatched

OpenStore = Callable[..., MessageStore]
MakeConfig = Callable[..., StoreConfig]
S = GetMessageStatus


def one_by_one(store: MessageStore, topic: str, queue_id: int, offset: int) -> MessageExt:
    phys = store.get_commit_log_offset_in_queue(topic, queue_id, offset)
    msg = store.look_message_by_offset(phys)
    assert msg is not None
    return msg


def mixed_messages(rng: random.Random, n: int) -> list[Message]:
    """Messages of two queues and another topic whose records change layout now and then:
    body and property lengths, an IPv6 born host, a system flag."""
    out = []
    for i in range(n):
        body = b"b" * rng.choice((10, 10, 10, 10, 11, 200))
        kw: dict[str, object] = {}
        if rng.random() < 0.1:
            kw["born_host"] = "[::1]:4000"
        if rng.random() < 0.1:
            kw["sys_flag"] = SYSFLAG_COMPRESSED
        tags = rng.choice(("A", "A", "A", "Bb", "é"))
        topic = "T" if rng.random() < 0.8 else "Other"
        out.append(Message(topic, body, i % 2, tags=tags, **kw))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("batch", [1, 7, 32])
def test_batches_equal_records_decoded_one_by_one(
    open_store: OpenStore, make_config: MakeConfig, batch: int
) -> None:
    # 4 KiB commit-log files: batches cross file ends (BLANK records) all the time
    store = open_store(make_config(mapped_file_size_commit_log=4096))
    for m in mixed_messages(random.Random(batch), 400):
        assert store.put_message(m).status.name == "PUT_OK"
    wait_dispatched(store)
    for queue_id in (0, 1):
        end = store.get_max_offset_in_queue("T", queue_id)
        offset, seen = 0, 0
        while offset < end:
            g = store.get_message("g", "T", queue_id, offset, batch)
            assert g.status is S.FOUND
            assert g.next_begin_offset == offset + len(g.messages)
            assert [m.queue_offset for m in g.messages] == list(range(offset, g.next_begin_offset))
            assert g.messages == [
                one_by_one(store, "T", queue_id, o) for o in range(offset, g.next_begin_offset)
            ]
            assert g.buffer_total_size == sum(m.store_size for m in g.messages)
            offset = g.next_begin_offset
            seen += len(g.messages)
        assert seen == end > 0


def test_a_damaged_record_in_the_middle_of_a_plain_batch(
    open_store: OpenStore, make_config: MakeConfig
) -> None:
    store = open_store(make_config())
    for _ in range(40):
        store.put_message(Message("T", b"x" * 50, 0, tags="A"))
    wait_dispatched(store)
    g = store.get_message("g", "T", 0, 0, 32)
    assert len(g.messages) == 32  # a plain batch
    for damaged in (0, 9, 31):
        phys = store.get_commit_log_offset_in_queue("T", 0, damaged)
        mf = store.commit_log.queue.find_mapped_file_by_offset(phys)
        assert mf is not None
        pos = phys - mf.from_offset + 100  # in the body
        mf.mm[pos] ^= 0x01
        try:
            if damaged == 0:
                with pytest.raises(Exception, match="CRC"):
                    store.get_message("g", "T", 0, 0, 32)
            else:
                g = store.get_message("g", "T", 0, 0, 32)
                assert [m.queue_offset for m in g.messages] == list(range(damaged))
                assert g.next_begin_offset == damaged
        finally:
            mf.mm[pos] ^= 0x01
    assert len(store.get_message("g", "T", 0, 0, 32).messages) == 32


def test_a_unit_of_another_queue_ends_a_plain_batch(
    open_store: OpenStore, make_config: MakeConfig
) -> None:
    store = open_store(make_config())
    for i in range(20):
        store.put_message(Message("T", b"same", i % 2, tags="A"))
    wait_dispatched(store)
    cq = store.consume_queues.find("T", 0)
    assert cq is not None
    unit = cq.get_unit(5)
    other = store.get_commit_log_offset_in_queue("T", 1, 5)  # same size, queue 1
    assert unit is not None
    UNIT.pack_into(cq.queue.files[0].mm, 5 * UNIT_SIZE, other, unit[1], unit[2])
    g = store.get_message("g", "T", 0, 0, 32)
    assert [m.queue_offset for m in g.messages] == [0, 1, 2, 3, 4]


def test_message_ext_is_an_immutable_record() -> None:
    rec = encode_record(
        topic="TopicA",
        body=b"hello",
        queue_id=2,
        queue_offset=9,
        phys_offset=4096,
        properties="TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1",
    )
    a = decode_stored(rec, 0, len(rec))
    b = decode_message(rec, 0, len(rec))
    assert a == b and hash(a) == hash(b)
    assert (a.topic, a.queue_id, a.queue_offset, a.commitlog_offset) == ("TopicA", 2, 9, 4096)
    assert (a.tags, a.keys, a.uniq_key, a.body) == ("TagA", ["k1", "k2"], "U1", b"hello")
    assert a.properties is a.properties
    with pytest.raises(AttributeError):
        a.queue_id = 3  # type: ignore[misc]
    for c in (pickle.loads(pickle.dumps(a)), copy.copy(a), copy.deepcopy(a)):
        assert type(c) is MessageExt and c == a and c.tags == "TagA"
    built = MessageExt.of(
        topic="TopicA",
        queue_id=2,
        queue_offset=9,
        commitlog_offset=4096,
        store_size=a.store_size,
        body=b"hello",
        body_crc=a.body_crc,
        flag=0,
        sys_flag=0,
        born_timestamp=a.born_timestamp,
        born_host=a.born_host,
        store_timestamp=a.store_timestamp,
        store_host=a.store_host,
        reconsume_times=0,
        prepared_transaction_offset=0,
        properties=a.properties_string,
    )
    assert built == a
    assert "TopicA" in repr(a) and "5 bytes" in repr(a)
