"""The name server: route table rules (RocketMQ 4.9.8's RouteInfoManager) on a manual clock,
its bodies byte for byte, and over loopback a NameServer with brokers registering through
NamesrvRegistrar and clients asking with the blocking RemotingClient."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rocketstore.broker.replication._outer_api import NamesrvRegistrar
from rocketstore.namesrv import NameServer, RouteInfoManager
from rocketstore.protocol._java_order import java_order
from rocketstore.protocol._namesrv_bodies import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    RegisterBrokerResult,
    TopicConfigWrapper,
    TopicRouteData,
    body_crc32,
    decode_topic_list,
)
from rocketstore.remoting import (
    AsyncRemotingClient,
    RemotingClient,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    _fastjson,
)
from rocketstore.remoting._fastjson import dumps_standard
from rocketstore.store._clock import ManualClock
from support.fixtures import TRANSCRIPTS
from support.ports import free_port

# the body RocketMQ 4.9.8's name server sent the C++ client for TBW102 (newtopic.jsonl)
TBW102_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:37843"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":'
    b'"broker-a","perm":7,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}'
)
CPP_CLIENT_VERSION = 63  # the version the official C++ client puts in its requests


def cfg(read: int = 8, write: int = 8, perm: int = 6, sys_flag: int = 0) -> dict[str, Any]:
    return {"readQueueNums": read, "writeQueueNums": write, "perm": perm, "topicSysFlag": sys_flag}


def wrapper(counter: int, **topics: dict[str, Any]) -> TopicConfigWrapper:
    return TopicConfigWrapper(DataVersion(1_700_000_000_000, counter), topics)


def register(
    routes: RouteInfoManager,
    name: str,
    addr: str,
    broker_id: int = 0,
    configs: TopicConfigWrapper | None = None,
    *,
    cluster: str = "DefaultCluster",
    ha: str = "ha",
    channel: object | None = None,
) -> RegisterBrokerResult:
    return routes.register_broker(
        cluster, addr, name, broker_id, ha, configs or wrapper(0), [], channel
    )


# ---- the route table ------------------------------------------------------------------------


def test_route_body_is_rocketmqs_byte_for_byte() -> None:
    routes = RouteInfoManager(ManualClock())
    register(routes, "broker-a", "127.0.0.1:37843", configs=wrapper(1, TBW102=cfg(8, 8, 7)))
    route = routes.route("TBW102")
    assert route is not None
    assert route.encode() == TBW102_ROUTE
    assert route.encode(standard_json=True) == TBW102_ROUTE.replace(b"{0:", b'{"0":')
    assert TopicRouteData.decode(TBW102_ROUTE) == route
    assert routes.route("Nope") is None


def test_brokers_expire_after_120_seconds_without_a_registration() -> None:
    clock = ManualClock()
    routes = RouteInfoManager(clock)
    register(routes, "broker-a", "10.0.0.1:10911", configs=wrapper(1, T=cfg()))
    register(routes, "broker-b", "10.0.0.2:10911", configs=wrapper(1, T=cfg()))
    clock.advance(100)
    register(routes, "broker-b", "10.0.0.2:10911", configs=wrapper(1, T=cfg()))  # heartbeat
    clock.advance(20)
    assert routes.scan_not_active_brokers() == []  # 120 s exactly is not yet expired
    clock.advance(0.5)
    assert routes.scan_not_active_brokers() == [("10.0.0.1:10911", None)]
    route = routes.route("T")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert routes.live_brokers() == ["10.0.0.2:10911"]
    assert list(routes.cluster_info().broker_addr_table) == ["broker-b"]
    clock.advance(100)
    assert [a for a, _ in routes.scan_not_active_brokers()] == ["10.0.0.2:10911"]
    assert routes.route("T") is None
    assert routes.all_topics() == []
    assert routes.cluster_info() == ClusterInfo({}, {})


def test_slaves_are_listed_by_id_and_learn_their_master() -> None:
    routes = RouteInfoManager(ManualClock())
    # a slave before its master: nothing to learn yet, and its topics make no route
    early = register(routes, "broker-a", "10.0.0.2:10911", 1, wrapper(5, T=cfg()), ha="s-ha")
    assert early == RegisterBrokerResult()
    assert routes.route("T") is None
    assert register(routes, "broker-a", "10.0.0.1:10911", 0, wrapper(1, T=cfg(4, 4, 7)), ha="m-ha")
    assert register(routes, "broker-a", "10.0.0.3:10911", 2, wrapper(5, T=cfg())) == (
        RegisterBrokerResult("m-ha", "10.0.0.1:10911")
    )
    route = routes.route("T")
    assert route is not None
    assert [dict(b.broker_addrs) for b in route.broker_datas] == [
        {0: "10.0.0.1:10911", 1: "10.0.0.2:10911", 2: "10.0.0.3:10911"}
    ]
    assert route.queue_datas[0].perm == 7  # the master's config, not the slaves'
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911",2:"10.0.0.3:10911"}' in (
        route.encode()
    )
    # the master goes away: the group keeps its queues, the route lists the slaves
    master = object()
    register(routes, "broker-a", "10.0.0.1:10911", 0, wrapper(1, T=cfg(4, 4, 7)), channel=master)
    assert routes.on_channel_destroy(master) == "10.0.0.1:10911"
    route = routes.route("T")
    assert route is not None
    assert dict(route.broker_datas[0].broker_addrs) == {1: "10.0.0.2:10911", 2: "10.0.0.3:10911"}
    assert register(routes, "broker-a", "10.0.0.2:10911", 1) == RegisterBrokerResult()


def test_an_address_keeps_one_id_in_its_group() -> None:
    routes = RouteInfoManager(ManualClock())
    register(routes, "broker-a", "10.0.0.2:10911", 1)
    register(routes, "broker-a", "10.0.0.2:10911", 0, wrapper(1, T=cfg()))  # slave promoted
    group = routes.cluster_info().broker_addr_table["broker-a"]
    assert dict(group.broker_addrs) == {0: "10.0.0.2:10911"}


def test_queue_data_changes_only_with_the_data_version() -> None:
    routes = RouteInfoManager(ManualClock())
    register(routes, "broker-a", "10.0.0.1:10911", 0, wrapper(1, T=cfg(4, 4)))
    register(routes, "broker-a", "10.0.0.1:10911", 0, wrapper(1, T=cfg(8, 8), U=cfg()))
    assert routes.topic_queue_datas("T")["broker-a"].read_queue_nums == 4
    assert routes.route("U") is None
    assert routes.is_topic_config_changed("10.0.0.1:10911", DataVersion(1_700_000_000_000, 2))
    register(routes, "broker-a", "10.0.0.1:10911", 0, wrapper(2, T=cfg(8, 8), U=cfg()))
    assert routes.topic_queue_datas("T")["broker-a"].read_queue_nums == 8
    assert routes.route("U") is not None


def test_several_broker_groups_of_one_topic_in_javas_hash_order() -> None:
    routes = RouteInfoManager(ManualClock())
    names = ["broker-a", "broker-b", "broker-c", "broker-d", "bk1", "zz", "a"]
    for i, name in enumerate(names):
        register(routes, name, f"10.0.0.{i}:10911", 0, wrapper(1, T=cfg(i + 1, i + 1)))
    route = routes.route("T")
    assert route is not None
    # what java.util.HashSet iterates for these names (checked against Java 17)
    java_hash_set_order = ["zz", "a", "broker-d", "broker-b", "broker-c", "bk1", "broker-a"]
    assert [b.broker_name for b in route.broker_datas] == java_hash_set_order
    assert [q.broker_name for q in route.queue_datas] == java_hash_set_order
    by_name = {q.broker_name: q for q in route.queue_datas}
    assert by_name["zz"].read_queue_nums == 6
    # brokerAddrTable is a HashMap(128): another order
    assert list(routes.cluster_info().broker_addr_table) == [
        "bk1",
        "zz",
        "broker-d",
        "broker-b",
        "broker-c",
        "broker-a",
        "a",
    ]


def test_java_order_after_a_resize() -> None:
    names = ["broker-a", "broker-b", "broker-c", "broker-d", "bk1", "zz", "a"]
    names += [f"broker-{i}" for i in range(10, 16)]  # 13 entries: the table has grown to 32
    assert java_order(names) == [
        "zz",
        "a",
        "broker-d",
        "bk1",
        "broker-13",
        "broker-14",
        "broker-11",
        "broker-12",
        "broker-10",
        "broker-b",
        "broker-c",
        "broker-a",
        "broker-15",
    ]


def test_delete_topic_everywhere_or_in_one_cluster() -> None:
    routes = RouteInfoManager(ManualClock())
    register(routes, "a", "10.0.0.1:1", 0, wrapper(1, T=cfg(), U=cfg()), cluster="C1")
    register(routes, "b", "10.0.0.2:1", 0, wrapper(1, T=cfg(), U=cfg()), cluster="C2")
    routes.delete_topic("T", "C1")
    assert list(routes.topic_queue_datas("T")) == ["b"]
    routes.delete_topic("T", "C2")
    assert routes.route("T") is None
    routes.delete_topic("U")
    assert routes.all_topics() == []
    routes.delete_topic("missing", "C1")  # no error


def test_cluster_info_and_unregister() -> None:
    routes = RouteInfoManager(ManualClock())
    register(routes, "broker-a", "10.0.0.1:1", 0, wrapper(1, T=cfg()), cluster="C1")
    register(routes, "broker-a", "10.0.0.2:1", 1, cluster="C1")
    register(routes, "broker-b", "10.0.0.3:1", 0, wrapper(1, T=cfg(), V=cfg()), cluster="C2")
    info = routes.cluster_info()
    assert {k: sorted(v) for k, v in info.cluster_addr_table.items()} == {
        "C1": ["broker-a"],
        "C2": ["broker-b"],
    }
    assert dict(info.broker_addr_table["broker-a"].broker_addrs) == {
        0: "10.0.0.1:1",
        1: "10.0.0.2:1",
    }
    assert info.broker_addr_table["broker-b"].cluster == "C2"
    assert ClusterInfo.decode(info.encode()) == info
    assert b'"brokerAddrs":{0:"10.0.0.1:1",1:"10.0.0.2:1"}' in info.encode()
    assert sorted(routes.all_topics()) == ["T", "V"]

    routes.unregister_broker("C2", "10.0.0.3:1", "broker-b", 0)
    assert sorted(routes.all_topics()) == ["T"]
    assert list(routes.cluster_info().cluster_addr_table) == ["C1"]
    routes.unregister_broker("C1", "10.0.0.1:1", "broker-a", 0)  # the slave remains
    assert routes.route("T") is not None
    routes.unregister_broker("C1", "10.0.0.2:1", "broker-a", 1)
    assert routes.route("T") is None
    assert routes.cluster_info() == ClusterInfo({}, {})


def test_retry_topics_are_routed_once_registered() -> None:
    routes = RouteInfoManager(ManualClock())
    register(routes, "broker-a", "10.0.0.1:1", 0, wrapper(1, CapTopic=cfg(4, 4)))
    assert routes.route("%RETRY%GID_cap_push") is None
    retry = cfg(1, 1, 6)
    register(
        routes,
        "broker-a",
        "10.0.0.1:1",
        0,
        wrapper(2, CapTopic=cfg(4, 4), **{"%RETRY%GID_cap_push": retry}),
    )
    route = routes.route("%RETRY%GID_cap_push")
    assert route is not None
    assert route.queue_datas[0].read_queue_nums == 1 and route.queue_datas[0].perm == 6


def test_filter_servers_appear_in_the_route() -> None:
    routes = RouteInfoManager(ManualClock())
    routes.register_broker("C", "10.0.0.1:1", "a", 0, "ha", wrapper(1, T=cfg()), ["10.0.0.1:9"])
    route = routes.route("T")
    assert route is not None and dict(route.filter_server_table) == {"10.0.0.1:1": ["10.0.0.1:9"]}
    routes.register_broker("C", "10.0.0.1:1", "a", 0, "ha", wrapper(1, T=cfg()), [])
    route = routes.route("T")
    assert route is not None and dict(route.filter_server_table) == {}


# ---- bodies ---------------------------------------------------------------------------------


def test_register_body_json_and_compressed_forms() -> None:
    body = RegisterBrokerBody(wrapper(3, T=cfg(2, 3, 7), U={"topicName": "U"}), ["f:1"])
    text = body.encode()
    assert text.startswith(b'{"filterServerList":["f:1"],"topicConfigSerializeWrapper":')
    assert b'"dataVersion":{"counter":3,"timestamp":1700000000000}' in text
    assert (
        b'"T":{"order":false,"perm":7,"readQueueNums":2,"topicFilterType":"SINGLE_TAG",'
        b'"topicName":"T","topicSysFlag":0,"writeQueueNums":3}'
    ) in text
    assert DataVersion.of({"counter": 3, "timestamp": 9}) == DataVersion(9, 3)
    assert DataVersion.of(SimpleNamespace(counter=3, timestamp=9)) == DataVersion(9, 3)
    decoded = RegisterBrokerBody.decode(text)
    assert decoded.topic_config_wrapper.data_version == DataVersion(1_700_000_000_000, 3)
    assert decoded.topic_config_wrapper.topic_config_table["U"]["readQueueNums"] == 16
    assert list(decoded.filter_server_list) == ["f:1"]

    packed = body.encode(compressed=True)
    raw = zlib.decompress(packed)
    assert b"T 2 3 7 SINGLE_TAG" in raw
    again = RegisterBrokerBody.decode(packed, compressed=True)
    assert again.topic_config_wrapper.topic_config_table == (
        decoded.topic_config_wrapper.topic_config_table
    )
    assert list(again.filter_server_list) == ["f:1"]


def test_standard_json_escapes_as_browser_compatible_fastjson() -> None:
    assert dumps_standard({"b": 1, "a": {2: "x", 10: "y", 1: "z"}}) == (
        '{"a":{"1":"z","2":"x","10":"y"},"b":1}'
    )
    assert dumps_standard(['a/b"\\\n\x01é\u2028']) == '["a\\/b\\"\\\\\\n\\u0001\\u00E9\\u2028"]'


# ---- over loopback --------------------------------------------------------------------------


def run(main: Callable[[], Awaitable[None]], timeout: float = 15.0) -> None:
    asyncio.run(asyncio.wait_for(main(), timeout))


async def call(
    addr: str,
    code: int,
    ext: dict[str, Any],
    body: bytes = b"",
    version: int | None = None,
    client: RemotingClient | None = None,
) -> RemotingCommand:
    """One request through the blocking client (on a worker thread: the server is on this
    loop); a new connection unless ``client`` is given. A broker must register on a connection
    it keeps: the name server drops a broker whose connection closes."""

    def go() -> RemotingCommand:
        cmd = RemotingCommand.request(code, ext, body)
        if version is not None:
            cmd.version = version
        if client is not None:
            return client.invoke(addr, cmd)
        with RemotingClient(timeout=5) as own:
            return own.invoke(addr, cmd)

    return await asyncio.to_thread(go)


async def eventually(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


class FakeBroker:
    """The topic configs a broker would register, with its DataVersion."""

    def __init__(self, **topics: dict[str, Any]) -> None:
        self.version = DataVersion(1_700_000_000_000, 1)
        self.topics = dict(topics)

    def add(self, name: str, config: dict[str, Any]) -> None:
        self.topics[name] = config
        self.version = DataVersion(self.version.timestamp + 1, self.version.counter + 1)

    def provide(self) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
        return self.version.to_json(), dict(self.topics)


def registrar(
    addrs: list[str], broker: FakeBroker, broker_addr: str = "127.0.0.1:37843", **kw: Any
) -> NamesrvRegistrar:
    kw.setdefault("broker_name", "broker-a")
    kw.setdefault("broker_id", 0)
    kw.setdefault("ha_server_addr", "127.0.0.1:10912")
    return NamesrvRegistrar(
        addrs,
        "DefaultCluster",
        kw.pop("broker_name"),
        kw.pop("broker_id"),
        broker_addr,
        kw.pop("ha_server_addr"),
        broker.provide,
        **kw,
    )


def route_request(topic: str) -> dict[str, Any]:
    return {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x", "topic": topic}


def test_registered_topics_are_routed_over_loopback() -> None:
    async def main() -> None:
        async with NameServer(port=0) as ns:
            broker = FakeBroker(TBW102=cfg(8, 8, 7), CapTopic=cfg(4, 4, 6))
            reg = registrar([ns.address], broker, initial_delay_s=60)
            await reg.start()
            try:
                assert reg.rounds == 1 and reg.master_addr is None
                code = RequestCode.GET_ROUTEINFO_BY_TOPIC
                old = await call(ns.address, code, route_request("TBW102"), b"", CPP_CLIENT_VERSION)
                assert old.code == ResponseCode.SUCCESS and old.remark is None
                assert bytes(old.body) == TBW102_ROUTE
                parsed = _fastjson.loads(bytes(old.body))
                assert list(parsed) == sorted(parsed)
                assert parsed["brokerDatas"][0]["brokerAddrs"] == {0: "127.0.0.1:37843"}

                new = await call(ns.address, code, route_request("CapTopic"))  # version 409
                assert json.loads(bytes(new.body))["brokerDatas"][0]["brokerAddrs"] == {
                    "0": "127.0.0.1:37843"
                }
                asked = await call(
                    ns.address,
                    code,
                    {"topic": "CapTopic", "acceptStandardJsonOnly": "true"},
                    b"",
                    CPP_CLIENT_VERSION,
                )
                assert bytes(asked.body) == bytes(new.body)

                missing = await call(ns.address, code, route_request("BrandNewTopic"))
                assert missing.code == ResponseCode.TOPIC_NOT_EXIST
                assert missing.remark == (
                    "No topic route info in name server for the topic: BrandNewTopic\n"
                    "See http://rocketmq.apache.org/docs/faq/ for further details."
                )

                topics = await call(ns.address, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
                assert sorted(decode_topic_list(topics.body)) == ["CapTopic", "TBW102"]
                info = await call(ns.address, RequestCode.GET_BROKER_CLUSTER_INFO, {})
                assert ClusterInfo.decode(info.body).cluster_addr_table == {
                    "DefaultCluster": ["broker-a"]
                }

                # a topic created on the broker reaches the name server at once
                broker.add("%RETRY%GID_cap_push", cfg(1, 1, 6))
                reg.register_now()
                await eventually(lambda: ns.routes.route("%RETRY%GID_cap_push") is not None)

                deleted = await call(
                    ns.address, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "CapTopic"}
                )
                assert deleted.code == ResponseCode.SUCCESS
                assert ns.routes.route("CapTopic") is None
            finally:
                await reg.close()
            # unregistered at shutdown: no route any more
            gone = await call(
                ns.address, RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("TBW102")
            )
            assert gone.code == ResponseCode.TOPIC_NOT_EXIST
            assert ns.routes.live_brokers() == []

    run(main)


def test_periodic_registration_is_a_heartbeat_and_a_closed_connection_drops_the_broker() -> None:
    async def main() -> None:
        clock = ManualClock()
        async with NameServer(port=0, clock=clock) as ns:
            reg = registrar([ns.address], FakeBroker(T=cfg()), period_s=0.05, initial_delay_s=0.05)
            await reg.start()
            try:
                await eventually(lambda: reg.rounds >= 3)
                clock.advance(121)
                assert ns.scan_not_active_brokers() == 1  # the name server closes its channel
                assert ns.routes.route("T") is None
                await eventually(lambda: ns.routes.route("T") is not None)  # next period
            finally:
                await reg.close(unregister=False)
            # the broker's connection closed without an unregister: dropped at once
            await eventually(lambda: ns.routes.route("T") is None)

    run(main)


def test_a_slave_learns_its_master_and_ha_address() -> None:
    async def main() -> None:
        async with NameServer(port=0) as ns:
            master = registrar(
                [ns.address],
                FakeBroker(T=cfg()),
                "127.0.0.1:20911",
                ha_server_addr="127.0.0.1:20912",
                initial_delay_s=60,
            )
            answers: list[RegisterBrokerResult] = []
            slave = registrar(
                [ns.address],
                FakeBroker(T=cfg(1, 1)),
                "127.0.0.1:30911",
                broker_id=1,
                initial_delay_s=60,
                on_registered=answers.append,
            )
            await master.start()
            await slave.start()
            try:
                assert slave.master_addr == "127.0.0.1:20911"
                assert slave.ha_master_addr == "127.0.0.1:20912"
                assert answers == [RegisterBrokerResult("127.0.0.1:20912", "127.0.0.1:20911")]
                assert master.master_addr is None and master.ha_master_addr is None
                route = ns.routes.route("T")
                assert route is not None
                assert dict(route.broker_datas[0].broker_addrs) == {
                    0: "127.0.0.1:20911",
                    1: "127.0.0.1:30911",
                }
                assert route.queue_datas[0].read_queue_nums == 8  # the master's
            finally:
                await slave.close()
                await master.close()

    run(main)


def test_a_dead_name_server_does_not_break_the_registrar() -> None:
    async def main() -> None:
        port = free_port()
        dead = f"127.0.0.1:{port}"
        async with NameServer(port=0) as live:
            reg = registrar(
                [dead, live.address],
                FakeBroker(T=cfg()),
                period_s=0.05,
                initial_delay_s=0.05,
                timeout_s=1,
            )
            await reg.start()  # one name server down: logged, the other one has the broker
            try:
                assert live.routes.route("T") is not None
                rounds = reg.rounds
                await eventually(lambda: reg.rounds >= rounds + 2)  # still registering
                # the dead one comes up: the next period registers with it
                async with NameServer(port=port) as revived:
                    await eventually(lambda: revived.routes.route("T") is not None)
            finally:
                await reg.close()  # unregistering from the (again) dead one is logged only
            assert live.routes.route("T") is None

    run(main)


def test_register_broker_checks_and_header_errors() -> None:
    async def main() -> None:
        async with NameServer(port=0) as ns:
            with RemotingClient(timeout=5) as broker:
                await check_registration(ns, broker)

    async def check_registration(ns: NameServer, broker: RemotingClient) -> None:
        body = RegisterBrokerBody(wrapper(1, T=cfg())).encode()
        ext = {
            "brokerName": "b",
            "brokerAddr": "127.0.0.1:1",
            "clusterName": "C",
            "haServerAddr": "127.0.0.1:2",
            "brokerId": "0",
            "compressed": "false",
            "bodyCrc32": str(body_crc32(body) ^ 1),
        }
        bad = await call(ns.address, RequestCode.REGISTER_BROKER, ext, body)
        assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
        missing = await call(ns.address, RequestCode.REGISTER_BROKER, {"brokerName": "b"}, body)
        assert missing.code == ResponseCode.SYSTEM_ERROR
        assert "brokerAddr" in (missing.remark or "")

        packed = RegisterBrokerBody(wrapper(1, T=cfg())).encode(compressed=True)
        ext.update(compressed="true", bodyCrc32=str(body_crc32(packed)))
        ok = await call(ns.address, RequestCode.REGISTER_BROKER, ext, packed, client=broker)
        assert ok.code == ResponseCode.SUCCESS and ok.ext_fields == {}
        assert ns.routes.route("T") is not None

        ask = {k: ext[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")}
        same = await call(
            ns.address,
            RequestCode.QUERY_DATA_VERSION,
            ask,
            DataVersion(1_700_000_000_000, 1).encode(),
        )
        assert same.ext_fields["changed"] == "false"
        assert DataVersion.decode(same.body) == DataVersion(1_700_000_000_000, 1)
        other = await call(
            ns.address, RequestCode.QUERY_DATA_VERSION, ask, DataVersion(5, 5).encode()
        )
        assert other.ext_fields["changed"] == "true"

        assert (await call(ns.address, RequestCode.UNREGISTER_BROKER, ask)).code == 0
        assert ns.routes.route("T") is None

    run(main)


def test_an_async_client_connection_is_the_brokers_channel() -> None:
    async def main() -> None:
        async with NameServer(port=0) as ns:
            client = AsyncRemotingClient()
            body = RegisterBrokerBody(wrapper(1, T=cfg())).encode()
            ext = {
                "brokerName": "b",
                "brokerAddr": "127.0.0.1:1",
                "clusterName": "C",
                "haServerAddr": "h",
                "brokerId": "0",
            }
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)
            assert (await client.invoke(ns.address, cmd)).code == 0
            assert ns.routes.route("T") is not None
            client.close()
            await eventually(lambda: ns.routes.route("T") is None)

    run(main)


# ---- replay of the recorded exchanges -------------------------------------------------------


def _namesrv_exchanges(path: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    pending: dict[int, dict[str, Any]] = {}
    pairs = []
    for line in path.read_text().splitlines():
        frame = json.loads(line)
        if frame["link"] != "namesrv":
            continue
        opaque = frame["header"]["opaque"]
        if frame["dir"] == "c->s":
            pending[opaque] = frame
        else:
            pairs.append((pending.pop(opaque), frame))
    return pairs


@pytest.mark.parametrize("name", ["send", "pull", "push", "retry", "newtopic"])
def test_replay_of_rocketmqs_route_answers(name: str) -> None:
    """Every GET_ROUTEINFO_BY_TOPIC the official client sent RocketMQ 4.9.8's name server,
    replayed with the recorded header: the same code, remark and body bytes come back, once the
    broker has registered what the recorded route shows."""
    exchanges = _namesrv_exchanges(TRANSCRIPTS / f"{name}.jsonl")
    assert exchanges

    async def main() -> None:
        async with NameServer(port=0) as ns:
            with RemotingClient(timeout=5) as broker:
                await replay(ns, broker)

    async def replay(ns: NameServer, broker_client: RemotingClient) -> None:
        for counter, (request, response) in enumerate(exchanges, start=1):
            topic = request["header"]["extFields"]["topic"]
            expected_code = response["header"]["code"]
            if expected_code == ResponseCode.SUCCESS:
                recorded = _fastjson.loads(response["body"])
                broker = recorded["brokerDatas"][0]
                queue = recorded["queueDatas"][0]
                configs = {topic: {**queue, "topicName": topic}}
                body = RegisterBrokerBody(
                    TopicConfigWrapper(DataVersion(counter, counter), configs)
                ).encode()
                ext = {
                    "brokerName": broker["brokerName"],
                    "brokerAddr": broker["brokerAddrs"][0],
                    "clusterName": broker["cluster"],
                    "haServerAddr": "127.0.0.1:10912",
                    "brokerId": "0",
                    "compressed": "false",
                    "bodyCrc32": str(body_crc32(body)),
                }
                registered = await call(
                    ns.address, RequestCode.REGISTER_BROKER, ext, body, client=broker_client
                )
                assert registered.code == ResponseCode.SUCCESS
            else:
                await call(ns.address, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic})
            header = request["header"]
            answer = await call(
                ns.address, header["code"], header["extFields"], b"", header["version"]
            )
            assert answer.code == expected_code
            assert answer.remark == response["header"].get("remark")
            assert bytes(answer.body) == response.get("body", "").encode()

    run(main)
