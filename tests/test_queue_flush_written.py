"""The consume-queue flush visits only the queues written since the last flush: a queue written
then idle is flushed once, one left with too few dirty pages stays marked, and a kill -9 after a
queue was marked (before its flush) loses nothing acknowledged under SYNC_FLUSH."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.log._mapped_file_queue import MappedFileQueue
from rocketstore.store.queue._consume_queue import UNIT_SIZE, ConsumeQueueTable
from support.processes import child_env
from support.waits import wait_dispatched

FILE = 1000 * UNIT_SIZE


@pytest.fixture
def table(tmp_path: Path) -> Iterator[ConsumeQueueTable]:
    t = ConsumeQueueTable(tmp_path / "consumequeue", FILE)
    try:
        yield t
    finally:
        t.shutdown()


@pytest.fixture
def flushed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The (topic, queue id) of every queue flushed, in order (seen where a queue's files are
    flushed, a plain Python class also under the compiled core)."""
    calls: list[tuple[str, int]] = []
    real = MappedFileQueue.flush_all

    def spy(self: MappedFileQueue, least_pages: int = 0) -> int:
        path = Path(self.store_path)
        calls.append((path.parent.name, int(path.name)))
        return real(self, least_pages)

    monkeypatch.setattr(MappedFileQueue, "flush_all", spy)
    return calls


def write(table: ConsumeQueueTable, topic: str, qid: int, count: int = 1) -> None:
    cq = table.find_or_create(topic, qid)
    start = cq.max_offset
    for i in range(start, start + count):
        assert cq.put_unit(1000 + i * 100, 100, 0, i)


def on_disk(table: ConsumeQueueTable, topic: str, qid: int) -> int:
    cq = table.find(topic, qid)
    assert cq is not None
    return cq.queue.flushed_where


def test_only_the_queues_written_are_flushed_and_each_once(
    table: ConsumeQueueTable, flushed: list[tuple[str, int]]
) -> None:
    for q in range(50):
        write(table, f"T{q % 5}", q // 5)
    flushed.clear()  # nothing flushed by the writes themselves
    assert table.flush(0) == 50
    assert sorted(flushed) == sorted((f"T{q % 5}", q // 5) for q in range(50))
    assert all(on_disk(table, f"T{q % 5}", q // 5) == UNIT_SIZE for q in range(50))
    flushed.clear()
    assert table.flush(0) == 0 and flushed == []  # idle: nothing visited
    write(table, "T3", 7, count=4)
    write(table, "T3", 7)  # written twice, marked once
    write(table, "T0", 2)
    assert table.flush(0) == 2
    assert sorted(flushed) == [("T0", 2), ("T3", 7)]
    assert on_disk(table, "T3", 7) == 6 * UNIT_SIZE
    flushed.clear()
    assert table.flush(0) == 0 and flushed == []


def test_a_queue_with_too_few_dirty_pages_stays_marked_until_a_thorough_round(
    table: ConsumeQueueTable, flushed: list[tuple[str, int]]
) -> None:
    write(table, "T", 0, count=3)  # 60 bytes: less than the 2 pages a round asks for
    for _ in range(3):
        flushed.clear()
        assert table.flush(2) == 1 and flushed == [("T", 0)]
        assert on_disk(table, "T", 0) == 0
    assert table.flush(0) == 1
    assert on_disk(table, "T", 0) == 3 * UNIT_SIZE
    flushed.clear()
    assert table.flush(2) == 0 and table.flush(0) == 0 and flushed == []
    write(table, "T", 0, count=500)  # 10,000 bytes: enough pages for a round
    assert table.flush(2) == 1
    assert on_disk(table, "T", 0) >= 2 * 4096


def test_a_write_after_the_mark_was_taken_marks_the_queue_again(
    table: ConsumeQueueTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(table, "T", 0)
    real = MappedFileQueue.flush_all

    def write_during_flush(self: MappedFileQueue, least_pages: int = 0) -> int:
        monkeypatch.setattr(MappedFileQueue, "flush_all", real)
        write(table, "T", 0)  # the dispatcher, between the flag going down and the flush
        return real(self, least_pages)

    monkeypatch.setattr(MappedFileQueue, "flush_all", write_during_flush)
    assert table.flush(0) == 1
    assert on_disk(table, "T", 0) == 2 * UNIT_SIZE
    assert [(cq.topic, cq.queue_id) for cq in table.written] == [("T", 0)]  # marked again
    write(table, "T", 0)
    assert table.flush(0) == 1
    assert on_disk(table, "T", 0) == 3 * UNIT_SIZE


def test_the_store_flushes_what_dispatch_wrote_through_each_path(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    # the flush service's interval is an hour: the rounds below are the test's own
    cfg = make_config(flush_interval_consume_queue=3_600_000)
    for inline in (True, False):
        store = open_store(
            dataclasses.replace(
                cfg,
                dispatch_in_put_path=inline,
                store_path_root_dir=cfg.store_path_root_dir + f"-{inline}",
            )
        )
        table = store.consume_queues
        for q in range(8):
            assert store.put_message(Message("W", b"one", q)).ok
        assert store.put_messages([Message("W", b"b%d" % i, 3) for i in range(4)]).ok
        wait_dispatched(store)
        assert table.flush(0) == 8
        for q in range(8):
            cq = table.find("W", q)
            assert cq is not None and not cq.unflushed()
            assert cq.queue.flushed_where == cq.max_offset * UNIT_SIZE
        assert table.flush(0) == 0
        assert store.put_message(Message("W", b"two", 5)).ok
        wait_dispatched(store)
        assert table.flush(0) == 1


# ---- kill -9 after a queue was marked -------------------------------------------------------

# The child: a SYNC_FLUSH store putting to many queues, printing every acknowledged message; it
# kills itself right after the n-th time a queue is marked as written (the unit written, the
# queue in the deque, no flush of it yet).
CHILD = r"""
import collections, json, os, random, signal, sys
from rocketstore import Message, MessageStore, StoreConfig
root, seed, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
class Marks(collections.deque):
    # the table's deque of written queues: a queue is appended when it is marked
    n = 0
    def append(self, cq):
        super().append(cq)
        Marks.n += 1
        if Marks.n == at:
            os.kill(os.getpid(), signal.SIGKILL)
cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024,
                  mapped_file_size_consume_queue=50 * 20, flush_disk_type="SYNC_FLUSH",
                  flush_interval_consume_queue=1, max_hash_slot_num=1000, max_index_num=4000)
store = MessageStore(cfg)
store.consume_queues.written = Marks()  # before any queue is made: each one takes it
store.load()
store.start()
rng = random.Random(seed)
i = 0
while True:
    q = rng.randrange(40)
    topic, qid = f"K{q // 8}", q % 8
    body = f"{seed}-{i}-{topic}/{qid}|" * rng.randint(1, 6)
    r = store.put_message(Message(topic, body.encode(), qid))
    if r.status.name == "PUT_OK":
        print(json.dumps([topic, qid, r.queue_offset, body]), flush=True)
    i += 1
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_a_kill_after_the_mark_loses_nothing_acknowledged(tmp_path: Path, seed: int) -> None:
    root = tmp_path / "store"
    at = 400 + seed * 37  # the n-th mark: after many flush rounds took queues off the deque
    env = child_env()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), str(seed), str(at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    acks: dict[tuple[str, int], dict[int, bytes]] = defaultdict(dict)
    for line in out.splitlines():
        try:
            topic, qid, qoff, body = json.loads(line)
        except ValueError:
            continue  # a torn last line
        acks[(topic, qid)][qoff] = body.encode()
    assert acks  # (how many depends on how often the flush took the marks meanwhile)
    cfg = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=50 * 20,
        max_hash_slot_num=1000,
        max_index_num=4000,
    )
    with MessageStore(cfg) as store:
        r = store.load_result
        assert r is not None and r.mode == "abnormal", r.summary()
        for (topic, qid), want in acks.items():
            by_offset = read_all(store, topic, qid)
            for qoff, body in want.items():
                assert by_offset.get(qoff) == body, (topic, qid, qoff, r.summary())


def read_all(store: MessageStore, topic: str, qid: int) -> dict[int, bytes]:
    got: dict[int, bytes] = {}
    offset = 0
    while True:
        messages = store.get_message("g", topic, qid, offset, 32).messages
        if not messages:
            return got
        for m in messages:
            got[m.queue_offset] = m.body
        offset = messages[-1].queue_offset + 1


def test_an_idle_store_writes_its_queue_checkpoint_once(
    open_store: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocketstore.store.queue import _queue_checkpoint as qcp

    written: list[qcp.QueueCheckpoint] = []
    real = qcp.write

    def counting(root: Path, cp: qcp.QueueCheckpoint) -> None:
        written.append(cp)
        real(root, cp)

    monkeypatch.setattr(qcp, "write", counting)
    store = open_store(flush_interval_consume_queue=3_600_000)  # the rounds are the test's
    service = store.flush_consume_queue
    assert service.checkpoint is not None
    for q in range(4):
        assert store.put_message(Message("C", b"m", q)).ok
    wait_dispatched(store)
    # a thorough round flushes, then writes the per-queue checkpoint; the one after it
    # records the logics time that flush set; from then on an idle store writes nothing
    service.step(0)
    service.step(0)
    settled = len(written)
    assert 1 <= settled <= 2
    for _ in range(3):
        service.step(0)
    assert len(written) == settled
    assert sorted(s.max_offset for s in written[-1].queues if s.topic == "C") == [1, 1, 1, 1]
    assert qcp.read(store.root) == written[-1]  # the file holds what the skipped rounds took
    assert store.put_message(Message("C", b"m", 2)).ok
    wait_dispatched(store)
    service.step(0)
    service.step(0)
    assert len(written) > settled
    assert [s.max_offset for s in written[-1].queues if s.topic == "C"] == [1, 1, 2, 1]
