"""`rocketstore serve` names every port it opens (name server, broker, HA, gRPC, metrics,
console), each one then reachable, and refuses two of its own servers on one port before
anything binds, naming both owners (the HA port is the broker's port + 1 unless set, as
RocketMQ's haListenPort is: a gRPC front end put there used to fail in gRPC's C core)."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.grpc import GrpcConfig
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer, run_servers
from rocketstore.server._ports import (
    PortClaim,
    PortClashError,
    PortInUseError,
    check_ports,
    overlaps,
    port_in_use_error,
    taken,
)
from support.ports import free_port
from support.processes import read_until

CLI = [sys.executable, "-m", "rocketstore.cli"]


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_claims_clash_on_one_port_of_overlapping_hosts() -> None:
    a = PortClaim("a", "127.0.0.1", 7000)
    assert overlaps(a, PortClaim("b", "localhost", 7000))
    assert overlaps(a, PortClaim("b", "0.0.0.0", 7000))
    assert overlaps(PortClaim("b", "::", 7000), a)
    assert not overlaps(a, PortClaim("b", "127.0.0.2", 7000))
    assert not overlaps(a, PortClaim("b", "127.0.0.1", 7001))
    assert not overlaps(PortClaim("a", "127.0.0.1", 0), PortClaim("b", "127.0.0.1", 0))
    check_ports([a, PortClaim("b", "127.0.0.1", 0), PortClaim("c", "127.0.0.2", 7000)])
    with pytest.raises(PortClashError, match=r"by a, at 127\.0\.0\.1:7000, and by c, at"):
        check_ports([a, PortClaim("b", "127.0.0.1", 7001), PortClaim("c", "0.0.0.0", 7000)])


def test_serve_prints_every_port_it_opens(tmp_path: Path) -> None:
    ns, broker, grpc, metrics, console = (free_port(also=(1,) if i == 1 else ()) for i in range(5))
    args = ["serve", "--store", str(tmp_path / "store"), "--namesrv-listen", f"127.0.0.1:{ns}"]
    args += ["--listen", f"127.0.0.1:{broker}", "--grpc-listen", f"127.0.0.1:{grpc}"]
    args += ["--metrics-listen", f"127.0.0.1:{metrics}", "--console-listen", f"127.0.0.1:{console}"]
    with (tmp_path / "serve.err").open("w") as err:
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            text = "\n".join(read_until(proc, r"^console on "))
            expected = {
                ns: r"^name server listening on 127\.0\.0\.1:(\d+)$",
                broker: r"^broker broker-a .* listening on 127\.0\.0\.1:(\d+), store",
                broker + 1: r"^HA port of broker broker-a .* listening on 127\.0\.0\.1:(\d+)$",
                grpc: r"^gRPC front end listening on 127\.0\.0\.1:(\d+)$",
                metrics: r"^metrics on http://127\.0\.0\.1:(\d+)/metrics",
                console: r"^console on http://127\.0\.0\.1:(\d+)/$",
            }
            for port, pattern in expected.items():
                found = re.search(pattern, text, re.MULTILINE)
                assert found and int(found.group(1)) == port, (pattern, text)
                assert listening(port), (port, pattern)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
            assert proc.stdout is not None
            proc.stdout.close()


@pytest.mark.parametrize(
    ("clash", "owners"),
    [
        (["--grpc-listen", "127.0.0.1:{ha}"], ("the HA port of broker broker-a", "gRPC")),
        (["--console-listen", "127.0.0.1:{broker}"], ("broker broker-a,", "the console")),
        (["--metrics-listen", "127.0.0.1:{ns}"], ("the name server", "the metrics endpoint")),
        (
            ["--ha-listen", "127.0.0.1:{grpc}", "--grpc-listen", "0.0.0.0:{grpc}"],
            ("the HA port", "gRPC"),
        ),
    ],
)
def test_serve_refuses_two_of_its_servers_on_one_port_before_binding(
    tmp_path: Path, clash: list[str], owners: tuple[str, str]
) -> None:
    ports = {"ns": free_port(), "broker": free_port(also=(1,)), "grpc": free_port()}
    ports["ha"] = ports["broker"] + 1
    args = ["serve", "--store", str(tmp_path / "store")]
    args += ["--namesrv-listen", f"127.0.0.1:{ports['ns']}"]
    args += ["--listen", f"127.0.0.1:{ports['broker']}", "--grpc-listen", "127.0.0.1:0"]
    args += ["--metrics-listen", "", "--console-listen", ""]
    args += [a.format(**ports) for a in clash]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "listening" not in done.stdout  # nothing bound
    assert "Traceback" not in done.stderr and "asked for twice" in done.stderr, done.stderr
    for owner in owners:
        assert owner in done.stderr, (owner, done.stderr)
    assert not (tmp_path / "store" / "abort").exists()  # the store was not opened


def test_run_servers_refuses_a_clash_before_the_name_server_binds(tmp_path: Path) -> None:
    ns_port, port = free_port(), free_port(also=(1,))
    ns = NameServer("127.0.0.1", ns_port)
    broker = BrokerServer(
        StoreConfig(store_path_root_dir=str(tmp_path / "store"), ha_listen_port=port + 1),
        BrokerConfig(listen_port=port, namesrv_addr=f"127.0.0.1:{ns_port}"),
        grpc=GrpcConfig(port=port + 1),
    )
    with pytest.raises(PortClashError, match="HA port of broker broker-a"):
        asyncio.run(run_servers(ns, [broker], announce=lambda _line: None, stats_interval=0))
    assert not listening(ns_port)
    assert not (tmp_path / "store").exists()


@pytest.fixture
def held() -> Iterator[Callable[[int], None]]:
    """Listens on 127.0.0.1 ports as another process would (closed at the end)."""
    sockets: list[socket.socket] = []

    def hold(port: int) -> None:
        s = socket.socket()
        sockets.append(s)
        s.bind(("127.0.0.1", port))
        s.listen()

    yield hold
    for s in sockets:
        s.close()


def test_a_port_held_elsewhere_is_named_with_the_option_that_moves_it(
    held: Callable[[int], None],
) -> None:
    port = free_port()
    claim = PortClaim("the console", "127.0.0.1", port, "--console-listen")
    cause = OSError(98, "address already in use")
    assert port_in_use_error([claim], cause) is cause  # free: the error is another one
    held(port)
    assert taken(claim)
    error = port_in_use_error([PortClaim("x", "127.0.0.1", free_port()), claim], cause)
    assert isinstance(error, PortInUseError)
    assert str(error) == (
        f"port {port} is in use by another process: the console cannot listen on "
        f"127.0.0.1:{port}; stop that process, or give it another port (--console-listen "
        "HOST:PORT)"
    )


@pytest.mark.parametrize(
    ("command", "held_port", "owner", "option"),
    [
        ("serve", "ns", "the name server", "--namesrv-listen"),
        ("serve", "ha", "the HA port of broker broker-a", "--ha-listen"),
        ("serve", "grpc", "the gRPC front end of broker broker-a", "--grpc-listen"),
        ("namesrv", "ns", "the name server", "--listen"),
    ],
)
def test_a_port_another_process_holds_ends_the_start_in_one_line_naming_it(
    tmp_path: Path,
    held: Callable[[int], None],
    command: str,
    held_port: str,
    owner: str,
    option: str,
) -> None:
    ports = {"ns": free_port(), "broker": free_port(also=(1,)), "grpc": free_port()}
    ports["ha"] = ports["broker"] + 1
    held(ports[held_port])
    if command == "serve":
        args = ["serve", "--store", str(tmp_path / "store")]
        args += ["--namesrv-listen", f"127.0.0.1:{ports['ns']}"]
        args += ["--listen", f"127.0.0.1:{ports['broker']}"]
        args += ["--grpc-listen", f"127.0.0.1:{ports['grpc']}"]
        args += ["--metrics-listen", "", "--console-listen", ""]
    else:
        args = ["namesrv", "--listen", f"127.0.0.1:{ports['ns']}", "--log-dir", str(tmp_path)]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(
        f"error: port {ports[held_port]} is in use by another process: {owner}"
    ), errors[0]
    assert f"127.0.0.1:{ports[held_port]}; stop that process" in errors[0]
    assert errors[0].endswith(f"give it another port ({option} HOST:PORT)"), errors[0]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == errors  # nothing else (gRPC's C core included)
    assert not (tmp_path / "store" / "abort").exists()  # opened (or not) and closed cleanly


def test_serve_names_the_acl_in_force(tmp_path: Path) -> None:
    """Under ACL 2.0 the start-up line names it and the file of its users and ACLs."""
    ns, broker = free_port(), free_port(also=(1,))
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"storePathRootDir={store}\nauthenticationEnabled=true\nauthorizationEnabled=true\n"
        'initAuthenticationUser={"username":"admin","password":"adminPass1"}\n'
    )
    args = ["serve", "-c", str(conf), "--namesrv-listen", f"127.0.0.1:{ns}"]
    args += ["--listen", f"127.0.0.1:{broker}", "--grpc-listen", "", "--metrics-listen", ""]
    args += ["--console-listen", ""]
    with (tmp_path / "serve.err").open("w") as err:
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            lines = read_until(proc, r"on every port of broker-a")
            acl = [line for line in lines if "on every port of broker-a" in line]
            assert acl == [f"ACL 2.0 on every port of broker-a: {store / 'config' / 'auth.json'}"]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
            assert proc.stdout is not None
            proc.stdout.close()
