"""Settings at run time over loopback: UPDATE_BROKER_CONFIG (25) and GET_BROKER_CONFIG's key
names on a broker, GET_NAMESRV_CONFIG (319) and UPDATE_NAMESRV_CONFIG (318) on the name
server; raw, through AdminClient and through ``rocketstore broker-config|namesrv-config``."""

from __future__ import annotations

import json

import pytest

from rocketstore.client import ClientError
from rocketstore.client._admin import AdminClient
from rocketstore.protocol._properties import PropertiesError, format_properties, parse_properties
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from support.cluster import Cluster, invoke

RC = ResponseCode


def call(addr: str, code: int, body: bytes) -> RemotingCommand:
    with RemotingClient(timeout=5) as client:
        return client.invoke(addr, RemotingCommand.request(code, {}, body=body))


def test_properties_text() -> None:
    text = "# comment\n\n  a = 1 \n!x\nb:two words\nc=\n"
    # Java's Properties keeps a value's trailing space (Integer.parseInt then refuses "1 ")
    assert parse_properties(text) == {"a": "1 ", "b": "two words", "c": ""}
    assert format_properties({"b": "2", "a": "1"}) == "a=1\nb=2\n"
    for bad in (b"novalue\n", b"=1\n", b"\xff\xfe=1"):
        with pytest.raises(PropertiesError):
            parse_properties(bad)


def test_broker_config_uses_rocketmq_key_names(cluster: Cluster, admin: AdminClient) -> None:
    config = admin.broker_config(cluster.addr("broker-a"))
    for key in (
        "warmMapedFileEnable",
        "flushLeastPagesWhenWarmMapedFile",
        "destroyMapedFileIntervalForcibly",
        "checkCRCOnRecover",
        "osPageCacheBusyTimeOutMills",
        "brokerClusterName",
        "brokerPermission",
        "fileReservedTime",
    ):
        assert key in config, key
    for wrong in ("warmMappedFileEnable", "checkCrcOnRecover", "osPageCacheBusyTimeoutMills"):
        assert wrong not in config


def test_update_broker_config(cluster: Cluster, admin: AdminClient) -> None:
    addr = cluster.addr("broker-a")
    broker = cluster.brokers["broker-a"]
    remark = admin.update_broker_config(addr, {"brokerPermission": "4", "slaveReadEnable": "true"})
    assert "applied in memory, not persisted" in remark and "brokerPermission" in remark
    assert broker.config.broker_permission == 4 and broker.config.slave_read_enable
    config = admin.broker_config(addr)
    assert (config["brokerPermission"], config["slaveReadEnable"]) == ("4", "true")
    assert admin.broker_config(cluster.addr("broker-b"))["brokerPermission"] == "6"

    admin.update_broker_config(addr, {"autoCreateTopicEnable": "false"})
    assert broker.topics.auto_create_topic_enable is False
    admin.update_broker_config(addr, {"autoCreateSubscriptionGroup": "false"})
    assert broker.groups.auto_create_subscription_group is False

    # refused: nothing of the body applied
    cases = [
        (b"brokerConfigPath=/tmp/x\n", RC.NO_PERMISSION, "Can not update config in black list."),
        (b"rocketmqHome=/x\nbrokerPermission=6\n", RC.NO_PERMISSION, "in black list"),
        (b"brokerPermission=6\nfileReservedTime=1\n", RC.SYSTEM_ERROR, "fileReservedTime cannot"),
        (b"brokerPermission=6\nnoSuchKey=1\n", RC.SYSTEM_ERROR, "unknown broker setting: noSuch"),
        (b"brokerPermission=x\n", RC.SYSTEM_ERROR, "brokerPermission: 'x' is not an integer"),
        (b"brokerPermission=9\n", RC.SYSTEM_ERROR, "9 is not within [0, 7]"),
        (b"longPollingEnable=yes\n", RC.SYSTEM_ERROR, "'yes' is not true or false"),
        (b"defaultTopicQueueNums=0\n", RC.SYSTEM_ERROR, "defaultTopicQueueNums"),
        (b"\xff=1\n", RC.SYSTEM_ERROR, "string2Properties error"),
        (b"brokerPermission\n", RC.SYSTEM_ERROR, "string2Properties error"),
    ]
    for body, code, remark_part in cases:
        r = call(addr, 25, body)
        assert r.code == code and remark_part in (r.remark or ""), (body, r.code, r.remark)
    assert broker.config.broker_permission == 4
    assert call(addr, 25, b"").code == RC.SUCCESS  # nothing to change

    with pytest.raises(ClientError) as info:
        admin.update_broker_config(addr, {"listenPort": "1"})
    assert info.value.code == RC.SYSTEM_ERROR

    # the CLI
    result = invoke(
        "broker-config", "update", "-n", cluster.namesrv, "-b", addr, "-k", "brokerPermission"
    )
    assert result.exit_code == 2  # --value missing
    args = ("-n", cluster.namesrv, "-b", addr)
    for key, value in (
        ("brokerPermission", "6"),
        ("autoCreateTopicEnable", "true"),
        ("autoCreateSubscriptionGroup", "true"),
        ("slaveReadEnable", "false"),
    ):
        result = invoke("broker-config", "update", *args, "-k", key, "-v", value)
        assert result.exit_code == 0 and "update broker config success" in result.output
    assert broker.config.broker_permission == 6 and broker.topics.auto_create_topic_enable
    result = invoke("broker-config", "update", *args, "-k", "fileReservedTime", "-v", "1")
    assert result.exit_code == 1 and "cannot change while the broker runs" in result.output
    assert "Traceback" not in result.output
    result = invoke("broker-config", "get", *args, "-k", "brokerPermission", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {addr: {"brokerPermission": "6"}}
    result = invoke("broker-config", "get", "-n", cluster.namesrv)
    assert result.exit_code == 0 and "checkCRCOnRecover" in result.output


def test_namesrv_config(cluster: Cluster, admin: AdminClient) -> None:
    ns = cluster.namesrv
    port = ns.rpartition(":")[2]
    r = call(ns, 319, b"")
    assert r.code == RC.SUCCESS
    config = parse_properties(bytes(r.body))
    assert config["listenPort"] == port
    assert (config["productEnvName"], config["orderMessageEnable"]) == ("center", "false")
    # RocketMQ's NamesrvConfig and NettyServerConfig keys, with its defaults
    assert config["configBlackList"] == "configBlackList;configStorePath;kvConfigPath"
    assert (config["serverWorkerThreads"], config["serverSocketBacklog"]) == ("8", "1024")
    assert config["configStorePath"].endswith("namesrv.properties")

    admin.update_namesrv_config({"orderMessageEnable": "TRUE", "productEnvName": "test"})
    (got,) = admin.namesrv_configs().values()
    assert (got["orderMessageEnable"], got["productEnvName"]) == ("true", "test")

    for body, code, remark_part in (
        (b"kvConfigPath=/tmp/kv\n", RC.NO_PERMISSION, "Can not update config in black list."),
        (b"productEnvName=x\nlistenPort=1\n", RC.SYSTEM_ERROR, "listenPort cannot change"),
        (b"clusterTest=maybe\n", RC.SYSTEM_ERROR, "clusterTest: 'maybe' is not true or false"),
        (b"\xff\xfe\n", RC.SYSTEM_ERROR, "string2Properties error"),
    ):
        r = call(ns, 318, body)
        assert r.code == code and remark_part in (r.remark or ""), (body, r.code, r.remark)
    (got,) = admin.namesrv_configs().values()
    assert got["productEnvName"] == "test" and got["listenPort"] == port

    result = invoke("namesrv-config", "update", "-n", ns, "-k", "productEnvName", "-v", "center")
    assert result.exit_code == 0, result.output
    result = invoke("namesrv-config", "get", "-n", ns, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[ns]["productEnvName"] == "center"
    result = invoke("namesrv-config", "update", "-n", ns, "-k", "configStorePath", "-v", "/x")
    assert result.exit_code == 1 and "black list" in result.output
