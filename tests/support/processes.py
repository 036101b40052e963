"""Child processes: their environment, reading what a server process prints while it runs, the
ports it listens on, and ending it."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src"


def child_env() -> dict[str, str]:
    """This process's environment for a child Python process, with the checkout's ``src``
    first on PYTHONPATH: the child imports the rocketstore under test."""
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


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


def listening_ports(pid: int) -> set[tuple[str, int]]:
    """Every TCP socket process ``pid`` listens on, as (address, port): the sockets of its
    open files (``/proc/<pid>/fd``) found listening in ``/proc/<pid>/net/tcp`` and ``tcp6``,
    whatever its configuration says."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, v6 in (("tcp", False), ("tcp6", True)):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                lines = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            addr_hex, port_hex = fields[1].split(":")
            found.add((_address(addr_hex, v6), int(port_hex, 16)))
    return found


def _address(hex_addr: str, v6: bool) -> str:
    """An address of /proc/net/tcp (host-order 32-bit words in hex) as text."""
    import ipaddress

    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if not v6:
        return str(ipaddress.IPv4Address(words))
    v6_addr = ipaddress.IPv6Address(words)
    mapped = v6_addr.ipv4_mapped
    return f"::ffff:{mapped}" if mapped is not None else str(v6_addr)
