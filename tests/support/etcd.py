"""A 3-member etcd cluster on loopback for the controller's tests (Debian's etcd-server: the
``etcd`` binary). Ports from support.ports, data directories under the test's tmp_path, every
member killed and waited for at the end, even when the test fails. Without ``etcd`` on PATH the
tests that need it are skipped, saying so.

A cluster may serve its clients over TLS (``EtcdTls``: a CA, a server certificate for 127.0.0.1
and a client certificate, made with the openssl command line) and turn etcd's auth on
(``enable_auth``: the root user, and users whose role reads and writes one key prefix), as an
operator would with ``etcdctl user add`` / ``role grant-permission`` / ``auth enable``, here
through etcd's JSON gateway."""

from __future__ import annotations

import base64
import json
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from .ports import free_ports

START_TIMEOUT = 30.0


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        pytest.skip("etcd is not installed (Debian: apt-get install etcd-server)")
    return path


@dataclass(frozen=True)
class EtcdTls:
    """PEM files: ``ca`` signs the server's certificate (127.0.0.1) and the client's."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def context(self) -> ssl.SSLContext:
        """A client's: the CA, and the client certificate (etcd with a trusted CA file asks
        every client for one)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


def _openssl(*args: str) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_tls(root: Path) -> EtcdTls:
    """A CA and two certificates it signs (EC P-256 keys, valid for a day), under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    key_args = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca, ca_key = root / "ca.crt", root / "ca.key"
    _openssl("req", "-x509", *key_args, "-keyout", str(ca_key), "-out", str(ca),
             "-days", "1", "-subj", "/CN=rocketstore-test-ca")  # fmt: skip
    made = {}
    for name, usage in (("server", "serverAuth,clientAuth"), ("client", "clientAuth")):
        key, csr, cert = root / f"{name}.key", root / f"{name}.csr", root / f"{name}.crt"
        ext = root / f"{name}.ext"
        ext.write_text(f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n")
        _openssl("req", *key_args, "-keyout", str(key), "-out", str(csr),
                 "-subj", f"/CN=rocketstore-test-{name}")  # fmt: skip
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
        made[name] = (cert, key)
    return EtcdTls(ca, made["server"][0], made["server"][1], made["client"][0], made["client"][1])


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _prefix_end(prefix: str) -> str:
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class EtcdCluster:
    """``size`` members named m0, m1, ...; ``endpoints`` their client URLs (https:// with
    ``tls``); ``extra`` more flags for every member (``--auth-token-ttl``)."""

    def __init__(
        self, root: Path, size: int = 3, *, tls: EtcdTls | None = None, extra: tuple[str, ...] = ()
    ) -> None:
        self.binary = etcd_binary()
        self.tls = tls
        self.extra = extra
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
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def endpoints(self) -> list[str]:
        return [f"{self.scheme}://127.0.0.1:{p}" for p in self.client_ports]

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
                "--listen-client-urls", self.endpoints[i],
                "--advertise-client-urls", self.endpoints[i],
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-cluster", self.initial,
                "--initial-cluster-state", "new",
                "--initial-cluster-token", f"rocketstore-test-{self.peer_ports[0]}",
                "--heartbeat-interval", "100",
                "--election-timeout", "1000",
                *self._tls_flags(),
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

    def _context(self) -> ssl.SSLContext | None:
        return self.tls.context() if self.tls is not None else None

    def _tls_flags(self) -> list[str]:
        tls = self.tls
        if tls is None:
            return []
        return ["--cert-file", str(tls.server_cert), "--key-file", str(tls.server_key),
                "--trusted-ca-file", str(tls.ca)]  # fmt: skip

    def post(
        self, path: str, body: dict[str, object], *, token: str | None = None, member: int = 0
    ) -> dict[str, object]:
        """One call of etcd's JSON gateway; its answer (an error answer's JSON too)."""
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = token
        req = urllib.request.Request(
            self.endpoints[member] + path, data=json.dumps(body).encode(), headers=headers,
            method="POST",
        )  # fmt: skip
        context = self._context()
        try:
            with urllib.request.urlopen(req, timeout=10.0, context=context) as r:
                return dict(json.loads(r.read()))
        except urllib.error.HTTPError as exc:
            return dict(json.loads(exc.read() or b"{}"))

    def enable_auth(self, root_password: str, users: dict[str, tuple[str, str]]) -> None:
        """etcd's auth on: the root user, and each user (name → (password, key prefix)) with a
        role of its own that reads and writes its prefix."""
        steps: list[tuple[str, dict[str, object]]] = [
            ("/v3/auth/user/add", {"name": "root", "password": root_password}),
            ("/v3/auth/role/add", {"name": "root"}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
        ]
        for name, (password, prefix) in users.items():
            perm = {"permType": "READWRITE", "key": _b64(prefix),
                    "range_end": _b64(_prefix_end(prefix))}  # fmt: skip
            steps += [
                ("/v3/auth/user/add", {"name": name, "password": password}),
                ("/v3/auth/role/add", {"name": f"role-{name}"}),
                ("/v3/auth/role/grant", {"name": f"role-{name}", "perm": perm}),
                ("/v3/auth/user/grant", {"user": name, "role": f"role-{name}"}),
            ]
        steps.append(("/v3/auth/enable", {}))
        for path, body in steps:
            answer = self.post(path, body)
            if "error" in answer and "already exists" not in str(answer["error"]):
                raise RuntimeError(f"etcd {path}: {answer}")

    def start(self) -> EtcdCluster:
        for name in self.names:
            self.start_member(name)
        self.wait_healthy(self.names)
        return self

    def healthy(self, name: str) -> bool:
        try:
            url = self.endpoint(name) + "/health"
            with urllib.request.urlopen(url, timeout=1.0, context=self._context()) as r:
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
                with urllib.request.urlopen(req, timeout=1.0, context=self._context()) as r:
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
        with urllib.request.urlopen(req, timeout=1.0, context=self._context()) as r:
            doc = json.loads(r.read())
        return {str(m["ID"]): str(m["name"]) for m in doc.get("members", [])}

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)
