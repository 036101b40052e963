"""The server commands as a user runs them: `rocketstore serve` announces where it listens, a
second owner of its store is refused with one line and exit status 1, and SIGTERM shuts the
server down cleanly (exit 0, the abort file removed)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from support.processes import read_until

CLI = [sys.executable, "-m", "rocketstore.cli"]


def test_serve_refuses_a_second_owner_and_stops_cleanly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = ["serve", "--store", str(store), "--namesrv-listen", "127.0.0.1:0"]
    args += ["--listen", "127.0.0.1:0", "--grpc-listen", ""]
    proc = subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        lines = read_until(proc, re.escape("broker broker-a"))
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
