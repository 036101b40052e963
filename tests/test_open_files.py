"""A flood of connections leaves `rocketstore serve` its open files: the servers of one process
hold at most half its open-file limit of connections together (remoting/_allowance.py), so a
peer that opens more connections than the process may open files (to the gRPC port, which had
no limit, or a remoting port, whose limit of 10,000 is beyond most processes' open files) no
longer takes the last file: the broker accepted nobody then, and its store could start no new
file. Each flood here is twice the child's limit of open files."""

from __future__ import annotations

import errno
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from support.ports import free_port
from support.processes import read_until

CLI = [sys.executable, "-m", "rocketstore.cli"]
LIMIT = 512  # the child's open files (soft and hard)


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def _own_limit_at_least(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        if hard != resource.RLIM_INFINITY and hard < n:
            pytest.skip(f"this process may open {hard} files, the flood needs {n}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def send(address: str, body: bytes) -> RemotingCommand:
    ext = {"a": "P", "b": "FloodT", "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "0"}
    ext |= {"h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
    with RemotingClient(timeout=30) as client:
        return client.invoke(address, RemotingCommand.request(310, ext, body))


def _serve(tmp_path: Path) -> tuple[subprocess.Popen[Any], dict[str, int]]:
    """``serve`` with a limit of LIMIT open files, once it said its gRPC port listens; its
    ports. A port another process took between its pick and the bind makes ``serve`` exit:
    started again on new ones (three tries), else the failure says what it printed."""
    for attempt in range(3):
        ports = {"name server": free_port(), "broker": free_port(also=(1,)), "gRPC": free_port()}
        args = ["serve", "--store", str(tmp_path / "store")]
        args += ["--namesrv-listen", f"127.0.0.1:{ports['name server']}"]
        args += ["--listen", f"127.0.0.1:{ports['broker']}"]
        args += ["--grpc-listen", f"127.0.0.1:{ports['gRPC']}"]
        args += ["--metrics-listen", "", "--console-listen", ""]
        with (tmp_path / "serve.err").open("w") as err:
            proc = subprocess.Popen(
                [*CLI, *args],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                preexec_fn=_limit_open_files,
            )
        try:
            read_until(proc, r"^gRPC front end listening on ", timeout=120)
            return proc, ports
        except AssertionError:
            exited = proc.poll() is not None
            if not exited:
                proc.kill()
            proc.wait(30)
            assert proc.stdout is not None
            proc.stdout.close()
            if not exited or attempt == 2:
                raise AssertionError((tmp_path / "serve.err").read_text()[-3000:]) from None
    raise AssertionError("unreachable")


def _flood(port: int, count: int, timeout: float) -> list[socket.socket]:
    """``count`` connections to ``port`` opened at once (connects begun together, then waited
    for together, rather than one after another, each waiting out the retries of a connect
    the full listen queue dropped); the ones refused or not connected within ``timeout``
    (the flood is over the limits) are closed and left out."""
    pending: dict[int, socket.socket] = {}
    opened: list[socket.socket] = []
    with selectors.DefaultSelector() as sel:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            if sock.connect_ex(("127.0.0.1", port)) not in (0, errno.EINPROGRESS):
                sock.close()
                continue
            pending[sock.fileno()] = sock
            sel.register(sock, selectors.EVENT_WRITE)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
                sock = pending.pop(key.fd)
                sel.unregister(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    sock.setblocking(True)
                    opened.append(sock)
                else:
                    sock.close()
    for sock in pending.values():
        sock.close()
    return opened


@pytest.mark.parametrize("flooded", ["gRPC", "broker", "name server"])
def test_a_connection_flood_leaves_the_process_its_files(tmp_path: Path, flooded: str) -> None:
    _own_limit_at_least(3 * LIMIT)
    flood: list[socket.socket] = []
    proc, ports = _serve(tmp_path)
    broker, port = ports["broker"], ports[flooded]
    try:
        address = f"127.0.0.1:{broker}"
        assert send(address, b"before").code == ResponseCode.SUCCESS
        flood += _flood(port, 2 * LIMIT, timeout=10)
        # the broker still accepts, serves and stores
        assert send(address, b"after").code == ResponseCode.SUCCESS
        with RemotingClient(timeout=30) as client:
            r = client.invoke(address, RemotingCommand.request(28, {}))
        assert r.code == ResponseCode.SUCCESS
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        for sock in flood:
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()
    log = (tmp_path / "serve.err").read_text()
    assert not re.search(r"Too many open files", log), log[-2000:]
