"""Dispatch in the put path hands a record whose consume queue needs file work (a queue to make,
a file to add, open or map) to the dispatch thread, which takes over from that record and gives
dispatch back once it has caught up; ``queue_files_in_put_path`` keeps that work in the put."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.queue._consume_queue import UNIT_SIZE
from support.processes import child_env
from support.waits import WAIT_S, wait_dispatched

SETTINGS = {
    "dispatch_in_put_path": True,
    "mapped_file_size_consume_queue": 8 * UNIT_SIZE,  # a new file every 8 units
}


def wait_inline(store: MessageStore) -> None:
    """Until the dispatch thread gave dispatch back to the put path."""
    deadline = time.monotonic() + WAIT_S
    while not store.reput.inline:
        assert time.monotonic() < deadline, "dispatch was not given back to the put path"
        time.sleep(0.002)


def bodies(store: MessageStore, topic: str, qid: int) -> list[bytes]:
    """Every message of the queue, page by page, each at the queue offset it was given."""
    out: list[bytes] = []
    while True:
        got = store.get_message("g", topic, qid, len(out), 32)
        if not got.messages:
            return out
        for m in got.messages:
            assert m.queue_offset == len(out)
            out.append(m.body)


def test_a_new_queue_is_made_by_the_thread_and_dispatch_comes_back(
    open_store: Callable[..., MessageStore],
) -> None:
    store = open_store(**SETTINGS)
    assert store.reput.inline
    r = store.put_message(Message("Fresh", b"first", 0))
    assert r.ok
    assert store.reput.handovers == 1
    wait_dispatched(store)
    wait_inline(store)
    assert bodies(store, "Fresh", 0) == [b"first"]
    # the queue's file has room now: the next puts are dispatched in the put path, readable
    # the moment they return
    for i in range(3):
        assert store.put_message(Message("Fresh", b"m%d" % i, 0)).ok
        assert store.get_max_offset_in_queue("Fresh", 0) == i + 2
    assert store.reput.handovers == 1
    # the ninth unit needs the queue's second file: handed over again
    for i in range(3, 8):
        assert store.put_message(Message("Fresh", b"m%d" % i, 0)).ok
    assert store.reput.handovers == 2
    wait_dispatched(store)
    assert bodies(store, "Fresh", 0) == [b"first"] + [b"m%d" % i for i in range(8)]
    cq = store.consume_queues.find("Fresh", 0)
    assert cq is not None and len(cq.queue.files) == 2


def test_file_work_in_the_put_path_when_asked(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SETTINGS, queue_files_in_put_path=True)
    for i in range(20):
        assert store.put_message(Message(f"Inline{i % 4}", b"m%d" % i, i % 3)).ok
        # readable the moment the put returns, new queue or new file alike
        assert bodies(store, f"Inline{i % 4}", i % 3)[-1] == b"m%d" % i
    assert store.reput.handovers == 0
    assert store.reput.inline


def test_puts_from_many_threads_across_new_and_old_queues_all_arrive_in_order(
    open_store: Callable[..., MessageStore],
) -> None:
    store = open_store(**SETTINGS)
    for t in range(5):  # queues that exist before the burst
        assert store.put_message(Message(f"Old{t}", b"seed", 0)).ok
    wait_dispatched(store)
    wait_inline(store)
    sent: dict[tuple[str, int], list[bytes]] = {}
    lock = threading.Lock()

    def producer(n: int) -> None:
        for i in range(150):
            topic, qid = (f"New{n}_{i % 25}", i % 2) if i % 3 else (f"Old{i % 5}", 0)
            body = b"%d-%d" % (n, i)
            with lock:  # the order of the puts to one queue is the order recorded
                assert store.put_message(Message(topic, body, qid)).ok
                sent.setdefault((topic, qid), []).append(body)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_dispatched(store)
    assert store.reput.handovers >= 1
    wait_inline(store)
    for (topic, qid), expected in sent.items():
        seed = [b"seed"] if topic.startswith("Old") else []
        assert bodies(store, topic, qid) == seed + expected, (topic, qid)


def test_a_shutdown_while_handed_over_dispatches_everything(
    make_config: Callable[..., StoreConfig],
) -> None:
    config = make_config(**SETTINGS)
    with MessageStore(config) as store:
        for i in range(200):
            assert store.put_message(Message(f"Bye{i}", b"b%d" % i, 0)).ok
    with MessageStore(config) as store:
        for i in range(200):
            assert bodies(store, f"Bye{i}", 0) == [b"b%d" % i]


# The child puts one message to each of many new queues (every one handed over to the dispatch
# thread), printing each acknowledged one; the test kills it with SIGKILL mid-stream.
CHILD = r"""
import sys
from rocketstore import Message, MessageStore, StoreConfig
root = sys.argv[1]
config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 20,
                     dispatch_in_put_path=True)
store = MessageStore(config)
store.load()
store.start()
print("up", flush=True)
for i in range(100000):
    topic = f"Kill{i % 500}"
    assert store.put_message(Message(topic, b"k%d" % i, (i // 500) % 4)).ok
    print(i, flush=True)
"""


def test_kill_9_while_the_thread_makes_queues_loses_no_acknowledged_message(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    env = child_env()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    acked: list[int] = []
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "up"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(acked) < 1200:
            line = proc.stdout.readline()
            if not line:
                break
            acked.append(int(line))
        proc.send_signal(signal.SIGKILL)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(acked) >= 1200
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20)
    with MessageStore(config) as store:
        for i in acked:
            topic, qid, offset = f"Kill{i % 500}", (i // 500) % 4, i // 2000
            got = store.get_message("g", topic, qid, offset, 1)
            assert [m.body for m in got.messages] == [b"k%d" % i], (i, got.status)
