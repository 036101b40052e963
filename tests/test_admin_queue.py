"""The store's consume queues administered over loopback: QUERY_CONSUME_QUEUE (321),
CLEAN_UNUSED_TOPIC (316) and CLEAN_EXPIRED_CONSUMEQUEUE (306), raw and through AdminClient;
QueryConsumeQueueResponseBody byte for byte."""

from __future__ import annotations

import json

import pytest

from rocketstore.client import MessageQueue, Producer
from rocketstore.client._admin import AdminClient
from rocketstore.protocol._admin_bodies import (
    BodyFormatError,
    ConsumeQueueUnit,
    QueryConsumeQueueBody,
)
from rocketstore.remoting import ResponseCode
from rocketstore.store._java_hash import java_string_hash
from rocketstore.store._store import MessageStore
from support.cluster import Cluster, create_everywhere, raw_call
from support.waits import wait_dispatched, wait_until

RC = ResponseCode


def test_query_consume_queue_body() -> None:
    body = QueryConsumeQueueBody(
        0, 2, (ConsumeQueueUnit(0, 180, 2598919), ConsumeQueueUnit(180, 181, -5)), None, "x"
    )
    assert body.encode() == (
        b'{"filterData":"x","maxQueueIndex":2,"minQueueIndex":0,"queueData":['
        b'{"eval":false,"physicOffset":0,"physicSize":180,"tagsCode":2598919},'
        b'{"eval":false,"physicOffset":180,"physicSize":181,"tagsCode":-5}]}'
    )
    assert QueryConsumeQueueBody.decode(body.encode()) == body
    with pytest.raises(BodyFormatError):
        QueryConsumeQueueBody.decode(b'{"queueData":[1]}')


def test_query_consume_queue(cluster: Cluster, admin: AdminClient) -> None:
    topic = "CqTopic"
    addr = cluster.addr("broker-a")
    create_everywhere(admin, cluster, topic, queues=1)
    mq = MessageQueue(topic, "broker-a", 0)
    with Producer(cluster.namesrv) as producer:
        for i in range(3):
            producer.send(topic, b"x" * (10 + i), tags="TagA", queue=mq)
    store = cluster.brokers["broker-a"].store
    assert wait_until(lambda: store.get_max_offset_in_queue(topic, 0) == 3)

    got = admin.query_consume_queue(addr, topic, 0, 1, 5)
    assert got is not None
    assert (got.min_queue_index, got.max_queue_index) == (0, 3)
    assert [u.phys_offset for u in got.units] == [
        store.get_commit_log_offset_in_queue(topic, 0, i) for i in (1, 2)
    ]
    assert all(u.tags_code == java_string_hash("TagA") for u in got.units)
    assert got.units[1].size == got.units[0].size + 1  # one byte more of body
    assert got.subscription is None and got.filter_data is None

    r = raw_call(
        addr,
        321,
        {"topic": topic, "queueId": "0", "index": "0", "count": "1", "consumerGroup": "G_cq"},
    )
    assert r.code == RC.SUCCESS
    doc = json.loads(bytes(r.body))
    assert list(doc) == ["filterData", "maxQueueIndex", "minQueueIndex", "queueData"]
    assert doc["filterData"] == f"G_cq@{topic} is not online!"
    assert len(doc["queueData"]) == 1

    # past the end: SUCCESS without a body
    r = raw_call(addr, 321, {"topic": topic, "queueId": "0", "index": "3", "count": "1"})
    assert (r.code, r.remark, len(r.body)) == (
        RC.SUCCESS,
        f"Index 3 of 0@{topic} is not exist!",
        0,
    )
    assert admin.query_consume_queue(addr, topic, 0, 7, 1) is None
    for ext, remark in (
        ({"topic": topic, "queueId": "5", "index": "0", "count": "1"}, f"5@{topic} is not exist!"),
        ({"topic": topic, "queueId": "0", "index": "0"}, "the custom field <count> is null"),
        ({"topic": topic, "queueId": "x", "index": "0", "count": "1"}, "queueId"),
        ({"topic": topic, "queueId": "0", "index": "0", "count": "-1"}, "count -1 is not"),
    ):
        r = raw_call(addr, 321, ext)
        assert r.code == RC.SYSTEM_ERROR and remark in (r.remark or ""), (ext, r.remark)


def test_clean_unused_topic(cluster: Cluster, admin: AdminClient) -> None:
    addr = cluster.addr("broker-a")
    broker = cluster.brokers["broker-a"]
    kept, dropped = "CleanKept", "CleanDropped"
    create_everywhere(admin, cluster, kept, queues=1)
    create_everywhere(admin, cluster, dropped, queues=1)
    with Producer(cluster.namesrv) as producer:
        for topic in (kept, dropped):
            producer.send(topic, b"m", queue=MessageQueue(topic, "broker-a", 0))
    store = broker.store
    queues = store.consume_queues
    assert wait_until(lambda: queues.find(dropped, 0) is not None and queues.find(kept, 0))
    cluster.run(_forget_topic(broker, dropped))  # its config goes, its queues stay

    admin.clean_unused_topic(addr)
    assert queues.find(dropped, 0) is None
    assert queues.find(kept, 0) is not None and store.get_max_offset_in_queue(kept, 0) == 1


async def _forget_topic(broker: object, topic: str) -> None:
    broker.topics.delete(topic)  # type: ignore[attr-defined]


def test_clean_expired_consume_queue(
    cluster: Cluster, admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_b = cluster.brokers["broker-b"].store
    topic = "ExpiredTopic"
    create_everywhere(admin, cluster, topic, queues=1)
    with Producer(cluster.namesrv) as producer:
        producer.send(topic, b"m", queue=MessageQueue(topic, "broker-b", 0))
    queues = store_b.consume_queues
    wait_dispatched(store_b)
    assert queues.find(topic, 0) is not None

    admin.clean_expired_consume_queue(cluster.addr("broker-b"))  # nothing has expired
    assert queues.find(topic, 0) is not None

    # the commit log's first byte past every message: every queue has expired
    monkeypatch.setattr(MessageStore, "min_phy_offset", property(lambda self: 1 << 40))
    admin.clean_expired_consume_queue(cluster.addr("broker-b"))
    assert queues.find(topic, 0) is None
    monkeypatch.undo()
    assert store_b.get_max_offset_in_queue(topic, 0) == 0
