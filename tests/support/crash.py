"""Fault-injection helpers of the crash tests: a producing child process to kill -9, a copy
of a live store with its unflushed tail dropped (power loss), seeded record corruptions."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketstore import MessageStore, StoreConfig

from .processes import child_env

FILE_SIZE = 64 * 1024

# The child: opens (recovers) the store, reports how it loaded, then puts messages with
# bodies that say who wrote them, printing one JSON line per acknowledged message with the
# flushed position seen right after it.
PRODUCER = r"""
import json, sys
from rocketstore import Message, MessageStore, StoreConfig
root, flush, cycle, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=65536,
                  flush_disk_type=flush, flush_interval_commit_log=5,
                  flush_commit_log_least_pages=0, flush_interval_consume_queue=20,
                  max_hash_slot_num=1000, max_index_num=4000)
store = MessageStore(cfg)
store.load()
store.start()
r = store.load_result
print(json.dumps({"load": r.mode, "end": r.max_phys_offset}), flush=True)
import random
rng = random.Random(seed)
i = 0
while True:
    qid = rng.randrange(3)
    body = (f"c{cycle}-m{i}-q{qid}|" * rng.randint(1, 40)).encode()
    if rng.random() < 0.1:
        res = store.put_messages([Message("Crash", body + bytes([k]), qid) for k in range(3)])
        bodies = [body + bytes([k]) for k in range(3)]
    else:
        keys = [f"k{cycle}-{i}"] if i % 2 else None  # both dispatch paths of the put path
        res = store.put_message(Message("Crash", body, qid, keys=keys))
        bodies = [body]
    if res.status.name == "PUT_OK":
        offs = res.offsets or (res.wrote_offset,)
        ends = [offs[k + 1] if k + 1 < len(offs) else res.wrote_offset + res.wrote_bytes
                for k in range(len(offs))]
        flushed = store.flushed_phy_offset()
        for k, b in enumerate(bodies):
            print(json.dumps([qid, res.queue_offset + k, offs[k], ends[k], b.decode("latin-1"),
                              flushed]), flush=True)
    i += 1
"""


@dataclass(frozen=True)
class Ack:
    queue_id: int
    queue_offset: int
    phys: int
    end: int
    body: bytes
    flushed: int  # the flushed position right after the put returned


def config(root: Path, flush: str = "ASYNC_FLUSH", **kw: Any) -> StoreConfig:
    kw.setdefault("flush_interval_commit_log", 5)
    kw.setdefault("max_hash_slot_num", 1000)  # small index files: cheap to copy
    kw.setdefault("max_index_num", 4000)
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE_SIZE,
        flush_disk_type=flush,
        **kw,
    )


def produce_and_kill(
    root: Path,
    flush: str,
    cycle: int,
    rng: random.Random,
    *,
    min_acks: int = 5,
    max_acks: int = 150,
) -> tuple[dict[str, Any], list[Ack]]:
    """Run the producer until it has acknowledged a random number of messages and (ASYNC_FLUSH)
    reported a flushed position past its first one, wait a random moment more, kill -9 it;
    returns its load report and every acknowledged message. Without the flushed report a
    loaded machine could kill every run before its flush thread ran, and the run would check
    the durability of nothing."""
    env = child_env()
    proc = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, str(root), flush, str(cycle), str(rng.randrange(1 << 30))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    want = rng.randint(min_acks, max_acks)
    lines: list[str] = []
    deadline = time.monotonic() + 60
    head = proc.stdout.readline()
    if not head:
        proc.wait(10)
        raise AssertionError(f"producer died: {proc.stderr.read() if proc.stderr else ''}")
    awaiting_flush = flush == "ASYNC_FLUSH"
    first_end: int | None = None  # the end of the run's first acknowledged message
    while time.monotonic() < deadline and (len(lines) < want or awaiting_flush):
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if awaiting_flush:
            try:
                _qid, _qoff, _phys, end, _body, flushed = json.loads(line)
            except ValueError:
                continue
            if first_end is None:
                first_end = end
            awaiting_flush = flushed < first_end
    time.sleep(rng.random() * 0.01)  # a random moment inside the next puts
    proc.send_signal(signal.SIGKILL)
    rest, _err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # lines printed before the kill are acknowledged too (the last one may be torn)
    for line in rest.splitlines():
        if line.endswith("]"):
            lines.append(line)
    acks = []
    for line in lines:
        try:
            qid, qoff, phys, end, body, flushed = json.loads(line)
        except ValueError:
            continue
        acks.append(Ack(qid, qoff, phys, end, body.encode("latin-1"), flushed))
    return json.loads(head), acks


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[Any]:
    out = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while True:
        g = store.get_message("check", topic, queue_id, offset, 32)
        if not g.messages:
            return out
        out += g.messages
        offset = g.next_begin_offset


def power_loss_copy(src: Path, dst: Path, flushed: int, rng: random.Random, garbage: bool) -> None:
    """Copy a live store and drop what was not flushed: the commit-log bytes past ``flushed``
    become zeroes (or garbage), the files past it disappear, the abort file stays."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("lock"))
    cl = dst / "commitlog"
    for path in sorted(cl.iterdir()):
        base = int(path.name)
        if base >= flushed + FILE_SIZE - flushed % FILE_SIZE and base > flushed:
            path.unlink()
            continue
        if base + FILE_SIZE <= flushed:
            continue
        pos = flushed - base
        with open(path, "r+b") as f:
            f.seek(pos)
            n = FILE_SIZE - pos
            f.write(
                bytes(rng.getrandbits(8) for _ in range(min(n, 4096))) + bytes(max(0, n - 4096))
                if garbage
                else bytes(n)
            )
