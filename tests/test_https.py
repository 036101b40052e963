"""The metrics endpoint and the console over HTTPS (`--https-cert` / `--https-key`): `serve`
says https in its lines, a client that trusts the CA reads /healthz, /metrics and the console's
page, a plain HTTP request on those ports gets no answer, and a bad pair of files is one line."""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from support.certs import make_certs
from support.interop import ServerProcess

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _get(url: str, ctx: ssl.SSLContext | None) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30, context=ctx) as answer:
        return answer.status, answer.read()


def test_metrics_and_console_over_https(tmp_path: Path, certs: Path) -> None:
    args = [*ServerProcess._command(), "serve", "--store", str(tmp_path / "store")]
    args += ["--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--grpc-listen", ""]
    args += ["--ha-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
    args += ["--console-listen", "127.0.0.1:0"]
    args += ["--https-cert", str(certs / "server.pem"), "--https-key", str(certs / "server.key")]
    server = ServerProcess(args, tmp_path / "serve.log", want_namesrv=True, want_broker=True)
    server._wait_started(60)
    try:
        text = ""
        deadline = time.monotonic() + 60  # the console's line comes after the broker's
        while "console on " not in text and time.monotonic() < deadline:
            assert server.proc.poll() is None, server.output()
            time.sleep(0.1)
            text = server.output()
        metrics = re.search(r"metrics on (https://\S+)/metrics", text)
        console = re.search(r"console on (https://\S+)/", text)
        assert metrics and console, text
        trusted = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        assert _get(metrics.group(1) + "/healthz", trusted)[0] == 200
        status, body = _get(metrics.group(1) + "/metrics", trusted)
        assert status == 200 and b"rocketmq_" in body
        assert _get(console.group(1) + "/", trusted)[0] == 200
        for base in (metrics.group(1), console.group(1)):  # plain HTTP: no answer
            with pytest.raises(OSError):
                _get(base.replace("https://", "http://") + "/healthz", None)
        untrusted = ssl.create_default_context(cafile=str(certs / "other-ca.pem"))
        with pytest.raises(OSError):
            _get(metrics.group(1) + "/healthz", untrusted)
        assert server.proc.poll() is None
    finally:
        server.stop()


def test_bad_https_files_are_one_line(tmp_path: Path, certs: Path) -> None:
    base = [sys.executable, "-c", "from rocketstore.cli import main; main()", "serve"]
    base += ["--store", str(tmp_path / "s")]
    for extra, words in (
        (["--https-cert", str(certs / "server.pem")], "give both --https-cert and --https-key"),
        (["--https-cert", str(certs / "server.pem"), "--https-key", str(certs / "client.key")],
         "https:"),
    ):  # fmt: skip
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
