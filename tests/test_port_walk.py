"""Every listening port of a secured cluster, tried as an outsider would.

A name server, RocketMQ 5's controller (file backend), two brokers of one group in controller
mode and ``serve``, each a process of its own, with TLS on every port (remoting: enforcing with
client certificates required; HTTPS for metrics and the console; TLS for gRPC), ACL on (the
brokers ACL 2.0, the name servers and the controller the plain ACL file) and the HA port's
proof and TLS on. The ports are read from each process's sockets (``/proc/<pid>/fd`` and
``/proc/<pid>/net/tcp``), not from its configuration: a port nobody declared fails the test,
naming the process, and so does one whose kind the port table of docs/security.md does not
list.

On every port: a plain remoting frame (answered by nothing but a TLS alert or a close); a TLS
handshake without a client certificate (refused where client certificates are required). Then,
with a client certificate the CA signed (a peer inside the network) and no account: unsigned
remoting requests that change state and that read data (refused), an HA handshake without the
proof's answer (refused, no log byte), HTTP GETs without credentials (401 or 403), gRPC calls
without a signature (UNAUTHORIZED). Afterwards nothing the requests asked for was done: no
topic, no KV entry, the same master.

Bounded: every socket has a timeout, every wait a deadline; every process is stopped in
``finally``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.client._controller import ControllerAdmin
from rocketstore.remoting import RemotingCommand, RequestCode, ResponseCode
from rocketstore.store.ha._auth import (
    CHALLENGE,
    CHALLENGE_SIZE,
    MAGIC,
    REFUSED,
    RESULT_HEAD,
    RESULT_HEAD_SIZE,
)
from rocketstore.store.ha._auto_wire import HANDSHAKE, SLAVE_HANDSHAKE
from support.acl_env import ACL_YML, create_topic_ext
from support.certs import make_certs
from support.chaos_cluster import CLI, Node
from support.ports import free_port
from support.processes import listening_ports
from support.remoting import read_command
from support.waits import wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

HOST = "127.0.0.1"
GROUP = "broker-a"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "security.md"
INNER = {"accessKey": "adminAK01", "secretKey": "adminSK01"}
MARK = "WalkMark"  # what the refused requests would have made

# the kinds of port, as docs/security.md's port table names them
NAMESRV = "name server (remoting)"
BROKER = "broker (remoting)"
CONTROLLER = "controller (remoting)"
HA = "HA (replication)"
GRPC = "gRPC front end"
METRICS = "metrics"
CONSOLE = "web console"
REMOTING = (NAMESRV, BROKER, CONTROLLER)
CLIENT_AUTH = (*REMOTING, HA)  # client certificates required


def documented_ports() -> set[str]:
    """The first column of docs/security.md's port table."""
    text = DOCS.read_text()
    start = text.index("| port |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    return set(rows)


class Cluster:
    """The processes, and the ports each was told to listen on (address → kind)."""

    def __init__(self, work: Path, certs: Path) -> None:
        self.work = work
        self.certs = certs
        self.logs = work / "logs"
        self.logs.mkdir()
        self.acl = work / "plain_acl.yml"
        self.acl.write_text(ACL_YML)
        self.nodes: list[Node] = []
        self.declared: dict[str, dict[int, str]] = {}
        self.namesrv = f"{HOST}:{self._port('namesrv', NAMESRV)}"
        self.controller = f"{HOST}:{self._port('controller', CONTROLLER)}"
        self.stores: list[Path] = []

    def _port(self, node: str, kind: str) -> int:
        port = free_port(HOST)
        self.declared.setdefault(node, {})[port] = kind
        return port

    def tls(self, https: bool = True) -> list[str]:
        c = self.certs
        argv = [
            "--tls-mode", "enforcing", "--tls-cert", str(c / "server.pem"),
            "--tls-key", str(c / "server.key"), "--tls-client-auth", "require",
            "--tls-trust", str(c / "ca.pem"),
        ]  # fmt: skip
        if https:
            argv += ["--https-cert", str(c / "server.pem"), "--https-key", str(c / "server.key")]
        return argv

    def _node(self, name: str, argv: list[str]) -> None:
        node = Node(name, [*argv, "--log-dir", str(self.logs / name)], self.logs / f"{name}.out")
        self.nodes.append(node)
        node.start()

    def start(self) -> None:
        self._node(
            "namesrv",
            [
                *CLI,
                "namesrv",
                "--listen",
                self.namesrv,
                "--acl-file",
                str(self.acl),
                *self.tls(https=False),
            ],
        )
        metrics = self._port("controller", METRICS)
        self._node(
            "controller",
            [
                *CLI, "controller", "--listen", self.controller, "--self-id", "n0",
                "--store", str(self.work / "controller"), "--acl-file", str(self.acl),
                "--metrics-listen", f"{HOST}:{metrics}", *self.tls(),
            ],
        )  # fmt: skip
        for i in range(2):
            name = f"broker{i}"
            port, ha, metrics = (self._port(name, k) for k in (BROKER, HA, METRICS))
            store = self.work / f"store{i}"
            self.stores.append(store)
            conf = self._conf(
                name,
                {
                    "brokerName": GROUP,
                    "brokerId": "-1",
                    "brokerRole": "SLAVE",
                    "enableControllerMode": "true",
                    "controllerAddr": self.controller,
                    "allAckInSyncStateSet": "true",
                    "namesrvAddr": self.namesrv,
                    "storePathRootDir": str(store),
                    "authenticationEnabled": "true",
                    "authorizationEnabled": "true",
                    "initAuthenticationUser": '{"username":"walkAdmin","password":"walkPass01"}',
                },
            )
            self._node(
                name,
                [
                    *CLI, "broker", "-c", str(conf), "--listen", f"{HOST}:{port}",
                    "--ha-listen", f"{HOST}:{ha}", "--grpc-listen", "",
                    "--metrics-listen", f"{HOST}:{metrics}", *self.tls(),
                ],
            )  # fmt: skip
        ns, port, ha, grpc, metrics, console = (
            self._port("serve", k) for k in (NAMESRV, BROKER, HA, GRPC, METRICS, CONSOLE)
        )
        store = self.work / "serve"
        self.stores.append(store)
        self.serve_namesrv = f"{HOST}:{ns}"
        conf = self._conf("serve", {"storePathRootDir": str(store), "haEnable": "true"})
        self._node(
            "serve",
            [
                *CLI, "serve", "-c", str(conf), "--namesrv-listen", self.serve_namesrv,
                "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}",
                "--grpc-listen", f"{HOST}:{grpc}",
                "--grpc-tls-cert", str(self.certs / "server.pem"),
                "--grpc-tls-key", str(self.certs / "server.key"),
                "--metrics-listen", f"{HOST}:{metrics}", "--console-listen", f"{HOST}:{console}",
                "--acl-file", str(self.acl), *self.tls(),
            ],
        )  # fmt: skip

    def _conf(self, name: str, values: dict[str, str]) -> Path:
        common = {
            "brokerClusterName": "DefaultCluster",
            "mappedFileSizeCommitLog": str(1024 * 1024),
            "innerClientAuthenticationCredentials": json.dumps(INNER),
            "haAuthEnabled": "true",
            "haTlsMode": "enforcing",
        }
        path = self.work / f"{name}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in {**common, **values}.items()))
        return path

    def listening(self) -> dict[str, set[tuple[str, int]]]:
        out = {}
        for node in self.nodes:
            assert node.running and node.proc is not None, f"{node.name} ended:\n{node.output()}"
            out[node.name] = listening_ports(node.proc.pid)
        return out

    def all_listening(self) -> bool:
        found = self.listening()
        return all(
            {p for _, p in found[name]} >= set(ports) for name, ports in self.declared.items()
        )

    def master(self) -> int | None:
        try:
            with ControllerAdmin(self.controller, timeout=3.0) as admin:
                info = admin.sync_state([GROUP]).table.get(GROUP)
        except Exception:
            return None
        if info is None or info.master_broker_id is None:
            return None
        return int(info.master_broker_id)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            with contextlib.suppress(Exception):
                node.stop()


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    # every process's own clients (registrations, notices) and this test's admin speak TLS
    # with a certificate and sign with the inner account; the probes below use neither
    for key, value in {
        "ROCKETSTORE_TLS": "true",
        "ROCKETSTORE_TLS_CA": str(certs / "ca.pem"),
        "ROCKETSTORE_TLS_CERT": str(certs / "client.pem"),
        "ROCKETSTORE_TLS_KEY": str(certs / "client.key"),
        "ROCKETSTORE_ACCESS_KEY": INNER["accessKey"],
        "ROCKETSTORE_SECRET_KEY": INNER["secretKey"],
        "ROCKETSTORE_INNER_CLIENT_ACCESS_KEY": INNER["accessKey"],
        "ROCKETSTORE_INNER_CLIENT_SECRET_KEY": INNER["secretKey"],
    }.items():
        monkeypatch.setenv(key, value)
    c = Cluster(tmp_path, certs)
    try:
        c.start()
        yield c
    finally:
        c.stop()


# ---- the probes --------------------------------------------------------------------------------


def contexts(certs: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(no client certificate, a client certificate the CA signed); both check the server."""
    bare = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    insider = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    insider.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
    return bare, insider


def read_all(sock: socket.socket | ssl.SSLSocket, limit: float = 10.0) -> bytes:
    """What the peer sends until it closes (or ``limit`` seconds pass)."""
    sock.settimeout(limit)
    out = b""
    with contextlib.suppress(OSError):  # reset, TLS alert, timeout
        while len(out) < 1 << 20:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
    return out


def plain_probe(port: int) -> bytes:
    """A plain remoting frame (an unsigned route read); what comes back."""
    with socket.create_connection((HOST, port), timeout=10) as sock:
        cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        with contextlib.suppress(OSError):
            sock.sendall(cmd.encode())
        return read_all(sock, 5.0)


@contextlib.contextmanager
def tls_connect(port: int, ctx: ssl.SSLContext) -> Iterator[ssl.SSLSocket]:
    raw = socket.create_connection((HOST, port), timeout=10)
    try:
        with ctx.wrap_socket(raw, server_hostname=HOST) as sock:
            sock.settimeout(10)
            yield sock
    finally:
        raw.close()


def refused_without_certificate(port: int, bare: ssl.SSLContext) -> bool:
    """Whether a TLS peer without a certificate is refused (at the handshake, or, TLS 1.3, at
    its first read) before anything is answered."""
    try:
        with tls_connect(port, bare) as sock:
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
            sock.sendall(cmd.encode())
            return read_all(sock, 10.0) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def remoting_requests() -> list[RemotingCommand]:
    """Unsigned requests every remoting server serves some of: state changes and reads."""
    elect = {"clusterName": "DefaultCluster", "brokerName": GROUP, "brokerId": "99",
             "designateElect": "true"}  # fmt: skip
    return [
        RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_ext(MARK)),
        RemotingCommand.request(100, {"namespace": MARK, "key": MARK, "value": "x"}),  # PUT_KV
        RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER, elect),
        RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG),
        RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}),
        RemotingCommand.request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "g",
                "topic": "TBW102",
                "queueId": "0",
                "queueOffset": "0",
                "maxMsgNums": "32",
                "sysFlag": "0",
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subVersion": "0",
            },
        ),
        RemotingCommand.request(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=json.dumps([GROUP]).encode()
        ),
    ]


def remoting_probe(port: int, insider: ssl.SSLContext, seen: set[str]) -> list[str]:
    """What answered an unsigned request with success (none should)."""
    answered = []
    for cmd in remoting_requests():
        with tls_connect(port, insider) as sock:
            sock.sendall(cmd.encode())
            reply = read_command(sock)
        if reply is not None and reply.code == ResponseCode.SUCCESS:
            answered.append(f"request {cmd.code} answered SUCCESS")
        elif reply is not None and (
            # the plain ACL's refusal (4.x's AclException), or ACL 2.0's (5.3's NO_PERMISSION)
            "AclException" in (reply.remark or "") or reply.code == ResponseCode.NO_PERMISSION
        ):
            seen.add(f"remoting refusal {cmd.code}")
    return answered


def ha_probe(port: int, insider: ssl.SSLContext, seen: set[str]) -> list[str]:
    """An HA peer that claims a replica id without the proof's answer: what it got beyond the
    challenge and a refusal (nothing should)."""
    try:
        with tls_connect(port, insider) as sock:
            data = read_all_prefix(sock, CHALLENGE_SIZE)
            if len(data) < CHALLENGE_SIZE:
                return []  # closed at once: not a master
            assert CHALLENGE.unpack(data)[0] == MAGIC
            with contextlib.suppress(OSError):
                sock.sendall(SLAVE_HANDSHAKE.pack(HANDSHAKE, 0, 0, 2))
            rest = read_all(sock)
    except (ssl.SSLError, ConnectionError):
        return []
    if not rest:
        return []
    magic, status, size = RESULT_HEAD.unpack_from(rest)
    if magic != MAGIC or status != REFUSED or len(rest) != RESULT_HEAD_SIZE + size + 32:
        return [f"the HA port answered {len(rest)} bytes beyond its challenge"]
    seen.add("HA refusal")
    return []


def read_all_prefix(sock: ssl.SSLSocket, n: int) -> bytes:
    out = b""
    with contextlib.suppress(OSError):
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                break
            out += chunk
    return out


def http_probe(port: int, bare: ssl.SSLContext, seen: set[str]) -> list[str]:
    """GETs and a POST without credentials: what was answered other than 401 / 403."""
    answered = []
    for method, path in (
        ("GET", "/metrics"),
        ("GET", "/api/topics"),
        ("GET", "/api/cluster"),
        ("GET", "/api/broker/config"),
        ("POST", "/api/topic/create"),
    ):
        conn = http.client.HTTPSConnection(HOST, port, context=bare, timeout=10)
        try:
            body = json.dumps({"topic": MARK}) if method == "POST" else None
            headers = {"X-Console": "1", "Content-Type": "application/json"}
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            text = r.read()
        finally:
            conn.close()
        if r.status not in (401, 403, 404):
            answered.append(f"{method} {path} answered {r.status}: {text[:80]!r}")
        elif r.status != 404:
            seen.add(f"HTTP {path} {r.status}")
    return answered


def grpc_probe(port: int, certs: Path, seen: set[str]) -> list[str]:
    """Unsigned gRPC calls (a route read, a send): what was not refused as UNAUTHORIZED."""
    import grpc

    from rocketstore.grpc._pb import definition_pb2 as pb
    from rocketstore.grpc._pb import service_pb2 as spb
    from rocketstore.grpc._pb import service_pb2_grpc

    creds = grpc.ssl_channel_credentials((certs / "ca.pem").read_bytes())
    answered = []
    with grpc.secure_channel(f"{HOST}:{port}", creds) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="TBW102")), timeout=15)
        if route.status.code != pb.Code.UNAUTHORIZED:
            answered.append(f"QueryRoute answered {route.status.code}")
        else:
            seen.add("gRPC QueryRoute UNAUTHORIZED")
        msg = pb.Message(
            topic=pb.Resource(name=MARK),
            body=b"x",
            system_properties=pb.SystemProperties(message_id="01WALK", body_encoding=pb.IDENTITY),
        )
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[msg]), timeout=15)
        if sent.status.code != pb.Code.UNAUTHORIZED:
            answered.append(f"SendMessage answered {sent.status.code}")
        else:
            seen.add("gRPC SendMessage UNAUTHORIZED")
    return answered


# ---- the walk ----------------------------------------------------------------------------------


def test_no_port_of_a_secured_cluster_answers_an_outsider(cluster: Cluster) -> None:
    assert wait_until(cluster.all_listening, 120, poll=0.5), (
        cluster.declared,
        cluster.listening(),
    )
    assert wait_until(lambda: cluster.master() is not None, 120, poll=0.5)
    master = cluster.master()
    documented = documented_ports()
    bare, insider = contexts(cluster.certs)
    problems: list[str] = []
    seen: set[str] = set()  # the refusals met: the probes reached what they probe
    walked = 0
    for name, found in sorted(cluster.listening().items()):
        declared = cluster.declared[name]
        for address, port in sorted(found):
            where = f"{name} port {address}:{port}"
            kind = declared.get(port)
            if kind is None:
                problems.append(f"{where}: listening, but nobody declared it")
                continue
            if kind not in documented:
                problems.append(f"{where}: {kind!r} is not in docs/security.md's port table")
            walked += 1
            data = plain_probe(port)
            if data and data[0] != 0x15:  # anything but a TLS alert
                problems.append(f"{where} ({kind}): a plain peer got {data[:40]!r}")
            if kind in CLIENT_AUTH and not refused_without_certificate(port, bare):
                problems.append(f"{where} ({kind}): TLS without a client certificate let in")
            if kind in REMOTING:
                problems += [f"{where}: {p}" for p in remoting_probe(port, insider, seen)]
            elif kind == HA:
                problems += [f"{where}: {p}" for p in ha_probe(port, insider, seen)]
            elif kind in (METRICS, CONSOLE):
                problems += [f"{where}: {p}" for p in http_probe(port, bare, seen)]
            elif kind == GRPC:
                problems += [f"{where}: {p}" for p in grpc_probe(port, cluster.certs, seen)]
    assert not problems, "\n".join(problems)
    # each kind of probe met the refusal it expects somewhere (none passed by failing to talk)
    for code in (17, 100, 1002, 21, 105, 11, 1006):
        assert f"remoting refusal {code}" in seen, (code, sorted(seen))
    for expected in (
        "HA refusal",
        "HTTP /metrics 401",
        "HTTP /api/topics 401",
        "gRPC QueryRoute UNAUTHORIZED",
        "gRPC SendMessage UNAUTHORIZED",
    ):
        assert expected in seen, (expected, sorted(seen))
    assert walked == sum(len(p) for p in cluster.declared.values())
    # nothing the refused requests asked for was done
    assert cluster.master() == master
    for store in cluster.stores:
        for path in (store / "config").glob("*.json"):
            assert MARK not in path.read_text(errors="replace"), path
    for path in cluster.work.rglob("kvConfig.json"):
        assert MARK not in path.read_text(errors="replace"), path
