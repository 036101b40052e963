"""Who may read /metrics (``--metrics-auth``): basic auth and bearer tokens from a file or the
environment, and with ACL on and no --metrics-auth an admin account of the ACL; /healthz and
/readyz open whatever the setting. Through the HTTP server, `rocketstore serve` with ACL on,
and a real Prometheus scraping with ``basic_auth`` and ``authorization`` (skipped without
/usr/bin/prometheus: apt-get install -y prometheus)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from rocketstore.metrics import MetricsServer
from rocketstore.metrics._auth import (
    OPEN,
    BasicAuth,
    BearerAuth,
    MetricsAuthError,
    parse_metrics_auth,
)
from support.metrics import PROMETHEUS, FakeNamesrv, FakeSource
from support.ports import free_port
from support.remoting import LoopThread

ADMIN, ADMIN_SECRET = "MetricsAdmin", "admin-secret-1"
WEAK, WEAK_SECRET = "WeakUser", "weak-secret-1"
ACL_YML = f"""\
accounts:
  - accessKey: {ADMIN}
    secretKey: {ADMIN_SECRET}
    admin: true
  - accessKey: {WEAK}
    secretKey: {WEAK_SECRET}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - PubOnly=PUB
"""


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def get(url: str, authorization: str | None = None, method: str = "GET") -> tuple[int, Any, str]:
    """(status, headers, body) of one request."""
    request = urllib.request.Request(url, method=method)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


# ---- the setting -----------------------------------------------------------------------------


def test_metrics_auth_values(tmp_path: Path) -> None:
    secret = tmp_path / "user"
    secret.write_text("prom:s3cret\n")
    auth = parse_metrics_auth(f"basic:file:{secret}")
    assert isinstance(auth, BasicAuth) and auth.describe() == f"basic auth ({secret})"
    assert not auth.check(basic("prom", "s3cret"), "127.0.0.1").status
    env = {"TOKEN": "abc.def-123", "USERPASS": "u:p:with:colons"}
    assert isinstance(parse_metrics_auth("bearer:env:TOKEN", env), BearerAuth)
    by_env = parse_metrics_auth("basic:env:USERPASS", env)
    assert not by_env.check(basic("u", "p:with:colons"), "127.0.0.1").status
    assert parse_metrics_auth("none") is OPEN
    bad = {
        "basic": "expected basic:file:PATH",
        "digest:file:/x": "expected basic:file:PATH",
        "basic:url:http://x": "expected file:PATH or env:NAME",
        "basic:env:MISSING": "MISSING is not set",
        f"basic:file:{tmp_path / 'missing'}": "cannot read",
        "basic:env:EMPTY": "is empty",
        "basic:env:NOCOLON": "must hold user:password",
        "bearer:env:SPACES": "a token has no spaces",
    }
    env = {"EMPTY": "\n", "NOCOLON": "justauser", "SPACES": "two words"}
    for spec, error in bad.items():
        with pytest.raises(MetricsAuthError, match=re.escape(error)):
            parse_metrics_auth(spec, env)


def test_basic_and_bearer_answers_over_http() -> None:
    loop = LoopThread()
    try:
        for auth, good, wrong in (
            (
                BasicAuth("prom", "s3cret", "test"),
                basic("prom", "s3cret"),
                [basic("prom", "s3cres"), basic("pron", "s3cret"), "Bearer s3cret", "Basic !!"],
            ),
            (
                BearerAuth("tok-123", "test"),
                "Bearer tok-123",
                ["Bearer tok-124", basic("tok-123", "x"), "Bearer"],
            ),
        ):
            server = MetricsServer([FakeSource()], "127.0.0.1", 0, namesrv=FakeNamesrv(), auth=auth)
            loop.run(server.start())
            url = f"http://{server.address}"
            try:
                status, headers, body = get(f"{url}/metrics")
                assert status == 401 and "TMetrics" not in body and '"T"' not in body
                assert headers["WWW-Authenticate"] == f'{auth.scheme} realm="rocketstore metrics"'
                for value in wrong:
                    assert get(f"{url}/metrics", value)[0] == 401, value
                assert get(f"{url}/metrics", method="HEAD")[0] == 401
                status, _h, body = get(f"{url}/metrics", good)
                assert status == 200 and 'topic="T"' in body
                assert get(f"{url}/healthz")[::2] == (200, "ok\n")
                assert get(f"{url}/readyz")[::2] == (200, "ready\n")
                assert server.http.unauthorized == len(wrong) + 2
            finally:
                loop.run(server.close())
    finally:
        loop.stop()


# ---- serve with ACL on, and a real Prometheus --------------------------------------------------


class Serve:
    """`rocketstore serve` with ACL on and metrics on a port the system chose."""

    def __init__(self, root: Path, *extra: str, controller: bool = False) -> None:
        acl = root / "plain_acl.yml"
        acl.write_text(ACL_YML)
        if controller:  # the standalone controller instead
            args = [
                *("controller", "--store", str(root / "controller"), "--acl-file", str(acl)),
                *("--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"),
                *("--log-dir", str(root / "logs")),
                *extra,
            ]
        else:
            args = [
                *("serve", "--store", str(root / "store"), "--acl-file", str(acl)),
                *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
                *("--grpc-listen", "", "--console-listen", "", "--metrics-listen", "127.0.0.1:0"),
                *extra,
            ]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.out = b""
        m = self._expect(rb"metrics on http://(127\.0\.0\.1:\d+)/metrics \(([^)]*)\)")
        self.address, self.auth = m.group(1).decode(), m.group(2).decode()

    def _expect(self, pattern: bytes, timeout: float = 60.0) -> re.Match[bytes]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.out)
            if m:
                return m
            if select.select([fd], [], [], 0.1)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self.out += chunk
        self.close()
        raise AssertionError(f"serve did not print {pattern!r}: {self.out!r}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(scope="module")
def serve_acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    server = Serve(tmp_path_factory.mktemp("metrics-acl"))
    try:
        yield server
    finally:
        server.close()


def test_with_acl_on_metrics_need_an_admin_account_and_health_stays_open(
    serve_acl: Serve,
) -> None:
    url = f"http://{serve_acl.address}"
    assert serve_acl.auth.startswith("basic auth with an admin account of the ACL")
    status, headers, body = get(f"{url}/metrics")
    assert status == 401 and "rocketmq_" not in body
    assert headers["WWW-Authenticate"] == 'Basic realm="rocketstore metrics"'
    assert get(f"{url}/metrics", basic(ADMIN, "admin-secret-2"))[0] == 401
    assert get(f"{url}/metrics", basic("Nobody", ADMIN_SECRET))[0] == 401
    status, _h, body = get(f"{url}/metrics", basic(WEAK, WEAK_SECRET))
    assert status == 403 and "not an admin" in body
    status, _h, body = get(f"{url}/metrics", basic(ADMIN, ADMIN_SECRET))
    assert status == 200 and "rocketmq_topic_number" in body
    assert get(f"{url}/healthz")[0] == 200
    assert get(f"{url}/readyz")[0] in (200, 503)  # open: an answer, not 401


def test_the_standalone_controllers_metrics_need_an_admin_account_with_acl_on(
    tmp_path: Path,
) -> None:
    server = Serve(tmp_path, controller=True)
    try:
        url = f"http://{server.address}"
        assert server.auth.startswith("basic auth with an admin account of the ACL")
        status, headers, body = get(f"{url}/metrics")
        assert status == 401 and "election_total" not in body
        assert headers["WWW-Authenticate"] == 'Basic realm="rocketstore metrics"'
        assert get(f"{url}/metrics", basic(ADMIN, "admin-secret-2"))[0] == 401
        status, _h, body = get(f"{url}/metrics", basic(WEAK, WEAK_SECRET))
        assert status == 403 and "not an admin" in body
        status, _h, body = get(f"{url}/metrics", basic(ADMIN, ADMIN_SECRET))
        assert status == 200 and "role" in body
        assert get(f"{url}/healthz")[0] == 200
    finally:
        server.close()
    (tmp_path / "open").mkdir()
    opened = Serve(tmp_path / "open", "--metrics-auth", "none", controller=True)
    try:
        assert opened.auth.startswith("open")
        assert get(f"http://{opened.address}/metrics")[0] == 200
    finally:
        opened.close()


def test_metrics_auth_none_opens_metrics_with_acl_on(tmp_path: Path) -> None:
    server = Serve(tmp_path, "--metrics-auth", "none")
    try:
        assert server.auth.startswith("open")
        assert get(f"http://{server.address}/metrics")[0] == 200
    finally:
        server.close()


def test_a_bad_metrics_auth_is_a_usage_error(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(tmp_path / "s")),
            *("--metrics-auth", f"basic:file:{tmp_path / 'missing'}"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--metrics-auth" in r.stderr and "cannot read" in r.stderr


@pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason=f"{PROMETHEUS} is not installed")
def test_prometheus_scrapes_with_basic_auth_and_a_bearer_token(
    serve_acl: Serve, tmp_path: Path
) -> None:
    """Prometheus's basic_auth (an ACL admin account, password_file) and authorization (a
    bearer token, credentials_file) scrape; a job without credentials is down (401)."""
    password = tmp_path / "admin.secret"
    password.write_text(ADMIN_SECRET + "\n")
    token = tmp_path / "token"
    token.write_text("prom-token-1\n")
    loop = LoopThread()
    bearer = MetricsServer(
        [FakeSource()],
        "127.0.0.1",
        0,
        namesrv=FakeNamesrv(),
        auth=parse_metrics_auth(f"bearer:file:{token}"),
    )
    loop.run(bearer.start())
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        f"  - job_name: acl-admin\n    basic_auth:\n      username: {ADMIN}\n"
        f"      password_file: {password}\n"
        f"    static_configs:\n      - targets: ['{serve_acl.address}']\n"
        f"  - job_name: anonymous\n    static_configs:\n      - targets: ['{serve_acl.address}']\n"
        f"  - job_name: bearer\n    authorization:\n      type: Bearer\n"
        f"      credentials_file: {token}\n"
        f"    static_configs:\n      - targets: ['{bearer.address}']\n"
    )
    log = tmp_path / "prometheus.log"
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            try:
                want = {"acl-admin": "1", "anonymous": "0", "bearer": "1"}
                up: dict[str, str] = {}
                deadline = time.monotonic() + 60
                while up != want and time.monotonic() < deadline and proc.poll() is None:
                    time.sleep(0.5)
                    query = urllib.parse.urlencode({"query": "up"})
                    with (
                        contextlib.suppress(OSError, ValueError),
                        urllib.request.urlopen(
                            f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5
                        ) as response,
                    ):
                        result = json.loads(response.read())["data"]["result"]
                        up = {r["metric"]["job"]: r["value"][1] for r in result}
                assert up == want, (up, log.read_text()[-2000:])
                query = urllib.parse.urlencode({"query": "rocketmq_topic_number"})
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5
                ) as response:
                    result = json.loads(response.read())["data"]["result"]
                assert {r["metric"]["job"] for r in result} == {"acl-admin", "bearer"}
            finally:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
    finally:
        loop.run(bearer.close())
        loop.stop()
    assert bearer.http.unauthorized == 0
