"""MessageStore: ownership lock, restart, concurrency, durability under SYNC_FLUSH."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig, StoreLockedError
from rocketstore.store._lock import lock_owner
from rocketstore.store.log._record import DispatchRequest, check_record
from support.processes import child_env


def scan_log(store_dir: str) -> list[tuple[DispatchRequest, bytes]]:
    """Every record in a commit-log directory, read from the files (no store involved)."""
    from rocketstore.store.log._record import decode_message

    out = []
    for path in sorted(Path(store_dir, "commitlog").iterdir()):
        data = path.read_bytes()
        pos = 0
        while True:
            r = check_record(data, pos, len(data), check_crc=True)
            if isinstance(r, int):
                break
            out.append((r, decode_message(data, pos, len(data)).body))
            pos += r.msg_size
    return out


# ---- ownership ------------------------------------------------------------------------------


def test_second_owner_in_the_same_process(open_store, make_config) -> None:  # type: ignore[no-untyped-def]
    first = open_store()
    assert first.put_message(Message("L", b"1")).ok
    second = MessageStore(make_config())
    with pytest.raises(StoreLockedError, match=str(os.getpid())):
        second.load()
    with pytest.raises(StoreLockedError), MessageStore(make_config()):
        pass
    second.shutdown()  # harmless: it never owned anything
    r = first.put_message(Message("L", b"2"))
    assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == 1
    assert lock_owner(first.config.store_path_root_dir) == os.getpid()
    first.shutdown()
    assert lock_owner(first.config.store_path_root_dir) is None
    with MessageStore(make_config()) as third:  # free again
        assert third.put_message(Message("L", b"3")).queue_offset == 2


def run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = child_env()
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_second_owner_in_another_process(open_store) -> None:  # type: ignore[no-untyped-def]
    first = open_store()
    child = run_child(
        """
        import sys
        from rocketstore import MessageStore, StoreConfig, StoreLockedError
        try:
            MessageStore(StoreConfig(store_path_root_dir=sys.argv[1],
                                     mapped_file_size_commit_log=65536)).load()
        except StoreLockedError as exc:
            print("LOCKED", exc)
            sys.exit(3)
        sys.exit(0)
        """,
        first.config.store_path_root_dir,
    )
    assert child.returncode == 3, child.stderr
    assert f"process {os.getpid()}" in child.stdout
    assert first.put_message(Message("L", b"still mine")).status is PutMessageStatus.PUT_OK


# ---- restart --------------------------------------------------------------------------------


def test_restart_finds_the_same_offsets(open_store, make_config) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for i in range(150):  # several files
        topic, qid = ("A", "B", "C")[i % 3], i % 4
        r = store.put_message(Message(topic, bytes([i]) * (200 + i * 7), qid))
        assert r.queue_offset == expected[(topic, qid)]
        expected[(topic, qid)] += 1
    store.put_messages([Message("A", b"batch", 0)] * 5)
    expected[("A", 0)] += 5
    max_offset = store.max_phy_offset
    table = dict(store.commit_log.topic_queue_table)
    assert table == dict(expected)
    store.shutdown()
    again = open_store(make_config())
    assert again.max_phy_offset == max_offset
    assert again.min_phy_offset == 0
    assert again.commit_log.topic_queue_table == table
    r = again.put_message(Message("B", b"next", 1))
    assert r.wrote_offset == max_offset
    assert r.queue_offset == expected[("B", 1)]


def test_restart_after_a_damaged_tail_ends_the_log_there(open_store, make_config) -> None:  # type: ignore[no-untyped-def]
    store = open_store()
    results = [store.put_message(Message("D", f"m{i}".encode() * 50)) for i in range(20)]
    store.shutdown()
    last = results[-1]
    path = Path(store.config.commit_log_dir) / f"{0:020d}"
    with open(path, "r+b") as f:  # flip a body byte of the last record
        f.seek(last.wrote_offset + last.wrote_bytes - 40)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    again = open_store(make_config())
    assert again.max_phy_offset == last.wrote_offset
    assert again.commit_log.topic_queue_table == {("D", 0): 19}
    r = again.put_message(Message("D", b"replacement"))
    assert (r.wrote_offset, r.queue_offset) == (last.wrote_offset, 19)


# ---- concurrency ----------------------------------------------------------------------------


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_concurrent_producers(open_store, flush: str) -> None:  # type: ignore[no-untyped-def]
    store = open_store(flush_disk_type=flush)
    threads_n, per_thread = 8, 150 if flush == "ASYNC_FLUSH" else 60
    acked: list[list[tuple[bytes, object]]] = [[] for _ in range(threads_n)]
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def produce(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                body = f"t{t}-m{i}-".encode() * (1 + (i * 7 + t) % 40)
                if i % 10 == 9:
                    r = store.put_messages(
                        [Message("C", body + bytes([k]), t % 4) for k in range(3)]
                    )
                    bodies = [body + bytes([k]) for k in range(3)]
                else:
                    r = store.put_message(Message("C", body, t % 4))
                    bodies = [body]
                if r.status is PutMessageStatus.PUT_OK:
                    for k, b in enumerate(bodies):
                        acked[t].append(
                            (b, (r.offsets[k] if r.offsets else r.wrote_offset, r.queue_offset + k))
                        )
                    if flush == "SYNC_FLUSH":
                        assert store.flushed_phy_offset() >= r.wrote_offset + r.wrote_bytes
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    all_acked = [a for per in acked for a in per]
    assert len(all_acked) == threads_n * (per_thread + per_thread // 10 * 2)
    store.commit_log.queue.flush_all(0)
    records = scan_log(store.config.store_path_root_dir)
    by_body: dict[bytes, list[DispatchRequest]] = defaultdict(list)
    for r, body in records:
        by_body[body].append(r)
    for body, (phys, qoff) in all_acked:
        (rec,) = by_body[body]  # present exactly once
        assert (rec.commitlog_offset, rec.queue_offset) == (phys, qoff)
    assert len(records) == len(all_acked)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r, _ in records:
        per_queue[r.queue_id].append(r.queue_offset)
    for qid, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), qid  # dense and in log order


# ---- durability -----------------------------------------------------------------------------

CHILD_PUTS = """
import json, os, signal, sys
from rocketstore import Message, MessageStore, StoreConfig
cfg = StoreConfig(store_path_root_dir=sys.argv[1], mapped_file_size_commit_log=65536,
                  flush_disk_type="SYNC_FLUSH")
store = MessageStore(cfg)
store.load()
store.start()
for i in range(int(sys.argv[2])):
    r = store.put_message(Message("Dur", f"durable-{i}".encode() * 30, i % 2))
    if r.status.name == "PUT_OK":
        flushed = store.flushed_phy_offset()
        print(json.dumps([r.wrote_offset, r.queue_offset, i, r.wrote_bytes, flushed]), flush=True)
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
os._exit(0)
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_sync_flush_survives_a_dropped_store(make_config, how: str) -> None:  # type: ignore[no-untyped-def]
    cfg: StoreConfig = make_config()
    child = run_child(CHILD_PUTS, cfg.store_path_root_dir, "120", how)
    if how == "kill":
        assert child.returncode == -signal.SIGKILL
    else:
        assert child.returncode == 0, child.stderr
    acked = [json.loads(line) for line in child.stdout.splitlines()]
    assert len(acked) == 120
    with MessageStore(cfg) as store:  # the lock died with the child
        for phys, qoff, i, size, flushed in acked:
            assert flushed >= phys + size  # durable before it was acknowledged
            m = store.look_message_by_offset(phys)
            assert m is not None, i
            assert m.body == f"durable-{i}".encode() * 30
            assert (m.queue_id, m.queue_offset) == (i % 2, qoff)
        assert store.commit_log.topic_queue_table == {("Dur", 0): 60, ("Dur", 1): 60}


def test_store_times_come_from_the_injected_clock(open_store, manual_clock) -> None:  # type: ignore[no-untyped-def]
    store = open_store(clock=manual_clock)
    r1 = store.put_message(Message("Clk", b"1"))
    manual_clock.advance(2.5)
    r2 = store.put_message(Message("Clk", b"2", born_timestamp=42))
    assert r1.store_timestamp == 1_700_000_000_000
    assert r2.store_timestamp == 1_700_000_002_500
    m1 = store.look_message_by_offset(r1.wrote_offset)
    m2 = store.look_message_by_offset(r2.wrote_offset)
    assert m1 is not None and m2 is not None
    assert (m1.store_timestamp, m1.born_timestamp) == (r1.store_timestamp, r1.store_timestamp)
    assert (m2.store_timestamp, m2.born_timestamp) == (r2.store_timestamp, 42)


def test_async_flusher_keeps_up_across_many_files(make_config) -> None:  # type: ignore[no-untyped-def]
    """One flush round covers every full file and the tail, so a clean shutdown after a burst
    of rolls leaves everything flushed and no abort file (a flusher that went one file per
    round fell behind and left the store to abnormal recovery)."""
    config = make_config(flush_interval_commit_log=60_000)  # the interval never comes round
    store = MessageStore(config)
    store.load()
    store.start()
    for i in range(400):  # ~40 files of 64 KiB
        assert store.put_message(Message("F", b"f" * 6000, i % 2)).ok
    queue = store.commit_log.queue
    assert len(queue.files) > 20 and queue.flushed_where < store.max_phy_offset
    flusher = store.commit_log.flush_service
    assert flusher.step(4)  # type: ignore[union-attr]
    full_end = queue.files[-1].from_offset
    assert queue.flushed_where >= full_end
    end = store.max_phy_offset
    store.shutdown()
    assert not (Path(config.store_path_root_dir) / "abort").exists()
    again = MessageStore(config)
    again.load()
    try:
        assert again.max_phy_offset == end
        assert again.load_result is not None and again.load_result.mode != "abnormal"
    finally:
        again.shutdown()
