"""RocketMQ 4.9.8's Java client with TLS on (``-Dtls.enable=true``) against ``rocketstore serve``
in RocketMQ's TLS modes: in enforcing its admin tool, producer and push consumer work over TLS
through the name server and the broker, a plain client is refused and the server keeps serving;
in permissive TLS and plain clients share the ports and read each other's messages. With
RocketMQ's test mode off and ``tls.client.authServer=true`` the client checks the server's
certificate against ``tls.client.trustCertPath``: the CA that signed it is accepted, another CA
is refused. Certificates are made by the test with openssl.

Skipped without ``ROCKETMQ_CLASSPATH`` (see tests/support/rocketmq_java.py) or openssl.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import rocketmq_java as rj
from support.certs import make_certs, tls_flags
from support.interop import ServerProcess

pytestmark = [
    pytest.mark.skipif(rj.unavailable() is not None, reason=str(rj.unavailable())),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl"),
]

TLS = ["-Dtls.enable=true"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def runners(tmp_path: Path) -> Iterator[list[rj.AdminRunner]]:
    """A list to put started runner JVMs in; each is closed on the way out."""
    started: list[rj.AdminRunner] = []
    try:
        yield started
    finally:
        for runner in started:
            runner.close()


def _runner(runners: list[rj.AdminRunner], root: Path, *props: str) -> rj.AdminRunner:
    runner = rj.AdminRunner(root, opts=[*rj.JAVA_OPTS, *props])
    runners.append(runner)
    return runner


def _serve(tmp_path: Path, certs: Path, mode: str) -> ServerProcess:
    return ServerProcess.serve(
        tmp_path / "store", tmp_path / "serve.log", extra=tls_flags(certs, mode), timeout=60
    )


def _make_topic(runner: rj.AdminRunner, namesrv: str, topic: str) -> None:
    made = runner.admin("updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", topic)
    assert "success" in made.out, made.out + made.err


def _assert_refused(attempt: rj.Output) -> None:
    """The send got no route: the name server's connection carried no answer."""
    assert attempt.out != "sent"
    assert "org.apache.rocketmq.remoting.exception.Remoting" in attempt.err, attempt.err[-2000:]


def test_enforcing_serves_rocketmqs_tls_client_and_refuses_a_plain_one(
    tmp_path: Path, certs: Path, runners: list[rj.AdminRunner]
) -> None:
    server = _serve(tmp_path, certs, "enforcing")
    try:
        assert server.namesrv is not None
        tls = _runner(runners, tmp_path / "tls", *TLS)
        _make_topic(tls, server.namesrv, "TlsJava")
        sent = tls.produce(server.namesrv, "PG_tls", "TlsJava")
        assert sent.out == "sent", sent.err[-2000:]
        assert tls.consume(server.namesrv, "CG_tls", "TlsJava", 1) == 1

        plain = _runner(runners, tmp_path / "plain")
        refused = plain.produce(server.namesrv, "PG_plain", "TlsJava")
        _assert_refused(refused)
        listed = plain.admin("topicList", "-n", server.namesrv)
        assert "TlsJava" not in listed.out, listed.out

        # the server goes on serving TLS clients
        assert server.running
        again = tls.produce(server.namesrv, "PG_tls2", "TlsJava")
        assert again.out == "sent", again.err[-2000:]
        listed = tls.admin("topicList", "-n", server.namesrv)
        assert "TlsJava" in listed.out, listed.out + listed.err
    finally:
        server.stop()


def test_permissive_serves_rocketmqs_tls_and_plain_clients_on_one_port(
    tmp_path: Path, certs: Path, runners: list[rj.AdminRunner]
) -> None:
    server = _serve(tmp_path, certs, "permissive")
    try:
        assert server.namesrv is not None
        tls = _runner(runners, tmp_path / "tls", *TLS)
        plain = _runner(runners, tmp_path / "plain")
        _make_topic(plain, server.namesrv, "MixedJava")
        for runner, group in ((tls, "PG_tls"), (plain, "PG_plain")):
            sent = runner.produce(server.namesrv, group, "MixedJava")
            assert sent.out == "sent", sent.err[-2000:]
        # each reads both messages: the one sent over TLS and the plain one
        assert tls.consume(server.namesrv, "CG_tls", "MixedJava", 2) == 2
        assert plain.consume(server.namesrv, "CG_plain", "MixedJava", 2) == 2
    finally:
        server.stop()


def test_rocketmqs_client_checks_the_servers_certificate_when_told(
    tmp_path: Path, certs: Path, runners: list[rj.AdminRunner]
) -> None:
    server = _serve(tmp_path, certs, "enforcing")
    checking = [*TLS, "-Dtls.test.mode.enable=false", "-Dtls.client.authServer=true"]
    try:
        assert server.namesrv is not None
        trusted = _runner(
            runners,
            tmp_path / "trusted",
            *checking,
            f"-Dtls.client.trustCertPath={certs / 'ca.pem'}",
        )
        _make_topic(trusted, server.namesrv, "CheckedJava")
        sent = trusted.produce(server.namesrv, "PG_checked", "CheckedJava")
        assert sent.out == "sent", sent.err[-2000:]

        stranger = _runner(
            runners,
            tmp_path / "stranger",
            *checking,
            f"-Dtls.client.trustCertPath={certs / 'other-ca.pem'}",
        )
        refused = stranger.produce(server.namesrv, "PG_stranger", "CheckedJava")
        _assert_refused(refused)
        assert server.running
    finally:
        server.stop()
