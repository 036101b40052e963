"""CLONE_GROUP_OFFSET (314) over loopback: a group's offsets on a topic (on each of its topics
when none is named) copied to another group, topics without a config skipped, an online
source group's unsubscribed topics skipped unless offline; raw, through AdminClient and
``rocketstore consumer clone-offset``."""

from __future__ import annotations

import json

from rocketstore.client import MessageQueue, PullConsumer
from rocketstore.client._admin import AdminClient
from rocketstore.remoting import ResponseCode
from support.cluster import (
    Cluster,
    close_client,
    create_everywhere,
    invoke,
    online_consumer,
    raw_call,
)

RC = ResponseCode
T1 = "CloneTopic1"
T2 = "CloneTopic2"
SRC = "G_clone_src"


def commit(cluster: Cluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    with PullConsumer(cluster.namesrv, group) as consumer:
        for qid, offset in offsets.items():
            consumer.commit_offset(MessageQueue(topic, "broker-a", qid), offset)


def offsets_on_a(cluster: Cluster, group: str, topic: str) -> dict[int, int]:
    return cluster.brokers["broker-a"].offsets.query_offsets(group, topic)


def test_clone_group_offset(cluster: Cluster, admin: AdminClient) -> None:
    for topic in (T1, T2):
        create_everywhere(admin, cluster, topic, queues=2)
    commit(cluster, SRC, T1, {0: 5, 1: 7})
    commit(cluster, SRC, T2, {0: 3})
    addr = cluster.addr("broker-a")

    # one topic
    r = raw_call(addr, 314, {"srcGroup": SRC, "destGroup": "G_d1", "topic": T1})
    assert (r.code, r.remark) == (RC.SUCCESS, None)
    assert offsets_on_a(cluster, "G_d1", T1) == {0: 5, 1: 7}
    assert offsets_on_a(cluster, "G_d1", T2) == {}

    # every topic of the source group
    r = raw_call(addr, 314, {"srcGroup": SRC, "destGroup": "G_d2", "topic": ""})
    assert r.code == RC.SUCCESS
    assert offsets_on_a(cluster, "G_d2", T1) == {0: 5, 1: 7}
    assert offsets_on_a(cluster, "G_d2", T2) == {0: 3}

    # a topic the broker has no config for, a group without offsets: nothing, still SUCCESS
    r = raw_call(addr, 314, {"srcGroup": SRC, "destGroup": "G_d3", "topic": "NoSuchTopic"})
    assert r.code == RC.SUCCESS
    r = raw_call(addr, 314, {"srcGroup": "G_nobody", "destGroup": "G_d3", "topic": T1})
    assert r.code == RC.SUCCESS
    assert cluster.brokers["broker-a"].offsets.topics_by_group("G_d3") == set()
    r = raw_call(addr, 314, {"srcGroup": SRC, "topic": T1})
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "the custom field <destGroup> is null")

    # the copy is an own table: later commits of the source do not move it
    commit(cluster, SRC, T1, {0: 6})
    assert offsets_on_a(cluster, "G_d1", T1) == {0: 5, 1: 7}

    # through the admin client and the CLI: every broker of the topic's route
    assert sorted(admin.clone_group_offset(SRC, "G_d4", T1)) == sorted(
        cluster.addr(n) for n in ("broker-a", "broker-b")
    )
    assert offsets_on_a(cluster, "G_d4", T1) == {0: 6, 1: 7}
    result = invoke(
        "consumer", "clone-offset", "-n", cluster.namesrv, "-s", SRC, "-d", "G_d5", "-t", T2,
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["dest_group"] == "G_d5"
    assert offsets_on_a(cluster, "G_d5", T2) == {0: 3}
    result = invoke(
        "consumer", "clone-offset", "-n", cluster.namesrv, "-s", SRC, "-d", "G_d6", "-t", "Nope",
    )  # fmt: skip
    assert result.exit_code == 1 and "Traceback" not in result.output


def test_clone_skips_topics_an_online_group_does_not_subscribe(
    cluster: Cluster, admin: AdminClient
) -> None:
    for topic in (T1, T2):
        create_everywhere(admin, cluster, topic, queues=2)
    commit(cluster, SRC, T1, {0: 5})
    commit(cluster, SRC, T2, {0: 3})
    addr = cluster.addr("broker-a")
    client = cluster.run(
        online_consumer(cluster, "127.0.0.1@clone-1", SRC, T1, brokers=("broker-a",))
    )  # subscribes T1 only
    try:
        raw_call(addr, 314, {"srcGroup": SRC, "destGroup": "G_on1", "topic": T2})
        assert offsets_on_a(cluster, "G_on1", T2) == {}
        raw_call(addr, 314, {"srcGroup": SRC, "destGroup": "G_on1", "topic": T1})
        assert offsets_on_a(cluster, "G_on1", T1) == offsets_on_a(cluster, SRC, T1)
        ext = {"srcGroup": SRC, "destGroup": "G_on2", "topic": T2, "offline": "true"}
        raw_call(addr, 314, ext)
        assert offsets_on_a(cluster, "G_on2", T2) == {0: 3}
    finally:
        cluster.run(close_client(client))
