"""The HA forgery, replayed through the real servers: a name server, RocketMQ 5's controller and
two rocketstore brokers of one group in controller mode (``allAckInSyncStateSet=true``,
``minInSyncReplicas=2``, ``haAuthEnabled=true`` with the inner account), each a process of its
own. The slave is paused (SIGSTOP); a process without the secret connects to the master's HA
port, sends the AutoSwitch handshake as the slave and reports the master's max offset. The
next send is not acknowledged, the confirm offset stays, the fake is refused and audited. Then
both brokers are killed (-9), the slave restarted alone: the controller elects it, and every
message that was acknowledged is in its commit log (read from its files).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import StoreConfig
from rocketstore.acl import _audit
from rocketstore.broker._config import BrokerConfig
from rocketstore.client import Producer
from rocketstore.client._admin import AdminClient
from rocketstore.client._controller import ControllerAdmin
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer
from rocketstore.store.ha._auth import CHALLENGE, CHALLENGE_SIZE, MAGIC
from rocketstore.store.ha._auto_wire import HANDSHAKE, SLAVE_HANDSHAKE, SLAVE_TRANSFER, TRANSFER
from rocketstore.store.ha._wire import REPORT
from support.chaos import read_commit_log
from support.chaos_cluster import CLI, Node
from support.ports import free_port

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals to processes")

GROUP = "broker-a"
TOPIC = "ForgeryTopic"
HOST = "127.0.0.1"


class Group:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True)
        self.namesrv_addr = f"{HOST}:{free_port(HOST)}"
        self.controller_addr = f"{HOST}:{free_port(HOST)}"
        self.nodes: list[Node] = []
        self.brokers: list[Node] = []
        self.addrs: list[str] = []
        self.ha_ports: list[int] = []

    def start(self) -> None:
        ns = Node(
            "namesrv",
            [*CLI, "namesrv", "--listen", self.namesrv_addr, "--log-dir", str(self.logs / "ns")],
            self.logs / "namesrv.out",
        )
        controller = Node(
            "controller",
            [
                *CLI, "controller", "--listen", self.controller_addr, "--self-id", "n0",
                "--metrics-listen", "", "--log-dir", str(self.logs / "controller"),
                "--store", str(self.work / "controller"),
            ],
            self.logs / "controller.out",
        )  # fmt: skip
        self.nodes += [ns, controller]
        ns.start()
        controller.start()
        inner = json.dumps({"accessKey": "innerAK", "secretKey": "inner-secret-42"})
        for i in range(2):
            port, ha_port = free_port(HOST), free_port(HOST)
            self.addrs.append(f"{HOST}:{port}")
            self.ha_ports.append(ha_port)
            values = {
                "brokerClusterName": "DefaultCluster",
                "brokerName": GROUP,
                "brokerId": "-1",
                "brokerRole": "SLAVE",
                "enableControllerMode": "true",
                "controllerAddr": self.controller_addr,
                "allAckInSyncStateSet": "true",
                "minInSyncReplicas": "2",
                "namesrvAddr": self.namesrv_addr,
                "storePathRootDir": str(self.work / f"store{i}"),
                "mappedFileSizeCommitLog": str(1024 * 1024),
                "syncFlushTimeout": "2000",
                "controllerHeartBeatTimeoutMills": "4000",
                # the paused slave stays connected and in the set while the test runs (a
                # loaded machine may take a minute): the restarted slave can be elected
                "haMaxTimeSlaveNotCatchup": "300000",
                "haHousekeepingInterval": "300000",
                "haAuthEnabled": "true",
                "innerClientAuthenticationCredentials": inner,
            }
            conf = self.work / f"broker{i}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
            argv = [*CLI, "broker", "-c", str(conf), "--listen", f"{HOST}:{port}"]
            argv += [
                "--ha-listen",
                f"{HOST}:{ha_port}",
                "--grpc-listen",
                "",
                "--metrics-listen",
                "",
            ]
            argv += ["--log-dir", str(self.logs / f"b{i}")]
            node = Node(f"broker{i}", argv, self.logs / f"broker{i}.out")
            self.brokers.append(node)
            self.nodes.append(node)
            node.start()

    def stop(self) -> None:
        for node in reversed(self.nodes):
            with contextlib.suppress(Exception):
                node.stop()

    def state(self) -> tuple[int | None, dict[int, int], frozenset[int]]:
        """(master index, broker id by index, SyncStateSet as indexes) from the controller."""
        try:
            with ControllerAdmin(self.controller_addr, timeout=2.0) as admin:
                info = admin.sync_state([GROUP]).table.get(GROUP)
        except Exception:
            return None, {}, frozenset()
        if info is None:
            return None, {}, frozenset()
        index = {a: i for i, a in enumerate(self.addrs)}
        ids = {
            index[r.broker_address]: int(r.broker_id)
            for r in (*info.in_sync_replicas, *info.not_in_sync_replicas)
            if r.broker_address in index and r.broker_id is not None
        }
        in_sync = frozenset(
            index[r.broker_address] for r in info.in_sync_replicas if r.broker_address in index
        )
        return index.get(info.master_address or ""), ids, in_sync

    def runtime(self, i: int) -> dict[str, str]:
        with AdminClient(self.namesrv_addr) as admin:
            return admin.runtime_info(self.addrs[i])

    def diagnostics(self) -> str:
        return "\n".join(f"--- {n.name}\n{n.output()[-3000:]}" for n in self.nodes)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    g = Group(tmp_path)
    try:
        g.start()
        yield g
    finally:
        g.stop()


def wait(cond: object, timeout: float, poll: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(poll)
    return bool(cond())  # type: ignore[operator]


def stopped(node: Node) -> bool:
    """Whether the node's process is stopped (SIGSTOP has taken effect)."""
    assert node.proc is not None
    stat = Path(f"/proc/{node.proc.pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


def send(producer: Producer, body: str) -> bool:
    """Whether the send was acknowledged (SEND_OK)."""
    try:
        return producer.send(TOPIC, body.encode()).status == "SEND_OK"
    except Exception:
        return False


@pytest.mark.timeout(300)
def test_a_forged_slave_is_refused_and_no_acknowledged_message_is_lost(group: Group) -> None:
    def whole() -> bool:
        master, _ids, in_sync = group.state()
        return master is not None and in_sync == frozenset({0, 1})

    assert wait(whole, 90), group.diagnostics()
    master, ids, _ = group.state()
    assert master is not None
    slave = 1 - master
    acked: list[str] = []
    with Producer(group.namesrv_addr, "forgery-test", timeout=5.0) as producer:
        deadline = time.monotonic() + 60
        i = 0
        while len(acked) < 10 and time.monotonic() < deadline:
            if send(producer, f"before-{i}"):
                acked.append(f"before-{i}")
            else:
                time.sleep(0.2)
            i += 1
        assert len(acked) == 10, group.diagnostics()

        group.brokers[slave].pause()
        assert wait(lambda: stopped(group.brokers[slave]), 30), "the slave did not stop"
        if send(producer, "paused-0"):
            acked.append("paused-0")
        assert "paused-0" not in acked, "acknowledged with the only other replica paused"
        figures = group.runtime(master)
        confirm = int(figures["confirmOffset"])
        master_max = int(figures["commitLogMaxOffset"])

        # the forgery: no credentials, the slave's id, the master's max offset
        with socket.create_connection((HOST, group.ha_ports[master]), timeout=5) as fake:
            fake.settimeout(10)
            head = b""
            while len(head) < CHALLENGE_SIZE:
                chunk = fake.recv(CHALLENGE_SIZE - len(head))
                assert chunk, "closed before the challenge"
                head += chunk
            assert CHALLENGE.unpack(head)[0] == MAGIC
            fake.sendall(SLAVE_HANDSHAKE.pack(HANDSHAKE, 0, 0, ids[slave]))
            fake.sendall(SLAVE_TRANSFER.pack(TRANSFER, master_max))
            closed = False
            with contextlib.suppress(ConnectionResetError):
                while fake.recv(4096):
                    pass
                closed = True
            assert closed, "the master kept the forged connection"
        if send(producer, "forged-0"):
            acked.append("forged-0")
        assert "forged-0" not in acked, "acknowledged on a forged slave's word"
        assert int(group.runtime(master)["confirmOffset"]) == confirm

    audit = (group.logs / f"b{master}" / "audit.log").read_text()
    assert "DENY" in audit and "HA handshake" in audit, audit

    # the master first: killed first, the slave's closed connection would have the master
    # propose it out of the SyncStateSet (it would then, rightly, not be elected alone)
    group.brokers[master].kill()
    group.brokers[slave].kill()
    group.brokers[slave].start()
    assert wait(lambda: group.state()[0] == slave, 90), group.diagnostics()
    group.brokers[slave].stop()
    records, _data = read_commit_log(group.work / f"store{slave}")
    bodies = {r.key for r in records if r.topic == TOPIC}
    lost = [m for m in acked if m not in bodies]
    assert not lost, f"acknowledged and lost: {lost}"


# ---- RocketMQ 4.x's HA: a SYNC_MASTER and its SLAVE, in one process ----------------------------


class Pair:
    """A name server, a SYNC_MASTER and a SLAVE with the HA proof on, on a loop thread."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.namesrv = NameServer(port=0)
        self.run(self.namesrv.start())
        self.servers: dict[str, BrokerServer] = {}

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self, name: str, role: str, broker_id: int) -> BrokerServer:
        store = StoreConfig(
            store_path_root_dir=str(self.root / name),
            mapped_file_size_commit_log=256 * 1024,
            broker_role=role,  # type: ignore[arg-type]
            sync_flush_timeout=1000,
        )
        config = BrokerConfig(
            listen_port=0,
            namesrv_addr=self.namesrv.address,
            broker_id=broker_id,
            ha_auth_enabled=True,
            inner_client_credentials=json.dumps({"accessKey": "innerAK", "secretKey": "s3cret!"}),
        )
        server = BrokerServer(store, config)
        self.run(server.start())
        self.servers[name] = server
        return server

    def stop(self, name: str) -> None:
        self.run(self.servers.pop(name).shutdown())

    def close(self) -> None:
        try:
            for name in ("slave", "master"):
                if name in self.servers:
                    self.stop(name)
            self.run(self.namesrv.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def forge_4x(port: int, offset: int) -> bool:
    """A peer without the secret reports ``offset`` as a 4.x slave; whether it was closed."""
    with socket.create_connection((HOST, port), timeout=5) as fake:
        fake.settimeout(10)
        head = b""
        while len(head) < CHALLENGE_SIZE:
            chunk = fake.recv(CHALLENGE_SIZE - len(head))
            if not chunk:
                return True
            head += chunk
        fake.sendall(REPORT.pack(offset))
        with contextlib.suppress(ConnectionResetError):
            while fake.recv(4096):
                pass
        return True


def test_the_4x_forgery_through_brokers_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rocketstore.audit")
    audited = _audit.REFUSALS.written + _audit.REFUSALS.counted
    pair = Pair(tmp_path)
    try:
        master = pair.start("master", "SYNC_MASTER", 0)
        slave = pair.start("slave", "SLAVE", 1)
        with Producer(pair.namesrv.address, "forgery-4x", timeout=5.0) as producer:
            assert wait(lambda: master.store.ha.connection_count() == 1, 30)
            assert send(producer, "held-0")
            assert wait(lambda: slave.store.max_phy_offset == master.store.max_phy_offset, 30)
            # the real slave is connected: a forged report neither counts nor replaces it
            assert forge_4x(master.store.ha.listen_port, master.store.max_phy_offset)
            assert master.store.ha.connection_count() == 1
            pair.stop("slave")
            assert wait(lambda: master.store.ha.connection_count() == 0, 30)
            assert forge_4x(master.store.ha.listen_port, master.store.max_phy_offset)
            assert not send(producer, "forged-0")
            assert master.store.ha.push2slave_max_offset < master.store.max_phy_offset
            stats = master.store.statistics().ha
            assert stats is not None and stats.refused_peers == 2
        # both refusals audited: the first line in full, a repeat from the same host counted
        # (the audit log's per-source summary)
        assert _audit.REFUSALS.written + _audit.REFUSALS.counted == audited + 2
        denials = [r.getMessage() for r in caplog.records if r.name == "rocketstore.audit"]
        assert all("request=HA handshake" in d for d in denials), denials
    finally:
        pair.close()
