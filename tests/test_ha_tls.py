"""TLS on the HA port (``store/ha/_tls.py``): master and slave stores on loopback with TLS in
each mode, the proof of membership on where it matters, raw peers speaking plain HA or TLS with
a certificate the master does not trust, a controller-mode group over TLS, and a slave killed
(-9) mid-transfer over TLS under SYNC_MASTER."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus
from rocketstore.remoting._tls import TlsServerConfig, client_context_for
from rocketstore.store.ha import HAGuard
from rocketstore.store.ha._auth import CHALLENGE_SIZE, MAGIC
from rocketstore.store.ha._tls import HATls
from rocketstore.store.ha._wire import REPORT
from support.certs import make_certs
from support.chaos import read_commit_log
from support.ha_stores import GROUP, INNER, Audit, ha_stores
from support.replicas import Group
from support.waits import wait_dispatched, wait_until

S = PutMessageStatus
FILE = 256 * 1024


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def ha_tls(certs: Path, mode: str = "enforcing", *, client_auth: str = "require") -> HATls:
    """A broker's HA TLS as the server builds it (server/_broker.ha_tls): its certificate both
    ways, the master's checked against the CA."""
    server = TlsServerConfig(
        mode,  # type: ignore[arg-type]
        str(certs / "server.pem"),
        str(certs / "server.key"),
        client_auth,  # type: ignore[arg-type]
        str(certs / "ca.pem") if client_auth != "none" else "",
    )
    client = client_context_for(
        str(certs / "ca.pem"), str(certs / "server.pem"), str(certs / "server.key")
    )
    return HATls(mode, server.context(), client)  # type: ignore[arg-type]


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    with ha_stores(
        tmp_path,
        mapped_file_size_commit_log=FILE,
        mapped_file_size_consume_queue=20 * 2000,
        sync_flush_timeout=3000,
    ) as open_:
        yield open_


def put_many(store: MessageStore, n: int, tag: str) -> list[tuple[int, int, bytes]]:
    out = []
    for i in range(n):
        body = (f"{tag}-{i}|" * (1 + i % 90)).encode()
        r = store.put_message(Message("T", body, i % 4))
        assert r.status is S.PUT_OK, r
        out.append((i % 4, r.queue_offset, body))
    return out


def same_log(master: Path, slave: Path) -> None:
    """The slave's commit log is the master's, byte for byte (read from the files)."""
    m_records, m_bytes = read_commit_log(master)
    s_records, s_bytes = read_commit_log(slave)
    assert len(s_records) == len(m_records)
    assert s_bytes == m_bytes


def connect(store: MessageStore) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", store.ha.listen_port), timeout=10)
    sock.settimeout(10)
    return sock


def closed_by_peer(sock: socket.socket | ssl.SSLSocket, within: float = 15.0) -> bool:
    sock.settimeout(within)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


# ---- RocketMQ 4.x's HA over TLS -----------------------------------------------------------------


def test_4x_replication_over_tls_is_byte_identical(
    certs: Path, stores: Callable[..., MessageStore], tmp_path: Path
) -> None:
    audit = Audit()
    tls = ha_tls(certs)
    master = stores("m", HAGuard(INNER, GROUP, 0, audit, tls=tls), broker_role="SYNC_MASTER")
    slave = stores(
        "s",
        HAGuard(INNER, GROUP, 1, audit, tls=tls),
        broker_role="SLAVE",
        ha_master_address=f"127.0.0.1:{master.ha.listen_port}",
    )
    assert wait_until(lambda: master.ha.connection_count() == 1)
    put_many(master, 3000, "a")  # SYNC_MASTER: each acknowledged by the slave over TLS
    assert master.max_phy_offset > 3 * FILE
    assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset)
    links = list(master.ha.connections)
    assert [c.tls_version.startswith("TLSv1.") for c in links] == [True]
    client = slave.ha.client
    assert client is not None and client.tls_version.startswith("TLSv1.")
    assert audit.lines == []
    same_log(tmp_path / "m", tmp_path / "s")


def test_enforcing_refuses_a_plain_peer_and_keeps_serving(
    certs: Path, stores: Callable[..., MessageStore], tmp_path: Path
) -> None:
    audit = Audit()
    tls = ha_tls(certs, client_auth="none")
    master = stores("m", HAGuard(None, GROUP, 0, audit, tls=tls), broker_role="SYNC_MASTER")
    slave = stores(
        "s",
        HAGuard(None, GROUP, 1, audit, tls=tls),
        broker_role="SLAVE",
        ha_master_address=f"127.0.0.1:{master.ha.listen_port}",
    )
    assert wait_until(lambda: master.ha.connection_count() == 1)
    put_many(master, 200, "before")
    # a plain 4.x slave reports the master's max offset: no TLS, refused, nothing read
    with connect(master) as plain:
        plain.sendall(REPORT.pack(master.max_phy_offset))
        assert closed_by_peer(plain)
    assert wait_until(lambda: any("TLS handshake failed" in r for r in audit.reasons()))
    assert master.ha.statistics().refused_peers >= 1
    # and the TLS slave is still served
    put_many(master, 200, "after")
    assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset)
    assert master.ha.connection_count() == 1
    same_log(tmp_path / "m", tmp_path / "s")


def test_a_certificate_not_in_trust_is_refused(
    certs: Path, stores: Callable[..., MessageStore]
) -> None:
    """With client certificates required, a peer offering one the trust did not sign, or
    none, is refused in the handshake (audited): it never gets the proof's challenge, let alone
    the log; a slave store with that certificate does not replicate."""
    audit = Audit()
    master = stores(
        "m",
        HAGuard(INNER, GROUP, 0, audit, tls=ha_tls(certs)),
        broker_role="ASYNC_MASTER",
        ha_enable=True,
    )
    put_many(master, 50, "x")
    for cert in ("intruder", None):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(str(certs / "ca.pem"))
        if cert:
            ctx.load_cert_chain(str(certs / f"{cert}.pem"), str(certs / f"{cert}.key"))
        with connect(master) as raw:
            try:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as peer:
                    peer.settimeout(15)
                    # TLS 1.3: the client's handshake ends before the server checks its
                    # certificate; the refusal comes as an alert on the first read
                    data = peer.recv(CHALLENGE_SIZE)
                    assert not data or int.from_bytes(data[:4], "big") != MAGIC
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                pass
    assert wait_until(lambda: len(audit.lines) == 2), audit.lines
    assert all("TLS handshake failed" in r for r in audit.reasons())
    # a slave store with the intruder's certificate (and the right inner account)
    intruder = client_context_for(
        str(certs / "ca.pem"), str(certs / "intruder.pem"), str(certs / "intruder.key")
    )
    bad_tls = dataclasses.replace(ha_tls(certs), client=intruder)
    slave = stores(
        "s",
        HAGuard(INNER, GROUP, 1, audit, tls=bad_tls),
        broker_role="SLAVE",
        ha_master_address=f"127.0.0.1:{master.ha.listen_port}",
    )
    assert wait_until(lambda: len(audit.lines) >= 3)
    assert slave.max_phy_offset == 0
    assert master.ha.connection_count() == 0


def test_a_slave_checks_its_masters_certificate(
    certs: Path, stores: Callable[..., MessageStore]
) -> None:
    """A master whose certificate the slave's trust did not sign is not replicated from."""
    audit = Audit()
    intruder_server = TlsServerConfig(
        "enforcing", str(certs / "intruder.pem"), str(certs / "intruder.key")
    ).context()
    fake_master = stores(
        "m",
        HAGuard(None, GROUP, 0, audit, tls=HATls("enforcing", intruder_server, None)),
        broker_role="ASYNC_MASTER",
        ha_enable=True,
    )
    put_many(fake_master, 50, "x")
    slave = stores(
        "s",
        HAGuard(None, GROUP, 1, audit, tls=ha_tls(certs)),
        broker_role="SLAVE",
        ha_master_address=f"127.0.0.1:{fake_master.ha.listen_port}",
    )
    client = slave.ha.client
    assert client is not None
    assert wait_until(lambda: "certificate verify failed" in client.last_error)
    assert slave.max_phy_offset == 0


@pytest.mark.parametrize("proof", [False, True], ids=["no-proof", "proof"])
def test_permissive_serves_tls_and_plain_slaves(
    certs: Path, stores: Callable[..., MessageStore], tmp_path: Path, proof: bool
) -> None:
    """Permissive: one TLS slave and one plain slave on one port, both get the log. Without the
    proof the plain slave speaks first (a RocketMQ slave's report: told apart from a TLS
    handshake by its first byte); with it, the plain slave waits for the challenge and is
    taken for plain when it sends nothing first."""
    audit = Audit()
    tls = ha_tls(certs, "permissive", client_auth="none")
    inner = INNER if proof else None
    master = stores(
        "m", HAGuard(inner, GROUP, 0, audit, tls=tls), broker_role="ASYNC_MASTER", ha_enable=True
    )
    address = f"127.0.0.1:{master.ha.listen_port}"
    secure = stores(
        "tls", HAGuard(inner, GROUP, 1, audit, tls=tls), broker_role="SLAVE",
        ha_master_address=address,
    )  # fmt: skip
    plain = stores(
        "plain", HAGuard(inner, GROUP, 2, audit), broker_role="SLAVE", ha_master_address=address
    )

    # both asked where to start before the log grows past its first file (a new slave asks
    # for the master's last file)
    def asked() -> bool:
        links = master.ha.connections
        return len(links) == 2 and all(c.request_offset >= 0 for c in links)

    assert wait_until(asked)
    # and both hold the start of the log before it grows past its first file: a link that a
    # loaded machine lets time out comes back asking from where its slave is, not as a new
    # slave (which RocketMQ starts at the master's last file)
    put_many(master, 5, "s")
    for slave in (secure, plain):
        assert wait_until(lambda s=slave: s.max_phy_offset == master.max_phy_offset)  # type: ignore[misc]
    put_many(master, 1500, "p")
    for slave in (secure, plain):
        assert wait_until(lambda s=slave: s.max_phy_offset == master.max_phy_offset)  # type: ignore[misc]
    versions = sorted(c.tls_version for c in master.ha.connections)
    assert versions[0] == "" and versions[1].startswith("TLSv1.")
    assert audit.lines == []
    same_log(tmp_path / "m", tmp_path / "tls")
    same_log(tmp_path / "m", tmp_path / "plain")


def test_broker_settings_make_the_ha_tls(certs: Path) -> None:
    """haTlsMode is checked; with it on, the broker's certificate is required, and the HA
    port's TLS takes the remoting port's files."""
    from rocketstore.broker._config import BrokerConfig
    from rocketstore.server._broker import ha_tls as broker_ha_tls
    from rocketstore.store._errors import StoreConfigError

    with pytest.raises(StoreConfigError, match="haTlsMode 'strict' is not one of"):
        BrokerConfig(ha_tls_mode="strict")
    assert broker_ha_tls(BrokerConfig()) is None
    with pytest.raises(StoreConfigError, match="needs the broker's certificate"):
        broker_ha_tls(BrokerConfig(ha_tls_mode="enforcing"))
    files = TlsServerConfig(
        "disabled", str(certs / "server.pem"), str(certs / "server.key"), "require",
        str(certs / "ca.pem"),
    )  # fmt: skip
    made = broker_ha_tls(BrokerConfig(ha_tls_mode="permissive", tls=files), env={})
    assert made is not None and made.mode == "permissive"
    assert made.server is not None and made.server.verify_mode == ssl.CERT_REQUIRED
    assert made.client is not None and made.client.check_hostname  # the trust checks the master
    missing = dataclasses.replace(files, cert_path=str(certs / "nothing.pem"))
    with pytest.raises(StoreConfigError, match="haTlsMode: tls"):
        broker_ha_tls(BrokerConfig(ha_tls_mode="enforcing", tls=missing), env={})


# ---- a slave killed mid-transfer over TLS ------------------------------------------------------

# A slave store over TLS in a child process. argv: root, JSON config, cert directory.
SLAVE = r"""
import json, sys, time
from rocketstore import MessageStore, StoreConfig
from rocketstore.remoting._tls import TlsServerConfig, client_context_for
from rocketstore.store.ha import HAGuard
from rocketstore.store.ha._tls import HATls
root, over, certs = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
server = TlsServerConfig("enforcing", certs + "/server.pem", certs + "/server.key").context()
client = client_context_for(certs + "/ca.pem", certs + "/server.pem", certs + "/server.key")
guard = HAGuard(("innerAK", "inner-secret-0123456789"), "broker-a", 1,
                tls=HATls("enforcing", server, client))
store = MessageStore(StoreConfig(store_path_root_dir=root, **over), ha_guard=guard)
store.load()
store.start()
print(json.dumps({"ready": True}), flush=True)
while True:
    time.sleep(1)
"""


def test_slave_killed_mid_transfer_over_tls_loses_no_acknowledged_message(
    certs: Path, stores: Callable[..., MessageStore], tmp_path: Path
) -> None:
    audit = Audit()
    master = stores(
        "m",
        HAGuard(INNER, GROUP, 0, audit, tls=ha_tls(certs)),
        broker_role="SYNC_MASTER",
        ha_transfer_batch_size=4096,
    )
    over = {
        "mapped_file_size_commit_log": FILE,
        "mapped_file_size_consume_queue": 20 * 2000,
        "ha_listen_port": 0,
        "ha_send_heartbeat_interval": 200,
        "ha_housekeeping_interval": 3000,
        "ha_reconnect_interval": 100,
        "broker_role": "SLAVE",
        "ha_master_address": f"127.0.0.1:{master.ha.listen_port}",
    }
    slave_root = tmp_path / "s"
    child = subprocess.Popen(
        [sys.executable, "-c", SLAVE, str(slave_root), json.dumps(over), str(certs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()

    def producer() -> None:  # puts without pause; the acknowledged ones are noted
        i = 0
        while not stop.is_set():
            body = (f"k-{i}|" * (1 + i % 200)).encode()
            r = master.put_message(Message("T", body, i % 4))
            if r.status is S.PUT_OK:
                acked.append((i % 4, r.queue_offset, body))
            i += 1

    worker = threading.Thread(target=producer, daemon=True)
    try:
        assert child.stdout is not None and json.loads(child.stdout.readline())["ready"]
        assert wait_until(lambda: master.ha.connection_count() == 1)
        worker.start()
        assert wait_until(lambda: len(acked) >= 2000)
        os.kill(child.pid, signal.SIGKILL)  # in the middle of the stream
        child.wait(30)
        n_before = len(acked)
        assert wait_until(lambda: master.ha.connection_count() == 0)
        stop.set()
        worker.join(60)
    finally:
        stop.set()
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    assert n_before >= 2000
    resumed = stores(
        "s",
        HAGuard(INNER, GROUP, 1, audit, tls=ha_tls(certs)),
        **{k: v for k, v in over.items() if k.startswith("ha_") or k == "broker_role"},
    )
    assert wait_until(lambda: master.ha.connection_count() == 1)
    put_many(master, 300, "after")  # acknowledged over the new TLS connection
    assert wait_until(lambda: resumed.max_phy_offset == master.max_phy_offset)
    wait_dispatched(resumed)
    for q, offset, body in acked:
        g = resumed.get_message("g", "T", q, offset, 1)
        assert g.status.name == "FOUND", (q, offset, g.status)
        assert g.messages[0].body == body
    assert audit.lines == []
    same_log(tmp_path / "m", slave_root)


# ---- controller mode's AutoSwitch HA over TLS ---------------------------------------------------


def test_controller_mode_replicates_over_tls(certs: Path, tmp_path: Path) -> None:
    """Two brokers in controller mode (every write held by both: allAckInSyncStateSet,
    minInSyncReplicas=2) with haTlsMode=enforcing, client certificates required and the
    proof on: the slave replicates over TLS, the logs are byte-identical."""
    tls = TlsServerConfig(
        "disabled",  # the remoting port stays plain; the HA port takes the files
        str(certs / "server.pem"),
        str(certs / "server.key"),
        "require",
        str(certs / "ca.pem"),
    )
    inner = json.dumps({"accessKey": INNER[0], "secretKey": INNER[1]})
    settings = {
        "ha_tls_mode": "enforcing",
        "tls": tls,
        "ha_auth_enabled": True,
        "inner_client_credentials": inner,
    }
    g = Group(tmp_path, broker=settings)
    try:
        for name in ("b1", "b2"):
            g.start_broker(name)
        assert wait_until(g.whole, 60, poll=0.1), g.sync_state()
        m = g.master()
        assert m is not None
        master = g.brokers[m].store
        slave = next(b.store for n, b in g.brokers.items() if n != m)
        for i in range(1500):
            body = (f"c-{i}|" * (1 + i % 90)).encode()
            assert master.put_message(Message("T", body, i % 4)).status is S.PUT_OK
        assert master.max_phy_offset > FILE  # across files
        assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset)
        links = list(master.ha.connections)  # type: ignore[attr-defined]
        assert [c.tls_version.startswith("TLSv1.") for c in links] == [True]
        assert master.ha.statistics().refused_peers == 0
        same_log(Path(master.config.store_path_root_dir), Path(slave.config.store_path_root_dir))
    finally:
        g.close()
