"""ReputMessageService: dispatch from the handoff and from the files, limits, idempotence."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.queue._consume_queue import UNIT_SIZE
from support.waits import wait_dispatched

SMALL = {
    "dispatch_in_put_path": False,  # these tests are about the dispatch thread and its handoff
    "mapped_file_size_consume_queue": 40 * UNIT_SIZE,
    "max_hash_slot_num": 16,
    "max_index_num": 64,
    "flush_interval_consume_queue": 10,
}


def cq_bytes(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def put_many(
    store: MessageStore, n: int, topic: str = "T", queues: int = 3, body: int = 300
) -> None:
    for i in range(n):
        r = store.put_message(
            Message(
                topic,
                bytes([i % 256]) * body,
                i % queues,
                tags=f"tag{i % 4}",
                keys=[f"k{i}"],
                properties={"UNIQ_KEY": f"U{i:08d}"},
            )
        )
        assert r.ok, r


def test_dispatch_fills_queues_index_and_listener(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    store = open_store(make_config(**SMALL))
    seen: list[tuple[Any, ...]] = []
    store.set_message_arriving_listener(lambda *args: seen.append(args))
    put_many(store, 300)  # several commit-log files (BLANK records) and queue files
    wait_dispatched(store)
    assert len(store.commit_log.queue.files) > 1
    for q in range(3):
        assert store.get_max_offset_in_queue("T", q) == 100
    assert len(seen) == 300
    topic, qid, next_offset, code, ts = seen[-1]
    assert (topic, qid, next_offset) == ("T", 299 % 3, 100)
    assert ts > 0 and code == store.consume_queues.find("T", 2).get_unit(99)[2]  # type: ignore[union-attr]
    assert [m.queue_offset for m in store.query_message("T", "k299").messages] == [99]
    assert store.query_message("T", "U00000150").messages[0].body[:1] == bytes([150])
    assert store.reput.parsed == 0  # everything came through the handoff
    assert len(store.index.files) > 1  # 64 entries a file


def test_redispatch_from_files_writes_the_same_bytes(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig], tmp_path: Path
) -> None:
    config = make_config(**SMALL)
    store = open_store(config)
    put_many(store, 250)
    wait_dispatched(store)
    store.shutdown()
    root = Path(config.store_path_root_dir)
    before = cq_bytes(root)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    store = open_store(config)  # start-up re-dispatches everything, parsing the files
    assert store.reput.parsed == 250
    assert cq_bytes(root) == before
    assert [m.queue_offset for m in store.query_message("T", "k7").messages] == [2]
    # and dispatching it all again adds nothing
    index_count = [f.index_count for f in store.index.files]
    store.reput.stop()
    store.reput.reput_from_offset = 0
    store.reput.catch_up()
    assert cq_bytes(root) == before
    assert [f.index_count for f in store.index.files] == index_count


def test_restart_continues_queue_offsets(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    config = make_config(**SMALL)
    store = open_store(config)
    put_many(store, 10, queues=2)
    store.shutdown()
    store = open_store(config)
    assert store.commit_log.topic_queue_table == {("T", 0): 5, ("T", 1): 5}
    r = store.put_message(Message("T", b"x", 1))
    assert r.queue_offset == 5
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("T", 1) == 6


def test_transactions_prepared_and_rollback_stay_out_of_queues(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    store = open_store(make_config(**SMALL))
    for flag, key in ((0x4, "prepared"), (0xC, "rollback"), (0x8, "commit"), (0, "plain")):
        assert store.put_message(Message("T", b"x", 0, keys=[key], sys_flag=flag)).ok
    wait_dispatched(store)
    g = store.get_message("g", "T", 0, 0, 32)
    assert [m.keys for m in g.messages] == [["commit"], ["plain"]]
    assert len(store.query_message("T", "prepared").messages) == 1  # indexed, as RocketMQ does
    assert store.query_message("T", "rollback").messages == []


def test_dispatch_stops_at_the_limit(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    store = open_store(make_config(**SMALL))
    store.reput.stop()
    results = [store.put_message(Message("T", b"x" * 50, 0)) for _ in range(5)]
    limit = results[2].wrote_offset  # as if only two messages were flushed
    store.reput._limit = lambda: limit
    store.reput.catch_up()
    assert store.get_max_offset_in_queue("T", 0) == 2
    store.reput._limit = store._dispatch_limit
    store.reput.catch_up()
    assert store.get_max_offset_in_queue("T", 0) == 5


def test_misaligned_handoff_falls_back_to_the_file(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    store = open_store(make_config(**SMALL))
    store.reput.stop()
    for i in range(6):
        store.put_message(Message("T", b"x" * 50, 0, keys=[f"k{i}"]))
    handoff = store.commit_log.dispatch_handoff
    assert handoff is not None and len(handoff) == 6
    handoff.popleft()
    handoff.popleft()  # the first two must come from the file
    store.reput.catch_up()
    assert store.reput.parsed == 2
    assert store.get_max_offset_in_queue("T", 0) == 6
    assert len(handoff) == 0


def test_sync_flush_dispatches_flushed_messages(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    store = open_store(make_config(flush_disk_type="SYNC_FLUSH", **SMALL))
    assert store.put_message(Message("T", b"a", 0)).ok
    # WAIT=false does not wait for the flush; dispatch asks for one
    assert store.put_message(Message("T", b"b", 0, properties={"WAIT": "false"})).ok
    wait_dispatched(store)
    deadline = time.monotonic() + 60
    while store.get_max_offset_in_queue("T", 0) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert store.commit_log.queue.flushed_where >= store.reput.reput_from_offset


def test_write_buffers_dispatch_committed_data(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    store = open_store(
        make_config(
            transient_store_pool_enable=True,
            transient_store_pool_size=3,
            mlock_write_buffers=False,
            **SMALL,
        )
    )
    put_many(store, 40, queues=1)
    deadline = time.monotonic() + 60
    while store.get_max_offset_in_queue("T", 0) < 40:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    g = store.get_message("g", "T", 0, 0, 32)
    assert [m.queue_offset for m in g.messages] == list(range(32))


def test_index_can_be_disabled(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    config = make_config(message_index_enable=False, **SMALL)
    store = open_store(config)
    put_many(store, 5)
    wait_dispatched(store)
    assert store.query_message("T", "k1").messages == []
    assert not (Path(config.store_path_root_dir) / "index").exists()
    assert store.get_max_offset_in_queue("T", 1) == 2


def test_batch_put_dispatches_as_single_puts_do(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig], tmp_path: Path
) -> None:
    """A batch goes to dispatch as one entry; the consume-queue files it leaves (also across a
    file boundary, where units go one by one) equal those of the same messages put singly."""
    clock_ms = 1_700_000_000_000

    class Fixed:  # one store time for both stores, so the records are byte-identical
        def now_ms(self) -> int:
            return clock_ms

        monotonic = staticmethod(time.monotonic)

    def messages() -> list[Message]:
        return [
            Message("B", b"m%03d" % i, 1, tags=f"t{i % 3}", keys=[f"k{i}"] if i % 2 else None)
            for i in range(57)  # 40 units per consume-queue file: the batch crosses a file
        ]

    stores = {}
    for name in ("single", "batch"):
        cfg = make_config(**SMALL, store_path_root_dir=str(tmp_path / name))
        store = open_store(cfg, clock=Fixed())
        msgs = messages()
        if name == "single":
            for m in msgs:
                assert store.put_message(m).ok
        else:
            assert store.put_messages(msgs[:3]).ok  # no file yet: unit by unit
            assert store.put_messages(msgs[3:20]).queue_offset == 3  # one pack into the file
            r = store.put_messages(msgs[20:])  # crosses into the next file: unit by unit
            assert r.ok and r.queue_offset == 20 and len(r.offsets) == 37
        wait_dispatched(store)
        stores[name] = store
    assert cq_bytes(tmp_path / "single") == cq_bytes(tmp_path / "batch")
    batch = stores["batch"]
    got = batch.get_message("g", "B", 1, 0, 64)
    assert [m.body for m in got.messages][:32] == [b"m%03d" % i for i in range(32)]
    assert batch.get_max_offset_in_queue("B", 1) == 57
    found = batch.query_message("B", "k41").messages
    assert [m.body for m in found] == [b"m041"]


def test_inline_dispatch_across_rolls_matches_the_dispatch_thread(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig], tmp_path: Path
) -> None:
    """ASYNC_FLUSH dispatches in the put path; across many commit-log rolls (BLANK records)
    and a batch, it leaves the same consume-queue files as the dispatch thread does."""
    roots = {}
    for inline in (True, False):
        root = tmp_path / f"inline-{inline}"
        cfg = make_config(
            **{**SMALL, "dispatch_in_put_path": inline}, store_path_root_dir=str(root)
        )
        store = open_store(cfg)
        assert store.reput.inline is inline
        for i in range(300):  # ~5 commit-log files of 64 KiB
            keys = [f"k{i}"] if i % 3 == 2 else None  # plain records take a shorter path
            assert store.put_message(Message("R", b"r" * 900, i % 3, keys=keys)).ok
        assert store.put_messages([Message("R", b"b%d" % i, 1) for i in range(10)]).ok
        wait_dispatched(store)
        assert store.reput.inline is inline  # the batch was dispatched in the put path too
        assert len(store.commit_log.queue.files) >= 5
        assert [store.get_max_offset_in_queue("R", q) for q in range(3)] == [100, 110, 100]
        assert [m.queue_offset for m in store.query_message("R", "k299").messages] == [99]
        roots[inline] = root
        store.flush_consume_queue.step(0)
    assert cq_bytes(roots[True]) == cq_bytes(roots[False])


def test_the_dispatch_thread_sleeps_while_the_put_path_dispatches(
    open_store: Callable[..., MessageStore], make_config: Callable[..., StoreConfig]
) -> None:
    """With dispatch in the put path, the service thread has nothing to poll for: it wakes
    about ten times a second, not every millisecond (each round takes the interpreter lock
    from the thread that puts)."""
    store = open_store(
        make_config(**{**SMALL, "dispatch_in_put_path": True, "queue_files_in_put_path": True})
    )
    assert store.reput.inline
    before = store.reput.rounds
    began = time.monotonic()
    while time.monotonic() - began < 1.0:
        assert store.put_message(Message("R", b"r" * 100, 0)).ok
        time.sleep(0.001)
    rounds = store.reput.rounds - before
    assert 1 <= rounds <= 30, rounds
    assert store.get_max_offset_in_queue("R", 0) > 100


@pytest.mark.sources_only
def test_inline_dispatch_failure_hands_over_to_the_dispatch_thread(
    open_store: Callable[..., MessageStore],
    make_config: Callable[..., StoreConfig],
    monkeypatch: Any,
) -> None:
    store = open_store(
        make_config(**{**SMALL, "dispatch_in_put_path": True, "queue_files_in_put_path": True})
    )
    assert store.put_message(Message("H", b"first", 0)).ok
    cq = store.consume_queues.find("H", 0)
    assert cq is not None
    calls = {"n": 0}
    original = type(cq).put_unit

    def refuse_once(self: Any, *args: Any) -> bool:
        calls["n"] += 1
        if calls["n"] == 1:
            return False  # e.g. no consume-queue file could be made
        return bool(original(self, *args))

    monkeypatch.setattr(type(cq), "put_unit", refuse_once)
    for i in range(5):  # with keys: the general path, which writes through put_unit
        assert store.put_message(Message("H", b"m%d" % i, 0, keys=[f"k{i}"])).ok
    assert store.reput.inline is False  # the thread took over
    wait_dispatched(store)
    got = store.get_message("g", "H", 0, 0, 32)
    assert [m.body for m in got.messages] == [b"first"] + [b"m%d" % i for i in range(5)]
