"""The file backend's promises: a change answered is on disk (a controller killed with -9 right
after answering comes back with it), a write in progress left behind is ignored, a state file
that does not decode stops the controller with one line instead of a guess, a failed start
lets go of the directory, and a failed write changes nothing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rocketstore.controller import (
    BackendUnavailableError,
    ControllerConfig,
    FileBackend,
    GroupRecord,
    Member,
    StateCorruptError,
)
from rocketstore.protocol._controller_headers import GetReplicaInfoRequest
from rocketstore.remoting import RequestCode, ResponseCode
from rocketstore.server import ControllerServer
from support.controllers import CLUSTER, FakeBroker, run
from support.ports import free_port
from support.processes import read_until

CLI = [sys.executable, "-m", "rocketstore.cli"]
ME = Member("n0", "127.0.0.1:1")


def _controller(store: Path, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*CLI, "controller", "--listen", f"127.0.0.1:{port}", "--store", str(store),
         "--metrics-listen", "", "--log-dir", str(store.parent / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    read_until(proc, re.escape("listening on"))
    return proc


def test_an_answered_election_survives_kill_9(tmp_path: Path) -> None:
    store = tmp_path / "controller"
    port = free_port("127.0.0.1")
    address = f"127.0.0.1:{port}"
    proc = _controller(store, port)
    try:

        async def elect() -> None:
            a = await FakeBroker(address).start()
            await a.register()
            await a.heartbeat()
            r = await a.elect()
            assert (r.code, r.ext_fields["masterEpoch"]) == (ResponseCode.SUCCESS, "1")
            proc.send_signal(signal.SIGKILL)  # at once after the answer
            proc.wait(10)
            await a.die()

        run(elect)
        proc = _controller(store, port)

        async def read() -> None:
            b = await FakeBroker(address).start()
            r = await b.call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequest("broker-a")
            )
            assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("1", "1")
            await b.die()

        run(read)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_write_in_progress_is_ignored_and_a_corrupt_file_refused(tmp_path: Path) -> None:
    store = tmp_path / "controller"

    async def write() -> None:
        backend = FileBackend(store)
        await backend.open()
        assert await backend.take_leadership(ME)
        record = GroupRecord(CLUSTER, "broker-a").with_replica(1, "a", "a;1").with_master(1)
        assert await backend.compare_and_set("broker-a", record, 0) == 1
        await backend.close()

    run(write)
    good = (store / "replicas.json").read_bytes()
    (store / "replicas.json.tmp").write_bytes(good[:20])  # a crash mid-write

    async def reopen() -> None:
        backend = FileBackend(store)
        await backend.open()
        read = await backend.read("broker-a")
        assert read is not None and read.record.master_epoch == 1
        await backend.close()

    run(reopen)
    assert not (store / "replicas.json.tmp").exists()

    doc = json.loads(good)
    doc["groups"]["broker-a"]["record"]["masterEpoch"] = "one"
    (store / "replicas.json").write_text(json.dumps(doc))

    async def corrupt() -> None:
        with pytest.raises(StateCorruptError, match=r"replicas.json: group 'broker-a'"):
            await FileBackend(store).open()

    run(corrupt)
    out = subprocess.run(
        [*CLI, "controller", "--listen", "127.0.0.1:0", "--store", str(store),
         "--metrics-listen", "", "--log-dir", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1, out
    assert out.stderr.startswith("error: ") and "replicas.json" in out.stderr
    assert "Traceback" not in out.stderr
    assert json.loads((store / "replicas.json").read_text())["groups"]["broker-a"]  # untouched


def test_a_failed_start_lets_go_of_the_directory(tmp_path: Path) -> None:
    store = tmp_path / "controller"

    async def main() -> None:
        taken = ControllerServer(ControllerConfig(listen_port=0, store_path=str(store)))
        await taken.start()
        try:
            clash = ControllerServer(
                ControllerConfig(
                    listen_port=taken.config.listen_port, store_path=str(tmp_path / "other")
                )
            )
            with pytest.raises(OSError):
                await clash.start()
            # its directory is free again: another controller takes the lead there at once
            again = FileBackend(tmp_path / "other")
            await again.open()
            assert await again.take_leadership(ME)
            await again.close()
        finally:
            await taken.shutdown()

    run(main)


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "controller"

    async def main() -> None:
        backend = FileBackend(store)
        await backend.open()
        assert await backend.take_leadership(ME)
        record = GroupRecord(CLUSTER, "broker-a").with_replica(1, "a", "a;1")
        assert await backend.compare_and_set("broker-a", record, 0) == 1
        (store / "replicas.json.tmp").mkdir()  # the next write cannot create its temp file
        with pytest.raises(BackendUnavailableError):
            await backend.compare_and_set("broker-a", record.with_master(1), 1)
        read = await backend.read("broker-a")
        assert read is not None and read.revision == 1 and read.record.master_epoch == 0
        (store / "replicas.json.tmp").rmdir()
        assert await backend.compare_and_set("broker-a", record.with_master(1), 1) == 2
        await backend.close()

    run(main)
