"""A store on a small, really full file system (a tmpfs mounted for the test).

The store runs in a child process (tests/support/disk_full_child.py), so a write into an unallocated
page of a mapped file, which the kernel answers with SIGBUS, shows as the child's exit status
-7 and fails the test. Needs root to mount; skipped (with the reason) where mounting fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.disk_full import Server, pull_bodies, send_messages
from support.waits import wait_dispatched

CHILD = Path(__file__).resolve().parent / "support" / "disk_full_child.py"


@contextlib.contextmanager
def tmpfs(size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on a new directory (skips the test where that fails)."""
    mnt = Path(tempfile.mkdtemp(prefix="rs-diskfull-"))
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
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


@pytest.fixture
def small_fs() -> Iterator[Path]:
    with tmpfs("6m") as mnt:
        yield mnt


def run_child(mode: str, root: Path, report: Path, *extra: str) -> dict[str, object]:
    env = dict(os.environ)
    r = subprocess.run(
        [sys.executable, str(CHILD), mode, str(root), str(report), *extra],
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
    check = run_child("check", root, tmp_path / "r.check", str(ballast))
    assert check["up"] is True
    assert check["by_phys"] == len(acked)
    assert check["put"] == "SERVICE_NOT_AVAILABLE"
    assert 0 < int(check["by_queue"]) <= len(acked)  # type: ignore[call-overload]
    # then space again while it runs: dispatch goes on, and a put takes the queue offset
    # after the last acknowledged one (not one that a record not dispatched yet holds)
    last = max(int(q) for _i, t, qid, q, _p in acked if t == "DiskA" and qid == 0)  # type: ignore[misc,call-overload]
    assert check["space_put"] == "PUT_OK"
    assert check["space_put_queue_offset"] == last + 1
    assert check["space_by_queue"] == len(acked)

    # a restart with space: every message is found through its queue, puts work
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

    from rocketstore.store.log import _mapped_file

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


@pytest.mark.parametrize("part", ["consumequeue", "index"])
def test_no_blocks_for_a_consume_queue_or_index_pauses_dispatch_and_the_store_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part: str
) -> None:
    from rocketstore.store import Message, MessageStore, PutMessageStatus, StoreConfig
    from rocketstore.store._disk import WRITE_INDEX_FILE_ERROR_BIT, WRITE_LOGICS_QUEUE_ERROR_BIT

    bit = WRITE_LOGICS_QUEUE_ERROR_BIT if part == "consumequeue" else WRITE_INDEX_FILE_ERROR_BIT
    cfg = StoreConfig(
        store_path_root_dir=str(tmp_path / "s"),
        mapped_file_size_consume_queue=600,  # 30 units a file
        max_hash_slot_num=64,
        max_index_num=31,  # 30 entries a file
    )
    with MessageStore(cfg) as store:
        for i in range(30):  # the 31st unit and the 31st key need new files
            m = Message("Q", b"m%d" % i, 0, keys=[f"k{i}"])
            assert store.put_message(m).status is PutMessageStatus.PUT_OK
        wait_dispatched(store)
        on = _fail_reserve_under(monkeypatch, part)
        r = store.put_message(Message("Q", b"m30", 0, keys=["k30"]))
        assert r.status is PutMessageStatus.PUT_OK  # in the commit log; dispatch waits
        _wait(lambda: store.running_flags.bits & bit)
        assert not store.running_flags.is_writeable()
        refused = store.put_message(Message("Q", b"refused", 0))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        g = store.get_message("g", "Q", 0, 0, 32)  # what was dispatched reads on
        assert [m.body for m in g.messages][:30] == [b"m%d" % i for i in range(30)]
        assert [m.body for m in store.query_message("Q", "k3").messages] == [b"m3"]
        on[0] = False  # space again: dispatch goes on, writes are accepted
        _wait(lambda: store.running_flags.bits == 0)
        assert store.put_message(Message("Q", b"m31", 0)).queue_offset == 31
        _wait(lambda: store.get_max_offset_in_queue("Q", 0) == 32)
        g = store.get_message("g", "Q", 0, 30, 32)
        assert [m.body for m in g.messages] == [b"m30", b"m31"]
        _wait(lambda: store.query_message("Q", "k30").messages)
        assert [m.body for m in store.query_message("Q", "k30").messages] == [b"m30"]


# ---- `rocketstore serve`: the name server and the broker in one process -------------------

BROKER_CONF = """\
mappedFileSizeCommitLog=1048576
mappedFileSizeConsumeQueue=6000
maxHashSlotNum=64
maxIndexNum=400
flushDiskType=SYNC_FLUSH
mappedFileAllocateAhead=65536
# the file system itself says when it is full (not a usage ratio), and nothing is deleted
diskSpaceWarningLevelRatio=1.0
cleanFileForciblyEnable=false
diskMaxUsedSpaceRatio=95
cleanResourceInterval=3600000
"""


def test_serve_on_a_full_disk_answers_service_not_available_and_restarts(
    small_fs: Path, tmp_path: Path
) -> None:
    from rocketstore.remoting import RemotingClient

    ballast = small_fs / "ballast"
    ballast.write_bytes(bytes(1 << 20))
    conf = tmp_path / "broker.conf"
    conf.write_text(BROKER_CONF)
    store = small_fs / "store"
    topic = "DiskServe"
    acked: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
    remarks: set[str] = set()
    server = Server(store, conf)
    try:
        with RemotingClient(timeout=10.0) as client:
            # the consumer group is created (and its config file written) while there is space
            assert send_messages(client, server.address, topic, 0, b"first").code == 0  # type: ignore[attr-defined]
            acked[0].append((0, b"first"))
            pull_bodies(client, server.address, topic, 0, 0)
            refused = 0
            for i in range(60_000):
                qid = i % 2
                body = (b"serve-%06d-" % i) * 30
                r = send_messages(client, server.address, topic, qid, body)
                if r.code == 0:  # type: ignore[attr-defined]
                    qoff = int(r.ext_fields["queueOffset"])  # type: ignore[attr-defined]
                    acked[qid].append((qoff, body))
                else:
                    assert r.code == 14, (r.code, r.remark)  # type: ignore[attr-defined]
                    remarks.add(r.remark)  # type: ignore[attr-defined]
                    refused += 1
                    if refused >= 10:
                        break
            assert refused >= 10
        assert server.proc.poll() is None  # alive: no SIGBUS
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL  # a crash on the full disk
    finally:
        server.close()
    assert all(r.startswith("service not available now") for r in remarks), remarks
    # RocketMQ's remark, with the use of the partitions of the commit log, queues and index
    assert all(
        re.search(
            r"the broker's disk is full \[CL: +[01]\.\d\d CQ: +[01]\.\d\d INDEX: +[01]\.\d\d\]", r
        )
        for r in remarks
    ), remarks
    assert sum(map(len, acked.values())) > 3000
    st = os.statvfs(small_fs)
    assert st.f_bfree * st.f_frsize < 256 * 1024

    # a restart on the still-full disk comes up (recovery may free a little: files past the
    # end, index files newer than the checkpoint), refuses sends once that is used, and
    # serves what it dispatched
    server = Server(store, conf)
    try:
        with RemotingClient(timeout=10.0) as client:
            for i in range(5000):
                body = (b"again-%06d-" % i) * 30
                r = send_messages(client, server.address, topic, 0, body)
                if r.code != 0:  # type: ignore[attr-defined]
                    break
                acked[0].append((int(r.ext_fields["queueOffset"]), body))  # type: ignore[attr-defined]
            assert r.code == 14  # type: ignore[attr-defined]
            assert server.proc.poll() is None
            first = pull_bodies(client, server.address, topic, 0, 0)
            assert first and first[0] == acked[0][0][1]
        rc = server.stop(signal.SIGTERM)
        assert rc != -signal.SIGBUS and rc != 128 + signal.SIGBUS
    finally:
        server.close()

    # space again: every acknowledged message is found by its queue offset
    ballast.unlink()
    server = Server(store, conf)
    try:
        with RemotingClient(timeout=10.0) as client:
            import time

            for qid, sent in acked.items():
                want = dict(sent)
                got: dict[int, bytes] = {}
                offset = 0
                deadline = time.monotonic() + 60
                while offset < len(want) and time.monotonic() < deadline:
                    bodies = pull_bodies(client, server.address, topic, qid, offset)
                    if not bodies:
                        time.sleep(0.05)  # dispatch catching up
                        continue
                    for b in bodies:
                        got[offset] = b
                        offset += 1
                assert all(got.get(q) == b for q, b in want.items()), qid
            r = send_messages(client, server.address, topic, 0, b"space again")
            assert r.code == 0  # type: ignore[attr-defined]
        assert server.stop(signal.SIGTERM) == 0
    finally:
        server.close()


# ---- a restart on a still-full disk: recovery's dispatch gets no blocks --------------------

RESTART_CONF = "mappedFileSizeCommitLog=1048576\n"  # 1 MiB commit-log files, the rest default


def _view(client: object, address: str, phys: int) -> object:
    from rocketstore.remoting import RemotingCommand

    cmd = RemotingCommand.request(33, {"offset": str(phys)})
    return client.invoke(address, cmd)  # type: ignore[attr-defined]


def test_a_restart_on_a_still_full_disk_comes_up_read_only_instead_of_dying_of_sigbus(
    tmp_path: Path,
) -> None:
    """80 MB of tmpfs, 64 MB of it ballast, 1 MiB commit-log files, a client whose messages
    carry a UNIQ_KEY (the index's slot pages need blocks all over their table): serve fills
    the disk, stops on SIGINT with dispatch behind, and comes up again on the still-full disk
    (the slot pages of a loaded index file were taken to have blocks: SIGBUS in recovery)."""
    from rocketstore.remoting import RemotingClient
    from rocketstore.store.log._record import decode_message

    conf = tmp_path / "broker.conf"
    conf.write_text(RESTART_CONF)
    quiet = ("--metrics-listen", "", "--console-listen", "")
    topic = "FullRestart"
    with tmpfs("80m") as fs:
        ballast = fs / "ballast"
        ballast.write_bytes(bytes(64 << 20))
        store = fs / "store"
        acked: list[tuple[int, int, int, bytes]] = []  # queue, queue offset, phys, body
        server = Server(store, conf, *quiet)
        try:
            with RemotingClient(timeout=10.0) as client:
                # the consumer group is created (its config file written) while there is space
                pull_bodies(client, server.address, topic, 0, 0)
                refused = 0
                for i in range(20_000):
                    body = (b"restart-%06d-" % i) * 60
                    uniq = "UNIQ_KEY\x01%032X" % (i * 7919 + 1)
                    r = send_messages(client, server.address, topic, i % 4, body, uniq)
                    if r.code == 0:  # type: ignore[attr-defined]
                        ext = r.ext_fields  # type: ignore[attr-defined]
                        phys = int(ext["msgId"][-16:], 16)
                        acked.append((i % 4, int(ext["queueOffset"]), phys, body))
                    else:
                        assert r.code == 14, (r.code, r.remark)  # type: ignore[attr-defined]
                        refused += 1
                        if refused >= 10:
                            break
                assert refused >= 10 and acked
            assert server.stop(signal.SIGINT) == 0
            first_err = server.stderr()
        finally:
            server.close()
        # dispatch was behind the commit log at the stop, the log itself flushed: a clean
        # stop (the next load dispatches the rest, from the queues' ends)
        assert not (store / "abort").exists(), first_err[-3000:]
        assert "--- Logging error ---" not in first_err
        st = os.statvfs(fs)
        assert st.f_bfree * st.f_frsize < 256 * 1024  # still full

        server = Server(store, conf, *quiet)  # dies of SIGBUS before it listens on main
        try:
            why = server.expect(rb"store \S+ is read-only: ([^\n]*)")
            assert "disk" in why
            with RemotingClient(timeout=10.0) as client:
                r = send_messages(client, server.address, topic, 0, b"refused", "UNIQ_KEY\x01AB")
                assert r.code == 14  # type: ignore[attr-defined]
                assert "disk is full" in r.remark  # type: ignore[attr-defined]
                # reads work: what was dispatched through its queue, anything by its offset
                pulled = pull_bodies(client, server.address, topic, 0, 0)
                mine = [b for q, _o, _p, b in sorted(acked) if q == 0]
                assert pulled and pulled == mine[: len(pulled)]
                for _q, _o, phys, body in (acked[0], acked[-1]):
                    v = _view(client, server.address, phys)
                    assert v.code == 0  # type: ignore[attr-defined]
                    raw = bytes(v.body)  # type: ignore[attr-defined]
                    assert decode_message(raw, 0, len(raw)).body == body
            assert server.proc.poll() is None
            # a fatal signal leaves the Python stacks in the log directory, on the full disk
            assert server.stop(signal.SIGBUS) == -signal.SIGBUS
            err = server.stderr()
        finally:
            server.close()
        assert "--- Logging error ---" not in err, err[-3000:]
        lost = [line for line in err.splitlines() if "cannot write the log file" in line]
        assert len(lost) <= 1, lost  # one line a minute, and this run was shorter
        fatal = (fs / "logs" / "store" / "fatal.log").read_text()
        assert "Fatal Python error: Bus error" in fatal
        assert 'File "' in fatal.split("Fatal Python error: Bus error", 1)[1]

        ballast.unlink()  # space again: every acknowledged message is there, sends work
        server = Server(store, conf, *quiet)
        try:
            assert b"read-only" not in server.out
            with RemotingClient(timeout=10.0) as client:
                import time

                for qid in range(4):
                    want = [b for q, _o, _p, b in sorted(acked) if q == qid]
                    got: list[bytes] = []
                    deadline = time.monotonic() + 60
                    while len(got) < len(want) and time.monotonic() < deadline:
                        more = pull_bodies(client, server.address, topic, qid, len(got))
                        if not more:
                            time.sleep(0.05)  # dispatch catching up
                        got += more
                    assert got == want, qid
                r = send_messages(
                    client, server.address, topic, 0, b"space again", "UNIQ_KEY\x01CD"
                )
                assert r.code == 0  # type: ignore[attr-defined]
            assert server.stop(signal.SIGTERM) == 0
        finally:
            server.close()
