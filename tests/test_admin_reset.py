"""RESET_CONSUMER_OFFSET (222) over loopback: an offline group's offsets set by the admin
client itself after the brokers answer CONSUMER_NOT_ONLINE, an online group's clients sent
RESET_CONSUMER_CLIENT_OFFSET (220) over their own connections; raw, through AdminClient and
``rocketstore consumer reset-offset``."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from rocketstore.client import Producer, PullConsumer
from rocketstore.client._admin import AdminClient
from rocketstore.protocol._admin_bodies import (
    BodyFormatError,
    MessageQueue,
    decode_reset_offset,
    encode_reset_offset,
)
from rocketstore.remoting import AsyncRemotingClient, Connection, RemotingCommand, ResponseCode
from support.cluster import (
    Cluster,
    close_client,
    create_everywhere,
    invoke,
    online_consumer,
    raw_call,
)
from support.waits import wait_until

RC = ResponseCode
TOPIC = "ResetTopic"
GROUP = "G_reset"


def test_reset_offset_bodies() -> None:
    table = {MessageQueue("T", "b", 1): 7, MessageQueue("T", "a", 0): 3}
    assert encode_reset_offset(table) == (
        b'{"offsetTable":{{"brokerName":"a","queueId":0,"topic":"T"}:3,'
        b'{"brokerName":"b","queueId":1,"topic":"T"}:7}}'
    )
    assert encode_reset_offset(table, for_cpp=True) == (
        b'{"offsetTable":[{"brokerName":"a","offset":3,"queueId":0,"topic":"T"},'
        b'{"brokerName":"b","offset":7,"queueId":1,"topic":"T"}]}'
    )
    for body in (encode_reset_offset(table), encode_reset_offset(table, for_cpp=True)):
        assert decode_reset_offset(body) == table
    with pytest.raises(BodyFormatError):
        decode_reset_offset(b'{"offsetTable":{{"brokerName":"a","queueId":0,"topic":"T"}:"x"}}')


def queues() -> list[MessageQueue]:
    return [MessageQueue(TOPIC, b, q) for b in ("broker-a", "broker-b") for q in (0, 1)]


def commit_all(cluster: Cluster, offset: int) -> None:
    with PullConsumer(cluster.namesrv, GROUP) as consumer:
        for mq in queues():
            consumer.commit_offset(mq, offset)


def offsets(admin: AdminClient) -> dict[MessageQueue, int]:
    stats = admin.examine_consume_stats(GROUP, TOPIC).offset_table
    return {mq: w.consumer_offset for mq, w in stats.items()}


def test_reset_offset(cluster: Cluster, admin: AdminClient) -> None:
    create_everywhere(admin, cluster, TOPIC, queues=2)
    a0 = MessageQueue(TOPIC, "broker-a", 0)
    with Producer(cluster.namesrv) as producer:
        for i in range(2):
            producer.send(TOPIC, b"early-%d" % i, queue=a0)
        time.sleep(0.3)  # the late ones stored at least this much later
        for i in range(2):
            producer.send(TOPIC, b"late-%d" % i, queue=a0)
    store = cluster.brokers["broker-a"].store
    assert wait_until(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 4)
    # a millisecond before the first late one: nearer the late ones whatever the load
    middle = store.get_message_store_timestamp(TOPIC, 0, 2) - 1
    assert store.get_offset_in_queue_by_time(TOPIC, 0, middle) == 2
    addr = cluster.addr("broker-a")
    ext = {"topic": TOPIC, "group": GROUP, "timestamp": str(middle), "isForce": "true"}

    # a group without offsets; a topic the broker does not have; a missing field
    r = raw_call(addr, 222, ext)
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, f"THe consumer group <{GROUP}> not exist")
    r = raw_call(addr, 222, {**ext, "topic": "NoSuchTopic"})
    assert r.code == RC.SYSTEM_ERROR and "no topic in this broker. topic=NoSuchTopic" in r.remark
    r = raw_call(addr, 222, {"topic": TOPIC, "group": GROUP})
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "the custom field <timestamp> is null")

    # offline: the brokers refuse, the admin client sets the offsets itself
    commit_all(cluster, 4)
    r = raw_call(addr, 222, ext)
    assert r.code == RC.CONSUMER_NOT_ONLINE
    assert r.remark == (
        f"Consumer not online, so can not reset offset, Group: {GROUP} Topic: {TOPIC} "
        f"Timestamp: {middle}"
    )
    online, table = admin.reset_consumer_offset(GROUP, TOPIC, middle)
    assert not online
    assert table[a0] == 2 and offsets(admin)[a0] == 2

    # the CLI, offline, back to the start
    result = invoke(
        "consumer", "reset-offset", "-n", cluster.namesrv, "-g", GROUP, "-t", TOPIC,
        "--time", "0", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["online"] is False and {q["offset"] for q in doc["queues"]} == {0}
    result = invoke(
        "consumer", "reset-offset", "-n", cluster.namesrv, "-g", GROUP, "-t", TOPIC,
        "--time", "-5",
    )  # fmt: skip
    assert result.exit_code == 2 and "--time" in result.output

    # online: each client of the group gets RESET_CONSUMER_CLIENT_OFFSET on its connection
    commit_all(cluster, 1)
    received: list[RemotingCommand] = []

    def on_reset(cmd: RemotingCommand, conn: Connection) -> None:
        received.append(cmd)

    client = cluster.run(_online_client(cluster, on_reset))
    try:
        online, table = admin.reset_consumer_offset(GROUP, TOPIC, middle, force=False)
        assert online
        # not forced: only moved back: a0 keeps 1 (its time's offset is 2), the empty queues
        # go back to 0
        assert table == {mq: 1 if mq == a0 else 0 for mq in queues()}
        assert wait_until(lambda: len(received) == 2)
        for cmd in received:
            assert cmd.code == 220 and cmd.is_oneway
            assert cmd.ext_fields == {"topic": TOPIC, "group": GROUP, "timestamp": str(middle)}
        assert {mq for cmd in received for mq in decode_reset_offset(cmd.body)} == set(queues())

        received.clear()
        online, table = admin.reset_consumer_offset(GROUP, TOPIC, -1)  # forced, to the end
        assert online and table[a0] == 4
        assert wait_until(lambda: len(received) == 2)
        assert offsets(admin)[a0] == 1  # the broker leaves moving to the clients
    finally:
        cluster.run(close_client(client))


async def _online_client(
    cluster: Cluster, on_reset: object, group: str = GROUP, topic: str = TOPIC
) -> AsyncRemotingClient:
    """A consumer of ``group`` on both brokers answering RESET_CONSUMER_CLIENT_OFFSET (220)."""
    handlers = {220: on_reset}
    return await online_consumer(cluster, "127.0.0.1@reset-1", group, topic, handlers=handlers)  # type: ignore[arg-type]


def test_reset_offset_of_a_group_with_queues_never_committed(
    cluster: Cluster, admin: AdminClient
) -> None:
    """A group that committed an offset on one queue of a topic (or is online) exists: its
    other queues, never committed, take the time's offset instead of RocketMQ's "THe consumer
    group <G> not exist"; that remark stays for a group no broker knows."""
    topic, group = "ResetPartly", "G_partly"
    create_everywhere(admin, cluster, topic, queues=2)
    everywhere = [MessageQueue(topic, b, q) for b in ("broker-a", "broker-b") for q in (0, 1)]
    a0 = everywhere[0]
    with Producer(cluster.namesrv) as producer:
        for i in range(3):
            producer.send(topic, b"m-%d" % i, queue=a0)
    store = cluster.brokers["broker-a"].store
    assert wait_until(lambda: store.get_max_offset_in_queue(topic, 0) == 3)
    with PullConsumer(cluster.namesrv, group) as consumer:
        consumer.commit_offset(a0, 3)  # the other three queues: never committed
    ext = {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"}
    r = raw_call(cluster.addr("broker-a"), 222, ext)
    assert r.code == RC.CONSUMER_NOT_ONLINE, r.remark  # the group exists, offline
    # broker-b has no offset and no subscription of the group: RocketMQ's remark
    r = raw_call(cluster.addr("broker-b"), 222, ext)
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")

    # offline: every queue's offset is set directly, the never-committed ones too
    result = invoke(
        "consumer", "reset-offset", "-n", cluster.namesrv, "-g", group, "-t", topic,
        "--time", "0", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["online"] is False
    assert {(q["broker_name"], q["queue_id"]): q["offset"] for q in doc["queues"]} == {
        (mq.broker_name, mq.queue_id): 0 for mq in everywhere
    }
    stats = admin.examine_consume_stats(group, topic).offset_table
    assert {mq: stats[mq].consumer_offset for mq in everywhere} == dict.fromkeys(everywhere, 0)
    result = invoke(
        "consumer", "reset-offset", "-n", cluster.namesrv, "-g", group, "-t", topic,
        "--time", "-1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output  # offline, to the end of each queue
    assert {q["queue_id"]: q["offset"] for q in json.loads(result.output)["queues"]
            if q["broker_name"] == "broker-a"} == {0: 3, 1: 0}  # fmt: skip

    # online with nothing committed: the clients are told every queue's offset
    received: list[RemotingCommand] = []
    fresh = "G_partly_online"
    client = cluster.run(
        _online_client(cluster, lambda cmd, _conn: received.append(cmd), fresh, topic)
    )
    try:
        online, table = admin.reset_consumer_offset(fresh, topic, 0, force=False)
        assert online and table == dict.fromkeys(everywhere, 0)
        assert wait_until(lambda: len(received) == 2)
    finally:
        cluster.run(close_client(client))

    # a group no broker knows
    result = invoke(
        "consumer", "reset-offset", "-n", cluster.namesrv, "-g", "G_nobody", "-t", topic,
        "--time", "0",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "THe consumer group <G_nobody> not exist" in result.output


async def _close(client: AsyncRemotingClient) -> None:
    client.close()
    await asyncio.sleep(0)
