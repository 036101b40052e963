"""Replication through brokers: a SYNC_MASTER and a SLAVE registered with one name server. The
slave learns its master's HA address from the name server, holds every acknowledged message and
serves it; the route lists it with id 1; with the slave gone a send answers SLAVE_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.client import MessageQueue, Producer
from rocketstore.client._consumer import decode_records
from rocketstore.client._route import parse_route
from rocketstore.namesrv import NameServer
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from rocketstore.server import BrokerServer


class Cluster:
    """A name server, a SYNC_MASTER and a SLAVE of one broker group on a loop thread."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.root = root
        self.namesrv = NameServer(port=0)
        self.master: BrokerServer | None = None
        self.slave: BrokerServer | None = None
        self.run(self.namesrv.start())

    def run(self, coro: Any, timeout: float = 20.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _broker(self, name: str, role: str, broker_id: int) -> BrokerServer:
        store = StoreConfig(
            store_path_root_dir=str(self.root / name),
            mapped_file_size_commit_log=256 * 1024,
            broker_role=role,  # type: ignore[arg-type]
            sync_flush_timeout=1000,
        )
        config = BrokerConfig(listen_port=0, namesrv_addr=self.namesrv.address, broker_id=broker_id)
        server = BrokerServer(store, config)
        self.run(server.start())
        return server

    def start_master(self) -> None:
        self.master = self._broker("master", "SYNC_MASTER", 0)

    def start_slave(self) -> None:
        self.slave = self._broker("slave", "SLAVE", 1)

    def stop_slave(self) -> None:
        if self.slave is not None:
            self.run(self.slave.shutdown())
            self.slave = None

    def close(self) -> None:
        try:
            self.stop_slave()
            if self.master is not None:
                self.run(self.master.shutdown())
            self.run(self.namesrv.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start_master()
        c.start_slave()
        yield c
    finally:
        c.close()


def _wait(cond: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


def _pull(client: RemotingClient, addr: str, topic: str, queue_id: int) -> tuple[int, bytes]:
    ext = {
        "consumerGroup": "g",
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
    }
    r = client.invoke(addr, RemotingCommand.request(11, ext))
    return r.code, bytes(r.body)


def test_sync_master_acknowledges_only_what_the_slave_holds(cluster: Cluster) -> None:
    assert cluster.master is not None and cluster.slave is not None
    # the slave learnt its master from the name server (no HA address was configured)
    assert _wait(lambda: cluster.master.store.ha.connection_count() == 1)  # type: ignore[union-attr]
    with Producer(cluster.namesrv.address) as producer:
        results = [producer.send("HaTopic", f"m{i}".encode()) for i in range(20)]
    assert {r.status for r in results} == {"SEND_OK"}
    master_end = cluster.master.store.max_phy_offset
    assert cluster.slave.store.max_phy_offset >= master_end
    # the slave serves the messages once it has the master's topic configs (synced every 10 s,
    # 3 s after it learns its master; here at once)
    assert _wait(lambda: cluster.slave.store.dispatch_behind_bytes() == 0)  # type: ignore[union-attr]
    assert cluster.slave.broker.slave_sync is not None
    assert cluster.slave.broker.slave_sync.master_addr == cluster.master.address
    assert cluster.run(cluster.slave.broker.slave_sync.sync_all())
    assert cluster.slave.broker.topics.select("HaTopic") == cluster.master.broker.topics.select(
        "HaTopic"
    )
    with RemotingClient(timeout=5.0) as client:
        route = client.invoke(
            cluster.namesrv.address, RemotingCommand.request(105, {"topic": "HaTopic"})
        )
        assert route.code == ResponseCode.SUCCESS
        addrs = parse_route("HaTopic", route.body).brokers["broker-a"]
        assert addrs[0] == cluster.master.address and addrs[1] == cluster.slave.address
        bodies = set()
        for queue in {r.queue.queue_id for r in results}:
            code, data = _pull(client, cluster.slave.address, "HaTopic", queue)
            assert code == ResponseCode.SUCCESS
            bodies |= {m.body for m in decode_records(data)}
        assert bodies == {f"m{i}".encode() for i in range(20)}


def test_without_its_slave_a_sync_master_answers_slave_not_available(cluster: Cluster) -> None:
    assert cluster.master is not None
    assert _wait(lambda: cluster.master.store.ha.connection_count() == 1)  # type: ignore[union-attr]
    queue = MessageQueue("HaGone", "broker-a", 0)
    with Producer(cluster.namesrv.address, retries=0) as producer:
        assert producer.send("HaGone", b"before", queue=queue).status == "SEND_OK"
        cluster.stop_slave()
        assert _wait(lambda: cluster.master.store.ha.connection_count() == 0)  # type: ignore[union-attr]
        r = producer.send("HaGone", b"after", queue=queue)
        assert r.status == "SLAVE_NOT_AVAILABLE"  # stored, not replicated
        cluster.start_slave()
        assert _wait(lambda: cluster.master.store.ha.connection_count() == 1)  # type: ignore[union-attr]
        assert producer.send("HaGone", b"again", queue=queue).status == "SEND_OK"
