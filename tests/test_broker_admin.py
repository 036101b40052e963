"""Administration over loopback: a name server and two broker groups of one cluster on an
event loop in a background thread; the admin codes (17, 21, 26, 28, 202, 208, 215, 300), the
queries (12, 33) and every ``rocketstore`` admin command (through click's CliRunner) against
them, plus the fastjson bodies byte for byte."""

from __future__ import annotations

import json
import time

import pytest

from rocketstore.client import ClientError, MessageQueue, Producer, PullConsumer, decode_records
from rocketstore.client._admin import AdminClient
from rocketstore.protocol._admin_bodies import (
    BodyFormatError,
    ConsumeStats,
    OffsetWrapper,
    TopicOffset,
    decode_group_list,
    decode_kv_table,
    decode_topic_stats,
    dumps,
    encode_kv_table,
    encode_topic_stats,
    loads,
)
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from support.cluster import CLUSTER, Cluster, create_everywhere, invoke, raw_call
from support.waits import wait_until

GROUP = "G_admin"
RC = ResponseCode


# ---- bodies ---------------------------------------------------------------------------------


def test_consume_stats_is_written_as_fastjson_writes_it() -> None:
    stats = ConsumeStats(
        {
            MessageQueue("T", "broker-b", 0): OffsetWrapper(7, 7, 1_700_000_000_123),
            MessageQueue("T", "broker-a", 1): OffsetWrapper(3, 1, 0),
        },
        0.0,
    )
    assert stats.encode() == (
        b'{"consumeTps":0.0,"offsetTable":{'
        b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":3,"consumerOffset":1,"lastTimestamp":0},'
        b'{"brokerName":"broker-b","queueId":0,"topic":"T"}:'
        b'{"brokerOffset":7,"consumerOffset":7,"lastTimestamp":1700000000123}}}'
    )
    assert ConsumeStats.decode(stats.encode()) == stats
    assert stats.total_lag() == 2


def test_consume_stats_reads_other_writers_forms() -> None:
    # pretty-printed, keys as Java's toString or as JSON text, a TPS with an exponent
    text = """{
        "offsetTable": {
            "MessageQueue [topic=T, brokerName=b, queueId=2]": {"brokerOffset": 9,
                "consumerOffset": 4, "lastTimestamp": 5},
            "{\\"topic\\":\\"T\\",\\"brokerName\\":\\"b\\",\\"queueId\\":3}": {"brokerOffset": 1}
        },
        "consumeTps": 1.5E1
    }"""
    stats = ConsumeStats.decode(text)
    assert stats.consume_tps == 15.0
    assert stats.offset_table == {
        MessageQueue("T", "b", 2): OffsetWrapper(9, 4, 5),
        MessageQueue("T", "b", 3): OffsetWrapper(1, 0, 0),
    }
    for bad in (b"[]", b"{", b'{"offsetTable":{{"topic":"T"}:{}}}', b'{"consumeTps":"x"}'):
        with pytest.raises(BodyFormatError):
            ConsumeStats.decode(bad)


def test_fastjson_reader_and_writer_round_trip() -> None:
    text = '{0:"a",-3:[1,2.5,true,false,null],"k":{"x":{}},{"b":1,"a":[2]}:"obj"}'
    doc = loads(text)
    assert doc[0] == "a" and doc[-3] == [1, 2.5, True, False, None]
    assert doc[(("b", 1), ("a", (2,)))] == "obj"
    assert loads(' { "s" : "\\u00e9\\n" } ') == {"s": "é\n"}
    assert dumps({0: "a", "k": {"x": 1.0}, (("q", 1),): []}) == '{0:"a","k":{"x":1.0},{"q":1}:[]}'
    with pytest.raises(BodyFormatError):
        loads("{} x")


def test_small_bodies() -> None:
    assert encode_kv_table({"a": "1"}) == b'{"table":{"a":"1"}}'
    assert decode_kv_table(b'{"table":{"a":"1","b":"x y"}}') == {"a": "1", "b": "x y"}
    table = {MessageQueue("T", "b", 0): TopicOffset(1, 5, 99)}
    assert encode_topic_stats(table) == (
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
        b'{"lastUpdateTimestamp":99,"maxOffset":5,"minOffset":1}}}'
    )
    assert decode_topic_stats(encode_topic_stats(table)) == table
    assert decode_group_list(b'{"groupList":["G1","G2"]}') == ["G1", "G2"]


# ---- a name server and two broker groups ----------------------------------------------------


# ---- UPDATE_AND_CREATE_TOPIC, GET_ALL_TOPIC_CONFIG ------------------------------------------


def test_create_topic_updates_config_and_registers_at_once(
    cluster: Cluster, admin: AdminClient
) -> None:
    addr = cluster.addr("broker-a")
    admin.create_topic(addr, "AdminCreated", read_queue_nums=3, write_queue_nums=2, perm=4)
    configs = admin.topic_configs(addr)
    assert configs["AdminCreated"] == {
        "order": False,
        "perm": 4,
        "readQueueNums": 3,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "AdminCreated",
        "topicSysFlag": 0,
        "writeQueueNums": 2,
    }
    assert "AdminCreated" not in admin.topic_configs(cluster.addr("broker-b"))
    # registered with the name server at once, not at the next 30 s period
    assert wait_until(lambda: cluster.route("AdminCreated") is not None)
    route = cluster.route("AdminCreated")
    assert [
        (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas
    ] == [("broker-a", 3, 2, 4)]

    # the body is the broker's TopicConfigSerializeWrapper, compact
    r = raw_call(addr, 21, {})
    doc = json.loads(bytes(r.body))
    assert list(doc) == ["dataVersion", "topicConfigTable"]
    assert b"\n" not in bytes(r.body) and b"\t" not in bytes(r.body)

    # an update with the same settings changes nothing (no new data version)
    version = cluster.brokers["broker-a"].topics.data_version
    admin.create_topic(addr, "AdminCreated", read_queue_nums=3, write_queue_nums=2, perm=4)
    assert cluster.brokers["broker-a"].topics.data_version == version
    admin.create_topic(addr, "AdminCreated", read_queue_nums=4, write_queue_nums=4, order=True)
    assert cluster.brokers["broker-a"].topics.data_version.counter == version.counter + 1
    assert admin.topic_configs(addr)["AdminCreated"]["order"] is True


def _create_ext(**over: str) -> dict[str, str]:
    ext = {
        "topic": "Fine",
        "defaultTopic": "TBW102",
        "readQueueNums": "4",
        "writeQueueNums": "4",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }
    ext.update(over)
    return {k: v for k, v in ext.items() if v != "-"}


@pytest.mark.parametrize(
    ("over", "remark"),
    [
        ({"topic": "bad topic"}, "contains illegal characters"),
        ({"topic": "x" * 128}, "longer than topic max length"),
        (
            {"topic": "SCHEDULE_TOPIC_XXXX"},
            "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic.",
        ),
        ({"topic": "rmq_sys_mine"}, "conflict with system topic"),
        ({"topic": "C1"}, "conflict with system topic"),  # the cluster-name topic
        ({"perm": "-"}, "the custom field <perm> is null"),
        ({"readQueueNums": "four"}, "readQueueNums: not an integer"),
        ({"topicFilterType": "SQL92"}, "topicFilterType = [SQL92] value invalid"),
        ({"writeQueueNums": "-1"}, "must not be negative"),
        ({"perm": "99"}, "perm 99 is not a permission"),
    ],
)
def test_create_topic_refuses_bad_requests(
    cluster: Cluster, over: dict[str, str], remark: str
) -> None:
    r = raw_call(cluster.addr("broker-a"), 17, _create_ext(**over))
    assert r.code == RC.SYSTEM_ERROR
    assert r.remark is not None and remark in r.remark
    assert "Fine" not in cluster.brokers["broker-a"].topics.all()


# ---- runtime info, broker config, topic stats -----------------------------------------------


def test_runtime_info_and_broker_config(cluster: Cluster, admin: AdminClient) -> None:
    addr = cluster.addr("broker-b")
    info = admin.runtime_info(addr)
    assert info["brokerVersionDesc"] == "V4_9_8" and info["brokerVersion"] == "409"
    # RocketMQ 5's keys that its mqadmin clusterList reads: a master is #Activated
    assert info["brokerActive"] == "true"
    assert info["getTransferredTps"] == info["getTransferedTps"]
    for key in (
        "putTps",
        "getTransferedTps",
        "commitLogMaxOffset",
        "earliestMessageTimeStamp",
        "commitLogDirCapacity",
        "runtime",
        "bootTimestamp",
    ):
        assert key in info, key
    # every key RocketMQ 4.9.8's brokerStatus lists (mqadmin prints them all)
    assert info["putMessageFailedTimes"] == "0"
    assert float(info["putLatency99"]) >= 0 and float(info["putLatency999"]) >= 0
    assert info["remainTransientStoreBufferNumbs"] == str(2**31 - 1)  # no write buffers
    assert (info["sendThreadPoolQueueCapacity"], info["EndTransactionQueueSize"]) == ("10000", "0")
    for key in ("msgPutTotalYesterdayMorning", "msgGetTotalTodayMorning"):
        assert info[key] == "0", key  # recorded at the first midnight after start
    assert int(info["msgGetTotalTodayNow"]) >= 0
    config = admin.broker_config(addr)
    assert config["brokerName"] == "broker-b"
    assert config["brokerClusterName"] == CLUSTER
    assert config["mappedFileSizeCommitLog"] == str(256 * 1024)
    r = raw_call(addr, 26, {})
    assert json.loads(r.ext_fields["version"])["counter"] == 0


def test_topic_stats_and_consumers_by_topic(cluster: Cluster, admin: AdminClient) -> None:
    create_everywhere(admin, cluster, "StatsTopic", queues=2)
    with Producer(cluster.namesrv) as producer:
        for i in range(3):
            producer.send("StatsTopic", b"s%d" % i, queue=MessageQueue("StatsTopic", "broker-a", 1))
    addr = cluster.addr("broker-a")
    assert wait_until(
        lambda: cluster.brokers["broker-a"].store.get_max_offset_in_queue("StatsTopic", 1) == 3
    )
    stats = decode_topic_stats(raw_call(addr, 202, {"topic": "StatsTopic"}).body)
    assert stats[MessageQueue("StatsTopic", "broker-a", 0)] == TopicOffset(0, 0, 0)
    q1 = stats[MessageQueue("StatsTopic", "broker-a", 1)]
    assert (q1.min_offset, q1.max_offset) == (0, 3) and q1.last_update_timestamp > 0
    missing = raw_call(addr, 202, {"topic": "NoSuchTopic"})
    assert (missing.code, missing.remark) == (RC.TOPIC_NOT_EXIST, "topic[NoSuchTopic] not exist")

    with PullConsumer(cluster.namesrv, "G_stats") as consumer:
        consumer.commit_offset(MessageQueue("StatsTopic", "broker-a", 1), 2)
    groups = decode_group_list(raw_call(addr, 300, {"topic": "StatsTopic"}).body)
    assert groups == ["G_stats"]


# ---- GET_CONSUME_STATS ----------------------------------------------------------------------


def test_consume_stats_per_queue(cluster: Cluster, admin: AdminClient) -> None:
    topic = "ProgressTopic"
    create_everywhere(admin, cluster, topic, queues=2)
    sent: dict[MessageQueue, int] = {
        MessageQueue(topic, "broker-a", 0): 4,
        MessageQueue(topic, "broker-a", 1): 1,
        MessageQueue(topic, "broker-b", 0): 3,
    }
    with Producer(cluster.namesrv) as producer:
        for mq, n in sent.items():
            for i in range(n):
                producer.send(topic, b"%s-%d" % (mq.broker_name.encode(), i), queue=mq)
    for mq, n in sent.items():
        store = cluster.brokers[mq.broker_name].store
        qid = mq.queue_id
        assert wait_until(lambda s=store, q=qid, n=n: s.get_max_offset_in_queue(topic, q) == n)

    a0, b0 = MessageQueue(topic, "broker-a", 0), MessageQueue(topic, "broker-b", 0)
    with PullConsumer(cluster.namesrv, GROUP) as consumer:
        pulled = consumer.pull(a0, 0, 32)
        consumer.commit_offset(a0, 3)
        consumer.commit_offset(b0, 3)
    third = pulled.messages[2]
    time.sleep(0.01)  # the consume TPS counts per millisecond since the pull

    a = admin.consume_stats(cluster.addr("broker-a"), GROUP, topic)
    assert a.offset_table == {
        a0: OffsetWrapper(4, 3, third.store_timestamp),
        MessageQueue(topic, "broker-a", 1): OffsetWrapper(1, 0, 0),
    }
    assert a.consume_tps > 0.0  # 4 messages pulled by the group within the minute
    # no topic: every topic the group has offsets on
    assert admin.consume_stats(cluster.addr("broker-a"), GROUP).offset_table == a.offset_table

    merged = admin.examine_consume_stats(GROUP, topic)
    assert set(merged.offset_table) == {
        a0,
        MessageQueue(topic, "broker-a", 1),
        b0,
        MessageQueue(topic, "broker-b", 1),
    }
    assert merged.offset_table[b0].lag == 0
    assert merged.total_lag() == 1 + 1 + 0 + 0

    unknown = admin.consume_stats(cluster.addr("broker-b"), "G_never")
    assert unknown.offset_table == {}
    r = raw_call(cluster.addr("broker-b"), 208, {})
    assert r.code == RC.SYSTEM_ERROR and r.remark == "the custom field <consumerGroup> is null"


# ---- DELETE_TOPIC_IN_BROKER -----------------------------------------------------------------


def test_delete_topic_in_broker(cluster: Cluster, admin: AdminClient) -> None:
    topic = "DoomedTopic"
    create_everywhere(admin, cluster, topic, queues=1)
    with Producer(cluster.namesrv) as producer:
        producer.send(topic, b"x", queue=MessageQueue(topic, "broker-a", 0))
    with PullConsumer(cluster.namesrv, "G_doomed") as consumer:
        consumer.commit_offset(MessageQueue(topic, "broker-a", 0), 1)
    broker = cluster.brokers["broker-a"]
    assert broker.offsets.topics_by_group("G_doomed") == {topic}

    admin.delete_topic_in_broker(cluster.addr("broker-a"), topic)
    assert topic not in admin.topic_configs(cluster.addr("broker-a"))
    assert topic in admin.topic_configs(cluster.addr("broker-b"))
    assert broker.offsets.topics_by_group("G_doomed") == set()
    if hasattr(broker.store, "delete_topic"):
        assert broker.store.get_max_offset_in_queue(topic, 0) == 0

    for bad, remark in (("TBW102", "conflict with system topic"), ("a/b", "illegal")):
        r = raw_call(cluster.addr("broker-a"), 215, {"topic": bad})
        assert r.code == RC.SYSTEM_ERROR and r.remark is not None and remark in r.remark


# ---- QUERY_MESSAGE, VIEW_MESSAGE_BY_ID ------------------------------------------------------


def test_query_by_key_and_view_by_id(cluster: Cluster, admin: AdminClient) -> None:
    topic = "KeyedTopic"
    create_everywhere(admin, cluster, topic, queues=1)
    with Producer(cluster.namesrv) as producer:
        r1 = producer.send(
            topic, b"first", keys=["order-1"], tags="TA", queue=MessageQueue(topic, "broker-a", 0)
        )
        r2 = producer.send(
            topic, b"second", keys=["order-1", "other"], queue=MessageQueue(topic, "broker-b", 0)
        )
        r3 = producer.send(
            topic, b"third", keys=["order-2"], queue=MessageQueue(topic, "broker-a", 0)
        )
    for broker in cluster.brokers.values():
        assert wait_until(lambda b=broker: b.store.dispatch_behind_bytes() == 0)

    found = admin.query_message(topic, "order-1")
    assert [m.body for m in found] == [b"first", b"second"]
    assert [m.msg_id for m in found] == [r1.offset_msg_id, r2.offset_msg_id]
    assert found[0].tags == "TA" and found[1].keys == ["order-1", "other"]

    by_uniq = admin.query_message(topic, r3.msg_id, unique_key=True)
    assert [m.body for m in by_uniq] == [b"third"]

    # the raw answer: stored records concatenated, with the index's progress
    addr = cluster.addr("broker-a")
    ext = {
        "topic": topic,
        "key": "order-1",
        "maxNum": "32",
        "beginTimestamp": "0",
        "endTimestamp": str(2**63 - 1),
    }
    r = raw_call(addr, 12, ext)
    assert r.code == RC.SUCCESS
    assert [m.body for m in decode_records(r.body)] == [b"first"]
    assert int(r.ext_fields["indexLastUpdatePhyoffset"]) > 0
    assert int(r.ext_fields["indexLastUpdateTimestamp"]) > 0
    none = raw_call(addr, 12, {**ext, "key": "no-such-key"})
    assert (none.code, none.remark) == (
        RC.QUERY_NOT_FOUND,
        "can not find message, maybe time range not correct",
    )
    assert "indexLastUpdateTimestamp" in none.ext_fields
    late = raw_call(addr, 12, {**ext, "beginTimestamp": str(2**62)})
    assert late.code == RC.QUERY_NOT_FOUND
    missing = raw_call(addr, 12, {k: v for k, v in ext.items() if k != "maxNum"})
    assert missing.code == RC.SYSTEM_ERROR and missing.remark == "the custom field <maxNum> is null"

    viewed = admin.view_message(r3.offset_msg_id)
    assert viewed.body == b"third" and viewed.keys == ["order-2"]
    assert viewed.msg_id == r3.offset_msg_id
    # the record exactly as stored
    store_msg = cluster.brokers["broker-a"].store.look_message_by_offset(viewed.commitlog_offset)
    assert store_msg is not None
    v = raw_call(addr, 33, {"offset": str(viewed.commitlog_offset)})
    assert len(v.body) == store_msg.store_size
    for offset in (viewed.commitlog_offset + 1, 10**12, -5):
        bad = raw_call(addr, 33, {"offset": str(offset)})
        assert (bad.code, bad.remark) == (
            RC.SYSTEM_ERROR,
            f"can not find message by the offset, {offset}",
        )


# ---- the rocketstore commands ---------------------------------------------------------------


def test_cli_topic_create_list_route_delete(cluster: Cluster, admin: AdminClient) -> None:
    ns = cluster.namesrv
    r = invoke(
        "topic",
        "create",
        "--namesrv",
        ns,
        "--topic",
        "CliTopic",
        "--queues",
        "3",
        "--cluster",
        CLUSTER,
    )
    assert r.exit_code == 0, r.output
    assert r.output.count("success") == 2
    for name in cluster.brokers:
        assert admin.topic_configs(cluster.addr(name))["CliTopic"]["writeQueueNums"] == 3
    assert wait_until(
        lambda: (x := cluster.route("CliTopic")) is not None and len(x.broker_datas) == 2
    )

    one = invoke(
        "topic",
        "create",
        "-n",
        ns,
        "-t",
        "CliOne",
        "--broker",
        cluster.addr("broker-b"),
        "--read-queues",
        "2",
        "--write-queues",
        "1",
        "--perm",
        "6",
    )
    assert one.exit_code == 0, one.output
    assert admin.topic_configs(cluster.addr("broker-b"))["CliOne"]["readQueueNums"] == 2
    assert "CliOne" not in admin.topic_configs(cluster.addr("broker-a"))
    assert wait_until(lambda: cluster.route("CliOne") is not None)

    listed = invoke("topic", "list", "--namesrv", ns)
    assert listed.exit_code == 0
    assert {"CliTopic", "CliOne"} <= set(listed.output.split())
    as_json = json.loads(invoke("topic", "list", "--namesrv", ns, "--json").output)
    assert "CliTopic" in as_json

    route = json.loads(invoke("topic", "route", "-n", ns, "-t", "CliTopic", "--json").output)
    assert [b["broker_name"] for b in route["brokers"]] == ["broker-a", "broker-b"]
    assert invoke("topic", "route", "-n", ns, "-t", "CliTopic").exit_code == 0

    bad = invoke("topic", "create", "-n", ns, "-t", "bad name", "-c", CLUSTER)
    assert bad.exit_code == 1 and "illegal characters" in bad.output

    gone = invoke("topic", "delete", "--namesrv", ns, "--topic", "CliTopic", "--cluster", CLUSTER)
    assert gone.exit_code == 0, gone.output
    assert "from NameServer success" in gone.output
    assert cluster.route("CliTopic") is None
    for name in cluster.brokers:
        assert "CliTopic" not in admin.topic_configs(cluster.addr(name))
    assert "CliTopic" not in invoke("topic", "list", "--namesrv", ns).output.split()
    # without --cluster: the brokers of the topic's route
    assert invoke("topic", "delete", "-n", ns, "-t", "CliOne").exit_code == 0
    assert cluster.route("CliOne") is None
    assert "CliOne" not in admin.topic_configs(cluster.addr("broker-b"))
    missing = invoke("topic", "route", "-n", ns, "-t", "CliOne")
    assert missing.exit_code == 1


def test_cli_cluster_list(cluster: Cluster) -> None:
    r = invoke("cluster", "list", "--namesrv", cluster.namesrv, "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["cluster"], x["broker_name"], x["broker_id"], x["address"]) for x in rows] == [
        (CLUSTER, "broker-a", 0, cluster.addr("broker-a")),
        (CLUSTER, "broker-b", 0, cluster.addr("broker-b")),
    ]
    assert all(x["version"] == "V4_9_8" for x in rows)
    table = invoke("cluster", "list", "--namesrv", cluster.namesrv)
    assert table.exit_code == 0
    for name in ("broker-a", "broker-b", cluster.addr("broker-a"), cluster.addr("broker-b")):
        assert name in table.output
    unknown = invoke("cluster", "list", "-n", cluster.namesrv, "-c", "NoSuchCluster")
    assert unknown.exit_code == 1 and "NoSuchCluster" in unknown.output


def test_cli_consumer_progress(cluster: Cluster, admin: AdminClient) -> None:
    topic, group = "LagTopic", "G_lag"
    create_everywhere(admin, cluster, topic, queues=1)
    with Producer(cluster.namesrv) as producer:
        for name, n in (("broker-a", 5), ("broker-b", 2)):
            for i in range(n):
                producer.send(topic, b"m%d" % i, queue=MessageQueue(topic, name, 0))
    for name, n in (("broker-a", 5), ("broker-b", 2)):
        store = cluster.brokers[name].store
        assert wait_until(lambda s=store, n=n: s.get_max_offset_in_queue(topic, 0) == n)
    with PullConsumer(cluster.namesrv, group) as consumer:
        consumer.join_group({topic: "*"})  # its heartbeat makes the group's %RETRY% topic
        consumer.commit_offset(MessageQueue(topic, "broker-a", 0), 2)
        consumer.commit_offset(MessageQueue(topic, "broker-b", 0), 2)

    r = invoke("consumer", "progress", "--namesrv", cluster.namesrv, "--group", group, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["total_lag"] == 3
    lags = {
        (q["broker_name"], q["queue_id"]): (q["broker_offset"], q["consumer_offset"], q["lag"])
        for q in doc["queues"]
    }
    assert lags == {("broker-a", 0): (5, 2, 3), ("broker-b", 0): (2, 2, 0)}
    assert all(q["last_timestamp"] > 0 for q in doc["queues"])

    table = invoke("consumer", "progress", "-n", cluster.namesrv, "-g", group, "-t", topic)
    assert table.exit_code == 0
    assert "Total lag: 3" in table.output and "broker-a" in table.output

    none = invoke("consumer", "progress", "-n", cluster.namesrv, "-g", "G_nobody")
    assert none.exit_code == 1 and "no consume stats" in none.output

    # without -g, as mqadmin consumerProgress: a line for every group, with its total lag
    every = invoke("consumer", "progress", "-n", cluster.namesrv, "--json")
    assert every.exit_code == 0, every.output
    by_group = {row["group"]: row for row in json.loads(every.output)}
    assert by_group[group]["total_lag"] == 3 and by_group[group]["count"] == 0
    table = invoke("consumer", "progress", "-n", cluster.namesrv)
    assert table.exit_code == 0 and group in table.output and "Diff Total" in table.output


def test_cli_message_query_and_view(cluster: Cluster, admin: AdminClient) -> None:
    topic = "CliKeyed"
    create_everywhere(admin, cluster, topic, queues=1)
    with Producer(cluster.namesrv) as producer:
        sent = producer.send(
            topic, b"hello", keys=["k-cli"], queue=MessageQueue(topic, "broker-b", 0)
        )
    assert wait_until(lambda: cluster.brokers["broker-b"].store.dispatch_behind_bytes() == 0)

    r = invoke("message", "query", "-n", cluster.namesrv, "-t", topic, "-k", "k-cli", "--json")
    assert r.exit_code == 0, r.output
    [doc] = json.loads(r.output)
    assert doc["body"] == "hello" and doc["offset_msg_id"] == sent.offset_msg_id
    assert doc["msg_id"] == sent.msg_id and doc["keys"] == ["k-cli"]
    table = invoke("message", "query", "-n", cluster.namesrv, "-t", topic, "-k", "k-cli")
    assert table.exit_code == 0 and sent.offset_msg_id in table.output
    nothing = invoke("message", "query", "-n", cluster.namesrv, "-t", topic, "-k", "nope")
    assert nothing.exit_code == 1

    v = invoke(
        "message", "view", "-n", cluster.namesrv, "--offset-msg-id", sent.offset_msg_id, "--json"
    )
    assert v.exit_code == 0, v.output
    assert json.loads(v.output)["body"] == "hello"
    v2 = invoke("message", "view", "-b", cluster.addr("broker-b"), "-i", sent.offset_msg_id)
    assert v2.exit_code == 0 and "hello" in v2.output
    bad = invoke("message", "view", "-i", "XYZ")
    assert bad.exit_code == 1 and "not a message id" in bad.output


def test_admin_client_errors(cluster: Cluster, admin: AdminClient) -> None:
    with pytest.raises(ClientError) as info:
        admin.create_topic(cluster.addr("broker-a"), "TBW102")
    assert info.value.code == RC.SYSTEM_ERROR
    with pytest.raises(ValueError, match="no name server"):
        AdminClient().topic_list()


def test_a_new_groups_retry_route_is_known_when_the_heartbeat_is_answered(
    cluster: Cluster,
) -> None:
    group = "FreshHeartbeatGroup"
    consumer = {
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY",
        "groupName": group,
        "messageModel": "CLUSTERING",
        "subscriptionDataSet": [],
        "unitMode": False,
    }
    body = json.dumps({"clientID": "127.0.0.1@hb", "consumerDataSet": [consumer]}).encode()
    assert cluster.route(f"%RETRY%{group}") is None
    with RemotingClient(timeout=5) as client:
        answer = client.invoke(cluster.addr("broker-a"), RemotingCommand.request(34, {}, body))
        assert answer.code == ResponseCode.SUCCESS
        # no wait: the broker registered the new retry topic before it answered
        route = cluster.route(f"%RETRY%{group}")
        assert route is not None and [b.broker_name for b in route.broker_datas] == ["broker-a"]
