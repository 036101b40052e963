"""Delayed delivery: levels, timing, restart, delayOffset.json, bad input, RocketMQ's own store."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketstore import ManualClock, Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store._errors import CorruptFileError
from rocketstore.store.log._record import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    SCHEDULE_TOPIC,
    tags_code,
)
from rocketstore.store.services._delay_offset import (
    DELAY_OFFSET_FILE,
    DelayOffsetFile,
    decode_delay_offsets,
    encode_delay_offsets,
)
from support.fixtures import unpack_fixture
from support.waits import WAIT_S

LEVELS = "1s 3s"


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


# the test drives time and delivery by hand: every put's queue units are written before it
# returns (no file work left to the dispatch thread, which runs on real time)
IN_PUT = {"queue_files_in_put_path": True}


def open_manual(open_store: Any, clock: ManualClock, **overrides: Any) -> MessageStore:
    """A store on a ManualClock whose schedule thread is stopped: the test drives delivery."""
    store: MessageStore = open_store(
        clock=clock, message_delay_level=LEVELS, **{**IN_PUT, **overrides}
    )
    store.schedule.stop()
    return store


def queue_messages(store: MessageStore, topic: str, queue_id: int) -> list[Any]:
    r = store.get_message("t", topic, queue_id, 0, 64)
    return list(r.messages)


def put_delayed(
    store: MessageStore, topic: str, queue_id: int, level: str, body: bytes, **kw: Any
) -> Any:
    props = {PROPERTY_DELAY: level, "user": "ü-value", **kw.pop("properties", {})}
    r = store.put_message(Message(topic, body, queue_id, properties=props, **kw))
    assert r.status is PutMessageStatus.PUT_OK, r
    return r


# ---- timing per level (manual clock) --------------------------------------------------------


def test_each_level_delivers_at_its_time(open_store: Any) -> None:
    clock = ManualClock()
    store = open_manual(open_store, clock)
    t0 = clock.now_ms()
    put_delayed(store, "T", 2, "1", b"one", tags="TagA", keys=["k1", "k2"])
    put_delayed(store, "T", 1, "2", b"two", tags="TagB")
    put_delayed(store, "U", 0, "7", b"clamped")  # above the 2 levels: level 2
    wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 1) == 2)
    # scheduled: queue level-1, REAL_* kept, tags code = delivery time
    sched = queue_messages(store, SCHEDULE_TOPIC, 0)
    assert len(sched) == 1
    assert sched[0].properties[PROPERTY_REAL_TOPIC] == "T"
    assert sched[0].properties[PROPERTY_REAL_QUEUE_ID] == "2"
    cq = store.consume_queues.find(SCHEDULE_TOPIC, 1)
    assert cq is not None
    assert [cq.get_unit(i)[2] for i in range(2)] == [t0 + 3000, t0 + 3000]  # type: ignore[index]
    assert queue_messages(store, SCHEDULE_TOPIC, 1)[1].properties[PROPERTY_DELAY] == "2"

    assert store.schedule.deliver_due() == 0
    clock.advance(0.999)
    assert store.schedule.deliver_due() == 0
    clock.advance(0.001)
    assert store.schedule.deliver_due() == 1
    wait_for(lambda: store.get_max_offset_in_queue("T", 2) == 1)
    (got,) = queue_messages(store, "T", 2)
    assert got.body == b"one" and got.tags == "TagA" and got.keys == ["k1", "k2"]
    assert got.store_timestamp == t0 + 1000
    # 4.9.8: the properties string is the scheduled one, DELAY / REAL_* included
    assert got.properties_string == sched[0].properties_string
    assert got.properties["user"] == "ü-value" and got.properties[PROPERTY_DELAY] == "1"
    assert got.born_timestamp == sched[0].born_timestamp
    assert got.store_size == sched[0].store_size - (len(SCHEDULE_TOPIC) - len("T"))
    tag_unit = store.consume_queues.find("T", 2).get_unit(0)  # type: ignore[union-attr]
    assert tag_unit is not None and tag_unit[2] == tags_code("TagA")

    clock.advance(1.5)
    assert store.schedule.deliver_due() == 0
    clock.advance(0.5)
    assert store.schedule.deliver_due() == 2
    wait_for(lambda: store.get_max_offset_in_queue("U", 0) == 1)
    assert [m.body for m in queue_messages(store, "T", 1)] == [b"two"]
    assert [m.body for m in queue_messages(store, "U", 0)] == [b"clamped"]
    assert store.schedule.offset_table() == {1: 1, 2: 2}
    assert store.schedule.deliver_due() == 0  # nothing twice


def test_delivery_on_time_with_the_real_clock(open_store: Any) -> None:
    store = open_store(message_delay_level="1s")
    r = put_delayed(store, "RT", 0, "1", b"x")
    # the schedule thread sees the message once dispatch has put it in the new schedule queue
    # (after the put's answer), and runs when a busy machine lets it: how late is not asserted
    wait_for(lambda: store.get_max_offset_in_queue("RT", 0) == 1, timeout=WAIT_S)
    (got,) = queue_messages(store, "RT", 0)
    assert got.store_timestamp >= r.store_timestamp + 1000  # never early


def test_bad_delay_levels(open_store: Any) -> None:
    clock = ManualClock()
    store = open_manual(open_store, clock)
    r = store.put_message(Message("T", b"x", properties={PROPERTY_DELAY: "soon"}))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "DELAY" in (r.error or "")
    for level in ("0", "-3"):  # not a delay: stored in its own topic at once
        assert store.put_message(Message("T", b"now", properties={PROPERTY_DELAY: level})).ok
    wait_for(lambda: store.get_max_offset_in_queue("T", 0) == 2)
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 0
    put_delayed(store, "T", 0, "250", b"late")
    wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 1) == 1)
    (m,) = queue_messages(store, SCHEDULE_TOPIC, 1)
    assert m.properties[PROPERTY_DELAY] == "2"


def test_a_refused_put_is_retried_not_lost(open_store: Any) -> None:
    clock = ManualClock()
    store = open_manual(open_store, clock)
    put_delayed(store, "T", 0, "1", b"a")
    put_delayed(store, "T", 0, "1", b"b")
    wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 2)
    store.commit_log.set_refusal("test", (PutMessageStatus.SERVICE_NOT_AVAILABLE, "test says no"))
    clock.advance(1)
    assert store.schedule.deliver_due() == 0
    assert store.schedule.offset_table().get(1, 0) == 0
    store.commit_log.set_refusal("test", None)
    clock.advance(5)
    assert store.schedule.deliver_due() == 0  # retried after 10 s, as RocketMQ
    clock.advance(5)
    assert store.schedule.deliver_due() == 2
    wait_for(lambda: store.get_max_offset_in_queue("T", 0) == 2)
    assert [m.body for m in queue_messages(store, "T", 0)] == [b"a", b"b"]


def test_undeliverable_message_is_skipped_and_logged(open_store: Any, caplog: Any) -> None:
    clock = ManualClock()
    store = open_manual(open_store, clock)
    # written straight to the schedule topic without REAL_TOPIC: nothing to deliver it to
    assert store.put_message(
        Message(SCHEDULE_TOPIC, b"orphan", 0, properties={PROPERTY_DELAY: "1"})
    ).ok
    put_delayed(store, "T", 0, "1", b"fine")
    wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 2)
    clock.advance(1)
    assert store.schedule.deliver_due() == 1
    assert "REAL_TOPIC" in caplog.text
    assert store.schedule.offset_table()[1] == 2


def test_slave_does_not_deliver(open_store: Any, make_config: Any) -> None:
    clock = ManualClock()
    store = open_manual(open_store, clock)
    put_delayed(store, "T", 0, "1", b"x")
    wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1)
    store.shutdown()
    slave = open_store(clock=clock, message_delay_level=LEVELS, broker_role="SLAVE")
    clock.advance(5)
    time.sleep(0.3)
    assert not slave.schedule.running
    assert slave.get_max_offset_in_queue("T", 0) == 0


# ---- restart and delayOffset.json -----------------------------------------------------------


def test_restart_in_the_middle_of_delays(open_store: Any, make_config: Any) -> None:
    clock = ManualClock()
    store = open_manual(open_store, clock)
    for i in range(3):
        put_delayed(store, "T", 0, "1", b"fast-%d" % i)
        put_delayed(store, "T", 1, "2", b"slow-%d" % i)
    wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 1) == 3)
    clock.advance(1)
    assert store.schedule.deliver_due() == 3
    store.shutdown()
    path = Path(make_config().store_path_root_dir) / "config" / DELAY_OFFSET_FILE
    assert path.read_bytes() == b'{\n\t"offsetTable":{1:3\n\t}\n}'

    again = open_manual(open_store, clock)
    assert again.schedule.deliver_due() == 0  # level 1 is done, level 2 is not due
    clock.advance(2)
    assert again.schedule.deliver_due() == 3
    wait_for(lambda: again.get_max_offset_in_queue("T", 1) == 3)
    assert [m.body for m in queue_messages(again, "T", 0)] == [b"fast-0", b"fast-1", b"fast-2"]
    assert [m.body for m in queue_messages(again, "T", 1)] == [b"slow-0", b"slow-1", b"slow-2"]
    again.shutdown()
    assert decode_delay_offsets(path.read_text()) == {1: 3, 2: 3}


def test_only_flushed_progress_is_persisted(open_store: Any, make_config: Any) -> None:
    clock = ManualClock()
    store = open_manual(
        open_store, clock, flush_interval_commit_log=60_000, flush_commit_log_least_pages=1000
    )
    put_delayed(store, "T", 0, "1", b"x")
    wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1)
    clock.advance(1)
    assert store.schedule.deliver_due() == 1
    store.schedule.persist()  # the re-put is not flushed yet: progress stays at 0
    path = Path(make_config().store_path_root_dir) / "config" / DELAY_OFFSET_FILE
    assert decode_delay_offsets(path.read_text()) == {}
    store.commit_log.queue.flush_all()
    store.schedule.persist()
    assert decode_delay_offsets(path.read_text()) == {1: 1}


def test_delay_offset_file_format_and_backup(tmp_path: Path) -> None:
    f = DelayOffsetFile(tmp_path / "config")
    assert f.load() == {}
    f.persist({2: 5, 1: 7, 18: 0})
    assert f.path.read_bytes() == b'{\n\t"offsetTable":{1:7,2:5,18:0\n\t}\n}'
    f.persist({1: 8, 2: 5, 18: 0})
    assert decode_delay_offsets(f.bak_path.read_text()) == {1: 7, 2: 5, 18: 0}
    assert not (tmp_path / "config" / (DELAY_OFFSET_FILE + ".tmp")).exists()
    assert f.load() == {1: 8, 2: 5, 18: 0}
    # plain JSON with quoted keys is read too
    assert decode_delay_offsets('{"offsetTable": {"3": 4}}') == {3: 4}
    assert encode_delay_offsets({}) == b'{\n\t"offsetTable":{}\n}'


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"{",
        b'{"offsetTable":[1,2]}',
        b'{"offsetTable":{x:1}}',
        b'{"offsetTable":{1:-4}}',
        b'{"offsetTable":{1:"7"}}',
        b"\xff\xfe",
    ],
)
def test_malformed_delay_offset_json(tmp_path: Path, damage: bytes, caplog: Any) -> None:
    f = DelayOffsetFile(tmp_path)
    f.persist({1: 3})
    f.persist({1: 4})  # .bak: {1: 3}
    f.path.write_bytes(damage)
    with pytest.raises(CorruptFileError):
        decode_delay_offsets(damage.decode("utf-8", "replace"))
    assert f.load() == {1: 3}
    assert "delayOffset.json" in caplog.text
    f.bak_path.write_bytes(b"garbage")
    assert f.load() == {}  # both damaged: start over (duplicates, no loss)
    assert (tmp_path / (DELAY_OFFSET_FILE + ".corrupt")).exists()


def test_offsets_are_clamped_into_the_queue(open_store: Any, make_config: Any) -> None:
    clock = ManualClock()
    store = open_manual(open_store, clock)
    for i in range(2):
        put_delayed(store, "T", 0, "1", b"%d" % i)
    wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 2)
    store.shutdown()
    root = Path(make_config().store_path_root_dir)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / DELAY_OFFSET_FILE).write_text('{"offsetTable":{1:99,2:5}}')
    again = open_store(clock=clock, message_delay_level=LEVELS, **IN_PUT)
    again.schedule.stop()
    assert again.schedule.offset_table() == {1: 2, 2: 5}  # level 2 has no queue: kept


# ---- RocketMQ 4.9.8's own store -------------------------------------------------------------


def _unpack(tmp_path: Path) -> Path:
    return unpack_fixture("clean", tmp_path)


def test_rocketmq_store_resumes_delivery(tmp_path: Path) -> None:
    base = _unpack(tmp_path)
    manifest = [json.loads(line) for line in (base / "manifest.jsonl").open()]
    msgs = [m for m in manifest if m["type"] == "msg"]
    delayed = [m for m in msgs if m["kind"] == "delay"]
    delivered = [m for m in msgs if m["kind"] == "delivered"]
    # RocketMQ's re-put: same properties (DELAY, REAL_TOPIC, REAL_QID kept), same body / born
    # time, record shorter by the topic name difference
    by_uniq = {m["uniqKey"]: m for m in delayed}
    for d in delivered:
        src = by_uniq[d["uniqKey"]]
        assert d["properties"] == src["properties"]
        assert (d["bodyCRC"], d["bornTimestamp"], d["sysFlag"], d["flag"]) == (
            src["bodyCRC"],
            src["bornTimestamp"],
            src["sysFlag"],
            src["flag"],
        )
        assert d["wroteBytes"] == src["wroteBytes"] - (len(SCHEDULE_TOPIC) - len(d["topic"]))
    pending = [m for m in delayed if m["queueId"] == 17]
    assert len(pending) == 2

    clock = ManualClock(max(m["storeTimestamp"] for m in msgs) + 5000)
    hour = time.localtime(clock.now_ms() / 1000).tm_hour
    config = StoreConfig(
        store_path_root_dir=str(base / "store"),
        mapped_file_size_commit_log=1048576,
        mapped_file_size_consume_queue=20000,
        max_hash_slot_num=1000,
        max_index_num=4000,
        delete_when=f"{(hour + 12) % 24:02d}",
    )
    with MessageStore(config, clock=clock, disk_usage=lambda _p: 0.1) as store:
        store.schedule.stop()
        assert store.schedule.offset_table() == {1: 6}
        cq = store.consume_queues.find(SCHEDULE_TOPIC, 17)
        assert cq is not None and cq.max_offset == 2
        for i, m in enumerate(pending):
            assert cq.get_unit(i) == (
                m["wroteOffset"],
                m["wroteBytes"],
                m["storeTimestamp"] + 7_200_000,
            )
        before = {
            (t, q): store.get_max_offset_in_queue(t, q)
            for t in ("TopicA", "TopicB")
            for q in range(4)
        }
        assert store.schedule.deliver_due() == 0  # level 1 done (offset 6 of 6), level 18 not due
        clock.advance(2 * 3600)
        assert store.schedule.deliver_due() == 2
        wait_for(lambda: store.get_max_offset_in_queue("TopicB", 1) == before[("TopicB", 1)] + 1)
        wait_for(lambda: store.get_max_offset_in_queue("TopicB", 0) == before[("TopicB", 0)] + 1)
        for m in pending:
            q = int(m["properties"]["REAL_QID"])
            got = queue_messages_from(store, "TopicB", q, before[("TopicB", q)])
            src = store.look_message_by_offset(m["wroteOffset"])
            assert src is not None
            assert got.properties_string == src.properties_string
            assert got.body == src.body and got.born_timestamp == src.born_timestamp
            assert got.store_size == m["wroteBytes"] - (len(SCHEDULE_TOPIC) - len("TopicB"))
        after = {
            (t, q): store.get_max_offset_in_queue(t, q)
            for t in ("TopicA", "TopicB")
            for q in range(4)
        }
        assert sum(after.values()) - sum(before.values()) == 2  # no level-1 duplicates
        assert store.schedule.deliver_due() == 0
    raw = (base / "store" / "config" / DELAY_OFFSET_FILE).read_bytes()
    assert raw == b'{\n\t"offsetTable":{1:6,18:2\n\t}\n}'
    assert (base / "store" / "config" / (DELAY_OFFSET_FILE + ".bak")).read_bytes() == (
        b'{\n\t"offsetTable":{1:6\n\t}\n}'
    )
    shutil.rmtree(base)


def queue_messages_from(store: MessageStore, topic: str, queue_id: int, offset: int) -> Any:
    r = store.get_message("t", topic, queue_id, offset, 1)
    assert r.messages, r
    return r.messages[0]


def test_timer_message_hops_through_levels_to_its_exact_time(open_store: Any) -> None:
    clock = ManualClock()
    # levels 1 s, 5 s, 30 s
    store = open_store(clock=clock, message_delay_level="1s 5s 30s", **IN_PUT)
    store.schedule.stop()
    t0 = clock.now_ms()
    deliver = t0 + 37_400
    props = {PROPERTY_DELAY: "3", "TIMER_DELIVER_MS": str(deliver), "user": "x"}
    r = store.put_message(Message("Timed", b"exact", 1, properties=props, tags="T"))
    assert r.status is PutMessageStatus.PUT_OK
    delivered_at = None
    for _ in range(1000):
        store.schedule.deliver_due()
        if store.get_max_offset_in_queue("Timed", 1) == 1:
            delivered_at = clock.now_ms()
            break
        clock.advance(0.1)
    assert delivered_at is not None
    # never early; late by less than the shortest level, plus a polling step (0.1 s here) for
    # each of the 5 passes
    assert deliver <= delivered_at < deliver + 1000 + 5 * 100
    # 30 s, then 5 s (7.4 s remained), then 1 s until the rest is over (2 or 3 passes with
    # the polling steps)
    counts = [store.get_max_offset_in_queue(SCHEDULE_TOPIC, q) for q in range(3)]
    assert counts[1:] == [1, 1] and counts[0] in (2, 3)
    (got,) = queue_messages(store, "Timed", 1)
    assert got.body == b"exact" and got.tags == "T" and got.properties["user"] == "x"
    assert got.properties["TIMER_DELIVER_MS"] == str(deliver)
    assert got.properties[PROPERTY_REAL_TOPIC] == "Timed"
    assert got.born_timestamp == queue_messages(store, SCHEDULE_TOPIC, 2)[0].born_timestamp


def test_plain_delay_level_is_not_rescheduled(open_store: Any) -> None:
    clock = ManualClock()
    store = open_manual(open_store, clock)
    put_delayed(store, "Plain", 0, "2", b"level-only")
    clock.advance(3.0)
    assert store.schedule.deliver_due() == 1
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 1) == 1  # no second pass


def test_recalled_timer_message_is_dropped_and_the_recall_survives_a_restart(
    open_store: Any, make_config: Any
) -> None:
    clock = ManualClock()
    store = open_store(clock=clock, message_delay_level="1s 5s", **IN_PUT)
    store.schedule.stop()
    t0 = clock.now_ms()
    for body, uniq in ((b"keep", "K1"), (b"drop", "K2")):
        props = {PROPERTY_DELAY: "2", "TIMER_DELIVER_MS": str(t0 + 7000), "UNIQ_KEY": uniq}
        assert store.put_message(Message("Rc", body, 0, properties=props)).status.ok
    store.recall_timer_message("Rc", "K2", t0 + 7000)
    with pytest.raises(ValueError, match="too late"):
        store.recall_timer_message("Rc", "K1", t0)
    root = store.config.store_path_root_dir
    store.shutdown()
    again = open_store(clock=clock, message_delay_level="1s 5s", store_path_root_dir=root, **IN_PUT)
    again.schedule.stop()
    for _ in range(100):
        again.schedule.deliver_due()
        clock.advance(0.1)
    assert [m.body for m in queue_messages(again, "Rc", 0)] == [b"keep"]
    again.schedule.persist()  # the dropped recall leaves the file
    assert json.loads((Path(root) / "config" / "timerRecall.json").read_text()) == {}
