"""The controller as an operator meets it: ``rocketstore controller`` standalone (SIGTERM stops
it cleanly, its state file stays), inside the name server (``enableControllerInNamesrv`` in a
namesrv.conf, on the controller's own port), its status / sync-state / elect-master /
clean-broker-data / config commands against a group of brokers, the admin requests refused
unless signed by an admin account when the controller checks ACL, and its metrics."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rocketstore.cli import main
from rocketstore.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from support.controllers import CLUSTER, FakeBroker, RunningGroup
from support.ports import free_port
from support.processes import read_until

CLI = [sys.executable, "-m", "rocketstore.cli"]
ADMIN = ("RocketMQAdmin", "12345678admin")
USER = ("RocketMQUser", "12345678user")
ACL = f"""
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    admin: false
"""


def running_group(tmp: Path, **kwargs: Any) -> RunningGroup:
    """The controller of these tests (inactive masters looked for every 100 ms) and its group,
    the brokers beating every 0.5 s at epoch 1 with offset 10."""
    return RunningGroup(
        tmp, beat=(1, 10), beat_every_s=0.5, scan_inactive_master_interval_ms=100, **kwargs
    )


def cli(*args: str, keys: tuple[str, str] | None = None) -> Result:
    env = {"ROCKETSTORE_ACCESS_KEY": None, "ROCKETSTORE_SECRET_KEY": None}
    if keys is not None:
        env = {"ROCKETSTORE_ACCESS_KEY": keys[0], "ROCKETSTORE_SECRET_KEY": keys[1]}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def running(tmp_path: Path):  # type: ignore[no-untyped-def]
    r = running_group(tmp_path)
    try:
        r.group()
        yield r
    finally:
        r.stop()


def test_status_and_sync_state(running: RunningGroup) -> None:
    out = cli("controller", "status", "-a", running.address)
    assert out.exit_code == 0, out.output
    assert "controller group  group1" in out.output
    assert f"active            n0 {running.address}" in out.output
    assert f"peer              n0 {running.address} active" in out.output
    out = cli("controller", "sync-state", "-a", running.address, "-b", "broker-a")
    assert out.exit_code == 0, out.output
    a, b = running.brokers
    assert f"master            1 {a.address}" in out.output
    assert "master epoch      1" in out.output
    assert "SyncStateSet      epoch 2, 2 in sync" in out.output
    assert f"  1   {a.address:<24} yes      yes    master" in out.output
    assert f"  2   {b.address:<24} yes      yes    slave" in out.output
    doc = json.loads(
        cli("controller", "sync-state", "-a", running.address, "-b", "broker-a", "--json").output
    )
    assert doc["replicasInfoTable"]["broker-a"]["masterEpoch"] == 1
    missing = cli("controller", "sync-state", "-a", running.address, "-b", "nobody")
    assert missing.exit_code == 1 and "knows no broker group nobody" in missing.output


def test_elect_master_and_clean_broker_data(running: RunningGroup) -> None:
    a, b = running.brokers
    out = cli("controller", "elect-master", "-a", running.address, "-b", "broker-a")
    assert out.exit_code == 0, out.output
    assert f"master 2 ({b.address}), master epoch 2, SyncStateSet epoch 3" in out.output
    # broker 1 is no longer in the SyncStateSet: it cannot be designated
    out = cli(
        "controller", "elect-master", "-a", running.address, "-b", "broker-a", "--broker-id", "1"
    )
    assert out.exit_code == 1 and "code 2012" in out.output
    # a group with a master is not forgotten unless told to forget living brokers
    out = cli(
        "controller", "clean-broker-data", "-a", running.address, "-b", "broker-a", "-c", CLUSTER
    )
    assert out.exit_code == 1 and "still alive" in out.output
    out = cli("controller", "clean-broker-data", "-a", running.address, "-b", "broker-a",
              "--broker-ids", "1", "--clean-living")  # fmt: skip
    assert out.exit_code == 0, out.output
    out = cli("controller", "sync-state", "-a", running.address, "-b", "broker-a")
    assert a.address not in out.output and b.address in out.output
    out = cli("controller", "config", "-a", running.address, "enableElectUncleanMaster=true")
    assert out.exit_code == 0 and "enableElectUncleanMaster=true" in out.output
    assert running.server.controller.config.enable_elect_unclean_master


def test_unreachable_controller_is_one_line(tmp_path: Path) -> None:
    out = cli("controller", "status", "-a", f"127.0.0.1:{free_port('127.0.0.1')}")
    assert out.exit_code == 1 and out.output.startswith("error: ") and "Traceback" not in out.output


def test_admin_requests_need_an_admin_account(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    r = running_group(tmp_path, acl_file=str(acl), signed=ADMIN)
    try:
        r.group()  # the brokers sign with an admin account (their inner account)

        async def plain_broker() -> list[RemotingCommand]:
            """A broker signing as a plain account changes nothing of its group."""
            from rocketstore.remoting._signing import RequestSigner

            b = await FakeBroker(r.address).start()
            b.client.signer = RequestSigner(*USER)
            b.broker_id = 1
            try:
                return [
                    await b.call(RequestCode.CONTROLLER_APPLY_BROKER_ID, {"brokerName": "x"}),
                    await b.elect(),
                    await b.alter({1}, master_epoch=1, set_epoch=1),
                ]
            finally:
                await b.die()

        for answer in r.loop.run(plain_broker()):
            assert answer.code == ResponseCode.SYSTEM_ERROR, answer
            assert "Need admin permission" in (answer.remark or ""), answer.remark
        out = cli(
            "controller", "elect-master", "-a", r.address, "-b", "broker-a", "--broker-id", "2"
        )
        assert out.exit_code == 1 and "No accessKey" in out.output
        out = cli("controller", "elect-master", "-a", r.address, "-b", "broker-a",
                  "--broker-id", "2", keys=USER)  # fmt: skip
        assert out.exit_code == 1 and "Need admin permission" in out.output
        out = cli("controller", "elect-master", "-a", r.address, "-b", "broker-a",
                  "--broker-id", "2", keys=ADMIN)  # fmt: skip
        assert out.exit_code == 0 and "master 2" in out.output, out.output
        out = cli("controller", "clean-broker-data", "-a", r.address, "-b", "broker-a",
                  "--clean-living", keys=USER)  # fmt: skip
        assert out.exit_code == 1 and "Need admin permission" in out.output
        with RemotingClient(signer=None) as client:  # unsigned: refused, the server serves on
            answer = client.invoke(
                r.address, RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
            )
            assert answer.code == ResponseCode.SYSTEM_ERROR and "AclException" in (
                answer.remark or ""
            )
        assert cli("controller", "status", "-a", r.address, keys=USER).exit_code == 0
    finally:
        r.stop()


def test_metrics_of_the_controller(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    from rocketstore.metrics import start_metrics

    r = running_group(tmp_path)
    try:
        r.group()
        metrics = r.loop.run(start_metrics([], "127.0.0.1:0", controller=r.server.controller))
        try:
            with urllib.request.urlopen(f"http://{metrics.address}/metrics", timeout=10) as resp:
                text = resp.read().decode()
        finally:
            r.loop.run(metrics.close())
        own = f'address="{r.address}",group="group1",peer_id="n0"'
        # the exposition writes labels in name order
        group = f'address="{r.address}",broker_set="broker-a",cluster="{CLUSTER}",group="group1",peer_id="n0"'
        assert f"role{{{own}}} 3.0" in text
        assert (
            f'election_total{{address="{r.address}",broker_set="broker-a",cluster="{CLUSTER}",'
            'election_result="new_master_elected",group="group1",peer_id="n0"} 1.0'
        ) in text
        assert f"rocketstore_controller_master_epoch{{{group}}} 1.0" in text
        assert f"rocketstore_controller_sync_state_set_size{{{group}}} 2.0" in text
        assert f"active_broker_num{{{group}}} 2.0" in text
        assert (
            f'request_total{{{own},request_handle_status="success",'
            f'request_type="controller_elect_master"}} 1.0'
        ) in text
    finally:
        r.stop()


def test_standalone_controller_stops_cleanly(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    store = tmp_path / "controller-store"
    proc = subprocess.Popen(
        [*CLI, "controller", "--listen", f"127.0.0.1:{port}", "--store", str(store),
         "--metrics-listen", ""],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = read_until(proc, re.escape("controller n0 of group1 listening on"))
        assert any(f"127.0.0.1:{port} (file backend, {store})" in line for line in lines), lines
        out = cli("controller", "status", "-a", f"127.0.0.1:{port}")
        assert out.exit_code == 0 and f"active            n0 127.0.0.1:{port}" in out.output
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert (store / "lock").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_controller_inside_the_name_server(tmp_path: Path) -> None:
    ns_port, ctl_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    conf = tmp_path / "namesrv.conf"
    conf.write_text(
        f"listenPort={ns_port}\n"
        f"kvConfigPath={tmp_path / 'kv.json'}\n"
        "enableControllerInNamesrv=true\n"
        "controllerDLegerGroup=group1\n"
        f"controllerDLegerPeers=n0-127.0.0.1:{ctl_port}\n"
        "controllerDLegerSelfId=n0\n"
        f"controllerStorePath={tmp_path / 'ctl'}\n"
    )
    proc = subprocess.Popen(
        [*CLI, "namesrv", "-c", str(conf), "--log-dir", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        read_until(proc, re.escape(f"controller n0 of group1 listening on 127.0.0.1:{ctl_port}"))
        with RemotingClient(signer=None) as client:
            meta = client.invoke(
                f"127.0.0.1:{ctl_port}",
                RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO),
            )
            assert meta.ext_fields["controllerLeaderAddress"] == f"127.0.0.1:{ctl_port}"
            # the name server answers on its own port, the controller's codes on the other
            cluster = client.invoke(
                f"127.0.0.1:{ns_port}", RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            )
            assert cluster.code == ResponseCode.SUCCESS
            other = client.invoke(
                f"127.0.0.1:{ns_port}",
                RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO),
            )
            assert other.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert (tmp_path / "ctl" / "lock").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
