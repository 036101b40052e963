"""A broker group's write permission in the routes over loopback: WIPE_WRITE_PERM_OF_BROKER
(205) and ADD_WRITE_PERM_OF_BROKER (327) on the name server (raw, AdminClient,
``rocketstore broker-perm``), and the broker's own ``brokerPermission`` changed by
UPDATE_BROKER_CONFIG reaching the routes at its registration."""

from __future__ import annotations

import json

from rocketstore.client._admin import AdminClient
from rocketstore.remoting import ResponseCode
from support.cluster import Cluster, create_everywhere, invoke, raw_call
from support.waits import wait_until

RC = ResponseCode
TOPIC = "PermTopic"


def perms(cluster: Cluster, topic: str = TOPIC) -> dict[str, int]:
    route = cluster.route(topic)
    return {} if route is None else {q.broker_name: q.perm for q in route.queue_datas}


def topics_of(cluster: Cluster, broker_name: str) -> int:
    assert cluster.ns is not None
    routes = cluster.ns.routes
    return sum(1 for t in routes.all_topics() if broker_name in routes.topic_queue_datas(t))


def test_wipe_and_add_write_perm(cluster: Cluster, admin: AdminClient) -> None:
    create_everywhere(admin, cluster, TOPIC, queues=2)
    admin.create_topic(cluster.addr("broker-a"), "PermReadOnly", perm=4)
    assert wait_until(lambda: perms(cluster, "PermReadOnly") == {"broker-a": 4})
    assert perms(cluster) == {"broker-a": 6, "broker-b": 6}
    count = topics_of(cluster, "broker-a")
    assert count > 2  # the system topics too

    r = raw_call(cluster.namesrv, 205, {"brokerName": "broker-a"})
    assert (r.code, r.remark, r.ext_fields) == (RC.SUCCESS, None, {"wipeTopicCount": str(count)})
    assert perms(cluster) == {"broker-a": 4, "broker-b": 6}
    assert perms(cluster, "PermReadOnly") == {"broker-a": 4}
    # a second wipe changes nothing but counts the same topics
    assert admin.wipe_write_perm("broker-a") == {cluster.namesrv: count}

    r = raw_call(cluster.namesrv, 327, {"brokerName": "broker-a"})
    assert (r.code, r.ext_fields) == (RC.SUCCESS, {"addTopicCount": str(count)})
    # read and write, as RocketMQ sets it, also where the topic was read-only
    assert perms(cluster) == {"broker-a": 6, "broker-b": 6}
    assert perms(cluster, "PermReadOnly") == {"broker-a": 6}

    r = raw_call(cluster.namesrv, 205, {"brokerName": "no-such-broker"})
    assert r.ext_fields == {"wipeTopicCount": "0"}
    r = raw_call(cluster.namesrv, 205, {})
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "the custom field <brokerName> is null")

    # the CLI
    result = invoke("broker-perm", "wipe", "-n", cluster.namesrv, "-b", "broker-b", "--json")
    assert result.exit_code == 0, result.output
    count_b = topics_of(cluster, "broker-b")
    assert json.loads(result.output) == {
        "broker_name": "broker-b",
        "topic_counts": {cluster.namesrv: count_b},
    }
    assert perms(cluster)["broker-b"] == 4
    result = invoke("broker-perm", "add", "-n", cluster.namesrv, "-b", "broker-b")
    assert result.exit_code == 0, result.output
    assert f"add write perm of broker[broker-b] in name server[{cluster.namesrv}] OK" in (
        result.output
    )
    assert perms(cluster)["broker-b"] == 6
    result = invoke("broker-perm", "wipe", "-n", "127.0.0.1:1", "-b", "broker-b")
    assert result.exit_code == 1 and "Traceback" not in result.output


def test_broker_permission_update_reaches_the_routes(cluster: Cluster, admin: AdminClient) -> None:
    create_everywhere(admin, cluster, TOPIC, queues=2)
    addr = cluster.addr("broker-b")
    admin.update_broker_config(addr, {"brokerPermission": "4"})
    try:
        assert wait_until(lambda: perms(cluster).get("broker-b") == 4), perms(cluster)
        assert perms(cluster)["broker-a"] == 6
    finally:
        admin.update_broker_config(addr, {"brokerPermission": "6"})
    assert wait_until(lambda: perms(cluster).get("broker-b") == 6), perms(cluster)
    # the topics' own permissions are kept in the broker's table
    assert cluster.brokers["broker-b"].topics.select(TOPIC).perm == 6  # type: ignore[union-attr]
