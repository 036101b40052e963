"""Crash safety under fault injection: kill -9 of a producing process, power loss, damaged
tails. Seeded: a failure names its seed and cycle and replays the same way."""

from __future__ import annotations

import os
import random
import shutil
import time
from collections import defaultdict
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore
from rocketstore.store.log._record import OFFSET_BODY_CRC, OFFSET_MAGIC, OFFSET_PHYSICAL_OFFSET
from support.crash import FILE_SIZE, Ack, config, power_loss_copy, produce_and_kill, read_queue

TOPIC = "Crash"


def check_survivors(store: MessageStore, acks: list[Ack], must: list[Ack]) -> None:
    """Every message in ``must`` is at its queue offset, intact; every message the store
    returns is one that was acknowledged or written (no damaged or invented message), and
    each queue is dense."""
    by_queue: dict[int, dict[int, bytes]] = defaultdict(dict)
    for a in acks:
        by_queue[a.queue_id][a.queue_offset] = a.body
    got: dict[int, dict[int, bytes]] = {}
    for qid in range(3):
        msgs = read_queue(store, TOPIC, qid)
        assert [m.queue_offset for m in msgs] == list(range(len(msgs))), qid
        got[qid] = {m.queue_offset: m.body for m in msgs}
        for m in msgs:
            assert m.topic == TOPIC and m.queue_id == qid
            assert m.body.startswith(b"c"), m  # written by a producer, CRC-checked on read
        assert store.get_max_offset_in_queue(TOPIC, qid) == len(msgs)
    for a in must:
        assert got[a.queue_id].get(a.queue_offset) == a.body, (a.queue_id, a.queue_offset)


def _kill_loop(tmp_path: Path, flush: str, cycles: int) -> None:
    """``cycles`` producer processes on one directory, each killed -9 at a random moment;
    every fourth run is followed by a check here (abnormal recovery, then a clean restart),
    and the last one."""
    rng = random.Random(f"kill-{flush}-{cycles}")
    root = tmp_path / "store"
    acked: list[Ack] = []  # every acknowledged message still in the log
    must: list[Ack] = []  # the ones that have to survive
    checked = False
    for cycle in range(cycles):
        head, acks = produce_and_kill(root, flush, cycle, rng)
        if cycle:
            assert head["load"] == ("clean" if checked else "abnormal"), (cycle, head)
        # what a run acknowledged past the recovered end was not durable (never under SYNC)
        lost = [a for a in acked if a.end > head["end"]]
        assert not [a for a in lost if a in must], (cycle, head)
        acked = [a for a in acked if a.end <= head["end"]] + acks
        if flush == "SYNC_FLUSH":
            must += acks  # acknowledged means flushed
        else:
            flushed = max((a.flushed for a in acks), default=0)
            must += [a for a in acks if a.end <= flushed]
        checked = cycle % 4 == 3
        if checked or cycle == cycles - 1:
            with MessageStore(config(root, flush)) as store:
                r = store.load_result
                assert r is not None and r.mode == "abnormal", r
                acked = [a for a in acked if a.end <= r.max_phys_offset]
                check_survivors(store, acked, must)
            with MessageStore(config(root, flush)) as store:  # shut down cleanly just now
                assert store.load_result is not None and store.load_result.mode == "clean"
                check_survivors(store, acked, must)
    # something durable was checked in every cycle on average (ASYNC_FLUSH: only what the
    # flush had reached when the producer reported it, fewer on a loaded machine)
    assert len(must) >= cycles


@pytest.mark.slow
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_kill_minus_nine_loop(tmp_path: Path, flush: str) -> None:
    """Eight producer processes killed -9 (two checks between them and one after)."""
    _kill_loop(tmp_path, flush, 8)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("ROCKETSTORE_LONG_TESTS"),
    reason="100 producer kills take minutes: set ROCKETSTORE_LONG_TESTS=1",
)
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_kill_minus_nine_loop_many_times(tmp_path: Path, flush: str) -> None:
    _kill_loop(tmp_path, flush, 100)


@pytest.mark.parametrize("garbage", [False, True], ids=["zeroed", "garbage"])
def test_power_loss_drops_the_unflushed_tail(
    tmp_path: Path, garbage: bool, synced_ranges: list[tuple[int, int]]
) -> None:
    rng = random.Random(f"power-{garbage}")
    cfg = config(
        tmp_path / "live",
        flush_interval_commit_log=3_600_000,
        flush_commit_log_thorough_interval=3_600_000,
    )
    durable: list[tuple[int, int, bytes]] = []
    with MessageStore(cfg) as live:
        for round_ in range(6):
            for i in range(rng.randint(5, 40)):
                qid = rng.randrange(3)
                body = f"c{round_}-{i}|".encode() * rng.randint(1, 60)
                r = live.put_message(Message(TOPIC, body, qid))
                assert r.ok
                durable.append((qid, r.queue_offset, body))
            if round_ < 5:
                live.commit_log.queue.flush_all(0)
                flushed = live.flushed_phy_offset()
                kept = len(durable)
        assert live.max_phy_offset > flushed  # an unflushed tail exists
        while live.dispatch_behind_bytes():
            pass
        power_loss_copy(tmp_path / "live", tmp_path / "after", flushed, rng, garbage)
    with MessageStore(config(tmp_path / "after")) as store:
        r = store.load_result
        assert r is not None and r.mode == "abnormal" and r.max_phys_offset == flushed
        # the garbage past the end was zeroed, and the zeroes made durable at once
        assert any(start == flushed < end for start, end in synced_ranges) is garbage, synced_ranges
        survivors = durable[:kept]
        for qid in range(3):
            msgs = read_queue(store, TOPIC, qid)
            want = [b for q, _o, b in survivors if q == qid]
            assert [m.body for m in msgs] == want
        # the store goes on where the durable data ended
        nxt = sum(1 for q, _o, _b in survivors if q == 0)
        assert store.put_message(Message(TOPIC, b"c-after", 0)).queue_offset == nxt
        assert store.put_message(Message(TOPIC, b"c-after", 0)).wrote_offset > flushed


# ---- damaged tails ---------------------------------------------------------------------------

CORRUPTIONS = ["body-bit", "crc", "magic", "length", "garbage-length", "phys", "zeroed", "garbage"]


@pytest.fixture(scope="module")
def base_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[tuple[int, int, int, int, bytes]]]:
    """A store of ~3 commit-log files: (queue id, queue offset, phys, size, body) per record."""
    root = tmp_path_factory.mktemp("tail") / "store"
    rng = random.Random("base-store")
    records = []
    with MessageStore(config(root)) as store:
        for i in range(260):
            qid = i % 3
            body = bytes(rng.getrandbits(8) for _ in range(rng.randint(50, 1200)))
            r = store.put_message(Message(TOPIC, body, qid, keys=[f"key-{i}"]))
            records.append((qid, r.queue_offset, r.wrote_offset, r.wrote_bytes, body))
    return root, records


def corrupt(path_of: dict[int, Path], phys: int, size: int, how: str, rng: random.Random) -> None:
    base = phys - phys % FILE_SIZE
    path = path_of[base]
    pos = phys - base
    data = bytearray(path.read_bytes())
    if how == "body-bit":
        at = pos + 88 + rng.randrange(0, max(1, size - 120))
        data[at] ^= 1 << rng.randrange(8)
    elif how == "crc":
        data[pos + OFFSET_BODY_CRC + rng.randrange(4)] ^= 0x40
    elif how == "magic":
        data[pos + OFFSET_MAGIC + rng.randrange(4)] ^= 0x01
    elif how == "length":
        total = int.from_bytes(data[pos : pos + 4], "big") + rng.choice([-3, -1, 1, 7])
        data[pos : pos + 4] = total.to_bytes(4, "big")
    elif how == "garbage-length":
        data[pos : pos + 4] = rng.getrandbits(32).to_bytes(4, "big")
    elif how == "phys":
        data[pos + OFFSET_PHYSICAL_OFFSET + 7] ^= 0x08
    elif how == "zeroed":
        start = pos + rng.randrange(0, size - 8)
        n = rng.randint(8, size)
        data[start : start + n] = bytes(len(data[start : start + n]))
        if start == pos:
            pass  # the log simply ends here
    else:  # random bytes over the record and beyond
        n = rng.randint(4, 3 * size)
        data[pos : pos + n] = bytes(rng.getrandbits(8) for _ in range(len(data[pos : pos + n])))
    path.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize("variant", range(50))
def test_damaged_tail_is_cut_at_the_first_bad_record(
    tmp_path: Path, base_store: tuple[Path, list[tuple[int, int, int, int, bytes]]], variant: int
) -> None:
    src, records = base_store
    rng = random.Random(f"tail-{variant}")
    root = tmp_path / "store"
    shutil.copytree(src, root)
    crashed = variant % 2 == 0
    if crashed:
        (root / "abort").touch()
    how = CORRUPTIONS[variant % len(CORRUPTIONS)]
    target = len(records) - 1 - rng.randrange(12)  # one of the last 12 records
    _q, _o, phys, size, _b = records[target]
    path_of = {int(p.name): p for p in (root / "commitlog").iterdir()}
    corrupt(path_of, phys, size, how, rng)
    with MessageStore(config(root)) as store:
        r = store.load_result
        assert r is not None
        assert r.max_phys_offset == phys, (how, r.summary())
        assert r.mode == ("abnormal" if crashed else "normal"), r.summary()
        kept = records[:target]
        for qid in range(3):
            msgs = read_queue(store, TOPIC, qid)
            assert [m.body for m in msgs] == [b for q, _o, _p, _s, b in kept if q == qid]
        assert store.look_message_by_offset(phys) is None
        # writes go on from the cut, at the next queue offsets
        for qid in range(3):
            n = sum(1 for q, *_ in kept if q == qid)
            w = store.put_message(Message(TOPIC, b"after-" + bytes([qid]), qid, keys=["after"]))
            assert w.ok and w.queue_offset == n
        while store.dispatch_behind_bytes():
            time.sleep(0.001)
        assert {m.body for m in store.query_message(TOPIC, "after").messages} == {
            b"after-\x00",
            b"after-\x01",
            b"after-\x02",
        }
    with MessageStore(config(root)) as store:  # and survive a clean restart
        assert store.load_result is not None and store.load_result.mode == "clean"
        for qid in range(3):
            assert read_queue(store, TOPIC, qid)[-1].body == b"after-" + bytes([qid])
