"""The console's lists and views beside RocketMQ Dashboard's, through its JSON API against a
real name server and broker on loopback: the topic and group lists' figures, a broker's
configuration and runtime figures, a producer group's connections, a test message (and an
account without PUB refused by the broker), a message's trace as trace-enabled clients write
it to RMQ_SYS_TRACE_TOPIC, and replication lag only where there is a slave."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.client import MessageQueue, Producer, PullConsumer
from rocketstore.client._trace import (
    TRACE_TOPIC,
    TraceContext,
    decode_traces,
    encode_trace,
)
from support.console_env import (
    BROKER,
    ConsoleEnv,
    http,
    opened,
    producer_online,
    sign_in,
    write_traces,
)
from support.waits import wait_dispatched, wait_until


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleEnv]:
    with opened(tmp_path_factory.mktemp("console-views")) as e:
        yield e


def created(env: ConsoleEnv, topic: str, queues: int) -> None:
    body = {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues}
    r = http(env, "POST", "/api/topic/create", body)
    assert r.status == 200, r.body
    assert wait_until(lambda: env.ns is not None and env.ns.routes.route(topic) is not None)


def dispatched(env: ConsoleEnv) -> None:
    assert wait_until(
        lambda: env.broker is not None and env.broker.store.dispatch_behind_bytes() == 0
    )


# ---- lists ----------------------------------------------------------------------------------


def test_topic_list_has_queues_messages_and_put_tps(env: ConsoleEnv) -> None:
    topic = "ListTopic"
    created(env, topic, queues=3)
    with Producer(env.namesrv) as p:
        for i in range(7):
            p.send(topic, b"m%d" % i)
    dispatched(env)
    rows = {t["topic"]: t for t in http(env, "GET", "/api/topics").doc["topics"]}
    row = rows[topic]
    assert (row["kind"], row["brokers"], row["readQueues"], row["writeQueues"]) == (
        "normal",
        [BROKER],
        3,
        3,
    )
    assert row["messages"] == 7
    assert row["putTps"] > 0  # puts within the last minute
    assert "errors" not in row
    assert rows["TBW102"]["kind"] == "system"


def test_group_list_has_consumers_tps_and_total_lag(env: ConsoleEnv) -> None:
    topic, group = "ListLagTopic", "ListLagGroup"
    created(env, topic, queues=2)
    with Producer(env.namesrv) as p:
        for i in range(10):
            p.send(topic, b"m%d" % i)
    dispatched(env)
    mq = MessageQueue(topic, BROKER, 0)
    with PullConsumer(env.namesrv, group) as c:
        assert c.pull(mq, 0, 32).messages
        c.commit_offset(mq, 1)
        # the pull consumer's heartbeat makes it a member online
        c.join_group({topic: "*"})
        assert wait_until(lambda: _group_row(env, group)["consumers"] == 1)
        row = _group_row(env, group)
        assert row["consumeType"] == "CONSUME_ACTIVELY"
        assert row["messageModel"] == "CLUSTERING"
    # the list's lag is the group page's: queue 1 never committed counts whole
    detail = http(env, "GET", f"/api/group?group={group}").doc
    assert detail["totalLag"] == 10 - 1
    row = _group_row(env, group)
    assert row["totalLag"] == detail["totalLag"]
    assert row["consumeTps"] >= 0
    assert wait_until(lambda: _group_row(env, group)["consumers"] == 0)


def _group_row(env: ConsoleEnv, group: str) -> dict[str, object]:
    rows = {g["group"]: g for g in http(env, "GET", "/api/groups").doc["groups"]}
    return rows[group]


# ---- a broker's configuration and figures ---------------------------------------------------


def test_broker_config_and_runtime_of_a_listed_broker_only(env: ConsoleEnv) -> None:
    doc = http(env, "GET", f"/api/broker/config?broker={env.broker_addr}").doc
    config = dict(doc["entries"])
    assert config["brokerName"] == BROKER
    assert config["traceTopicEnable"] == "false"
    assert config["msgTraceTopicName"] == TRACE_TOPIC
    runtime = dict(http(env, "GET", f"/api/broker/runtime?broker={env.broker_addr}").doc["entries"])
    assert runtime["brokerVersionDesc"] == "V4_9_8"
    assert "haNearestSlaveLagBytes" not in runtime  # no slave
    for path in ("/api/broker/config", "/api/broker/runtime"):
        r = http(env, "GET", f"{path}?broker=127.0.0.1:1")
        assert r.status == 400 and "not a broker the name servers list" in r.doc["error"]


# ---- producers, a test message ----------------------------------------------------------------


def test_producer_connections_of_a_group(env: ConsoleEnv) -> None:
    topic = "ProducerTopic"
    created(env, topic, queues=1)
    with producer_online(env, "ConsoleProducers", "127.0.0.1@console-producer"):
        doc = http(env, "GET", f"/api/producers?topic={topic}&group=ConsoleProducers").doc
        [c] = doc["connections"]
        assert c["clientId"] == "127.0.0.1@console-producer"
        assert c["language"] == "PYTHON" and c["clientAddr"].startswith("127.0.0.1:")
    none = http(env, "GET", f"/api/producers?topic={topic}&group=NoSuchProducers").doc
    assert none["connections"] == []
    assert http(env, "GET", "/api/producers?topic=NoSuchTopic&group=G").status == 404


def test_send_a_test_message_and_find_it(env: ConsoleEnv) -> None:
    topic = "SendTopic"
    created(env, topic, queues=2)
    body = {"topic": topic, "tags": "TagA", "keys": "order-1 order-2", "body": "hello 世界"}
    r = http(env, "POST", "/api/topic/send", body)
    assert r.status == 200, r.body
    sent = r.doc
    assert sent["status"] == "SEND_OK" and sent["brokerName"] == BROKER
    dispatched(env)
    found = http(env, "GET", f"/api/messages/key?topic={topic}&key=order-2").doc["messages"]
    [m] = found
    assert (m["msgId"], m["tags"], m["keys"], m["bodyText"]) == (
        sent["msgId"],
        "TagA",
        ["order-1", "order-2"],
        "hello 世界",
    )
    missing = http(env, "POST", "/api/topic/send", {"topic": "NoSuchTopic", "body": "x"})
    assert missing.status == 404
    empty = http(env, "POST", "/api/topic/send", {"topic": topic, "body": ""})
    assert empty.status == 400


def test_a_test_message_needs_pub_on_the_topic(tmp_path: Path) -> None:
    env = ConsoleEnv(tmp_path / "acl", acl=True)
    try:
        env.open()
        admin = sign_in(env, "console-admin", "admin-secret-1")
        made = http(env, "POST", "/api/topic/create", {"topic": "AclSend"}, cookie=admin)
        assert made.status == 200, made.body
        assert wait_until(lambda: env.ns is not None and env.ns.routes.route("AclSend") is not None)
        reader = sign_in(env, "console-reader", "reader-secret-1")
        body = {"topic": "AclSend", "body": "not allowed"}
        refused = http(env, "POST", "/api/topic/send", body, cookie=reader)
        assert refused.status == 403, refused.body
        assert "AclException" in refused.doc["error"]
        user = sign_in(env, "console-user", "user-secret-1")
        ok = http(env, "POST", "/api/topic/send", {**body, "body": "allowed"}, cookie=user)
        assert ok.status == 200 and ok.doc["status"] == "SEND_OK", ok.body
        assert env.broker is not None
        wait_dispatched(env.broker.store)
        assert env.broker.store.get_max_offset_in_queue("AclSend", ok.doc["queueId"]) == 1
    finally:
        env.close()


# ---- message trace --------------------------------------------------------------------------


def test_a_message_trace_as_trace_enabled_clients_write_it(env: ConsoleEnv) -> None:
    topic = "TracedTopic"
    created(env, topic, queues=1)
    with Producer(env.namesrv, "TracedProducers") as p:
        sent = p.send(topic, b"traced", tags="T", keys="trace-key")
    now = int(time.time() * 1000)
    pub = TraceContext(
        "Pub",
        sent.msg_id,
        timestamp=now,
        region_id="DefaultRegion",
        group="TracedProducers",
        topic=topic,
        tags="T",
        keys="trace-key",
        store_host=env.broker_addr,
        body_length=6,
        cost_time=3,
        msg_type="Normal_Msg",
        offset_msg_id=sent.offset_msg_id,
    )
    before = TraceContext(
        "SubBefore",
        sent.msg_id,
        timestamp=now + 10,
        region_id="DefaultRegion",
        group="TracedConsumers",
        request_id="REQ1",
        retry_times=0,
        keys="trace-key",
    )
    after = TraceContext(
        "SubAfter",
        sent.msg_id,
        timestamp=now + 10,
        group="TracedConsumers",
        request_id="REQ1",
        cost_time=7,
        success=False,
        keys="trace-key",
    )
    other = TraceContext("SubBefore", "SOME-OTHER-ID", timestamp=now, group="G", request_id="R")
    # the trace topic does not exist yet: the first trace creates it, as on RocketMQ's broker
    assert env.broker is not None and env.broker.topics.select(TRACE_TOPIC) is None
    write_traces(env, [pub])
    write_traces(env, [before, other])
    write_traces(env, [after])
    assert env.broker.topics.select(TRACE_TOPIC) is not None
    dispatched(env)
    doc = http(env, "GET", f"/api/trace?id={sent.msg_id}").doc
    assert doc["traceTopic"] == TRACE_TOPIC and doc["traceMessages"] == 3
    rows = [(r["type"], r["group"], r["costTime"], r["status"]) for r in doc["rows"]]
    assert rows == [
        ("Pub", "TracedProducers", 3, "success"),
        ("SubBefore", "TracedConsumers", 0, ""),
        ("SubAfter", "TracedConsumers", 7, "failed"),
    ]
    assert all(r["clientHost"] == "127.0.0.1" for r in doc["rows"])
    assert doc["rows"][0]["offsetMsgId"] == sent.offset_msg_id
    [consumer] = doc["consumers"]
    assert consumer["group"] == "TracedConsumers"
    [attempt] = consumer["attempts"]
    assert (attempt["requestId"], attempt["costTime"], attempt["status"]) == ("REQ1", 7, "failed")
    nothing = http(env, "GET", "/api/trace?id=NO-SUCH-ID").doc
    assert nothing["rows"] == [] and nothing["consumers"] == []


def test_trace_text_round_trips_and_tolerates_damage() -> None:
    ctx = TraceContext(
        "EndTransaction",
        "ID1",
        timestamp=5,
        group="P",
        topic="T",
        msg_type="Trans_Msg_Half",
        transaction_id="TX",
        transaction_state="COMMIT_MESSAGE",
        from_transaction_check=True,
    )
    text = encode_trace(ctx) + "Pub\x01not-a-number\x02" + "Nonsense\x01x\x02"
    decoded = decode_traces(text)
    assert decoded.contexts == [ctx] and decoded.unreadable == 2
    # 4.9.8's Pub without offsetMsgId (13 fields) and 5.x's with the client host (15)
    short = "Pub\x011\x01r\x01P\x01T\x01ID\x01\x01\x01h:1\x014\x012\x010\x01false\x02"
    [pub] = decode_traces(short).contexts
    assert (pub.offset_msg_id, pub.success, pub.cost_time) == ("", False, 2)
    long = (
        "Pub\x011\x01r\x01P\x01T\x01ID\x01\x01\x01h:1\x014\x012\x013\x01OFF\x01true\x0110.0.0.1\x02"
    )
    [pub] = decode_traces(long).contexts
    assert (pub.offset_msg_id, pub.msg_type, pub.client_host) == ("OFF", "Delay_Msg", "10.0.0.1")


def test_trace_topic_enable_makes_the_topic_at_start(tmp_path: Path) -> None:
    env = ConsoleEnv(tmp_path / "trace", trace_topic=True)
    try:
        env.open()
        assert env.broker is not None
        config = env.broker.topics.select(TRACE_TOPIC)
        assert config is not None and (config.read_queue_nums, config.write_queue_nums) == (1, 1)
        assert env.broker.topics.is_system_topic(TRACE_TOPIC)
        assert wait_until(
            lambda: env.ns is not None and env.ns.routes.route(TRACE_TOPIC) is not None
        )
        doc = http(env, "GET", f"/api/broker/config?broker={env.broker_addr}").doc
        assert dict(doc["entries"])["traceTopicEnable"] == "true"
    finally:
        env.close()


# ---- replication lag ------------------------------------------------------------------------


def test_replication_lag_only_where_there_is_a_slave(tmp_path: Path) -> None:
    env = ConsoleEnv(tmp_path / "ha", slave=True)
    try:
        env.open()
        with Producer(env.namesrv) as p:
            for i in range(5):
                p.send("HaLagTopic", b"m%d" % i)
        assert env.broker is not None and env.slave is not None
        master_max = env.broker.store.get_max_phy_offset()

        def rows() -> dict[int, dict[str, object]]:
            return {b["brokerId"]: b for b in http(env, "GET", "/api/cluster").doc["brokers"]}

        assert wait_until(lambda: rows()[0]["haLagBytes"] == 0 and rows()[1]["haLagBytes"] == 0, 20)
        assert rows()[1]["commitLogMaxOffset"] == master_max
        env.run(env.slave.shutdown())
        env.slave = None
        # the master with no slave connected has no lag figure (not its whole commit log)
        assert wait_until(lambda: rows()[0]["haLagBytes"] is None, 20)
    finally:
        env.close()
