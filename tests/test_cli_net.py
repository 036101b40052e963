"""The server commands as a user runs them: `rocketstore serve` announces where it listens, a
second owner of its store is refused with one line and exit status 1, and SIGTERM shuts the
server down cleanly (exit 0, the abort file removed)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

CLI = [sys.executable, "-m", "rocketstore.cli"]


def _wait_for_line(proc: subprocess.Popen[bytes], needle: str, timeout: float = 30.0) -> list[str]:
    """The lines the process printed, once one contains ``needle``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            lines = buf.decode().splitlines()
            if any(needle in line for line in lines):
                return lines
    raise AssertionError(f"no {needle!r} in {buf!r}")


def test_serve_refuses_a_second_owner_and_stops_cleanly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = ["serve", "--store", str(store), "--namesrv-listen", "127.0.0.1:0"]
    args += ["--listen", "127.0.0.1:0", "--grpc-listen", ""]
    proc = subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        lines = _wait_for_line(proc, "broker broker-a")
        assert any(line.startswith("name server listening on 127.0.0.1:") for line in lines)
        assert (store / "abort").exists()  # running
        second = subprocess.run(
            [*CLI, "broker", "--store", str(store), "--listen", "127.0.0.1:0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert second.stderr.startswith("error: ") and "owned by process" in second.stderr
        assert f"store {store} is owned by process {proc.pid}" in second.stderr  # which store
        assert "stop that process, or give this one another store directory" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert "Traceback" not in second.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not (store / "abort").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
