"""Controller mode against RocketMQ 5.1.4 itself (skipped without ``ROCKETMQ5_CLASSPATH``, see
tests/support/rocketmq5.py): RocketMQ's controller (embedded in its name server) gives rocketstore
brokers their ids and roles, elects a new master when the master is killed, and mqadmin reads
the group back (getSyncStateSet, getBrokerEpoch, clusterList); and a RocketMQ 5.1.4 broker and a
rocketstore broker replicate each other with AutoSwitch HA, each way: 5.1.4 as the slave of a
rocketstore master, then, the rocketstore master killed, rocketstore as the slave of the 5.1.4
master it rejoins, the two commit logs byte-identical each time.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from rocketstore.client import Producer
from support import rocketmq5 as rmq5
from support.chaos_cluster import CLI, Node
from support.ports import free_port
from support.waits import wait_until

pytestmark = pytest.mark.skipif(rmq5.unavailable() is not None, reason=str(rmq5.unavailable()))

FILE = 8 * 1024 * 1024


def rocketstore_broker(
    root: Path, name: str, group: str, namesrv: str, controller: str
) -> tuple[Node, str]:
    port = free_port("127.0.0.1")
    conf = root / f"{name}.conf"
    conf.write_text(
        "brokerClusterName=DefaultCluster\n"
        f"brokerName={group}\n"
        "brokerId=-1\n"
        "enableControllerMode=true\n"
        f"controllerAddr={controller}\n"
        "allAckInSyncStateSet=true\n"
        f"namesrvAddr={namesrv}\n"
        f"storePathRootDir={root / name}\n"
        f"mappedFileSizeCommitLog={FILE}\n"
    )
    argv = [*CLI, "broker", "-c", str(conf), "--listen", f"127.0.0.1:{port}"]
    argv += ["--ha-listen", f"127.0.0.1:{free_port('127.0.0.1')}", "--grpc-listen", ""]
    argv += ["--metrics-listen", "", "--log-dir", str(root / f"{name}-logs")]
    node = Node(name, argv, root / f"{name}.out")
    node.start()
    return node, f"127.0.0.1:{port}"


def send(namesrv: str, topic: str, count: int, prefix: str, within: float = 60.0) -> int:
    acked = 0
    deadline = time.monotonic() + within
    with Producer(namesrv, "rmq5-interop", timeout=5.0) as p:
        for i in range(count):
            while time.monotonic() < deadline:
                try:
                    if p.send(topic, f"{prefix}-{i}".encode()).status == "SEND_OK":
                        acked += 1
                        break
                except Exception:
                    pass
                time.sleep(0.2)
    return acked


def sync_state(root: Path, controller: str, group: str) -> dict[str, str]:
    out = rmq5.admin(root, "getSyncStateSet", "-a", controller, "-b", group)
    found = dict(re.findall(r"#(\w+)\t(\S+)", out))
    found["in_sync"] = str(out.count("InSyncReplica:"))
    return found


def log_bytes(store: Path) -> bytes:
    try:
        data = (store / "commitlog" / f"{0:020d}").read_bytes()
    except FileNotFoundError:
        return b""
    return data.rstrip(b"\0")


def test_rocketstore_brokers_under_rocketmq_5s_controller(tmp_path: Path) -> None:
    procs: list[rmq5.JavaProcess] = []
    nodes: list[Node] = []
    try:
        ns_proc, namesrv, controller = rmq5.start_namesrv(tmp_path)
        procs.append(ns_proc)
        brokers = []
        for i in range(3):
            node, addr = rocketstore_broker(tmp_path, f"b{i}", "broker-a", namesrv, controller)
            nodes.append(node)
            brokers.append(addr)
        assert wait_until(
            lambda: sync_state(tmp_path, controller, "broker-a").get("in_sync") == "3", 90, 1.0
        ), rmq5.admin(tmp_path, "getSyncStateSet", "-a", controller, "-b", "broker-a")
        state = sync_state(tmp_path, controller, "broker-a")
        assert state["MasterEpoch"] == "1" and state["MasterAddr"] in brokers
        assert send(namesrv, "Rmq5Topic", 20, "one") == 20
        epochs = rmq5.admin(tmp_path, "getBrokerEpoch", "-n", namesrv, "-b", "broker-a")
        assert epochs.count("EpochEntry{epoch=1, startOffset=0") == 3, epochs
        old = brokers.index(state["MasterAddr"])
        nodes[old].kill()
        assert wait_until(
            lambda: sync_state(tmp_path, controller, "broker-a").get("MasterEpoch") == "2", 60, 1.0
        )
        new_master = sync_state(tmp_path, controller, "broker-a")["MasterAddr"]
        assert new_master != brokers[old]
        assert send(namesrv, "Rmq5Topic", 20, "two") == 20
        listed = rmq5.admin(tmp_path, "clusterList", "-n", namesrv)
        assert re.search(rf"broker-a\s+0\s+{re.escape(new_master)}", listed), listed
        nodes[old].start()  # back as a slave, in the set again
        assert wait_until(
            lambda: sync_state(tmp_path, controller, "broker-a").get("in_sync") == "3", 90, 1.0
        )
        assert "role change NONE -> SLAVE, epoch 2" in nodes[old].output()
    finally:
        for node in nodes:
            node.kill()
        for proc in procs:
            proc.kill()


def test_autoswitch_ha_between_rocketmq_5_and_rocketstore(tmp_path: Path) -> None:
    procs: list[rmq5.JavaProcess] = []
    nodes: list[Node] = []
    try:
        ns_proc, namesrv, controller = rmq5.start_namesrv(tmp_path)
        procs.append(ns_proc)
        ours, _ours_addr = rocketstore_broker(tmp_path, "rs", "broker-x", namesrv, controller)
        nodes.append(ours)
        assert wait_until(lambda: "role change NONE -> MASTER, epoch 1" in ours.output(), 60, 0.5)
        assert send(namesrv, "Rmq5Ha", 20, "before") == 20
        # RocketMQ 5.1.4 joins as the slave of the rocketstore master
        java, java_addr = rmq5.start_broker(tmp_path, "j", "broker-x", namesrv, controller, FILE)
        procs.append(java)
        assert wait_until(
            lambda: sync_state(tmp_path, controller, "broker-x").get("in_sync") == "2", 90, 1.0
        )
        assert send(namesrv, "Rmq5Ha", 20, "both") == 20  # every SyncStateSet member holds it
        ours_log = log_bytes(tmp_path / "rs")
        assert wait_until(lambda: log_bytes(tmp_path / "j") == ours_log, 30, 0.5)
        # the rocketstore master dies: 5.1.4 becomes master of epoch 2
        ours.kill()
        assert wait_until(
            lambda: sync_state(tmp_path, controller, "broker-x").get("MasterAddr") == java_addr,
            60,
            1.0,
        )
        assert send(namesrv, "Rmq5Ha", 20, "java-master") == 20
        # rocketstore comes back as 5.1.4's slave: handshake, epochs, replication
        ours.start()
        assert wait_until(
            lambda: sync_state(tmp_path, controller, "broker-x").get("in_sync") == "2", 90, 1.0
        )
        assert send(namesrv, "Rmq5Ha", 10, "after") == 10
        java_log = log_bytes(tmp_path / "j")
        assert wait_until(lambda: log_bytes(tmp_path / "rs") == java_log, 30, 0.5)
        logs = "".join(p.read_text() for p in (tmp_path / "rs-logs").glob("*.log"))
        assert re.search(r"master epochs \[\(1, 0\), \(2, \d+\)\].*consistent point", logs)
        epochs = (tmp_path / "rs" / "epochFileCheckpoint").read_text().split("\n")
        assert epochs[0] == "2" and epochs[2].startswith("1-0") and epochs[3].startswith("2-")
    finally:
        for node in nodes:
            node.kill()
        for proc in procs:
            proc.kill()
