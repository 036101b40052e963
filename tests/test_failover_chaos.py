"""The fault harness, bounded (a few faults, minutes): a controller-mode group of three
rocketstore brokers (``allAckInSyncStateSet``, ``minInSyncReplicas=2``) under the project's client
and the official RocketMQ 4.x client, a reader with offsets of its own, faults injected one at a
time, and the checker's verdict from the replicas' files (see tests/support/chaos.py). The long run, 100
mixed faults, is benchmarks/failover_chaos.py. Marked slow (``-m "not slow"`` leaves them out);
each run is bounded by its fault count, by the harness's heal waits and by the test timeout.

Each broker runs in a network namespace of its own where the machine allows it (root and
``ip``); elsewhere everything is on loopback and the partition's test is skipped, saying why.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from support.chaos import env_ok, run_chaos
from support.chaos_net import NetnsTopology

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="the harness runs processes on Linux"),
    pytest.mark.skipif(env_ok() is not None, reason=str(env_ok())),
]


def run_harness(tmp_path: Path, kinds: list[str], *, backend: str) -> None:
    verdict, history, _cluster = run_chaos(tmp_path, kinds, backend=backend)
    print(verdict.summary())
    assert not verdict.acked_lost, f"acknowledged and lost: {verdict.acked_lost[:20]}"
    assert not verdict.divergent_replicas, verdict.divergent_replicas
    assert not verdict.read_problems, verdict.read_problems[:20]
    assert verdict.acked > 0 and verdict.reads > 0
    assert not verdict.unhealed, verdict.unhealed
    clients = {o.client for o in history.acked()}
    assert "py" in clients
    if any(o.client == "rmq4" for o in history.ops):
        assert "rmq4" in clients, "the official client never got an acknowledgement"
    for f in history.faults:
        if f.kind in ("kill_master", "pause_master", "partition_master"):
            assert f.new_master not in (None, f.old_master), f"{f.kind}: no new master"


@pytest.mark.timeout(900)
def test_master_and_slave_faults_lose_no_acknowledged_message(tmp_path: Path) -> None:
    run_harness(tmp_path, ["kill_master", "kill_slave", "pause_master"], backend="file")


@pytest.mark.timeout(900)
def test_a_partitioned_master_loses_no_acknowledged_message(tmp_path: Path) -> None:
    """The master cut off from the controller and its slaves (a network namespace each)."""
    why_not = NetnsTopology.available()
    if why_not is not None:
        pytest.skip(f"the partition needs network namespaces: {why_not}")
    run_harness(tmp_path, ["partition_master", "kill_slave"], backend="file")


@pytest.mark.timeout(900)
def test_controller_faults_and_a_restart_of_everything(tmp_path: Path) -> None:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (Debian: apt-get install etcd-server)")
    run_harness(tmp_path, ["kill_controller", "restart_all", "kill_master"], backend="etcd")
