"""Open files and mappings of a store with many queues, in-process: one message to each of N
queues (8 a topic), every queue read back, the store shut down and opened again, every queue
read again.

    python benchmarks/queue_files.py [--queues N] [--dir DIR] [--bound B]
        [--idle-seconds S [--idle-only]]

After each step it prints the process's open descriptors (/proc/self/fd), its mappings
(lines of /proc/self/maps), the store files mapped, and the step's seconds. ``--bound``
sets ``max_mapped_queue_files`` (0: what the limits allow). A step that fails prints the
error and ends the run (a store holding a descriptor per mapped file runs out of them: the
open-file limit is the process's, see ``ulimit -n``).

``--idle-seconds S``: after the sends, the process's CPU over S seconds with nothing to do
(user + system, ``getrusage``: the store's own threads, its flushes and checkpoints), as a
percentage of one core; ``--idle-only`` ends the run there.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.log._mapped_file import mapped_counters

PER_TOPIC = 8


def _figures(step: str, t0: float) -> None:
    fds = len(os.listdir("/proc/self/fd")) - 1
    with open("/proc/self/maps", "rb") as f:
        maps = sum(1 for _ in f)
    print(
        f"{step:<22} open files {fds:>7,}  mappings {maps:>7,}  "
        f"mapped store files {mapped_counters()[0]:>7,}  {time.perf_counter() - t0:8.1f} s",
        flush=True,
    )


def _read_all(store: MessageStore, queues: int) -> None:
    for q in range(queues):
        got = store.get_message("g", f"Bench{q // PER_TOPIC}", q % PER_TOPIC, 0, 4)
        if not got.messages:
            raise RuntimeError(f"queue {q}: {got.status.name}")


def _idle_cpu(seconds: float) -> None:
    def used() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    time.sleep(2.0)
    c0, t0 = used(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = used(), time.monotonic()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(
        f"{'idle':<22} CPU {100 * (c1 - c0) / (t1 - t0):.2f} % of a core over "
        f"{t1 - t0:.1f} s (load average {load})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=20_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--bound", type=int, default=0)
    parser.add_argument("--idle-seconds", type=float, default=0.0)
    parser.add_argument("--idle-only", action="store_true")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="queue-files-", dir=args.dir)
    extra = {"max_mapped_queue_files": args.bound} if args.bound else {}
    cfg = StoreConfig(store_path_root_dir=root, **extra)  # type: ignore[arg-type]
    print(f"{args.queues:,} queues, open-file limit {os.sysconf('SC_OPEN_MAX'):,}", flush=True)
    try:
        t0 = time.perf_counter()
        _figures("start", t0)
        store = MessageStore(cfg)
        store.load()
        store.start()
        try:
            t0 = time.perf_counter()
            for q in range(args.queues):
                r = store.put_message(Message(f"Bench{q // PER_TOPIC}", b"x" * 100, q % PER_TOPIC))
                if not r.ok:
                    raise RuntimeError(f"queue {q}: {r.status.name} {r.error}")
            while store.dispatch_behind_bytes():
                time.sleep(0.01)
            _figures("a send to every queue", t0)
            if args.idle_seconds > 0:
                _idle_cpu(args.idle_seconds)
                if args.idle_only:
                    return
            t0 = time.perf_counter()
            _read_all(store, args.queues)
            _figures("every queue read", t0)
        finally:
            store.shutdown()
        t0 = time.perf_counter()
        store = MessageStore(cfg)
        store.load()
        store.start()
        try:
            _figures("opened again", t0)
            t0 = time.perf_counter()
            _read_all(store, args.queues)
            _figures("every queue read", t0)
        finally:
            store.shutdown()
    except Exception as exc:  # the figure is where it stops
        print(f"failed: {exc}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
