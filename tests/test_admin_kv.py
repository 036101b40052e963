"""The name server's KV config over loopback: PUT_KV_CONFIG (100), GET_KV_CONFIG (101),
DELETE_KV_CONFIG (102), GET_KVLIST_BY_NAMESPACE (219) answered as RocketMQ answers them,
kept in kvConfig.json across a restart, the ORDER_TOPIC_CONFIG namespace in routes and
registration answers; raw, through AdminClient and ``rocketstore kv``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocketstore.client._admin import AdminClient
from rocketstore.namesrv import KVConfigError, KVConfigManager, NameServer
from rocketstore.protocol._namesrv_bodies import decode_kv_table
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from support.cluster import Cluster, create_everywhere, invoke

RC = ResponseCode
ORDER = "ORDER_TOPIC_CONFIG"


def call(addr: str, code: int, ext: dict[str, str], version: int = 409) -> RemotingCommand:
    with RemotingClient(timeout=5) as client:
        request = RemotingCommand.request(code, ext)
        request.version = version
        return client.invoke(addr, request)


def test_kv_file_is_rocketmqs(tmp_path: Path) -> None:
    path = tmp_path / "namesrv" / "kvConfig.json"
    kv = KVConfigManager(path)
    kv.load()  # no file: empty
    kv.put("ns", "b", "2")
    kv.put("ns", "a", "1")
    kv.put(ORDER, "T", "broker-a:4")
    # compact fastjson, maps in Java's HashMap order
    assert path.read_text() == (
        '{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"broker-a:4"},"ns":{"a":"1","b":"2"}}}'
    )
    assert kv.encode_namespace("ns") == b'{"table":{"a":"1","b":"2"}}'
    assert kv.encode_namespace("none") is None
    kv.delete("ns", "a")
    kv.delete("ns", "absent")
    again = KVConfigManager(path)
    again.load()
    assert again.namespace("ns") == {"b": "2"} and again.get(ORDER, "T") == "broker-a:4"
    assert not path.with_name("kvConfig.json.tmp").exists()

    # a damaged file stops the load and stays as it is
    for text in ("{not json", '{"configTable":{"ns":{"k":1}}}', "[]"):
        path.write_text(text)
        with pytest.raises(KVConfigError, match=r"kvConfig\.json"):
            KVConfigManager(path).load()
        assert path.read_text() == text
    path.write_text("  \n")
    blank = KVConfigManager(path)
    blank.load()
    assert blank.namespace("ns") is None


async def _start_ns(path: Path) -> NameServer:
    ns = NameServer("127.0.0.1", 0, kv_config_path=path)
    await ns.start()
    return ns


def test_kv_requests_and_persistence(cluster: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "namesrv" / "kvConfig.json"
    ns = cluster.run(_start_ns(path))
    try:
        addr = ns.address
        r = call(addr, 101, {"namespace": "ns", "key": "k"})
        assert (r.code, r.remark) == (RC.QUERY_NOT_FOUND, "No config item, Namespace: ns Key: k")
        r = call(addr, 219, {"namespace": "ns"})
        assert (r.code, r.remark) == (RC.QUERY_NOT_FOUND, "No config item, Namespace: ns")
        r = call(addr, 100, {"namespace": "ns", "key": "k"})
        assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "the custom field <value> is null")
        assert not path.exists()

        assert call(addr, 100, {"namespace": "ns", "key": "k", "value": "v 1"}).code == RC.SUCCESS
        assert call(addr, 100, {"namespace": "ns", "key": "j", "value": ""}).code == RC.SUCCESS
        r = call(addr, 101, {"namespace": "ns", "key": "k"})
        assert (r.code, r.ext_fields["value"]) == (RC.SUCCESS, "v 1")
        r = call(addr, 219, {"namespace": "ns"})
        assert decode_kv_table(r.body) == {"k": "v 1", "j": ""}
        assert json.loads(path.read_text()) == {"configTable": {"ns": {"k": "v 1", "j": ""}}}
        r = call(addr, 102, {"namespace": "ns", "key": "j"})
        assert r.code == RC.SUCCESS
        r = call(addr, 102, {"namespace": "other", "key": "j"})  # absent: still SUCCESS
        assert r.code == RC.SUCCESS
        config = call(addr, 319, {})
        assert f"kvConfigPath={path}" in bytes(config.body).decode()
    finally:
        cluster.run(ns.close())

    # a new name server over the same file has the values
    ns = cluster.run(_start_ns(path))
    try:
        with AdminClient(ns.address) as admin:
            assert admin.get_kv_config("ns", "k") == "v 1"
            assert admin.get_kv_config("ns", "j") is None
            assert admin.kv_list("ns") == {"k": "v 1"}
            assert admin.kv_list("nothing") is None
    finally:
        cluster.run(ns.close())


def test_order_topic_config_in_routes(cluster: Cluster, admin: AdminClient) -> None:
    topic = "KvOrderTopic"
    create_everywhere(admin, cluster, topic, queues=2)
    admin.put_kv_config(ORDER, topic, "broker-a:2;broker-b:2")
    ext = {"topic": topic}
    # orderMessageEnable off (RocketMQ's default): routes carry no order configuration
    r = call(cluster.namesrv, 105, ext)
    assert r.code == RC.SUCCESS and b"orderTopicConf" not in bytes(r.body)
    admin.update_namesrv_config({"orderMessageEnable": "true"})
    try:
        r = call(cluster.namesrv, 105, ext)
        doc = json.loads(bytes(r.body))
        assert doc["orderTopicConf"] == "broker-a:2;broker-b:2"
        assert list(doc) == ["brokerDatas", "filterServerTable", "orderTopicConf", "queueDatas"]
        # an older client gets fastjson's own form, with the same field
        r = call(cluster.namesrv, 105, ext, version=63)
        assert b'"orderTopicConf":"broker-a:2;broker-b:2"' in bytes(r.body)
        # a topic without one
        create_everywhere(admin, cluster, "KvPlainTopic", queues=1)
        r = call(cluster.namesrv, 105, {"topic": "KvPlainTopic"})
        assert "orderTopicConf" not in json.loads(bytes(r.body))
    finally:
        admin.update_namesrv_config({"orderMessageEnable": "false"})

    # a registering broker is answered the namespace as a KV table
    register = RemotingCommand.request(
        103,
        {
            "brokerName": "broker-kv",
            "brokerAddr": "127.0.0.1:1",
            "clusterName": "C-kv",
            "haServerAddr": "127.0.0.1:2",
            "brokerId": "0",
        },
    )
    with RemotingClient(timeout=5) as client:
        r = client.invoke(cluster.namesrv, register)
        assert r.code == RC.SUCCESS
        assert decode_kv_table(r.body) == {topic: "broker-a:2;broker-b:2"}
        unregister = {
            k: register.ext_fields[k]
            for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")
        }
        client.invoke(cluster.namesrv, RemotingCommand.request(104, unregister))
    admin.delete_kv_config(ORDER, topic)
    assert admin.kv_list(ORDER) == {}


def test_kv_commands(cluster: Cluster) -> None:
    n = cluster.namesrv
    result = invoke("kv", "put", "-n", n, "-s", "cli", "-k", "a", "-v", "1")
    assert result.exit_code == 0, result.output
    assert "success" in result.output
    result = invoke("kv", "get", "-n", n, "-s", "cli", "-k", "a", "--json")
    assert json.loads(result.output) == {"namespace": "cli", "key": "a", "value": "1"}
    result = invoke("kv", "get", "-n", n, "-s", "cli", "-k", "a")
    assert result.output == "1\n"
    invoke("kv", "put", "-n", n, "-s", "cli", "-k", "b", "-v", "x=y")
    result = invoke("kv", "list", "-n", n, "-s", "cli", "--json")
    assert json.loads(result.output) == {"namespace": "cli", "table": {"a": "1", "b": "x=y"}}
    result = invoke("kv", "list", "-n", n, "-s", "cli")
    assert result.output == "a=1\nb=x=y\n"
    result = invoke("kv", "delete", "-n", n, "-s", "cli", "-k", "a", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"namespace": "cli", "key": "a", "namesrv": [n]}
    result = invoke("kv", "get", "-n", n, "-s", "cli", "-k", "a")
    assert result.exit_code == 1
    assert "No config item, Namespace: cli Key: a" in result.output
    result = invoke("kv", "list", "-n", n, "-s", "none")
    assert result.exit_code == 1 and "Namespace: none" in result.output
    assert "Traceback" not in result.output


def test_namesrv_command_refuses_a_damaged_kv_file(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    path.write_text("{oops")
    result = invoke("namesrv", "--listen", "127.0.0.1:0", "--kv-config", str(path))
    assert result.exit_code == 1
    assert "KV config" in result.output and str(path) in result.output
    assert "Traceback" not in result.output
    assert path.read_text() == "{oops"
