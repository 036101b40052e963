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


# ---- without a real full disk: the reservation of blocks made to fail --------------------


def _fail_reserve_under(monkeypatch: pytest.MonkeyPatch, part: str) -> list[bool]:
    """Make every reservation of blocks in a file whose path contains ``part`` fail with
    ENOSPC while the returned flag is on."""
    import errno

    from rocketstore.store import _mapped_file

    real = _mapped_file.reserve
    on = [True]

    def reserve(fd: int, start: int, end: int) -> bool:
        if on[0] and part in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, start, end)

    monkeypatch.setattr(_mapped_file, "reserve", reserve)
    return on


def _wait(cond: object, timeout: float = 10) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_no_blocks_for_the_commit_log_refuses_puts_with_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: str
) -> None:
    from rocketstore.store import Message, MessageStore, PutMessageStatus, StoreConfig

    cfg = StoreConfig(
        store_path_root_dir=str(tmp_path / "s"),
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_allocate_ahead=4096,
        flush_disk_type=flush,  # type: ignore[arg-type]
    )
    with MessageStore(cfg) as store:
        first = store.put_message(Message("Full", b"x" * 100, 0))
        assert first.status is PutMessageStatus.PUT_OK
        on = _fail_reserve_under(monkeypatch, "commitlog")
        statuses = [store.put_message(Message("Full", b"y" * 1000, 0)).status for _ in range(20)]
        ok = statuses.count(PutMessageStatus.PUT_OK)
        # puts go on into the blocks reserved already (one page), then are refused
        assert 0 < ok < 4 and statuses[:ok] == [PutMessageStatus.PUT_OK] * ok
        assert set(statuses[ok:]) == {PutMessageStatus.SERVICE_NOT_AVAILABLE}
        end = store.max_phy_offset
        assert end <= 4096
        refused = store.put_message(Message("Full", b"y" * 1000, 0))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert store.max_phy_offset == end  # nothing written
        m = store.look_message_by_offset(first.wrote_offset)
        assert m is not None and m.body == b"x" * 100  # reads go on
        on[0] = False  # space again
        r = store.put_message(Message("Full", b"z", 0))
        assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == ok + 1


def test_no_blocks_for_a_consume_queue_pauses_dispatch_and_the_store_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocketstore.store import Message, MessageStore, PutMessageStatus, StoreConfig
    from rocketstore.store._disk import WRITE_LOGICS_QUEUE_ERROR_BIT

    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "s"), mapped_file_size_consume_queue=600)
    with MessageStore(cfg) as store:
        for i in range(30):  # a queue file holds 30 units: the next one needs a new file
            assert store.put_message(Message("Q", b"m%d" % i, 0)).status is PutMessageStatus.PUT_OK
        on = _fail_reserve_under(monkeypatch, "consumequeue")
        r = store.put_message(Message("Q", b"m30", 0))
        assert r.status is PutMessageStatus.PUT_OK  # in the commit log; its unit waits
        _wait(lambda: store.running_flags.bits & WRITE_LOGICS_QUEUE_ERROR_BIT)
        assert not store.running_flags.is_writeable()
        refused = store.put_message(Message("Q", b"refused", 0))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        g = store.get_message("g", "Q", 0, 0, 32)  # what was dispatched reads on
        assert [m.body for m in g.messages] == [b"m%d" % i for i in range(30)]
        on[0] = False  # space again: dispatch goes on, writes are accepted
        _wait(lambda: store.running_flags.bits == 0)
        assert store.put_message(Message("Q", b"m31", 0)).queue_offset == 31
        _wait(lambda: store.get_max_offset_in_queue("Q", 0) == 32)
        g = store.get_message("g", "Q", 0, 30, 32)
        assert [m.body for m in g.messages] == [b"m30", b"m31"]
