"""The per-queue checkpoint: its format, when a restart believes it (and opens no queue file),
when it is ignored (stale, corrupt, another store's: the queue files are read instead), and
crash safety (kill -9 while it is written, kill -9 of a process putting to many queues)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store._errors import CorruptFileError
from rocketstore.store.log._mapped_file import MappedFile
from rocketstore.store.queue import _queue_checkpoint as qcp
from rocketstore.store.queue._consume_queue import UNIT, UNIT_SIZE
from rocketstore.store.queue._queue_checkpoint import (
    CRC,
    ENTRY,
    FILE_NAME,
    HEADER,
    QueueCheckpoint,
    QueueState,
)
from support.waits import wait_until

SRC = str(Path(__file__).resolve().parents[1] / "src")
CQ_UNITS = 50  # small consume-queue files: a queue of more than 50 messages has several


def config(root: Path, **kw: Any) -> StoreConfig:
    kw.setdefault("flush_disk_type", "SYNC_FLUSH")
    kw.setdefault("flush_consume_queue_thorough_interval", 3_600_000)  # no periodic one
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=CQ_UNITS * UNIT_SIZE,
        max_hash_slot_num=1000,
        max_index_num=4000,
        **kw,
    )


def queues(n: int) -> list[tuple[str, int]]:
    return [(f"T{i // 4}", i % 4) for i in range(n)]


def fill(
    store: MessageStore, qs: list[tuple[str, int]], rng: random.Random, count: int
) -> dict[tuple[str, int], list[bytes]]:
    """``count`` messages over the queues ``qs`` (each gets at least one); bodies by queue."""
    sent: dict[tuple[str, int], list[bytes]] = defaultdict(list)
    order = list(qs) + [rng.choice(qs) for _ in range(max(0, count - len(qs)))]
    for topic, qid in order:
        body = f"{topic}/{qid}#{len(sent[(topic, qid)])}|".encode() * rng.randint(1, 8)
        r = store.put_message(Message(topic, body, qid))
        assert r.status.name == "PUT_OK", r
        sent[(topic, qid)].append(body)
    assert wait_until(lambda: store.dispatch_behind_bytes() == 0)
    return sent


def read_all(store: MessageStore, topic: str, qid: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.get_min_offset_in_queue(topic, qid)
    while True:
        g = store.get_message("check", topic, qid, offset, 32)
        if not g.messages:
            return out
        out += [m.body for m in g.messages]
        offset = g.next_begin_offset


def check_queues(store: MessageStore, sent: dict[tuple[str, int], list[bytes]]) -> None:
    """Every queue holds exactly what was sent to it, from offset 0, and says so."""
    for (topic, qid), bodies in sent.items():
        assert store.get_max_offset_in_queue(topic, qid) == len(bodies), (topic, qid)
        assert read_all(store, topic, qid) == bodies, (topic, qid)


# ---- the format ----------------------------------------------------------------------------


def sample(rng: random.Random) -> QueueCheckpoint:
    states = tuple(
        QueueState(
            topic,
            qid,
            rng.randrange(100),
            rng.randrange(100, 10**9),
            rng.randrange(-1, 1 << 40),
            rng.randrange(0, 1 << 31),
            rng.randrange(-(1 << 63), 1 << 63),
            rng.randrange(-1, 1 << 50),
        )
        for topic, qid in [("A", 0), ("A", 3), ("B%RETRY|x", 7), ("a" * 127, 2**31 - 1)]
    )
    return QueueCheckpoint(
        clean=bool(rng.randrange(2)),
        file_size=6_000_000,
        log_end=rng.randrange(1 << 40),
        dispatch_from=rng.randrange(1 << 40),
        dispatch_covered=rng.randrange(1 << 40),
        verify_from=rng.randrange(1 << 40),
        physic_timestamp=rng.randrange(1 << 42),
        logics_timestamp=rng.randrange(1 << 42),
        witness=(rng.randrange(1 << 40), rng.randrange(1 << 20), rng.randrange(1 << 42)),
        queues=states,
    )


def test_round_trip_and_layout(tmp_path: Path) -> None:
    rng = random.Random(1)
    for _ in range(5):
        cp = sample(rng)
        data = qcp.encode(cp)
        topics = {q.topic for q in cp.queues}
        body = HEADER.size + sum(2 + len(t) + 4 for t in topics) + len(cp.queues) * ENTRY.size
        assert len(data) == body + CRC.size
        assert data[:8] == qcp.MAGIC
        assert qcp.decode(data) == cp
        qcp.write(tmp_path, cp)
        assert qcp.read(tmp_path) == cp
        assert not (tmp_path / (FILE_NAME + ".tmp")).exists()
    qcp.remove(tmp_path)
    assert qcp.read(tmp_path) is None


def test_every_flipped_bit_and_every_cut_is_refused() -> None:
    data = qcp.encode(sample(random.Random(2)))
    rng = random.Random(3)
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(CorruptFileError):
            qcp.decode(bytes(bad))
    for n in range(len(data)):
        with pytest.raises(CorruptFileError):
            qcp.decode(data[:n])


# ---- a clean restart -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[Any, list[bytes]]]:
    """40 queues of 10 topics, some with several consume-queue files, shut down cleanly."""
    root = tmp_path_factory.mktemp("clean") / "store"
    with MessageStore(config(root)) as store:
        sent = fill(store, queues(40), random.Random(4), 400)
        for _ in range(2 * CQ_UNITS):  # one queue over three files
            body = b"long|" * 3
            assert store.put_message(Message("T0", body, 0)).status.name == "PUT_OK"
            sent[("T0", 0)].append(body)
    return root, dict(sent)


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_clean_restart_opens_no_queue_file(
    tmp_path: Path,
    clean_store: tuple[Path, dict[Any, list[bytes]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = copy_of(clean_store[0], tmp_path / "s")
    sent = clean_store[1]
    assert (root / FILE_NAME).exists()
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: Any, *args: Any, **kw: Any) -> int:
        if "consumequeue" in str(path):
            opened.append(str(path))
        return real_open(path, *args, **kw)

    monkeypatch.setattr(os, "open", counting_open)
    with MessageStore(config(root)) as store:
        r = store.load_result
        assert r is not None and r.mode == "clean" and r.queue_checkpoint == "used", r
        assert r.consume_queues == 40 and r.queues_opened == 0, r.summary()
        assert opened == []
        # offsets come from the checkpoint, still without a file opened
        for (topic, qid), bodies in sent.items():
            assert store.get_max_offset_in_queue(topic, qid) == len(bodies)
            assert store.get_min_offset_in_queue(topic, qid) == 0
        assert opened == []
        # the first read of a queue opens its files (and only its)
        assert read_all(store, "T3", 1) == sent[("T3", 1)]
        assert opened and all(os.sep.join(("T3", "1")) in p for p in opened)
        assert read_all(store, "T0", 0) == sent[("T0", 0)]  # three files
        check_queues(store, sent)
        # puts after the restart go on at the right offsets, into the right queues
        r2 = store.put_message(Message("T5", b"after", 2))
        assert r2.queue_offset == len(sent[("T5", 2)])
        assert wait_until(lambda: store.get_max_offset_in_queue("T5", 2) == r2.queue_offset + 1)
        assert read_all(store, "T5", 2)[-1] == b"after"


def test_queues_read_after_a_clean_restart_are_checkpointed_without_reading_them_again(
    tmp_path: Path,
    clean_store: tuple[Path, dict[Any, list[bytes]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A queue opened from the checkpoint (its last unit checked against it) keeps that state
    for the next checkpoint: taking it reads no unit, so no file of the store's queues is
    mapped again (at 100,000 queues read through after a restart, most of them unmapped by
    the mapping limit, every minute's checkpoint mapped each one's last file again)."""
    root = copy_of(clean_store[0], tmp_path / "s")
    sent = clean_store[1]
    recorded = qcp.read(root)
    assert recorded is not None
    with MessageStore(config(root)) as store:
        check_queues(store, sent)  # every queue opened and read through
        held: list[str] = []
        real_hold = MappedFile.hold

        def counting_hold(self: MappedFile) -> bool:
            held.append(str(self.path))
            return real_hold(self)

        monkeypatch.setattr(MappedFile, "hold", counting_hold)
        states = store.consume_queues.states()
        assert held == []
        assert sorted(states) == sorted(recorded.queues)
        # a queue written since is read again: its new last unit
        r = store.put_message(Message("T2", b"new", 1))
        assert wait_until(lambda: store.dispatch_behind_bytes() == 0)
        (after,) = [s for s in store.consume_queues.states() if (s.topic, s.queue_id) == ("T2", 1)]
        assert after.max_offset == r.queue_offset + 1 and after.last_phys == r.wrote_offset


def test_a_burst_of_new_queues_brings_the_checkpoint_forward(tmp_path: Path) -> None:
    """1,000 queues made since the last checkpoint bring the next one forward (the thorough
    interval is an hour here): a crash soon after the burst recovers from it, opening only
    the queues made after it, not every one of the burst."""
    root = tmp_path / "s"
    n = 1050
    burst = [(f"B{i // 8}", i % 8) for i in range(n)]
    with MessageStore(config(root, flush_disk_type="ASYNC_FLUSH")) as store:
        for topic, qid in burst:
            assert store.put_message(Message(topic, b"burst", qid)).status.name == "PUT_OK"

        def checkpointed() -> int:
            try:
                cp = qcp.read(root)
            except CorruptFileError:
                return 0
            return len(cp.queues) if cp is not None else 0

        assert wait_until(lambda: checkpointed() == n)
        # what a kill -9 now leaves: the running store's files as they are (abort file too)
        crashed = copy_of(root, tmp_path / "crashed")
    (crashed / "lock").unlink(missing_ok=True)
    with MessageStore(config(crashed, flush_disk_type="ASYNC_FLUSH")) as again:
        r = again.load_result
        assert r is not None and r.mode == "abnormal" and r.queue_checkpoint == "used", r
        assert r.queues_opened < n // 10, r.summary()
        assert all(again.get_max_offset_in_queue(t, q) == 1 for t, q in burst)


def test_a_queue_that_disagrees_is_recovered_from_its_files(
    tmp_path: Path, clean_store: tuple[Path, dict[Any, list[bytes]]]
) -> None:
    """The last unit of a queue's file changed after the checkpoint: the queue is recovered
    from its files when first used (cut where it stops matching, dispatched again)."""
    root = copy_of(clean_store[0], tmp_path / "s")
    sent = clean_store[1]
    qdir = root / "consumequeue" / "T2" / "3"
    last = sorted(qdir.iterdir())[-1]
    data = bytearray(last.read_bytes())
    n = len(sent[("T2", 3)]) % CQ_UNITS or CQ_UNITS
    phys, size, tags = UNIT.unpack_from(data, (n - 1) * UNIT_SIZE)
    UNIT.pack_into(data, (n - 1) * UNIT_SIZE, phys + 1, size, tags)
    last.write_bytes(bytes(data))
    with MessageStore(config(root)) as store:
        r = store.load_result
        assert r is not None and r.queue_checkpoint == "used" and r.queues_opened == 0
        check_queues(store, sent)


def corrupt_checkpoint(path: Path, how: str, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip":
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif how == "truncate":
        del data[rng.randrange(len(data)) :]
    elif how == "garbage":
        data = bytearray(rng.getrandbits(8) for _ in range(rng.randrange(1, 300)))
    else:
        data = bytearray()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how,seed",
    [("flip", s) for s in range(4)]
    + [("truncate", s) for s in range(3)]
    + [
        ("garbage", 0),
        ("empty", 0),
    ],
)
@pytest.mark.parametrize("crashed", [False, True])
def test_a_corrupt_checkpoint_is_ignored(
    tmp_path: Path,
    clean_store: tuple[Path, dict[Any, list[bytes]]],
    how: str,
    seed: int,
    crashed: bool,
) -> None:
    root = copy_of(clean_store[0], tmp_path / "s")
    corrupt_checkpoint(root / FILE_NAME, how, random.Random(f"{how}-{seed}"))
    if crashed:
        (root / "abort").touch()
    with MessageStore(config(root)) as store:
        r = store.load_result
        assert r is not None and r.queue_checkpoint.startswith("ignored"), r.summary()
        assert r.queues_opened == r.consume_queues == 40
        assert sum("per-queue checkpoint ignored" in n for n in r.notes) == 1
        check_queues(store, clean_store[1])


def test_a_stale_checkpoint_is_ignored(tmp_path: Path) -> None:
    """The checkpoint of an earlier clean shutdown, put back after more messages (and more
    queues) were written and the store shut down cleanly again."""
    root = tmp_path / "s"
    rng = random.Random(5)
    with MessageStore(config(root)) as store:
        sent = fill(store, queues(12), rng, 60)
    old = (root / FILE_NAME).read_bytes()
    with MessageStore(config(root)) as store:
        for key, bodies in fill(store, queues(20), rng, 80).items():
            sent[key] += bodies
    (root / FILE_NAME).write_bytes(old)
    with MessageStore(config(root)) as store:
        r = store.load_result
        assert r is not None and r.mode == "clean" and "stale" in r.queue_checkpoint, r.summary()
        assert r.queues_opened == 20
        check_queues(store, sent)


@pytest.mark.parametrize("crashed", [False, True])
def test_another_stores_checkpoint_is_ignored(tmp_path: Path, crashed: bool) -> None:
    """Two stores of the same shape; one gets the other's checkpoint."""
    sent = {}
    for name, seed in (("a", 6), ("b", 7)):
        with MessageStore(config(tmp_path / name)) as store:
            sent[name] = fill(store, queues(16), random.Random(seed), 50)
    shutil.copy(tmp_path / "b" / FILE_NAME, tmp_path / "a" / FILE_NAME)
    if crashed:
        (tmp_path / "a" / "abort").touch()
    with MessageStore(config(tmp_path / "a")) as store:
        r = store.load_result
        assert r is not None and r.queue_checkpoint.startswith("ignored"), r.summary()
        assert r.mode == ("abnormal" if crashed else "clean")
        check_queues(store, sent["a"])


# ---- after a crash -------------------------------------------------------------------------


def crash_copy(store: MessageStore, dst: Path) -> Path:
    """The files of a running store as a kill -9 leaves them (page cache included)."""
    shutil.copytree(store.root, dst, ignore=shutil.ignore_patterns("lock"))
    assert (dst / "abort").exists()
    return dst


def test_a_periodic_checkpoint_behind_the_queues(tmp_path: Path) -> None:
    """A checkpoint taken, then more messages to some of its queues and to new queues, then
    a crash: the queues the log's tail touches are opened and brought forward from their
    files, the others come from the checkpoint; every queue is right."""
    rng = random.Random(8)
    with MessageStore(config(tmp_path / "s")) as store:
        sent = fill(store, queues(40), rng, 120)
        store.queue_checkpoint.save(store.queue_checkpoint.take())
        touched = rng.sample(queues(40), 10) + [(f"N{i}", 0) for i in range(5)]
        for key, bodies in fill(store, touched, rng, 60).items():
            sent[key] += bodies
        crashed = crash_copy(store, tmp_path / "crashed")
    with MessageStore(config(crashed)) as store:
        r = store.load_result
        assert r is not None and r.mode == "abnormal" and r.queue_checkpoint == "used", r
        assert r.consume_queues == 45 and r.queues_opened == len(touched), r.summary()
        check_queues(store, sent)


def test_the_checkpoint_is_ignored_when_the_log_lost_what_it_covers(tmp_path: Path) -> None:
    """A log cut below what the checkpoint covered (power loss of an ASYNC_FLUSH store): the
    queues are all opened and cut back with the log."""
    rng = random.Random(9)
    cfg = config(tmp_path / "s", flush_disk_type="ASYNC_FLUSH")
    with MessageStore(cfg) as store:
        sent = fill(store, queues(12), rng, 40)
        cut = store.max_phy_offset
        later = fill(store, queues(12), rng, 30)
        store.queue_checkpoint.save(store.queue_checkpoint.take())
        crashed = crash_copy(store, tmp_path / "crashed")
    for f in sorted((crashed / "commitlog").iterdir()):  # everything after ``cut`` is gone
        start = int(f.name)
        if start > cut:
            f.unlink()
        elif start + 256 * 1024 > cut:
            with open(f, "r+b") as out:
                out.seek(cut - start)
                out.write(bytes(256 * 1024 - (cut - start)))
    assert later
    with MessageStore(config(crashed, flush_disk_type="ASYNC_FLUSH")) as store:
        r = store.load_result
        assert r is not None and r.max_phys_offset == cut, r.summary()
        assert r.queue_checkpoint.startswith("ignored"), r.summary()
        check_queues(store, sent)


def test_a_clean_stop_with_dispatch_behind_is_clean(tmp_path: Path) -> None:
    """Dispatch stopped behind the commit log (a failing disk, too many open files): the
    stop still records a clean end and the next load dispatches the rest."""
    rng = random.Random(10)
    with MessageStore(config(tmp_path / "s")) as store:
        sent = fill(store, queues(8), rng, 20)
        store.reput.stop()
        for key, bodies in fill_undispatched(store, queues(8), rng, 20).items():
            sent[key] += bodies
        assert store.dispatch_behind_bytes() > 0
    assert not (tmp_path / "s" / "abort").exists()
    with MessageStore(config(tmp_path / "s")) as store:
        r = store.load_result
        assert r is not None and r.mode == "clean" and r.dispatched >= 20, r.summary()
        check_queues(store, sent)


def fill_undispatched(
    store: MessageStore, qs: list[tuple[str, int]], rng: random.Random, count: int
) -> dict[tuple[str, int], list[bytes]]:
    sent: dict[tuple[str, int], list[bytes]] = defaultdict(list)
    for _ in range(count):
        topic, qid = rng.choice(qs)
        body = f"late-{topic}/{qid}".encode()
        assert store.put_message(Message(topic, body, qid)).status.name == "PUT_OK"
        sent[(topic, qid)].append(body)
    return sent


# ---- kill -9 -------------------------------------------------------------------------------

# The child: a SYNC_FLUSH store writing the per-queue checkpoint as often as it can (every
# consume-queue flush round), putting to many queues and printing every acknowledged message.
# With a kill point it kills itself inside the n-th checkpoint write after its 20th
# acknowledged message: half of the temporary file written, all of it written, renamed but the
# directory not synced, or just after.
CHILD = r"""
import json, os, random, signal, sys
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.queue import _queue_checkpoint as qcp
root, seed, nqueues, phase, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
writes = [0]
acked = [0]
real_replace, real_fsync_dir = qcp.replace_synced, qcp.fsync_dir
def die():
    os.kill(os.getpid(), signal.SIGKILL)
def replace_synced(path, data):
    if acked[0] < 20:
        return real_replace(path, data)
    writes[0] += 1
    if writes[0] == at and phase == "tmp-half":
        with open(str(path) + ".tmp", "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
        die()
    if writes[0] == at and phase == "tmp-whole":
        with open(str(path) + ".tmp", "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        die()
    real_replace(path, data)
    if writes[0] == at and phase == "renamed":
        die()
def fsync_dir(d):
    real_fsync_dir(d)
    if writes[0] == at and phase == "after":
        die()
qcp.replace_synced, qcp.fsync_dir = replace_synced, fsync_dir
cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024,
                  mapped_file_size_consume_queue=50 * 20, flush_disk_type="SYNC_FLUSH",
                  flush_interval_consume_queue=1, flush_consume_queue_thorough_interval=1,
                  max_hash_slot_num=1000, max_index_num=4000)
store = MessageStore(cfg)
store.load()
store.start()
print(json.dumps({"load": store.load_result.mode}), flush=True)
rng = random.Random(seed)
i = 0
while True:
    q = rng.randrange(nqueues)
    topic, qid = f"K{q // 8}", q % 8
    body = f"{seed}-{i}-{topic}/{qid}|" * rng.randint(1, 6)
    r = store.put_message(Message(topic, body.encode(), qid))
    if r.status.name == "PUT_OK":
        print(json.dumps([topic, qid, r.queue_offset, body]), flush=True)
        acked[0] += 1
    i += 1
"""


def run_child(
    root: Path, seed: int, nqueues: int, phase: str, at: int, kill_after: int | None
) -> list[tuple[str, int, int, bytes]]:
    """Run the child until it kills itself (or, with ``kill_after``, until that many acks and
    a seeded moment more, then kill -9 it); its acknowledged messages."""
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), str(seed), str(nqueues), phase, str(at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # how it loaded (nothing when it killed itself before)
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if kill_after is not None and len(lines) >= kill_after:
                time.sleep(random.Random(seed).random() * 0.02)
                proc.send_signal(signal.SIGKILL)
                break
        rest, _err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, _err[-2000:]
        lines += rest.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    acks = []
    for line in lines:
        try:
            topic, qid, qoff, body = json.loads(line)
        except ValueError:
            continue  # the last line may be torn
        acks.append((topic, qid, qoff, body.encode()))
    return acks


def check_after_kill(root: Path, acks: list[tuple[str, int, int, bytes]], tmp: Path) -> str:
    """Every acknowledged message is readable at its offset; each queue's offsets are what a
    recovery without the checkpoint finds. Returns how the checkpoint was taken."""
    oracle = tmp / "oracle"
    shutil.copytree(root, oracle, ignore=shutil.ignore_patterns("lock"))
    qcp.remove(oracle)
    with MessageStore(config(oracle)) as store:
        r0 = store.load_result
        assert r0 is not None and r0.queue_checkpoint == "none"
        expect = store.consume_queues.offset_table()
    shutil.rmtree(oracle)
    with MessageStore(config(root)) as store:
        r = store.load_result
        assert r is not None and r.mode == "abnormal", r.summary()
        by_queue: dict[tuple[str, int], dict[int, bytes]] = defaultdict(dict)
        for topic, qid, qoff, body in acks:
            by_queue[(topic, qid)][qoff] = body
        for (topic, qid), want in by_queue.items():
            got = dict(enumerate(read_all(store, topic, qid)))
            for qoff, body in want.items():
                assert got.get(qoff) == body, (topic, qid, qoff, r.summary())
        assert {k: v for k, v in store.consume_queues.offset_table().items()} == expect
        for (topic, qid), n in expect.items():
            assert store.get_max_offset_in_queue(topic, qid) == n
            assert len(read_all(store, topic, qid)) == n
        return r.queue_checkpoint


@pytest.mark.parametrize(
    "phase,at",
    [("tmp-half", 1), ("tmp-half", 7), ("tmp-whole", 4), ("renamed", 3), ("after", 5)],
)
def test_kill_during_a_checkpoint_write_loses_nothing(tmp_path: Path, phase: str, at: int) -> None:
    root = tmp_path / "s"
    acks = run_child(root, at, 64, phase, at, None)
    used = check_after_kill(root, acks, tmp_path)
    assert len(acks) >= 20
    # a checkpoint written before the one killed (or the killed one, once renamed) is used
    if at > 1 or not phase.startswith("tmp"):
        assert used == "used", used


@pytest.mark.parametrize("seed", range(3))
def test_kill_of_a_process_putting_to_many_queues(tmp_path: Path, seed: int) -> None:
    """Three runs on one directory, each killed -9 at a seeded moment; every run's
    acknowledged messages stay readable through their queues."""
    root = tmp_path / "s"
    rng = random.Random(f"many-{seed}")
    acks: list[tuple[str, int, int, bytes]] = []
    for run in range(3):
        acks += run_child(root, seed * 10 + run, 400, "none", 0, rng.randint(50, 400))
        check_after_kill(root, acks, tmp_path)
