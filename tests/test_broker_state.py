"""Broker state persisted in RocketMQ's config files: the fastjson file helper, topic configs,
subscription groups and consumer offsets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rocketstore import ManualClock, StoreError, StoreIOError
from rocketstore.broker._errors import BrokerError, ConfigFileError, InvalidTopicError
from rocketstore.broker.state._consumer_offset import CONSUMER_OFFSET_FILE, ConsumerOffsetManager
from rocketstore.broker.state._json_file import ConfigFile
from rocketstore.broker.state._subscription_group import (
    SUBSCRIPTION_GROUP_FILE,
    SubscriptionGroupManager,
)
from rocketstore.broker.state._topic_config import (
    DEFAULT_TOPIC,
    OFFSET_MOVED_EVENT,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TOPICS_FILE,
    TRACE_TOPIC,
    TopicConfig,
    TopicConfigManager,
    dlq_topic,
    retry_topic,
    validate_topic,
)
from rocketstore.protocol._subscription_group import SubscriptionGroupConfig
from rocketstore.remoting._fastjson import dumps, loads_lenient

# ---------------------------------------------------------------------------------------------
# fastjson text


def test_loads_lenient_quotes_bare_integer_keys_only_outside_strings() -> None:
    text = '{"offsetTable":{"T@G":{0:5,1:3,\n\t-2 : 7}},"s":"{9:1,8:2}","e":"a\\"{3:4"}'
    doc = loads_lenient(text)
    assert doc["offsetTable"]["T@G"] == {"0": 5, "1": 3, "-2": 7}
    assert doc["s"] == "{9:1,8:2}"  # untouched inside a string
    assert doc["e"] == 'a"{3:4'


def test_loads_lenient_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        loads_lenient('{"offsetTable":{0:5')


def test_fastjson_pretty_format() -> None:
    doc = {"a": {"x": 1, "y": True}, "m": {0: 5, 1: 3}, "e": {}, "l": ["p", 2], "n": None}
    assert dumps(doc, pretty=True) == (
        '{\n\t"a":{\n\t\t"x":1,\n\t\t"y":true\n\t},\n\t"m":{0:5,1:3\n\t},\n\t"e":{},'
        '\n\t"l":[\n\t\t"p",\n\t\t2\n\t],\n\t"n":null\n}'
    )
    assert dumps(doc) == ('{"a":{"x":1,"y":true},"m":{0:5,1:3},"e":{},"l":["p",2],"n":null}')
    assert loads_lenient(dumps(doc, pretty=True))["m"] == {"0": 5, "1": 3}


def test_config_file_round_trip_and_backup(tmp_path: Path) -> None:
    f = ConfigFile(tmp_path / "x.json")
    assert f.load(dict) is None
    f.persist('{"v":1}')
    assert not f.bak_path.exists()
    f.persist('{"v":2}')
    assert json.loads(f.bak_path.read_text()) == {"v": 1}
    f.persist('{"v":3}')
    assert json.loads(f.bak_path.read_text()) == {"v": 2}
    assert ConfigFile(tmp_path / "x.json").load(dict) == {"v": 3}
    assert not f.tmp_path.exists()


def test_config_file_corrupt_main_falls_back_to_bak(tmp_path: Path) -> None:
    f = ConfigFile(tmp_path / "x.json")
    f.persist('{"v":1}')
    f.persist('{"v":2}')
    f.path.write_text('{"v":2, "broken')  # torn by hand
    g = ConfigFile(tmp_path / "x.json")
    assert g.load(dict) == {"v": 1}
    # the damaged main file never replaces the good backup
    g.persist('{"v":3}')
    assert json.loads(g.bak_path.read_text()) == {"v": 1}
    assert g.load(dict) == {"v": 3}


def test_config_file_empty_main_reads_bak(tmp_path: Path) -> None:
    f = ConfigFile(tmp_path / "x.json")
    f.persist('{"v":1}')
    f.persist('{"v":2}')
    f.path.write_bytes(b"")
    assert ConfigFile(tmp_path / "x.json").load(dict) == {"v": 1}


def test_config_file_decode_error_counts_as_corrupt(tmp_path: Path) -> None:
    f = ConfigFile(tmp_path / "x.json")
    f.persist('{"v":1}')
    f.persist('{"v":"two"}')

    def decode(doc: dict[str, object]) -> int:
        v = doc["v"]
        if not isinstance(v, int):
            raise ValueError("not an int")
        return v

    assert ConfigFile(tmp_path / "x.json").load(decode) == 1


def test_config_file_without_usable_copy_refuses(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{not json")
    with pytest.raises(ConfigFileError) as info:
        ConfigFile(path).load(dict)
    assert isinstance(info.value, StoreError)
    assert "x.json" in str(info.value)


# ---------------------------------------------------------------------------------------------
# topics


def manager(tmp_path: Path, clock: ManualClock | None = None, **kw: object) -> TopicConfigManager:
    return TopicConfigManager(
        tmp_path,
        "broker-a",
        "DefaultCluster",
        clock=clock or ManualClock(),
        **kw,  # type: ignore[arg-type]
    )


def test_system_topics_at_start(tmp_path: Path) -> None:
    m = manager(tmp_path)
    tbw = m.select(DEFAULT_TOPIC)
    assert tbw == TopicConfig(DEFAULT_TOPIC, 8, 8, PERM_INHERIT | PERM_READ | PERM_WRITE)
    assert m.select(SCHEDULE_TOPIC) == TopicConfig(SCHEDULE_TOPIC, 18, 18)
    assert m.select(SELF_TEST_TOPIC) == TopicConfig(SELF_TEST_TOPIC, 1, 1)
    assert m.select(OFFSET_MOVED_EVENT) == TopicConfig(OFFSET_MOVED_EVENT, 1, 1)
    assert m.select("DefaultCluster") == TopicConfig("DefaultCluster", 16, 16, 7)
    assert m.select("broker-a") == TopicConfig("broker-a", 1, 1, 7)
    assert m.select("DefaultCluster_REPLY_TOPIC") is not None
    assert m.select(TRACE_TOPIC) is None  # traceTopicEnable is off by default
    assert m.is_system_topic("broker-a") and m.is_system_topic("rmq_sys_x")
    assert not m.is_system_topic("TopicA")
    assert not (tmp_path / TOPICS_FILE).exists()  # nothing changed, nothing written

    off = manager(tmp_path / "off", auto_create_topic_enable=False, trace_topic_enable=True)
    assert off.select(DEFAULT_TOPIC) is None
    assert off.select(TRACE_TOPIC) == TopicConfig(TRACE_TOPIC, 1, 1)


def test_create_in_send_inherits_from_default_topic(tmp_path: Path) -> None:
    clock = ManualClock()
    m = manager(tmp_path, clock)
    v0 = m.data_version
    clock.advance(1)
    created = m.create_in_send("NewTopic", DEFAULT_TOPIC, 4)
    assert created == TopicConfig("NewTopic", 4, 4, PERM_READ | PERM_WRITE)
    assert m.data_version.counter == v0.counter + 1
    assert m.data_version.timestamp == clock.now_ms()
    # the client may ask for more queues than the default topic has: min of both
    assert m.create_in_send("Big", DEFAULT_TOPIC, 100, 0) == TopicConfig("Big", 8, 8, 6)
    # an existing topic comes back unchanged, no version bump
    counter = m.data_version.counter
    assert m.create_in_send("NewTopic", DEFAULT_TOPIC, 2) == created
    assert m.data_version.counter == counter
    # persisted at once
    again = manager(tmp_path)
    assert again.select("NewTopic") == created
    assert again.data_version == m.data_version


def test_create_in_send_needs_an_inheritable_default(tmp_path: Path) -> None:
    m = manager(tmp_path)
    assert m.create_in_send("T1", "NoSuchDefault", 4) is None
    m.update(TopicConfig("Plain", 4, 4, PERM_READ | PERM_WRITE))
    assert m.create_in_send("T2", "Plain", 4) is None
    m.update(TopicConfig("Template", 2, 2, PERM_INHERIT | PERM_READ | PERM_WRITE, "MULTI_TAG"))
    t3 = m.create_in_send("T3", "Template", 4, 1)
    assert t3 == TopicConfig("T3", 2, 2, 6, "MULTI_TAG", topic_sys_flag=1)


def test_create_in_send_with_auto_create_off(tmp_path: Path) -> None:
    # a TBW102 left in the file of a broker that once had auto-creation on is not inherited
    manager(tmp_path).update(TopicConfig("Seed", 1, 1))
    m = manager(tmp_path, auto_create_topic_enable=False)
    assert m.select(DEFAULT_TOPIC) is not None  # from the file
    assert m.create_in_send("T", DEFAULT_TOPIC, 4) is None


def test_create_in_send_validates_the_name(tmp_path: Path) -> None:
    m = manager(tmp_path)
    for bad in ("", "a b", "topic/x", "t" * 128, "中文"):
        with pytest.raises(InvalidTopicError):
            m.create_in_send(bad, DEFAULT_TOPIC, 4)
    with pytest.raises(InvalidTopicError):
        validate_topic(DEFAULT_TOPIC, allow_default=False)
    assert m.create_in_send("a%|-_Z9" + "t" * 120, DEFAULT_TOPIC, 4) is not None  # 127 chars


def test_validate_topic_errors_are_broker_errors() -> None:
    with pytest.raises(InvalidTopicError) as info:
        validate_topic("bad topic")
    assert isinstance(info.value, BrokerError)
    assert isinstance(info.value, ValueError)
    assert "illegal characters" in str(info.value)


def test_create_in_send_back_update_delete(tmp_path: Path) -> None:
    m = manager(tmp_path)
    retry = m.create_in_send_back(retry_topic("G1"), 1, PERM_READ | PERM_WRITE)
    assert retry == TopicConfig("%RETRY%G1", 1, 1, 6)
    assert m.create_in_send_back(retry_topic("G1"), 5, 2) == retry  # already there
    dlq = m.create_in_send_back(dlq_topic("G1"), 1, PERM_WRITE)
    assert dlq.perm == PERM_WRITE and not dlq.readable
    m.update(TopicConfig("TopicA", 4, 4))
    m.update(TopicConfig("TopicA", 8, 8, order=True))
    assert m.is_order_topic("TopicA")
    assert m.delete("TopicA") and not m.delete("TopicA")
    with pytest.raises(InvalidTopicError):
        m.update(TopicConfig("bad topic"))
    assert set(manager(tmp_path).all()) == set(m.all())


def test_topics_file_is_rocketmq_format(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    m = manager(tmp_path, clock)
    m.update(TopicConfig("TopicA", 4, 4))
    text = (tmp_path / TOPICS_FILE).read_text()
    assert text.startswith(
        '{\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"timestamp":1700000000000\n\t},'
    )
    assert (
        '\t\t"TopicA":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"TopicA",\n'
        '\t\t\t"topicSysFlag":0,\n\t\t\t"writeQueueNums":4\n\t\t}'
    ) in text
    assert not text.endswith("\n")


def test_topics_file_written_by_rocketmq_loads(tmp_path: Path) -> None:
    (tmp_path / TOPICS_FILE).write_text(
        '{\n\t"dataVersion":{\n\t\t"counter":7,\n\t\t"timestamp":1690000000000\n\t},\n'
        '\t"topicConfigTable":{\n\t\t"TopicTest":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":4,\n\t\t\t"topicFilterType":"SINGLE_TAG",\n'
        '\t\t\t"topicName":"TopicTest",\n\t\t\t"topicSysFlag":0,\n\t\t\t"writeQueueNums":4\n'
        '\t\t},\n\t\t"SCHEDULE_TOPIC_XXXX":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":18,\n\t\t\t"topicFilterType":"SINGLE_TAG",\n'
        '\t\t\t"topicName":"SCHEDULE_TOPIC_XXXX",\n\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":18\n\t\t}\n\t}\n}'
    )
    m = manager(tmp_path)
    assert m.select("TopicTest") == TopicConfig("TopicTest", 4, 4)
    assert m.data_version.counter == 7 and m.data_version.timestamp == 1690000000000
    assert m.select(DEFAULT_TOPIC) is not None  # system topics stay


def test_topics_corrupt_file_falls_back_to_bak(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.update(TopicConfig("TopicA", 4, 4))  # the first change writes the whole file
    m.update(TopicConfig("TopicB", 2, 2))
    m.persist()  # the file rewritten whole: the previous one is the backup
    m.update(TopicConfig("TopicC", 1, 1))  # in the change log only
    (tmp_path / TOPICS_FILE).write_text('{"dataVersion":{"counter":')
    again = manager(tmp_path)
    assert again.select("TopicA") == TopicConfig("TopicA", 4, 4)
    assert again.select("TopicB") is None  # the backup is one rewrite older
    assert again.select("TopicC") == TopicConfig("TopicC", 1, 1)  # the log replayed over it
    assert again.data_version.counter == 3


def test_topics_file_with_wrong_shape_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / TOPICS_FILE).write_text('{"topicConfigTable":{"T":{"readQueueNums":"many"}}}')
    with pytest.raises(ConfigFileError):
        manager(tmp_path)


# ---------------------------------------------------------------------------------------------
# subscription groups


def test_subscription_group_auto_create_and_persist(tmp_path: Path) -> None:
    clock = ManualClock()
    m = SubscriptionGroupManager(tmp_path, clock=clock)
    assert m.get("TOOLS_CONSUMER") is not None and m.get("CID_ONSAPI_OWNER") is not None
    assert m.get("G1") is None
    g1 = m.find_or_create("G1")
    assert g1 == SubscriptionGroupConfig("G1")
    assert (g1.retry_queue_nums, g1.retry_max_times, g1.broker_id) == (1, 16, 0)
    assert g1.which_broker_when_consume_slowly == 1 and g1.notify_consumer_ids_changed_enable
    assert m.data_version.counter == 1
    assert m.find_or_create("G1") is g1 and m.data_version.counter == 1
    text = (tmp_path / SUBSCRIPTION_GROUP_FILE).read_text()
    assert (
        '\t\t"G1":{\n\t\t\t"brokerId":0,\n\t\t\t"consumeBroadcastEnable":true,\n'
        '\t\t\t"consumeEnable":true,\n\t\t\t"consumeFromMinEnable":true,\n'
        '\t\t\t"groupName":"G1",\n\t\t\t"notifyConsumerIdsChangedEnable":true,\n'
        '\t\t\t"retryMaxTimes":16,\n\t\t\t"retryQueueNums":1,\n'
        '\t\t\t"whichBrokerWhenConsumeSlowly":1\n\t\t}'
    ) in text
    m.update(g1.replace(retry_max_times=3))
    again = SubscriptionGroupManager(tmp_path, clock=clock)
    assert again.get("G1") == SubscriptionGroupConfig("G1", retry_max_times=3)
    assert again.data_version == m.data_version
    assert again.delete("G1") and again.get("G1") is None and not again.delete("G1")


def test_subscription_group_auto_create_off(tmp_path: Path) -> None:
    m = SubscriptionGroupManager(tmp_path, auto_create_subscription_group=False)
    assert m.find_or_create("G1") is None
    assert m.find_or_create("CID_RMQ_SYS_TRANS") is not None  # system groups always
    m.update(SubscriptionGroupConfig("G2"))
    assert m.disable_consume("G2") and not m.get("G2").consume_enable  # type: ignore[union-attr]
    assert not m.disable_consume("nope")


def test_subscription_group_corrupt_file_falls_back_to_bak(tmp_path: Path) -> None:
    m = SubscriptionGroupManager(tmp_path)
    m.find_or_create("G1")  # the first change writes the whole file
    m.find_or_create("G2")
    m.persist()  # rewritten whole: the previous file is the backup
    (tmp_path / SUBSCRIPTION_GROUP_FILE).write_bytes(b"\x00\x00\x00")
    again = SubscriptionGroupManager(tmp_path)
    assert again.get("G1") is not None and again.get("G2") is None


# ---------------------------------------------------------------------------------------------
# consumer offsets


def test_offsets_commit_query_and_lookups(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    assert m.query_offset("G1", "TopicA", 0) == -1
    assert not m.dirty
    m.commit_offset("127.0.0.1:5000", "G1", "TopicA", 0, 5)
    m.commit_offset("127.0.0.1:5000", "G1", "TopicA", 1, 3)
    m.commit_offset("127.0.0.1:5000", "G2", "TopicA", 0, 9)
    m.commit_offset("127.0.0.1:5000", "G1", "%RETRY%G1", 0, 0)
    assert m.dirty
    assert m.query_offset("G1", "TopicA", 0) == 5
    assert m.query_offset("G1", "TopicA", 2) == -1
    assert m.query_offsets("G1", "TopicA") == {0: 5, 1: 3}
    assert m.queue_ids("G1", "TopicA") == [0, 1]
    assert m.groups_by_topic("TopicA") == {"G1", "G2"}
    assert m.topics_by_group("G1") == {"TopicA", "%RETRY%G1"}
    m.commit_offset("h", "G1", "TopicA", 0, 2)  # going back is applied (and logged)
    assert m.query_offset("G1", "TopicA", 0) == 2
    assert m.clone_offsets("G1", "G3", "TopicA") and m.query_offsets("G3", "TopicA") == {0: 2, 1: 3}
    assert m.remove_topic("TopicA") == ["TopicA@G1", "TopicA@G2", "TopicA@G3"]
    assert m.remove_group("G1") == ["%RETRY%G1@G1"]
    assert m.table() == {}


def test_offsets_file_is_fastjson_and_round_trips(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("h", "G1", "TopicA", 1, 3)
    m.commit_offset("h", "G1", "TopicA", 0, 5)
    m.persist()
    assert not m.dirty
    text = (tmp_path / CONSUMER_OFFSET_FILE).read_text()
    assert text == '{\n\t"offsetTable":{\n\t\t"TopicA@G1":{0:5,1:3\n\t\t}\n\t}\n}'
    assert ConsumerOffsetManager(tmp_path).table() == {"TopicA@G1": {0: 5, 1: 3}}


def test_offsets_reads_rocketmq_file(tmp_path: Path) -> None:
    (tmp_path / CONSUMER_OFFSET_FILE).write_text(
        '{\n\t"offsetTable":{\n'
        '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n'
        '\t\t},\n\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:249,3:251\n'
        "\t\t}\n\t}\n}"
    )
    m = ConsumerOffsetManager(tmp_path)
    assert m.query_offsets("please_rename_unique_group_name_4", "TopicTest") == {
        0: 250,
        1: 250,
        2: 249,
        3: 251,
    }
    assert not m.dirty
    # quoted keys (strict JSON, as other tools write) are read too
    (tmp_path / CONSUMER_OFFSET_FILE).write_text('{"offsetTable":{"T@G":{"0":1,"7":2}}}')
    assert ConsumerOffsetManager(tmp_path).query_offsets("G", "T") == {0: 1, 7: 2}


def test_offsets_dirty_only_on_change(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    assert not m.persist_if_dirty()
    assert not (tmp_path / CONSUMER_OFFSET_FILE).exists()
    m.commit_offset("h", "G", "T", 0, 1)
    assert m.persist_if_dirty()
    mtime = os.stat(tmp_path / CONSUMER_OFFSET_FILE).st_mtime_ns
    m.commit_offset("h", "G", "T", 0, 1)  # push consumers re-commit unchanged offsets
    assert not m.dirty and not m.persist_if_dirty()
    assert os.stat(tmp_path / CONSUMER_OFFSET_FILE).st_mtime_ns == mtime
    m.commit_offset("h", "G", "T", 0, 2)
    assert m.persist_if_dirty()
    assert (tmp_path / (CONSUMER_OFFSET_FILE + ".bak")).exists()


def test_offsets_corrupt_main_falls_back_to_bak(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("h", "G", "T", 0, 1)
    m.persist()
    m.commit_offset("h", "G", "T", 0, 2)
    m.persist()
    path = tmp_path / CONSUMER_OFFSET_FILE
    path.write_bytes(path.read_bytes()[:-7])  # torn write
    assert ConsumerOffsetManager(tmp_path).query_offset("G", "T", 0) == 1


def test_offsets_failed_persist_stays_dirty(tmp_path: Path) -> None:
    config_dir = tmp_path / "config"
    m = ConsumerOffsetManager(config_dir)
    m.commit_offset("h", "G", "T", 0, 1)
    config_dir.write_text("a file where the directory should be")
    with pytest.raises(StoreIOError):
        m.persist()
    assert m.dirty


def test_unreadable_config_file_is_an_io_error(tmp_path: Path) -> None:
    (tmp_path / CONSUMER_OFFSET_FILE).mkdir()  # reading a directory fails
    with pytest.raises(StoreIOError):
        ConsumerOffsetManager(tmp_path)


def test_offsets_scan_unsubscribed(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("h", "Online", "T", 0, 0)
    m.commit_offset("h", "Gone", "T", 0, 3)
    m.commit_offset("h", "Behind", "T", 0, 10)
    removed = m.scan_unsubscribed_topics(
        is_subscribed=lambda group, topic: group == "Online",
        min_offset_in_queue=lambda topic, qid: 5,
    )
    assert removed == ["T@Gone"]  # "Behind" still has messages to read
    assert m.groups_by_topic("T") == {"Online", "Behind"}
