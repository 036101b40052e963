"""gRPC clients of a cluster: two broker groups registered with one name server, each with its
gRPC front end. QueryRoute and QueryAssignment at either front end answer every group's queues,
each at its own broker's endpoint, so a 5.x client given one endpoint sends to and receives from
the whole cluster (checked with stubs and with the official client)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.client._admin import AdminClient
from rocketstore.grpc import GrpcFrontEnd
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.grpc._pb import service_pb2 as spb
from rocketstore.grpc._pb import service_pb2_grpc
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer
from support.grpc_broker import TEST_GRPC_CONFIG, small_store_config
from support.waits import wait_dispatched

T = TypeVar("T")
MD = [("x-mq-client-id", "cluster-test")]
NAMES = ("broker-a", "broker-b")


class GrpcCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.namesrv: NameServer
        self.servers: dict[str, BrokerServer] = {}
        self.brokers: dict[str, BrokerController] = {}
        self.fronts: dict[str, GrpcFrontEnd] = {}

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def start(self) -> GrpcCluster:
        async def up() -> None:
            self.namesrv = NameServer("127.0.0.1", 0)
            await self.namesrv.start()
            for name in NAMES:
                server = BrokerServer(
                    small_store_config(self.root / name),
                    BrokerConfig(
                        listen_port=0,
                        namesrv_addr=self.namesrv.address,
                        broker_name=name,
                        cluster_name="GrpcCluster",
                    ),
                    grpc=TEST_GRPC_CONFIG,
                )
                await server.start()
                self.servers[name] = server
                self.brokers[name] = server.broker
                assert server.grpc is not None
                self.fronts[name] = server.grpc

        self.call(up)
        return self

    def close(self) -> None:
        async def down() -> None:
            for name in list(self.servers):
                await self.servers.pop(name).shutdown()
            self.fronts.clear()
            self.brokers.clear()
            await self.namesrv.close()

        try:
            self.call(down)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def create_topic(self, topic: str, queues: int = 2) -> None:
        with AdminClient(self.namesrv.address) as admin:
            for broker in self.brokers.values():
                admin.create_topic(
                    broker.address, topic, read_queue_nums=queues, write_queue_nums=queues
                )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            route = self.namesrv.routes.route(topic)
            if route is not None and len(route.broker_datas) == len(NAMES):
                return
            time.sleep(0.05)
        raise AssertionError(f"the route of {topic} did not reach the name server")

    def stored(self, name: str, topic: str) -> list[bytes]:
        """The bodies in ``topic``'s queues on broker ``name``, once dispatch has taken every
        message put there (a send to a new queue is answered before it)."""
        store = self.brokers[name].store
        wait_dispatched(store)

        async def read() -> list[bytes]:
            return [
                bytes(m.body)
                for q in range(4)
                for m in store.get_message("chk", topic, q, 0, 64).messages
            ]

        return self.call(read)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    c = GrpcCluster(tmp_path_factory.mktemp("grpc-cluster"))
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(scope="module")
def stubs(cluster: GrpcCluster) -> Iterator[dict[str, Any]]:
    channels = {name: grpc.insecure_channel(f.address) for name, f in cluster.fronts.items()}
    try:
        yield {name: service_pb2_grpc.MessagingServiceStub(ch) for name, ch in channels.items()}
    finally:
        for ch in channels.values():
            ch.close()


def endpoint_of(broker: pb.Broker) -> str:
    (addr,) = broker.endpoints.addresses
    return f"{addr.host}:{addr.port}"


def test_route_and_assignment_name_every_broker_group_at_its_endpoint(
    cluster: GrpcCluster, stubs: dict[str, Any]
) -> None:
    topic = "ClusterRouteT"
    cluster.create_topic(topic, queues=2)
    for asked in NAMES:
        req = spb.QueryRouteRequest()
        req.topic.name = topic
        r = stubs[asked].QueryRoute(req, metadata=MD)
        assert r.status.code == pb.Code.OK
        by_broker: dict[str, list[int]] = {}
        for mq in r.message_queues:
            assert mq.permission == pb.READ_WRITE
            assert endpoint_of(mq.broker) == cluster.fronts[mq.broker.name].address
            by_broker.setdefault(mq.broker.name, []).append(mq.id)
        assert by_broker == {"broker-a": [0, 1], "broker-b": [0, 1]}
        areq = spb.QueryAssignmentRequest()
        areq.topic.name = topic
        areq.group.name = "ClusterG"
        a = stubs[asked].QueryAssignment(areq, metadata=MD)
        assert a.status.code == pb.Code.OK
        assert sorted(
            (x.message_queue.broker.name, endpoint_of(x.message_queue.broker))
            for x in a.assignments
        ) == sorted((name, cluster.fronts[name].address) for name in NAMES)


def test_a_broker_without_grpc_is_left_out(cluster: GrpcCluster, stubs: dict[str, Any]) -> None:
    topic = "ClusterNoGrpcT"
    cluster.create_topic(topic, queues=1)
    front_b = cluster.fronts["broker-b"]
    endpoint_b = cluster.brokers["broker-b"].grpc_endpoint
    cluster.brokers["broker-b"].grpc_endpoint = None  # as if it served no gRPC
    try:
        routes = cluster.fronts["broker-a"].service.routes
        assert routes is not None
        routes._endpoints.clear()  # forget what was learnt
        req = spb.QueryRouteRequest()
        req.topic.name = topic
        r = stubs["broker-a"].QueryRoute(req, metadata=MD)
        assert {mq.broker.name for mq in r.message_queues} == {"broker-a"}
    finally:
        cluster.brokers["broker-b"].grpc_endpoint = endpoint_b
        routes._endpoints.clear()
    assert front_b.address == endpoint_b


def test_official_client_with_one_endpoint_reaches_the_whole_cluster(
    cluster: GrpcCluster, tmp_path: Path
) -> None:
    from support.grpc_client import client_venv, run_client

    python = client_venv()
    topic = "ClusterInteropT"
    cluster.create_topic(topic, queues=2)
    endpoint = cluster.fronts["broker-a"].address
    bodies = [f"m{i}" for i in range(12)]
    sent = run_client(
        python,
        None,
        tmp_path,
        endpoints=endpoint,
        scenario="produce",
        topic=topic,
        messages=[{"body": b} for b in bodies],
    )
    assert not sent["errors"]
    on_a, on_b = cluster.stored("broker-a", topic), cluster.stored("broker-b", topic)
    assert on_a and on_b  # the client spread its sends over both groups
    assert sorted(x.decode() for x in on_a + on_b) == sorted(bodies)
    got = run_client(
        python,
        None,
        tmp_path,
        endpoints=endpoint,
        scenario="receive",
        topic=topic,
        group="ClusterInteropG",
        rounds=10,
        invisible_s=30,
        await_s=1,
    )
    received = sorted(m["body"] for r in got["rounds"] for m in r)
    req = spb.QueryRouteRequest()
    req.topic.name = topic
    with grpc.insecure_channel(endpoint) as channel:
        route = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(req, metadata=MD)
    seen_route = sorted((mq.broker.name, mq.id) for mq in route.message_queues)
    assert received == sorted(bodies), (got["rounds"], seen_route, on_a, on_b)
