"""The fault harness, bounded (a few faults, minutes): a controller-mode group of three
rocketstore brokers (``allAckInSyncStateSet``, ``minInSyncReplicas=2``) under the project's client
and the official RocketMQ 4.x client, a reader with offsets of its own, faults injected one at a
time, and the checker's verdict from the replicas' files (see tests/_chaos.py). The long run, 100
mixed faults, is benchmarks/failover_chaos.py.

Each broker runs in a network namespace of its own where the machine allows it (root and
``ip``); elsewhere everything is on loopback and the partition is skipped (the run says why).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

from _chaos import (
    TOPIC,
    History,
    Nemesis,
    PyProducer,
    Reader,
    Rmq4Producer,
    caught_up,
    check,
    env_ok,
    final_master_and_confirm,
)
from _chaos_cluster import ChaosCluster

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the harness runs processes on Linux"),
    pytest.mark.skipif(env_ok() is not None, reason=str(env_ok())),
]


def run_harness(
    tmp_path: Path, kinds: list[str], *, backend: str, official_client: bool = True
) -> None:
    cluster = ChaosCluster(tmp_path, backend=backend)
    history = History()
    producers: list[PyProducer] = []
    rmq4: Rmq4Producer | None = None
    reader: Reader | None = None
    try:
        cluster.start()
        assert cluster.wait(cluster.healthy, 120), "the group did not form:\n" + "\n".join(
            n.output()[-1500:] for n in cluster.brokers
        )
        from rocketstore.client._admin import AdminClient

        with AdminClient(cluster.namesrv_addr) as admin:
            master = cluster.master()
            assert master is not None
            admin.create_topic(
                cluster.broker_addrs[master], TOPIC, read_queue_nums=4, write_queue_nums=4
            )
            # every replica knows the topic (copied from the master) before a failover
            assert cluster.wait(
                lambda: all(TOPIC in admin.topic_configs(a) for a in cluster.broker_addrs), 60
            ), "the slaves did not copy the topic"
        producers.append(PyProducer(history, cluster.namesrv_addr))
        reader = Reader(history, cluster.namesrv_addr)
        for t in (*producers, reader):
            t.start()
        if official_client:
            try:
                from _interop import InteropUnavailable, rmq4_python

                python = rmq4_python()
            except InteropUnavailable as exc:
                print(f"official 4.x client unavailable: {exc}")
            else:
                rmq4 = Rmq4Producer(history, python, tmp_path / "rmq4-home", cluster.namesrv_addr)
        time.sleep(3.0)
        nemesis = Nemesis(cluster, history, seed=30)
        if not cluster.topology.can_partition:
            print(f"partition skipped: {cluster.topology.why_not}")
        nemesis.run([k for k in kinds if k in nemesis.kinds], log=print)
        time.sleep(3.0)
        for p in producers:
            p.stopping.set()
        if rmq4 is not None:
            rmq4.stop()
        for p in producers:
            p.join(30)
        assert cluster.wait(cluster.healthy, 120), "the group did not heal"
        assert cluster.wait(lambda: caught_up(cluster), 60), "the replicas did not catch up"
        time.sleep(2.0)  # the reader takes what the confirm offset lets it see
        reader.stopping.set()
        reader.join(30)
        master, confirm = final_master_and_confirm(cluster)
        cluster.stop()
        verdict = check(cluster, history, master, confirm, nemesis.stuck)
        print(verdict.summary())
        assert not verdict.acked_lost, f"acknowledged and lost: {verdict.acked_lost[:20]}"
        assert not verdict.divergent_replicas, verdict.divergent_replicas
        assert not verdict.read_problems, verdict.read_problems[:20]
        assert verdict.acked > 0 and verdict.reads > 0
        assert not verdict.unhealed, verdict.unhealed
        clients = {o.client for o in history.acked()}
        assert "py" in clients
        if rmq4 is not None:
            assert "rmq4" in clients, "the official client never got an acknowledgement"
        masters = {f.new_master for f in history.faults if f.kind == "kill_master"}
        assert None not in masters, "a killed master was not replaced"
    finally:
        for p in producers:
            p.stopping.set()
        if rmq4 is not None:
            rmq4.stop()
        if reader is not None:
            reader.stopping.set()
        cluster.stop()


@pytest.mark.timeout(900)
def test_master_and_slave_faults_lose_no_acknowledged_message(tmp_path: Path) -> None:
    run_harness(
        tmp_path,
        ["kill_master", "kill_slave", "pause_master", "partition_master"],
        backend="file",
    )


@pytest.mark.timeout(900)
def test_controller_faults_and_a_restart_of_everything(tmp_path: Path) -> None:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (Debian: apt-get install etcd-server)")
    run_harness(tmp_path, ["kill_controller", "restart_all", "kill_master"], backend="etcd")
