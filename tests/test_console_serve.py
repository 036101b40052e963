"""`rocketstore serve` runs the web console beside its broker and says where it is."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def test_serve_runs_the_console_and_says_where(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(tmp_path / "s")),
            *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
            *("--grpc-listen", "", "--metrics-listen", "", "--console-listen", "127.0.0.1:0"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        address = None
        deadline = time.monotonic() + 30
        while address is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            m = re.match(r"console on http://(\S+)/", line)
            if m:
                address = m.group(1)
        assert address is not None, "serve did not say where its console is"
        with urllib.request.urlopen(f"http://{address}/", timeout=10) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
        deadline = time.monotonic() + 20
        while True:  # the broker registers with the name server shortly after it starts
            with urllib.request.urlopen(f"http://{address}/api/cluster", timeout=10) as r:
                cluster = json.loads(r.read())
            if "broker-a" in json.dumps(cluster) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "broker-a" in json.dumps(cluster)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_bad_console_address_is_a_usage_error(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(tmp_path / "s")),
            *("--console-listen", "here:there"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--console-listen" in r.stderr and "Traceback" not in r.stderr
