"""Batch puts under fault injection: kill -9 of a process putting batches (SYNC_FLUSH), a batch
torn at a seeded byte, a dispatch that fails half-way through a batch, and consume-queue units
of batches across file boundaries compared with single puts. Seeded and bounded."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore
from rocketstore.store.queue._consume_queue import UNIT_SIZE, ConsumeQueue
from support.crash import FILE_SIZE, config, power_loss_copy, read_queue
from support.processes import child_env

TOPIC = "Batch"
CQ_FILE = UNIT_SIZE * 16  # tiny consume-queue files: batches cross their boundaries
QUEUES = 2

# The child puts batches (put_messages, and put_plain_batch) and single messages and prints
# one JSON line per acknowledged batch: [queue id, first queue offset, [bodies], flushed, end].
BATCH_PRODUCER = r"""
import json, random, sys
from rocketstore import Message, MessageStore, StoreConfig
root, cycle, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=65536,
                  mapped_file_size_consume_queue=@CQ@, flush_disk_type="SYNC_FLUSH",
                  flush_interval_consume_queue=20, max_hash_slot_num=1000, max_index_num=4000)
store = MessageStore(cfg)
store.load()
store.start()
r = store.load_result
print(json.dumps({"load": r.mode, "end": r.max_phys_offset}), flush=True)
rng = random.Random(seed)
i = 0
while True:
    qid = rng.randrange(@QUEUES@)
    n = rng.choice([1, 2, 3, 7, 16, 17, 40])
    bodies = [(f"b{cycle}-{i}-{k}/{n}|" * rng.randint(1, 25)).encode() for k in range(n)]
    kind = rng.random()
    if kind < 0.25:
        res = store.put_plain_batch("@TOPIC@", qid, bodies, [b""] * n, [None] * n, [None] * n)
    elif kind < 0.9:
        res = store.put_messages([Message("@TOPIC@", b, qid, keys=[f"k{cycle}-{i}"])
                                  for b in bodies])
    else:
        bodies = bodies[:1]
        res = store.put_message(Message("@TOPIC@", bodies[0], qid))
    if res.status.name == "PUT_OK":
        print(json.dumps([qid, res.queue_offset, [b.decode() for b in bodies],
                          store.flushed_phy_offset(), res.wrote_offset + res.wrote_bytes]),
              flush=True)
    i += 1
"""
BATCH_PRODUCER = (
    BATCH_PRODUCER.replace("@CQ@", str(CQ_FILE))
    .replace("@QUEUES@", str(QUEUES))
    .replace("@TOPIC@", TOPIC)
)


def cfg(root: Path, flush: str = "SYNC_FLUSH") -> Any:
    return config(
        root, flush, mapped_file_size_consume_queue=CQ_FILE, flush_interval_consume_queue=20
    )


def run_and_kill(root: Path, cycle: int, rng: random.Random) -> tuple[dict[str, Any], list[Any]]:
    env = child_env()
    proc = subprocess.Popen(
        [sys.executable, "-c", BATCH_PRODUCER, str(root), str(cycle), str(rng.randrange(1 << 30))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    head = proc.stdout.readline()
    if not head:
        proc.wait(10)
        raise AssertionError(proc.stderr.read() if proc.stderr else "producer died")
    want = rng.randint(3, 120)
    lines: list[str] = []
    deadline = time.monotonic() + 20
    while len(lines) < want and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    time.sleep(rng.random() * 0.02)  # somewhere inside the next batch
    proc.send_signal(signal.SIGKILL)
    rest, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    lines += [ln for ln in rest.splitlines() if ln.endswith("]")]
    acks = []
    for line in lines:
        try:
            acks.append(json.loads(line))
        except ValueError:
            continue
    return json.loads(head), acks


def check_store(store: MessageStore, must: list[Any]) -> dict[int, list[bytes]]:
    """Queues dense, every message CRC-clean and written by a producer, every acknowledged
    batch whole at its offsets; a batch never shows a record after a missing one."""
    got: dict[int, list[bytes]] = {}
    cl = store.commit_log
    for qid in range(QUEUES):
        msgs = read_queue(store, TOPIC, qid)
        assert [m.queue_offset for m in msgs] == list(range(len(msgs))), qid
        assert store.get_max_offset_in_queue(TOPIC, qid) == len(msgs)
        for m in msgs:
            assert m.topic == TOPIC and m.queue_id == qid
            assert m.body.startswith(b"b"), m
            cl.check_at(m.commitlog_offset, check_crc=True)  # raises on a bad record
        got[qid] = [m.body for m in msgs]
    for qid, qoff, bodies, _flushed, _end in must:
        assert got[qid][qoff : qoff + len(bodies)] == [b.encode() for b in bodies], (qid, qoff)
    # records of one batch are consecutive: parts k/n seen for a batch form a prefix 0..j
    for qid, bodies in got.items():
        seen: dict[str, list[int]] = defaultdict(list)
        for b in bodies:
            tag, _, _ = b.partition(b"|")
            batch, k = tag.decode().rsplit("-", 1)
            seen[batch].append(int(k.split("/")[0]))
        for batch, ks in seen.items():
            assert ks == list(range(len(ks))), (qid, batch, ks)
    return got


def _kill_loop(tmp_path: Path, seed: int, cycles: int) -> None:
    """SYNC_FLUSH: every acknowledged batch survives whole, nothing torn is visible, queue
    offsets stay dense, across ``cycles`` kills and restarts on one directory."""
    rng = random.Random(f"batch-kill-{seed}")
    root = tmp_path / "store"
    must: list[Any] = []
    for cycle in range(cycles):
        head, acks = run_and_kill(root, cycle, rng)
        if cycle:
            assert head["load"] == "abnormal", head
            # acknowledged under SYNC_FLUSH: within the recovered end
            assert all(a[4] <= head["end"] for a in must), head
        for a in acks:
            assert a[3] >= a[4], a  # acknowledged only once flushed
        must += acks
    with MessageStore(cfg(root)) as store:
        assert store.load_result is not None and store.load_result.mode == "abnormal"
        check_store(store, must)
    with MessageStore(cfg(root)) as store:
        assert store.load_result is not None and store.load_result.mode == "clean"
        check_store(store, must)
    assert len(must) >= cycles  # something acknowledged checked in every cycle on average


@pytest.mark.parametrize("seed", [1, 2])
def test_kill_minus_nine_during_batch_puts(tmp_path: Path, seed: int) -> None:
    _kill_loop(tmp_path, seed, 5)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("ROCKETSTORE_LONG_TESTS"),
    reason="50 producer kills take minutes: set ROCKETSTORE_LONG_TESTS=1",
)
def test_kill_minus_nine_during_batch_puts_many_times(tmp_path: Path) -> None:
    _kill_loop(tmp_path, 7, 50)


@pytest.mark.parametrize("seed", [3, 4, 5, 6])
def test_batch_torn_at_a_random_byte(tmp_path: Path, seed: int) -> None:
    """A crash while a batch is being packed leaves a prefix of its bytes: recovery keeps its
    whole records before the cut and nothing from the cut on; the queue goes on densely."""
    rng = random.Random(seed)
    live = tmp_path / "live"
    with MessageStore(cfg(live)) as store:
        for i in range(rng.randint(3, 12)):
            n = rng.randint(1, 20)
            r = store.put_messages(
                [Message(TOPIC, f"b0-{i}-{k}/{n}|".encode() * 5, i % QUEUES) for k in range(n)]
            )
            assert r.ok
        n = rng.randint(2, 30)
        qid = rng.randrange(QUEUES)
        last = store.put_messages(
            [
                Message(TOPIC, f"b0-last-{k}/{n}|".encode() * rng.randint(1, 9), qid)
                for k in range(n)
            ]
        )
        assert last.ok
        before = last.queue_offset
        while store.dispatch_behind_bytes():
            pass
        cut = last.wrote_offset + rng.randrange(last.wrote_bytes)
        ends = [*last.offsets[1:], last.wrote_offset + last.wrote_bytes]
        whole = sum(1 for e in ends if e <= cut)  # records wholly before the cut
        power_loss_copy(live, tmp_path / "after", cut, rng, garbage=False)
    with MessageStore(cfg(tmp_path / "after")) as store:
        r = store.load_result
        assert r is not None and r.mode == "abnormal"
        assert r.max_phys_offset == max([last.wrote_offset] + [e for e in ends if e <= cut])
        got = check_store(store, [])
        assert len(got[qid]) == before + whole
        nxt = store.put_messages(
            [Message(TOPIC, b"b1-x-0/2|", qid), Message(TOPIC, b"b1-x-1/2|", qid)]
        )
        assert nxt.ok and nxt.queue_offset == before + whole
        check_store(store, [])


def test_dispatch_failing_half_way_through_a_batch_is_retried_idempotently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consume queue cannot roll to a new file once, in the middle of a batch: dispatch
    retries from the commit log and the queue ends dense, every unit once."""
    with MessageStore(cfg(tmp_path / "s", "ASYNC_FLUSH")) as store:
        first = store.put_messages([Message(TOPIC, f"b0-a-{k}/10|".encode(), 0) for k in range(10)])
        assert first.ok
        while store.dispatch_behind_bytes():
            pass
        cq = store.consume_queues.find_or_create(TOPIC, 0)
        real = cq.queue.get_last_mapped_file
        failed = []

        def flaky(*a: Any, **kw: Any) -> Any:
            if not failed:
                failed.append(1)
                return None
            return real(*a, **kw)

        monkeypatch.setattr(cq.queue, "get_last_mapped_file", flaky)
        second = store.put_messages(
            [Message(TOPIC, f"b0-b-{k}/20|".encode(), 0) for k in range(20)]
        )
        assert second.ok
        deadline = time.monotonic() + 60
        while store.get_max_offset_in_queue(TOPIC, 0) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert failed
        check_store(store, [])
        assert store.get_max_offset_in_queue(TOPIC, 0) == 30
        units = [cq.get_unit(i) for i in range(30)]
        assert [u[0] for u in units if u] == [*first.offsets, *second.offsets]


@pytest.mark.parametrize("seed", range(6))
def test_put_units_match_put_unit_across_files_and_redispatch(tmp_path: Path, seed: int) -> None:
    """Batches of random sizes (some re-sent whole or in part, as a re-dispatch would) give
    the same queue files as the same units put one by one."""
    rng = random.Random(seed)
    size = UNIT_SIZE * rng.choice([3, 5, 16])
    a = ConsumeQueue("T", 0, tmp_path / "a", size)
    b = ConsumeQueue("T", 0, tmp_path / "b", size)
    a.load()
    b.load()
    phys = 0
    offset = 0
    for _ in range(40):
        n = rng.randint(1, 12)
        sizes = [rng.randint(100, 300) for _ in range(n)]
        offs = []
        for s in sizes:
            offs.append(phys)
            phys += s
        codes = [rng.randrange(1 << 31) for _ in range(n)]
        assert a.put_units(offs, sizes, codes, offset)
        if rng.random() < 0.3:  # re-dispatch: the batch again, or its tail
            k = rng.randrange(n)
            assert a.put_units(offs[k:], sizes[k:], codes[k:], offset + k)
        for i in range(n):
            assert b.put_unit(offs[i], sizes[i], codes[i], offset + i)
        offset += n
    assert a.max_offset == b.max_offset == offset
    assert a.max_physic_offset == b.max_physic_offset
    fa = sorted(p.name for p in (tmp_path / "a" / "T" / "0").iterdir())
    fb = sorted(p.name for p in (tmp_path / "b" / "T" / "0").iterdir())
    assert fa == fb
    for i in range(offset):
        assert a.get_unit(i) == b.get_unit(i), i
    a.queue.shutdown(0)
    b.queue.shutdown(0)


def test_power_loss_after_sync_batches_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    """Under SYNC_FLUSH an acknowledged batch is below the flushed position: dropping every
    unflushed byte (garbage after it) loses none of them."""
    rng = random.Random("sync-batch-power")
    live = tmp_path / "live"
    acks: list[Any] = []
    with MessageStore(cfg(live)) as store:
        for i in range(80):
            qid = rng.randrange(QUEUES)
            n = rng.randint(1, 20)
            bodies = [f"b0-{i}-{k}/{n}|".encode() * rng.randint(1, 30) for k in range(n)]
            r = store.put_messages([Message(TOPIC, x, qid) for x in bodies])
            assert r.ok
            acks.append([qid, r.queue_offset, [x.decode() for x in bodies], 0, 0])
        flushed = store.flushed_phy_offset()
        assert flushed >= store.max_phy_offset
        assert flushed > FILE_SIZE  # several commit-log files
        while store.dispatch_behind_bytes():
            pass
        power_loss_copy(live, tmp_path / "after", flushed, rng, garbage=True)
    with MessageStore(cfg(tmp_path / "after")) as store:
        check_store(store, acks)
