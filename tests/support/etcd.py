"""A 3-member etcd cluster on loopback for the controller's tests (Debian's etcd-server: the
``etcd`` binary). Ports from support.ports, data directories under the test's tmp_path, every
member killed and waited for at the end, even when the test fails. Without ``etcd`` on PATH the
tests that need it are skipped, saying so."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .ports import free_ports

START_TIMEOUT = 30.0


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        pytest.skip("etcd is not installed (Debian: apt-get install etcd-server)")
    return path


class EtcdCluster:
    """``size`` members named m0, m1, ...; ``endpoints`` their client URLs."""

    def __init__(self, root: Path, size: int = 3) -> None:
        self.binary = etcd_binary()
        self.root = root
        self.names = [f"m{i}" for i in range(size)]
        ports = free_ports(2 * size)
        self.client_ports = ports[:size]
        self.peer_ports = ports[size:]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.initial = ",".join(
            f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports, strict=True)
        )

    @property
    def endpoints(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.client_ports]

    def endpoint(self, name: str) -> str:
        return self.endpoints[self.names.index(name)]

    def start_member(self, name: str) -> None:
        i = self.names.index(name)
        data = self.root / f"etcd-{name}"
        log = open(self.root / f"etcd-{name}.log", "ab")  # noqa: SIM115 - the process owns it
        self.procs[name] = subprocess.Popen(
            [
                self.binary,
                "--name", name,
                "--data-dir", str(data),
                "--listen-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-cluster", self.initial,
                "--initial-cluster-state", "new",
                "--initial-cluster-token", f"rocketstore-test-{self.peer_ports[0]}",
                "--heartbeat-interval", "100",
                "--election-timeout", "1000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

    def start(self) -> EtcdCluster:
        for name in self.names:
            self.start_member(name)
        self.wait_healthy(self.names)
        return self

    def healthy(self, name: str) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint(name) + "/health", timeout=1.0) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def wait_healthy(self, names: list[str], timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name in names:
                proc = self.procs.get(name)
                if proc is not None and proc.poll() is not None:
                    log = (self.root / f"etcd-{name}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"etcd member {name} exited: {log}")
            if all(self.healthy(n) for n in names):
                return
            time.sleep(0.1)
        raise TimeoutError(f"etcd members {names} not healthy within {timeout} s")

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)

    def leader(self) -> str | None:
        """The member that leads the raft group now (from any member's status)."""
        for name in list(self.procs):
            try:
                req = urllib.request.Request(
                    self.endpoint(name) + "/v3/maintenance/status", data=b"{}", method="POST"
                )
                with urllib.request.urlopen(req, timeout=1.0) as r:
                    doc = json.loads(r.read())
            except (OSError, ValueError, urllib.error.URLError):
                continue
            leader_id = doc.get("leader")
            members = self._members(name)
            if leader_id is not None and leader_id in members:
                return members[leader_id]
        return None

    def _members(self, name: str) -> dict[str, str]:
        req = urllib.request.Request(
            self.endpoint(name) + "/v3/cluster/member/list", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(req, timeout=1.0) as r:
            doc = json.loads(r.read())
        return {str(m["ID"]): str(m["name"]) for m in doc.get("members", [])}

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)
