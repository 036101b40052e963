"""Administration of a broker's clients and counters over loopback: GET_CONSUMER_CONNECTION_LIST
(203), GET_PRODUCER_CONNECTION_LIST (204), GET_BROKER_CONSUME_STATS (317), VIEW_BROKER_STATS_DATA
(315) and the consume TPS of GET_CONSUME_STATS (208), raw, through AdminClient and through the
``rocketstore consumer|producer connection`` commands; the bodies byte for byte."""

from __future__ import annotations

import json
import logging
import time

import pytest

from rocketstore.broker.state._stats import RollingCounter
from rocketstore.client import ClientError, MessageQueue, Producer, PullConsumer
from rocketstore.client._admin import AdminClient
from rocketstore.protocol._admin_bodies import (
    BodyFormatError,
    BrokerStatsData,
    BrokerStatsItem,
    ClientConnection,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    OffsetWrapper,
    decode_producer_connection,
    encode_producer_connection,
)
from rocketstore.protocol._heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    ProducerData,
    build_subscription,
    encode_heartbeat,
)
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from support.cluster import CLUSTER, Cluster, create_everywhere, invoke, raw_call
from support.waits import wait_dispatched, wait_until

RC = ResponseCode
TOPIC = "ConnTopic"
GROUP = "G_conn"
PRODUCER_GROUP = "P_conn"


# ---- bodies ---------------------------------------------------------------------------------


def test_consumer_connection_is_written_as_fastjson_writes_it() -> None:
    sub = build_subscription("T", "TagA", sub_version=17).to_json()
    body = ConsumerConnection(
        (ClientConnection("10.0.0.1@1", "127.0.0.1:5000", "JAVA", 409),),
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
        {"T": sub},
    )
    assert body.encode() == (
        b'{"connectionSet":[{"clientAddr":"127.0.0.1:5000","clientId":"10.0.0.1@1",'
        b'"language":"JAVA","version":409}],"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
        b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","subscriptionTable":'
        b'{"T":{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG",'
        b'"subString":"TagA","subVersion":17,"tagsSet":["TagA"],"topic":"T"}}}'
    )
    assert ConsumerConnection.decode(body.encode()) == body
    producers = [ClientConnection("c", "a:1", "CPP", 1)]
    assert decode_producer_connection(encode_producer_connection(producers)) == producers
    for bad in (b"[]", b'{"connectionSet":{"a":1}}', b'{"subscriptionTable":{"T":1}}'):
        with pytest.raises(BodyFormatError):
            ConsumerConnection.decode(bad)


def test_stats_bodies() -> None:
    data = BrokerStatsData(
        BrokerStatsItem(6, 0.1, 2.0), BrokerStatsItem(6, 0.0, 2.0), BrokerStatsItem(0, 0, 0)
    )
    assert data.encode() == (
        b'{"statsDay":{"avgpt":0.0,"sum":0,"tps":0.0},"statsHour":{"avgpt":2.0,"sum":6,'
        b'"tps":0.0},"statsMinute":{"avgpt":2.0,"sum":6,"tps":0.1}}'
    )
    assert BrokerStatsData.decode(data.encode()) == data
    with pytest.raises(BodyFormatError):
        BrokerStatsData.decode(b'{"statsMinute":{"sum":"x"}}')
    stats = ConsumeStats({MessageQueue("T", "b", 0): OffsetWrapper(5, 2, 0)}, 1.5)
    listed = ConsumeStatsList("127.0.0.1:10911", [("G", [stats]), ("H", [])], 3)
    assert listed.encode() == (
        b'{"brokerAddr":"127.0.0.1:10911","consumeStatsList":[{"G":[{"consumeTps":1.5,'
        b'"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5,'
        b'"consumerOffset":2,"lastTimestamp":0}}}]},{"H":[]}],"totalDiff":3}'
    )
    assert ConsumeStatsList.decode(listed.encode()) == listed


def test_rolling_counter_windows() -> None:
    counter = RollingCounter()
    counter.add(0, 10)  # a sample (0, 0, 0) first, then the addition
    counter.add(5_000, 20)  # within the 10 s: no new sample
    assert counter.window(10_000, 0) == (30, 3.0, 15.0)
    counter.add(70_000, 5)  # a minute sample at 70 s before the addition ...
    for t in range(80_000, 140_000, 10_000):
        counter.maybe_sample(t)
    # ... and seven kept: the minute window starts at 70 s, only the 5 remain
    total, tps, avgpt = counter.window(135_000, 0)
    assert (total, avgpt) == (5, 5.0) and tps == pytest.approx(5 / 65)
    assert counter.window(135_000, 1)[0] == 35  # the hour still has everything
    for t in range(140_000, 220_000, 10_000):
        counter.maybe_sample(t)
    assert counter.window(220_000, 0) == (0, 0.0, 0.0)

    # one burst, then nothing: gone from the minute five minutes later, still in the hour
    idle = RollingCounter()
    idle.add(0, 6)
    assert idle.window(300_000, 0) == (0, 0.0, 0.0)
    total, tps, avgpt = idle.window(300_000, 1)
    assert (total, avgpt) == (6, 6.0) and tps == pytest.approx(6 / 300)
    assert idle.window(5_000, 0)[0] == 6

    # a counter a few milliseconds old: its TPS is over one 10 s sampling step, as RocketMQ's
    # first sample covers, not over the milliseconds (8 pulls are not 8000 TPS)
    young = RollingCounter()
    young.add(1_000, 8)
    assert young.window(1_001, 0) == (8, 0.8, 8.0)


# ---- a cluster --------------------------------------------------------------------------------


def heartbeat(client: RemotingClient, addr: str, client_id: str) -> None:
    data = HeartbeatData(
        client_id,
        consumers=(
            ConsumerData(
                GROUP,
                ConsumeType.CONSUME_PASSIVELY,
                MessageModel.CLUSTERING,
                ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                (build_subscription(TOPIC, "TagA || TagB", sub_version=42),),
            ),
        ),
        producers=(ProducerData(PRODUCER_GROUP),),
    )
    r = client.invoke(addr, RemotingCommand.request(34, {}, body=encode_heartbeat(data)))
    assert r.code == RC.SUCCESS, r.remark


def test_consumer_and_producer_connections(cluster: Cluster, admin: AdminClient) -> None:
    addr = cluster.addr("broker-a")
    create_everywhere(admin, cluster, TOPIC)
    with RemotingClient(timeout=5) as client:
        heartbeat(client, addr, "127.0.0.1@conn-1")
        broker = cluster.brokers["broker-a"]
        (peer,) = [c.channel.peer for c in broker.consumers.group_info(GROUP).clients]

        r = raw_call(addr, 203, {"consumerGroup": GROUP})
        assert r.code == RC.SUCCESS
        doc = json.loads(bytes(r.body))
        assert list(doc) == [
            "connectionSet",
            "consumeFromWhere",
            "consumeType",
            "messageModel",
            "subscriptionTable",
        ]
        assert doc["connectionSet"] == [
            {
                "clientAddr": peer,
                "clientId": "127.0.0.1@conn-1",
                "language": "PYTHON",
                "version": 409,
            }
        ]
        assert peer.startswith("127.0.0.1:")
        assert doc["consumeType"] == "CONSUME_PASSIVELY"
        assert doc["messageModel"] == "CLUSTERING"
        assert doc["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
        sub = doc["subscriptionTable"][TOPIC]
        assert (sub["subString"], sub["subVersion"], sorted(sub["tagsSet"])) == (
            "TagA || TagB",
            42,
            ["TagA", "TagB"],
        )

        cc = admin.examine_consumer_connection(GROUP)
        assert [c.client_id for c in cc.connections] == ["127.0.0.1@conn-1"]
        assert set(cc.subscriptions) == {TOPIC}

        # the CLI
        result = invoke("consumer", "connection", "-n", cluster.namesrv, "-g", GROUP, "--json")
        assert result.exit_code == 0, result.output
        out = json.loads(result.output)
        assert out["connections"][0]["client_addr"] == peer
        assert out["subscriptions"][TOPIC]["sub_string"] == "TagA || TagB"
        assert out["message_model"] == "CLUSTERING"
        result = invoke("consumer", "connection", "-n", cluster.namesrv, "-g", GROUP)
        assert result.exit_code == 0 and "127.0.0.1@conn-1" in result.output

        # producers
        r = raw_call(addr, 204, {"producerGroup": PRODUCER_GROUP})
        assert r.code == RC.SUCCESS
        assert json.loads(bytes(r.body)) == {
            "connectionSet": [
                {"clientAddr": peer, "clientId": "127.0.0.1@conn-1", "language": "PYTHON"}
                | {"version": 409}
            ]
        }
        assert [c.client_addr for c in admin.producer_connection(addr, PRODUCER_GROUP)] == [peer]
        assert [c.client_id for c in admin.examine_producer_connection(PRODUCER_GROUP)] == [
            "127.0.0.1@conn-1"
        ]
        result = invoke(
            "producer", "connection", "-n", cluster.namesrv, "-g", PRODUCER_GROUP, "--json"
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["connections"][0]["client_id"] == "127.0.0.1@conn-1"

    # the client gone: the group is offline
    assert wait_until(lambda: cluster.brokers["broker-a"].consumers.group_info(GROUP) is None)
    r = raw_call(addr, 203, {"consumerGroup": GROUP})
    assert (r.code, r.remark) == (RC.CONSUMER_NOT_ONLINE, f"the consumer group[{GROUP}] not online")
    with pytest.raises(ClientError) as info:
        admin.examine_consumer_connection(GROUP)
    assert info.value.code == RC.CONSUMER_NOT_ONLINE
    r = raw_call(addr, 204, {"producerGroup": PRODUCER_GROUP})
    assert (r.code, r.remark) == (
        RC.SYSTEM_ERROR,
        f"the producer group[{PRODUCER_GROUP}] not exist",
    )
    result = invoke("producer", "connection", "-n", cluster.namesrv, "-g", PRODUCER_GROUP)
    assert result.exit_code == 1 and "no producer of group" in result.output
    result = invoke("consumer", "connection", "-n", cluster.namesrv, "-g", GROUP)
    assert result.exit_code == 1 and "not online" in result.output
    assert "Traceback" not in result.output
    for code in (203, 204):
        r = raw_call(addr, code, {})
        assert r.code == RC.SYSTEM_ERROR and "is null" in (r.remark or "")


def test_consume_tps_broker_consume_stats_and_stats_data(
    cluster: Cluster, admin: AdminClient, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = "StatsTopic", "G_stats"
    addr = cluster.addr("broker-a")
    create_everywhere(admin, cluster, topic, queues=1)
    mq = MessageQueue(topic, "broker-a", 0)
    with Producer(cluster.namesrv) as producer:
        for i in range(6):
            producer.send(topic, b"m%d" % i, queue=mq)
    store = cluster.brokers["broker-a"].store
    assert wait_until(lambda: store.get_max_offset_in_queue(topic, 0) == 6)
    with PullConsumer(cluster.namesrv, group) as consumer:
        assert len(consumer.pull(mq, 0, 4).messages) == 4
        assert len(consumer.pull(mq, 4, 4).messages) == 2
        consumer.commit_offset(mq, 5)
    time.sleep(0.01)  # the TPS counts per millisecond: let at least one pass since the pulls

    stats = admin.consume_stats(addr, group, topic)
    assert stats.offset_table[mq].consumer_offset == 5
    assert stats.consume_tps > 0.0
    assert admin.consume_stats(addr, "G_never_pulled", topic).consume_tps == 0.0

    # every group of the broker
    listed = admin.broker_consume_stats(addr)
    assert listed.broker_addr == addr
    by_group = dict(listed.groups)
    (mine,) = by_group[group]
    assert mine.offset_table == {mq: OffsetWrapper(6, 5, mine.offset_table[mq].last_timestamp)}
    assert mine.consume_tps > 0.0
    assert listed.total_diff == sum(s.total_lag() for _, lst in listed.groups for s in lst)
    assert listed.total_diff >= 1
    assert dict(admin.broker_consume_stats(addr, only_order=True).groups)[group] == []

    # rolling counters
    got = admin.broker_stats(addr, "GROUP_GET_NUMS", f"{topic}@{group}")
    assert got.minute.sum == got.hour.sum == got.day.sum == 6
    assert got.minute.avgpt == 3.0  # two pulls
    assert got.minute.tps > 0.0
    assert admin.broker_stats(addr, "GROUP_GET_SIZE", f"{topic}@{group}").minute.sum > 0
    put = admin.broker_stats(addr, "TOPIC_PUT_NUMS", topic)
    assert put.minute.sum == 6
    assert admin.broker_stats(addr, "BROKER_GET_NUMS", CLUSTER).minute.sum >= 6
    assert admin.broker_stats(addr, "BROKER_PUT_NUMS", CLUSTER).minute.sum >= 6
    with caplog.at_level(logging.DEBUG, logger="rocketstore.broker"):
        for name, key in (("GROUP_GET_NUMS", "nope@x"), ("NO_SUCH_STATS", topic)):
            r = raw_call(addr, 315, {"statsName": name, "statsKey": key})
            assert (r.code, r.remark) == (RC.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
    # a statistic not kept (yet) is an answer, not a fault: the console asks for every topic
    absent = [r for r in caplog.records if "not exist" in r.getMessage()]
    assert absent and all(r.levelno == logging.DEBUG for r in absent)
    r = raw_call(addr, 315, {"statsKey": topic})
    assert r.code == RC.SYSTEM_ERROR and r.remark == "the custom field <statsName> is null"


def test_cli_broker_stats(cluster: Cluster, admin: AdminClient) -> None:
    topic, group = "CliStatsTopic", "G_cli_stats"
    addr = cluster.addr("broker-a")
    create_everywhere(admin, cluster, topic, queues=1)
    mq = MessageQueue(topic, "broker-a", 0)
    with Producer(cluster.namesrv) as producer:
        for i in range(3):
            producer.send(topic, b"m%d" % i, queue=mq)
    wait_dispatched(cluster.brokers["broker-a"].store)  # all three in the queue first
    with PullConsumer(cluster.namesrv, group) as consumer:
        assert len(consumer.pull(mq, 0, 8).messages) == 3
        consumer.commit_offset(mq, 3)

    args = ("broker-stats", "-n", cluster.namesrv, "-b", addr)
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    rows = {(r["name"], r["key"]): r for r in json.loads(result.output)}
    assert rows[("TOPIC_PUT_NUMS", topic)]["day"]["sum"] == 3
    assert rows[("GROUP_GET_NUMS", f"{topic}@{group}")]["minute"]["sum"] == 3

    result = invoke(*args, "--name", "GROUP_GET_SIZE", "--key", f"{topic}@{group}", "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["minute"]["sum"] > 0
    result = invoke(*args)
    assert result.exit_code == 0 and topic in result.output

    result = invoke(*args, "--name", "TOPIC_PUT_NUMS", "--key", "NoSuchTopic")
    assert result.exit_code == 1 and "The stats <TOPIC_PUT_NUMS> <NoSuchTopic> not exist" in (
        result.output
    )
    result = invoke(*args, "--name", "TOPIC_PUT_NUMS")
    assert result.exit_code == 2 and "together" in result.output
