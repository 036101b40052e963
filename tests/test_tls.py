"""TLS on the remoting ports, RocketMQ's three modes through `rocketstore serve`: enforcing
serves TLS only (a plain client gets nothing and the server keeps serving), permissive serves
TLS and plain clients on one port, disabled serves plain only. The project's clients speak TLS
when told (ROCKETSTORE_TLS, `rocketstore --tls`), check the server's certificate against a CA
when given one, and present their own to a server that asks. Certificates are made by the test
with openssl."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rocketstore.client import MessageQueue, Producer, PullConsumer
from rocketstore.remoting import RemotingClient, RemotingCommand, RemotingError
from rocketstore.remoting._tls import TlsConfigError, TlsServerConfig, client_context, speaks_tls
from support.certs import make_certs
from support.interop import ServerProcess
from support.waits import wait_until

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

GET_ALL_TOPIC_LIST = 206


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _serve(tmp_path: Path, certs: Path, mode: str, *extra: str) -> ServerProcess:
    args = [*ServerProcess._command(), "serve", "--store", str(tmp_path / "store")]
    args += ["--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"]
    args += ["--grpc-listen", "", "--metrics-listen", "", "--ha-listen", "127.0.0.1:0"]
    args += ["--tls-mode", mode]
    if mode != "disabled":
        args += ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key")]
    args += list(extra)
    return ServerProcess(
        args, tmp_path / "serve.log", want_namesrv=True, want_broker=True
    )._wait_started(60)


@pytest.fixture(scope="module")
def serve(
    tmp_path_factory: pytest.TempPathFactory, certs: Path
) -> Iterator[Callable[..., ServerProcess]]:
    """``serve(mode, *flags)``: `rocketstore serve` in that TLS mode, started once for the
    module's tests that ask for the same (each sends on a topic of its own and changes nothing
    else of it); every one stopped at the end."""
    started: dict[tuple[str, ...], ServerProcess] = {}

    def serve_(mode: str, *extra: str) -> ServerProcess:
        key = (mode, *extra)
        if key not in started:
            started[key] = _serve(tmp_path_factory.mktemp(f"tls-{mode}"), certs, mode, *extra)
        return started[key]

    try:
        yield serve_
    finally:
        with ThreadPoolExecutor() as stopping:  # each waits for its clean shutdown
            list(stopping.map(ServerProcess.stop, started.values()))


@pytest.fixture
def tls_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in (
        "ROCKETSTORE_TLS",
        "ROCKETSTORE_TLS_CA",
        "ROCKETSTORE_TLS_CERT",
        "ROCKETSTORE_TLS_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def _round_trip(server: ServerProcess, topic: str) -> None:
    """A send and a pull of it through the name server and the broker."""
    assert server.namesrv is not None and server.broker is not None
    with Producer(server.namesrv, timeout=10.0) as producer:
        sent = producer.send(topic, b"over tls", queue=MessageQueue(topic, "broker-a", 0))
    assert sent.status == "SEND_OK", sent
    bodies: list[bytes] = []
    with PullConsumer(server.namesrv, "G_tls", timeout=10.0) as consumer:

        def pulled() -> bool:  # a send to a new queue is answered before dispatch queues it
            got = consumer.pull(MessageQueue(topic, "broker-a", 0), 0, 8)
            bodies[:] = [m.body for m in got.messages]
            return bool(bodies)

        assert wait_until(pulled, poll=0.05)
    assert bodies == [b"over tls"]


def _topic_list(address: str) -> int:
    with RemotingClient(timeout=5.0, connect_timeout=5.0) as client:
        return client.invoke(address, RemotingCommand.request(GET_ALL_TOPIC_LIST, {})).code


def test_enforcing_serves_tls_only(
    serve: Callable[..., ServerProcess], tls_env: pytest.MonkeyPatch
) -> None:
    server = serve("enforcing")
    tls_env.setenv("ROCKETSTORE_TLS", "true")
    _round_trip(server, "TlsOnly")
    assert server.namesrv is not None and server.broker is not None
    tls_env.delenv("ROCKETSTORE_TLS")
    for address in (server.namesrv, server.broker):  # a plain client is not served
        with pytest.raises(RemotingError):
            _topic_list(address)
    # ... and the server goes on serving TLS clients
    tls_env.setenv("ROCKETSTORE_TLS", "true")
    assert _topic_list(server.namesrv) == 0
    assert server.proc.poll() is None


def test_permissive_serves_both_on_one_port(
    serve: Callable[..., ServerProcess], certs: Path, tls_env: pytest.MonkeyPatch
) -> None:
    server = serve("permissive")
    _round_trip(server, "Plain")  # a plain client
    tls_env.setenv("ROCKETSTORE_TLS", "true")
    tls_env.setenv("ROCKETSTORE_TLS_CA", str(certs / "ca.pem"))  # the server checked too
    with Producer(server.namesrv or "", timeout=10.0) as producer:
        sent = producer.send("Plain", b"second", queue=MessageQueue("Plain", "broker-a", 0))
    assert sent.status == "SEND_OK" and sent.queue_offset == 1
    # a connection that says nothing is closed after the handshake timeout, not kept
    assert server.broker is not None
    host, port = server.broker.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as silent:
        silent.settimeout(60)
        assert silent.recv(1) == b""


def test_a_server_certificate_from_another_ca_is_refused(
    serve: Callable[..., ServerProcess], certs: Path, tls_env: pytest.MonkeyPatch
) -> None:
    server = serve("enforcing")
    assert server.namesrv is not None
    tls_env.setenv("ROCKETSTORE_TLS", "true")
    tls_env.setenv("ROCKETSTORE_TLS_CA", str(certs / "other-ca.pem"))
    with pytest.raises(RemotingError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
        _topic_list(server.namesrv)
    tls_env.setenv("ROCKETSTORE_TLS_CA", str(certs / "ca.pem"))
    assert _topic_list(server.namesrv) == 0


def test_client_certificates_when_the_server_asks(
    serve: Callable[..., ServerProcess], certs: Path, tls_env: pytest.MonkeyPatch
) -> None:
    server = serve("enforcing", "--tls-client-auth", "require",
        "--tls-trust", str(certs / "ca.pem"))  # fmt: skip
    assert server.namesrv is not None
    tls_env.setenv("ROCKETSTORE_TLS", "true")
    with pytest.raises(RemotingError):
        _topic_list(server.namesrv)  # no certificate of its own
    tls_env.setenv("ROCKETSTORE_TLS_CERT", str(certs / "client.pem"))
    tls_env.setenv("ROCKETSTORE_TLS_KEY", str(certs / "client.key"))
    assert _topic_list(server.namesrv) == 0


def test_disabled_serves_plain_only(
    serve: Callable[..., ServerProcess], tls_env: pytest.MonkeyPatch
) -> None:
    server = serve("disabled")
    assert server.namesrv is not None
    assert _topic_list(server.namesrv) == 0
    tls_env.setenv("ROCKETSTORE_TLS", "true")
    with pytest.raises(RemotingError):
        _topic_list(server.namesrv)
    assert server.proc.poll() is None


def test_the_cli_speaks_tls_with_its_flag(serve: Callable[..., ServerProcess], certs: Path) -> None:
    server = serve("enforcing")
    assert server.namesrv is not None
    cli = [*ServerProcess._command(), "--tls", "--tls-ca", str(certs / "ca.pem")]
    done = subprocess.run(
        [*cli, "produce", "--namesrv", server.namesrv, "--topic", "Cli", "hello"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "SEND_OK" in done.stdout, done.stderr
    plain = subprocess.run(
        [*ServerProcess._command(), "topic", "list", "--namesrv", server.namesrv],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert plain.returncode != 0 and "Traceback" not in plain.stderr


def test_bad_tls_settings_are_one_line(tmp_path: Path, certs: Path) -> None:
    base = [sys.executable, "-c", "from rocketstore.cli import main; main()", "serve"]
    base += ["--store", str(tmp_path / "s"), "--namesrv-listen", "127.0.0.1:0"]
    for extra, words in (
        (["--tls-mode", "enforcing"], "needs a certificate and its key"),
        (["--tls-mode", "enforcing", "--tls-cert", str(tmp_path / "none.pem"),
          "--tls-key", str(tmp_path / "none.key")], "No such file"),
        (["--tls-mode", "permissive", "--tls-cert", str(certs / "server.pem"),
          "--tls-key", str(certs / "server.key"), "--tls-client-auth", "require"], "trustCertPath"),
    ):  # fmt: skip
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_the_first_byte_tells_tls_from_a_frame() -> None:
    assert speaks_tls(0x16)  # a TLS handshake record
    assert not speaks_tls(0x00)  # a frame's length under 16 MiB
    with pytest.raises(TlsConfigError):
        TlsServerConfig(mode="strict")  # type: ignore[arg-type]
    props = {"tls.server.mode": "Permissive", "tls.server.certPath": "a", "tls.server.keyPath": "b"}
    assert TlsServerConfig.from_properties(props).mode == "permissive"
    assert client_context({}) is None
    ctx = client_context({"ROCKETSTORE_TLS": "true"})
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE  # RocketMQ's client default
