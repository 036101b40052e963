"""Subscription-group administration over loopback: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) and DELETE_SUBSCRIPTIONGROUP (207) against a name server
and two broker groups of one cluster (test_broker_admin's Cluster), through raw requests, the
AdminClient and the ``rocketstore group`` commands (click's CliRunner)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from rocketstore.broker._controller import BrokerController
from rocketstore.broker.admin._admin import AdminProcessor
from rocketstore.broker.state._change_log import ChangeLog
from rocketstore.broker.state._subscription_group import SUBSCRIPTION_GROUP_FILE
from rocketstore.cli import main as cli_main
from rocketstore.client import ClientError
from rocketstore.client._admin import AdminClient
from rocketstore.protocol._subscription_group import SubscriptionGroupConfig
from rocketstore.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from support.cluster import CLUSTER, Cluster, raw_call, started_cluster

RC = ResponseCode
CREATE = RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
GET_ALL = RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG
DELETE = RequestCode.DELETE_SUBSCRIPTIONGROUP


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started_cluster(tmp_path_factory.mktemp("groups")) as c:
        yield c


def send_body(addr: str, body: bytes) -> RemotingCommand:
    with RemotingClient(timeout=5) as client:
        return client.invoke(addr, RemotingCommand.request(CREATE, {}, body))


def table_of(addr: str) -> dict[str, Any]:
    r = raw_call(addr, GET_ALL, {})
    assert r.code == RC.SUCCESS
    doc = json.loads(bytes(r.body))
    table: dict[str, Any] = doc["subscriptionGroupTable"]
    return table


def file_of(broker: BrokerController) -> dict[str, Any]:
    """What a restart reads: the file with its change log replayed over it."""
    path = Path(broker.config_dir) / SUBSCRIPTION_GROUP_FILE
    table: dict[str, Any] = json.loads(path.read_text("utf-8"))["subscriptionGroupTable"]
    for change in ChangeLog(path).replay():
        if "c" in change:
            table[change["k"]] = change["c"]
        else:
            table.pop(change["k"], None)
    return table


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli_main, list(args), catch_exceptions=False)


# ---- create, read back, update ---------------------------------------------------------------


def test_create_reads_back_from_the_broker_and_the_file(
    cluster: Cluster, admin: AdminClient
) -> None:
    broker = cluster.brokers["broker-a"]
    addr = cluster.addr("broker-a")
    version = broker.groups.data_version
    sent = SubscriptionGroupConfig(
        "G_fifo", consume_message_orderly=True, retry_max_times=3, consume_broadcast_enable=False
    )
    assert admin.update_subscription_group(addr, sent) == sent
    assert broker.groups.data_version.counter == version.counter + 1

    expected = {
        "brokerId": 0,
        "consumeBroadcastEnable": False,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeMessageOrderly": True,
        "groupName": "G_fifo",
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 3,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }
    assert table_of(addr)["G_fifo"] == expected
    assert file_of(broker)["G_fifo"] == expected  # persisted at once
    assert admin.subscription_groups(addr)["G_fifo"] == sent
    # the other broker of the cluster was not asked
    assert "G_fifo" not in table_of(cluster.addr("broker-b"))
    # the same settings again: nothing changes, nothing is written
    admin.update_subscription_group(addr, sent)
    assert broker.groups.data_version.counter == version.counter + 1

    # orderly off: the key leaves the file, as RocketMQ 4.9.8 writes it
    admin.update_subscription_group(addr, sent, consume_message_orderly=False)
    assert "consumeMessageOrderly" not in file_of(broker)["G_fifo"]
    assert "consumeMessageOrderly" not in table_of(addr)["G_fifo"]
    assert all("consumeMessageOrderly" not in doc for doc in file_of(broker).values())


def test_bodies_as_rocketmq_admins_send_them(cluster: Cluster) -> None:
    addr = cluster.addr("broker-b")
    groups = cluster.brokers["broker-b"].groups
    # 4.9.8's mqadmin updateSubGroup: fastjson of the bean, broadcast and from-min off
    java4 = (
        b'{"brokerId":0,"consumeBroadcastEnable":false,"consumeEnable":true,'
        b'"consumeFromMinEnable":false,"groupName":"G_java4","notifyConsumerIdsChangedEnable":true,'
        b'"retryMaxTimes":16,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}'
    )
    assert send_body(addr, java4).code == RC.SUCCESS
    assert groups.get("G_java4") == SubscriptionGroupConfig(
        "G_java4", consume_broadcast_enable=False, consume_from_min_enable=False
    )
    # RocketMQ 5's bean has more fields; the ones rocketstore does not keep are ignored
    java5 = json.dumps(
        {
            "attributes": {},
            "brokerId": 0,
            "consumeBroadcastEnable": True,
            "consumeEnable": False,
            "consumeFromMinEnable": True,
            "consumeMessageOrderly": True,
            "consumeTimeoutMinute": 15,
            "groupName": "G_java5",
            "groupRetryPolicy": {
                "type": "CUSTOMIZED",
                "customizedRetryPolicy": {"max": 7200000, "min": 1000, "next": [1000, 5000]},
            },
            "groupSysFlag": 0,
            "notifyConsumerIdsChangedEnable": True,
            "retryMaxTimes": 5,
            "retryQueueNums": 1,
            "whichBrokerWhenConsumeSlowly": 1,
        }
    ).encode()
    assert send_body(addr, java5).code == RC.SUCCESS
    assert groups.get("G_java5") == SubscriptionGroupConfig(
        "G_java5", consume_enable=False, consume_message_orderly=True, retry_max_times=5
    )
    # only the name: every other field takes the defaults
    assert send_body(addr, b'{"groupName":"G_plain"}').code == RC.SUCCESS
    assert groups.get("G_plain") == SubscriptionGroupConfig("G_plain")


def test_update_of_some_fields_keeps_the_others(cluster: Cluster, admin: AdminClient) -> None:
    addr = cluster.addr("broker-a")
    first = admin.update_subscription_group(
        addr, "G_keep", consume_message_orderly=True, retry_queue_nums=2, consume_enable=False
    )
    # a group the broker did not have starts from the defaults
    assert first == SubscriptionGroupConfig(
        "G_keep", consume_message_orderly=True, retry_queue_nums=2, consume_enable=False
    )
    second = admin.update_subscription_group(addr, "G_keep", retry_max_times=4)
    assert second == first.replace(retry_max_times=4)
    assert admin.subscription_groups(addr)["G_keep"] == second
    third = admin.update_subscription_group(addr, "G_keep", consume_enable=True)
    assert third == second.replace(consume_enable=True)
    assert table_of(addr)["G_keep"]["consumeMessageOrderly"] is True


# ---- delete ---------------------------------------------------------------------------------


def test_delete_with_and_without_offsets(cluster: Cluster, admin: AdminClient) -> None:
    broker = cluster.brokers["broker-a"]
    addr = cluster.addr("broker-a")
    for group in ("G_del_keep", "G_del_clean", "G_del_old"):
        admin.update_subscription_group(addr, group, retry_max_times=2)
        broker.offsets.commit_offset("test", group, "DelTopic", 0, 5)
        broker.offsets.commit_offset("test", group, "DelTopic", 1, 7)
    broker.offsets.commit_offset("test", "G_del_other", "DelTopic", 0, 9)

    admin.delete_subscription_group(addr, "G_del_keep")
    assert "G_del_keep" not in table_of(addr)
    assert "G_del_keep" not in file_of(broker)  # persisted at once
    assert broker.offsets.query_offsets("G_del_keep", "DelTopic") == {0: 5, 1: 7}

    admin.delete_subscription_group(addr, "G_del_clean", clean_offset=True)
    assert "G_del_clean" not in table_of(addr)
    assert broker.offsets.query_offsets("G_del_clean", "DelTopic") == {}
    offsets_file = Path(broker.config_dir) / "consumerOffset.json"
    on_disk = offsets_file.read_text("utf-8")
    assert "DelTopic@G_del_clean" not in on_disk and "DelTopic@G_del_other" in on_disk

    # RocketMQ 4.9.8's header names the flag removeOffset
    r = raw_call(addr, DELETE, {"groupName": "G_del_old", "removeOffset": "true"})
    assert r.code == RC.SUCCESS
    assert "G_del_old" not in broker.groups.all()
    assert broker.offsets.topics_by_group("G_del_old") == set()
    assert broker.offsets.query_offsets("G_del_other", "DelTopic") == {0: 9}

    # an absent group: SUCCESS, as RocketMQ answers; nothing changes
    version = broker.groups.data_version
    admin.delete_subscription_group(addr, "G_never_there", clean_offset=True)
    assert broker.groups.data_version == version
    # a built-in group may be deleted, as in RocketMQ
    admin.delete_subscription_group(addr, "TOOLS_CONSUMER")
    assert "TOOLS_CONSUMER" not in table_of(addr)

    missing = raw_call(addr, DELETE, {})
    assert missing.code == RC.SYSTEM_ERROR
    assert missing.remark == "the custom field <groupName> is null"
    blank = raw_call(addr, DELETE, {"groupName": " "})
    assert (blank.code, blank.remark) == (RC.SYSTEM_ERROR, "The specified group is blank.")


# ---- bad requests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "remark"),
    [
        (b"", "the request body is empty"),
        (b"not json", "not a SubscriptionGroupConfig JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"groupName":"G_bad"', "not a SubscriptionGroupConfig JSON"),
        (b"[]", "not a SubscriptionGroupConfig JSON object"),
        (b"null", "not a SubscriptionGroupConfig JSON object"),
        (b'{"retryMaxTimes":3}', "has no groupName"),
        (b'{"groupName":7}', "has no groupName"),
        (b'{"groupName":""}', "The specified group is blank."),
        (b'{"groupName":"bad name"}', "contains illegal characters"),
        (b'{"groupName":"' + b"g" * 121 + b'"}', "longer than group max length: 120"),
        (b'{"groupName":"G_bad","retryMaxTimes":"many"}', "retryMaxTimes is not an integer"),
        (b'{"groupName":"G_bad","consumeEnable":"yes"}', "consumeEnable is not a boolean"),
        (b'{"groupName":"G_bad","retryQueueNums":-1}', "retryQueueNums -1 is negative"),
    ],
)
def test_bad_bodies_are_refused_and_change_nothing(
    cluster: Cluster, body: bytes, remark: str
) -> None:
    broker = cluster.brokers["broker-b"]
    addr = cluster.addr("broker-b")
    before, version = broker.groups.all(), broker.groups.data_version
    r = send_body(addr, body)
    assert r.code == RC.SYSTEM_ERROR
    assert r.remark is not None and remark in r.remark, r.remark
    assert broker.groups.all() == before and broker.groups.data_version == version
    # the broker keeps serving, on a new connection as on the old one
    assert send_body(addr, b'{"groupName":"G_after_bad"}').code == RC.SUCCESS
    assert "G_after_bad" in table_of(addr)


def test_a_slave_refuses_changes() -> None:
    groups: dict[str, SubscriptionGroupConfig] = {}
    fake = SimpleNamespace(
        store=SimpleNamespace(is_master=False),  # a slave: its role from the store
        config=SimpleNamespace(broker_name="broker-a"),
        store_config=SimpleNamespace(broker_role="SLAVE"),
        clock=SimpleNamespace(now_ms=lambda: 0),
        groups=SimpleNamespace(get=groups.get, update=lambda c: groups.update({c.group_name: c})),
    )
    handlers = AdminProcessor(fake).handlers()  # type: ignore[arg-type]
    conn = SimpleNamespace(peer="127.0.0.1:1")

    async def ask(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        answer = handlers[code](RemotingCommand.request(code, ext, body), conn)  # type: ignore[arg-type]
        return answer if isinstance(answer, RemotingCommand) else await answer

    for code, ext, body in (
        (CREATE, {}, b'{"groupName":"G_s"}'),
        (DELETE, {"groupName": "G_s"}, b""),
    ):
        r = asyncio.run(ask(code, ext, body))
        assert r.code == RC.SYSTEM_ERROR
        assert r.remark is not None and r.remark.startswith("Can't modify topic or subscription")
    assert groups == {}


def test_client_errors(cluster: Cluster, admin: AdminClient) -> None:
    with pytest.raises(ClientError, match="contains illegal characters"):
        admin.update_subscription_group(cluster.addr("broker-a"), "bad name", retry_max_times=1)
    with pytest.raises(TypeError):
        admin.update_subscription_group(cluster.addr("broker-a"), "G_x", no_such_field=1)


# ---- rocketstore group update | delete | list -----------------------------------------------


def test_cli_update_list_delete(cluster: Cluster) -> None:
    ns = cluster.namesrv
    a, b = cluster.addr("broker-a"), cluster.addr("broker-b")

    r = invoke(
        "group",
        "update",
        "--namesrv",
        ns,
        "--cluster",
        CLUSTER,
        "--group",
        "G_cli",
        "--orderly",
        "--retry-max-times",
        "6",
        "--no-broadcast",
    )
    assert r.exit_code == 0, r.output
    assert f"create subscription group to {a} success." in r.output
    assert f"create subscription group to {b} success." in r.output
    for name in ("broker-a", "broker-b"):
        assert cluster.brokers[name].groups.get("G_cli") == SubscriptionGroupConfig(
            "G_cli", consume_message_orderly=True, retry_max_times=6, consume_broadcast_enable=False
        )

    # one broker, one field: the others keep their values
    r = invoke(
        "group",
        "update",
        "-n",
        ns,
        "-b",
        a,
        "-g",
        "G_cli",
        "--retry-queue-nums",
        "3",
        "--no-consume-enable",
    )
    assert r.exit_code == 0, r.output
    assert cluster.brokers["broker-a"].groups.get("G_cli") == SubscriptionGroupConfig(
        "G_cli",
        consume_message_orderly=True,
        retry_max_times=6,
        consume_broadcast_enable=False,
        retry_queue_nums=3,
        consume_enable=False,
    )
    assert cluster.brokers["broker-b"].groups.all()["G_cli"].retry_queue_nums == 1
    r = invoke("group", "update", "-n", ns, "-b", a, "-g", "G_cli", "--no-orderly")
    assert r.exit_code == 0, r.output
    assert "consumeMessageOrderly" not in file_of(cluster.brokers["broker-a"])["G_cli"]

    listed = invoke("group", "list", "--namesrv", ns, "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    mine = {row["broker_name"]: row for row in rows if row["group_name"] == "G_cli"}
    assert set(mine) == {"broker-a", "broker-b"}
    assert mine["broker-a"]["address"] == a
    assert (mine["broker-a"]["consume_message_orderly"], mine["broker-a"]["retry_queue_nums"]) == (
        False,
        3,
    )
    assert mine["broker-b"]["consume_message_orderly"] is True
    assert {row["group_name"] for row in rows} >= {"G_cli", "SELF_TEST_C_GROUP"}
    table = invoke("group", "list", "-n", ns, "-c", CLUSTER)
    assert table.exit_code == 0 and "G_cli" in table.output and "Orderly" in table.output
    only_b = json.loads(invoke("group", "list", "-n", ns, "-b", b, "--json").output)
    assert {row["address"] for row in only_b} == {b}

    broker_a = cluster.brokers["broker-a"]
    broker_a.offsets.commit_offset("test", "G_cli", "CliTopic", 0, 3)
    r = invoke("group", "delete", "-n", ns, "-b", a, "-g", "G_cli", "--clean-offset")
    assert r.exit_code == 0, r.output
    assert f"delete subscription group [G_cli] and its consumer offsets from broker [{a}]" in (
        r.output
    )
    assert broker_a.groups.get("G_cli") is None
    assert broker_a.offsets.topics_by_group("G_cli") == set()
    assert cluster.brokers["broker-b"].groups.get("G_cli") is not None
    r = invoke("group", "delete", "-n", ns, "-c", CLUSTER, "-g", "G_cli")
    assert r.exit_code == 0, r.output
    assert cluster.brokers["broker-b"].groups.get("G_cli") is None


def test_cli_errors(cluster: Cluster) -> None:
    ns = cluster.namesrv
    bad = invoke("group", "update", "-n", ns, "-c", CLUSTER, "-g", "bad name", "--orderly")
    assert bad.exit_code == 1
    assert "error:" in bad.output and "contains illegal characters" in bad.output
    unknown = invoke("group", "delete", "-n", ns, "-c", "NoSuchCluster", "-g", "G_x")
    assert unknown.exit_code == 1 and "no cluster named 'NoSuchCluster'" in unknown.output
    both = invoke(
        "group", "update", "-n", ns, "-c", CLUSTER, "-b", cluster.addr("broker-a"), "-g", "G_x"
    )
    assert both.exit_code == 2 and "give --cluster or --broker, not both" in both.output
    assert (
        invoke("group", "update", "-n", ns, "-g", "G_x", "--retry-max-times", "-1").exit_code == 2
    )
    # a broker out of reach
    down = invoke("group", "list", "-n", ns, "-b", "127.0.0.1:1", "--json")
    assert down.exit_code == 1 and "error: 127.0.0.1:1" in down.output
