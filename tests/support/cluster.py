"""A name server and two broker groups (broker-a, broker-b of cluster C1) on an event loop in a
thread of their own, driven by blocking clients; the admin tests' cluster, and how they call it
(raw requests, the CLI in-process)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from click.testing import CliRunner

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.cli import main as cli_main
from rocketstore.client._admin import AdminClient
from rocketstore.namesrv import NameServer
from rocketstore.protocol._heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    build_subscription,
    encode_heartbeat,
)
from rocketstore.remoting import (
    AsyncRemotingClient,
    Connection,
    RemotingClient,
    RemotingCommand,
    ResponseCode,
)
from rocketstore.server import BrokerServer

from .waits import wait_until

T = TypeVar("T")
CLUSTER = "C1"


class Cluster:
    """A NameServer and two BrokerControllers (broker-a, broker-b of cluster C1) on an event
    loop in a thread of their own; the test drives them with blocking clients."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="cluster-loop")
        self.thread.start()
        self.ns: NameServer | None = None
        self.servers: dict[str, BrokerServer] = {}
        self.brokers: dict[str, BrokerController] = {}

    def run(self, coro: Awaitable[T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop).result(timeout)

    async def start(self) -> None:
        self.ns = NameServer("127.0.0.1", 0)
        await self.ns.start()
        for name in ("broker-a", "broker-b"):
            store_config = StoreConfig(
                store_path_root_dir=str(self.root / name),
                mapped_file_size_commit_log=256 * 1024,
                mapped_file_size_consume_queue=20 * 1000,
                max_hash_slot_num=1000,
                max_index_num=4000,
                flush_interval_commit_log=10,
                commit_interval_commit_log=10,
            )
            server = BrokerServer(
                store_config,
                BrokerConfig(
                    listen_port=0,
                    namesrv_addr=self.ns.address,
                    broker_name=name,
                    cluster_name=CLUSTER,
                ),
            )
            await server.start()
            self.servers[name] = server
            self.brokers[name] = server.broker

    async def stop(self) -> None:
        for server in self.servers.values():
            await server.shutdown()
        if self.ns is not None:
            await self.ns.close()

    @property
    def namesrv(self) -> str:
        assert self.ns is not None
        return self.ns.address

    def addr(self, name: str) -> str:
        return self.brokers[name].address

    def route(self, topic: str) -> Any:
        assert self.ns is not None
        return self.ns.routes.route(topic)

    def close(self) -> None:
        try:
            self.run(self.stop(), 30.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


async def _wrap(coro: Awaitable[T]) -> T:
    return await coro


@contextlib.contextmanager
def started_cluster(root: Path) -> Iterator[Cluster]:
    """A name server and two brokers, both registered; stopped on the way out. Each test
    module that uses it has a cluster of its own (a module-scoped ``cluster`` fixture)."""
    c = Cluster(root)
    try:
        c.run(c.start())
        assert wait_until(lambda: c.ns is not None and len(c.ns.routes.live_brokers()) == 2)
        yield c
    finally:
        c.close()


def raw_call(addr: str, code: int, ext: dict[str, str]) -> RemotingCommand:
    with RemotingClient(timeout=5) as client:
        return client.invoke(addr, RemotingCommand.request(code, ext))


def create_everywhere(admin: AdminClient, cluster: Cluster, topic: str, queues: int = 2) -> None:
    for name in cluster.brokers:
        admin.create_topic(
            cluster.addr(name), topic, read_queue_nums=queues, write_queue_nums=queues
        )
    assert wait_until(
        lambda: (r := cluster.route(topic)) is not None and len(r.broker_datas) == 2
    ), "the route did not reach the name server"


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(cli_main, list(args), catch_exceptions=False)
    return result


Answer = Callable[[RemotingCommand, Connection], Any]


async def online_consumer(
    cluster: Cluster,
    client_id: str,
    group: str,
    topic: str,
    *,
    handlers: dict[int, Answer] | None = None,
    brokers: tuple[str, ...] = ("broker-a", "broker-b"),
    version: int | None = None,
) -> AsyncRemotingClient:
    """A consumer ``client_id`` of ``group`` subscribed to ``topic``, registered with
    ``brokers`` by a heartbeat (of client ``version`` when given), answering the brokers'
    requests with ``handlers``; on the cluster's loop (``cluster.run``)."""
    client = AsyncRemotingClient(handlers or {})  # type: ignore[arg-type]
    data = HeartbeatData(
        client_id,
        consumers=(
            ConsumerData(
                group,
                ConsumeType.CONSUME_PASSIVELY,
                MessageModel.CLUSTERING,
                ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                (build_subscription(topic, "*"),),
            ),
        ),
    )
    for name in brokers:
        request = RemotingCommand.request(34, {}, body=encode_heartbeat(data))
        if version is not None:
            request.version = version
        r = await client.invoke(cluster.addr(name), request)
        assert r.code == ResponseCode.SUCCESS, r.remark
    return client


async def close_client(client: AsyncRemotingClient) -> None:
    """Close ``client`` and give the brokers a moment to see its connections end."""
    client.close()
    await asyncio.sleep(0.05)
