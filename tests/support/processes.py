"""Reading what a server process prints while it runs, and ending it."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import time
from typing import Any


def read_until(proc: subprocess.Popen[Any], pattern: str, timeout: float = 60.0) -> list[str]:
    """The lines the process printed, once one matches ``pattern``."""
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
            if any(re.search(pattern, line) for line in lines):
                return lines
    raise AssertionError(f"no {pattern!r} in {buf!r}")


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> int:
    """SIGTERM, then SIGKILL when it has not ended after ``grace`` seconds; its exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
    return int(proc.returncode)
