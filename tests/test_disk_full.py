"""A store on a small, really full file system (a tmpfs mounted for the test).

The store runs in a child process (tests/_disk_full_child.py), so a write into an unallocated
page of a mapped file, which the kernel answers with SIGBUS, shows as the child's exit status
-7 and fails the test. Needs root to mount; skipped (with the reason) where mounting fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("_disk_full_child.py")


@pytest.fixture
def small_fs() -> Iterator[Path]:
    mnt = Path(tempfile.mkdtemp(prefix="rs-diskfull-"))
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if r.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=60)
        mnt.rmdir()


def run_child(mode: str, root: Path, report: Path) -> dict[str, object]:
    env = dict(os.environ)
    r = subprocess.run(
        [sys.executable, str(CHILD), mode, str(root), str(report)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert r.returncode != -signal.SIGBUS and r.returncode != 128 + signal.SIGBUS, (
        f"{mode}: killed by SIGBUS\n{r.stderr[-3000:]}"
    )
    assert r.returncode == 0, f"{mode}: exit {r.returncode}\n{r.stderr[-3000:]}"
    data: dict[str, object] = json.loads(report.read_text())
    return data


def test_full_disk_refuses_puts_and_restarts_without_losing_acknowledged_messages(
    small_fs: Path, tmp_path: Path
) -> None:
    ballast = small_fs / "ballast"
    ballast.write_bytes(bytes(1 << 20))  # freed later: the disk gets space back
    root = small_fs / "store"
    fill = run_child("fill", root, tmp_path / "r.fill")
    acked = fill["acked"]
    assert isinstance(acked, list) and len(acked) > 5000
    assert set(fill["refused"]) == {"SERVICE_NOT_AVAILABLE"}  # type: ignore[arg-type]
    st = os.statvfs(small_fs)
    assert st.f_bfree * st.f_frsize < 256 * 1024  # it was really full

    # a restart on the still-full disk (after a crash: abnormal recovery) comes up, refuses
    # puts, and every acknowledged message is there to read
    (tmp_path / "r.check.fill").write_text(json.dumps(fill))
    check = run_child("check", root, tmp_path / "r.check")
    assert check["up"] is True
    assert check["by_phys"] == len(acked)
    assert check["put"] == "SERVICE_NOT_AVAILABLE"
    assert 0 < int(check["by_queue"]) <= len(acked)  # type: ignore[call-overload]

    # space again: dispatch catches up, every message is found through its queue, puts work
    ballast.unlink()
    (tmp_path / "r.resume.fill").write_text(json.dumps(fill))
    resume = run_child("resume", root, tmp_path / "r.resume")
    assert resume["by_phys"] == len(acked)
    assert resume["by_queue"] == len(acked)
    assert resume["put"] == "PUT_OK" and resume["flags"] == 0
