"""Heartbeat bodies, subscriptions and client membership (consumer and producer groups)."""

from __future__ import annotations

import base64
import json

import pytest

from rocketstore import ManualClock
from rocketstore.broker.state._consumer_manager import ConsumerManager, ProducerManager
from rocketstore.protocol._errors import InvalidHeartbeatError, InvalidSubscriptionError
from rocketstore.protocol._heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    ProducerData,
    SubscriptionData,
    build_subscription,
    encode_heartbeat,
    parse_heartbeat,
)
from rocketstore.store._java_hash import java_string_hash
from support.fixtures import TRANSCRIPTS


def heartbeat_bodies(name: str) -> list[bytes]:
    """The HEART_BEAT (34) bodies the official C++ client sent in a recorded session."""
    path = TRANSCRIPTS / name
    bodies = []
    for line in path.read_text().splitlines():
        frame = json.loads(line)
        if frame["dir"] == "c->s" and frame["header"].get("code") == 34:
            if frame.get("body") is not None:
                bodies.append(frame["body"].encode())
            else:
                bodies.append(base64.b64decode(frame["body_b64"]))
    assert bodies, name
    return bodies


# ---------------------------------------------------------------------------------------------
# heartbeat bodies


def test_parse_push_consumer_heartbeat_from_transcript() -> None:
    for body in heartbeat_bodies("push.jsonl"):
        hb = parse_heartbeat(body)
        assert hb.client_id == "24904-127.0.0.1@DEFAULT"
        assert hb.producers == ()
        (c,) = hb.consumers
        assert c.group_name == "GID_cap_push"
        assert c.consume_type is ConsumeType.CONSUME_PASSIVELY
        assert c.message_model is MessageModel.CLUSTERING
        assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        assert not c.unit_mode
        subs = {s.topic: s for s in c.subscriptions}
        assert set(subs) == {"%RETRY%GID_cap_push", "CapTopic"}
        retry = subs["%RETRY%GID_cap_push"]
        assert retry.matches_all and retry.sub_version == 1795532966879
        cap = subs["CapTopic"]
        assert cap.sub_string == "TagA || TagB"
        assert cap.tags_set == {"TagA", "TagB"}
        # the C++ client sends codeSet [0,0]; the codes are the tags' Java hash codes
        assert cap.code_set == {java_string_hash("TagA"), java_string_hash("TagB")}
        assert cap.matches_tags_code(java_string_hash("TagB"))
        assert not cap.matches_tags_code(java_string_hash("TagC"))
        assert not cap.matches_tags_code(0)


def test_parse_pull_and_retry_heartbeats_from_transcripts() -> None:
    (pull,) = heartbeat_bodies("pull.jsonl")
    hb = parse_heartbeat(pull)
    (c,) = hb.consumers
    assert c.group_name == "GID_cap_pull"
    assert c.consume_type is ConsumeType.CONSUME_ACTIVELY
    assert c.subscriptions == ()
    for body in heartbeat_bodies("retry.jsonl"):
        (c,) = parse_heartbeat(body).consumers
        assert {s.topic for s in c.subscriptions} == {"%RETRY%GID_cap_retry", "CapTopic"}
        assert all(s.matches_all for s in c.subscriptions)


def test_parse_java_style_heartbeat_and_round_trip() -> None:
    body = (
        b'{"clientID":"10.0.0.1@123","consumerDataSet":[{"consumeFromWhere":'
        b'"CONSUME_FROM_FIRST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"G",'
        b'"messageModel":"BROADCASTING","subscriptionDataSet":[{"classFilterMode":false,'
        b'"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":17,'
        b'"tagsSet":["TagA"],"topic":"T"}],"unitMode":false}],"producerDataSet":'
        b'[{"groupName":"CLIENT_INNER_PRODUCER"},{"groupName":"P"}]}'
    )
    hb = parse_heartbeat(body)
    (c,) = hb.consumers
    assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert c.message_model is MessageModel.BROADCASTING
    (sub,) = c.subscriptions
    assert sub == SubscriptionData("T", "TagA", frozenset({"TagA"}), frozenset({2598919}), 17)
    assert hb.producer_groups == ["CLIENT_INNER_PRODUCER", "P"]
    assert parse_heartbeat(encode_heartbeat(hb)) == hb


def test_parse_heartbeat_rejects_bad_bodies() -> None:
    for body in (
        b"\xff\xfe",
        b"not json",
        b"[]",
        b'{"clientID":"c","consumerDataSet":{}}',
        b'{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":"NOPE"}]}',
        b'{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":9}]}',
        b'{"clientID":"c","consumerDataSet":[{"consumeType":0}]}',
        b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{}]}]}',
    ):
        with pytest.raises(InvalidHeartbeatError):
            parse_heartbeat(body)
    with pytest.raises(InvalidSubscriptionError):
        parse_heartbeat(
            b'{"clientID":"c","consumerDataSet":[{"groupName":"G",'
            b'"subscriptionDataSet":[{"topic":"T","subString":"||"}]}]}'
        )


def test_build_subscription_like_filter_api() -> None:
    assert build_subscription("T", None).matches_all
    assert build_subscription("T", "").sub_string == "*"
    s = build_subscription("T", " TagA ||TagB|| ", sub_version=5)
    assert s.tags_set == {"TagA", "TagB"} and s.sub_version == 5
    assert s.code_set == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert s.sub_string == " TagA ||TagB|| "
    assert build_subscription("T", " || ").tags_set == frozenset()  # Java: no tags, no error
    with pytest.raises(InvalidSubscriptionError):
        build_subscription("T", "||||")
    sql = build_subscription("T", "a > 5", "SQL92")
    assert sql.expression_type == "SQL92" and sql.matches_tags_code(123)
    with pytest.raises(InvalidSubscriptionError):
        build_subscription("T", "", "SQL92")
    # tags codes from the consume queue are int64; Java compares their int value
    neg = build_subscription("T", "中文")
    code = java_string_hash("中文")
    assert neg.matches_tags_code(code) and neg.matches_tags_code(code & 0xFFFFFFFF)
    assert neg.matches_tags_code(None)  # a unit without a tags code matches


# ---------------------------------------------------------------------------------------------
# consumer groups

PUSH = ConsumeType.CONSUME_PASSIVELY
CLUSTERING = MessageModel.CLUSTERING
LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET


def register(
    m: ConsumerManager[str], channel: str, client_id: str, *subs: SubscriptionData
) -> bool:
    return m.register_consumer("G", channel, client_id, PUSH, CLUSTERING, LAST, subs)


def test_membership_changes_are_detected() -> None:
    clock = ManualClock()
    m: ConsumerManager[str] = ConsumerManager(clock)
    a = build_subscription("T", "*", sub_version=1)
    assert register(m, "ch1", "c1", a)  # new channel
    assert not register(m, "ch1", "c1", a)  # the same heartbeat again
    assert register(m, "ch2", "c2", a)  # a second consumer
    assert m.consumer_ids("G") == ("c1", "c2")
    assert m.channels("G") == ["ch1", "ch2"]
    assert m.find_channel("G", "c2") == "ch2" and m.find_channel("G", "cX") is None
    # a newer version of the same topic's subscription replaces it without a notification
    a2 = build_subscription("T", "TagA", sub_version=2)
    assert not register(m, "ch1", "c1", a2)
    assert m.find_subscription("G", "T") == a2
    # an older version is ignored
    assert not register(m, "ch2", "c2", build_subscription("T", "TagZ", sub_version=1))
    assert m.find_subscription("G", "T") == a2
    # a topic added or removed is a change
    b = build_subscription("U", "*", sub_version=2)
    assert register(m, "ch1", "c1", a2, b)
    assert m.groups_by_topic("U") == {"G"}
    assert register(m, "ch1", "c1", a2)
    assert m.find_subscription("G", "U") is None
    info = m.group_info("G")
    assert info is not None and info.consume_type is PUSH
    assert [c.client_id for c in info.clients] == ["c1", "c2"]
    assert set(info.subscriptions) == {"T"}
    assert m.group_info("nope") is None and m.consumer_ids("nope") == ()


def test_unregister_and_channel_close() -> None:
    m: ConsumerManager[str] = ConsumerManager(ManualClock())
    sub = build_subscription("T", "*")
    register(m, "ch1", "c1", sub)
    register(m, "ch2", "c2", sub)
    m.register_consumer("H", "ch1", "c1", PUSH, CLUSTERING, LAST, [sub])
    assert m.unregister_consumer("G", "ch2")
    assert m.consumer_ids("G") == ("c1",)
    assert not m.unregister_consumer("nope", "ch1")
    assert sorted(m.on_channel_closed("ch1")) == ["G", "H"]
    assert m.groups() == []  # emptied groups are gone
    assert m.on_channel_closed("ch1") == []


def test_scan_not_active_expires_silent_channels() -> None:
    clock = ManualClock()
    m: ConsumerManager[str] = ConsumerManager(clock)
    sub = build_subscription("T", "*")
    register(m, "ch1", "c1", sub)
    clock.advance(60)
    register(m, "ch2", "c2", sub)
    clock.advance(61)  # ch1 silent for 121 s, ch2 for 61 s
    assert m.scan_not_active() == {"G": ["ch1"]}
    assert m.consumer_ids("G") == ("c2",)
    register(m, "ch2", "c2", sub)  # a heartbeat keeps it alive
    clock.advance(119)
    assert m.scan_not_active() == {}
    clock.advance(2)
    assert m.scan_not_active() == {"G": ["ch2"]}
    assert m.groups() == []
    register(m, "ch3", "c3", sub)
    clock.advance(10)
    assert m.scan_not_active(timeout_s=5) == {"G": ["ch3"]}


# ---------------------------------------------------------------------------------------------
# producer groups


def test_producer_manager() -> None:
    clock = ManualClock()
    m: ProducerManager[str] = ProducerManager(clock)
    assert m.register_producer("P", "ch1", "c1")
    assert not m.register_producer("P", "ch1", "c1")
    assert m.register_producer("P", "ch2", "c2")
    assert m.register_producer("Q", "ch1", "c1")
    assert m.channels("P") == ["ch1", "ch2"]
    assert m.find_channel("c2") == "ch2"
    picks = {m.available_channel("P") for _ in range(4)}
    assert picks == {"ch1", "ch2"}  # round robin
    assert m.available_channel("P", is_usable=lambda ch: ch == "ch2") == "ch2"
    assert m.available_channel("P", is_usable=lambda ch: False) is None
    assert m.available_channel("none") is None
    assert [i.client_id for i in m.producer_table()["P"]] == ["c1", "c2"]
    assert m.unregister_producer("P", "ch2") and not m.unregister_producer("P", "ch2")
    assert m.find_channel("c2") is None
    assert sorted(m.on_channel_closed("ch1")) == ["P", "Q"]
    assert m.groups() == []
    m.register_producer("P", "ch3", "c3")
    clock.advance(121)
    assert m.scan_not_active() == {"P": ["ch3"]}
    assert m.find_channel("c3") is None and m.groups() == []


def test_heartbeat_data_types() -> None:
    hb = HeartbeatData(
        "c",
        (ConsumerData("G", PUSH, CLUSTERING, LAST, (build_subscription("T", "A || B"),)),),
        (ProducerData("P"),),
    )
    assert parse_heartbeat(encode_heartbeat(hb)) == hb
