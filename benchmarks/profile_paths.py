"""Where a message's time goes on one hot path, by function (cProfile).

    python benchmarks/profile_paths.py PATH [--messages N] [--top K] [--dir DIR]

PATH is one of:

- ``put``: ``MessageStore.put_message`` of 1 KiB bodies into 4 queues, one thread, ASYNC_FLUSH
  (dispatch in the put path, as by default);
- ``get``: ``get_message`` of those messages back, 32 per call, decoded and CRC-checked;
- ``recover``: a restart after a kill (no clean shutdown): the commit log checked record by
  record from the last checkpoint;
- ``decode``: the Spark reader's decoder outside Spark, every column (store → Arrow batches).

It fills a fresh store under DIR (a temporary directory by default, removed afterwards), runs
the path once to warm it, once timed, then once under cProfile (a store's shutdown, which
flushes every file, is left out of each), and prints the total in microseconds a message
with and without the profiler, then the K functions with the most own time in
microseconds a message and their share. The profiler slows Python calls several-fold, so the
shares say where the time goes, the absolute figures only compare with each other.
``ROCKETSTORE_NO_EXTENSIONS=1`` in the environment profiles the pure-Python code.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rocketstore import MessageStore, PutMessageStatus, StoreConfig
from rocketstore.bench.storage import _messages

FILE_SIZE = 256 * 1024 * 1024

# a path's (prepare, run, finish): prepare before every run, run timed, finish once at the end
Steps = tuple[Callable[[], None], Callable[[], None], Callable[[], None]]


def _config(root: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE_SIZE,
        flush_interval_commit_log=600_000,
        flush_interval_consume_queue=600_000,
    )


def _fill(root: Path, n: int) -> None:
    store = MessageStore(_config(root))
    store.load()
    store.start()
    ok = PutMessageStatus.PUT_OK
    for msg in _messages(n):
        if store.put_message(msg).status is not ok:
            raise SystemExit("a put failed while filling the store")
    store.shutdown()


def _put(root: Path, n: int) -> Steps:
    msgs = _messages(n)
    state: dict[str, MessageStore] = {}

    def finish() -> None:
        store = state.pop("store", None)
        if store is not None:
            store.shutdown()

    def prepare() -> None:
        finish()  # the last run's store: its shutdown (the flush of every file) is not timed
        shutil.rmtree(root, ignore_errors=True)
        store = MessageStore(_config(root))
        store.load()
        store.start()
        state["store"] = store

    def run() -> None:
        put = state["store"].put_message
        for msg in msgs:
            put(msg)

    return prepare, run, finish


def _get(root: Path, n: int) -> Steps:
    _fill(root, n)
    store = MessageStore(_config(root))
    store.load()
    store.start()

    def run() -> None:
        for qid in range(4):
            offset = 0
            while True:
                got = store.get_message("G", "BenchTopic", qid, offset, 32)
                if not got.messages:
                    break
                offset = got.next_begin_offset

    return (lambda: None), run, store.shutdown


def _recover(root: Path, n: int) -> Steps:
    _fill(root, n)
    saved = root.with_name(root.name + "-killed")
    state: dict[str, MessageStore] = {}

    def finish() -> None:
        store = state.pop("store", None)
        if store is not None:
            store.shutdown()

    def prepare() -> None:
        finish()  # the last run's store: its shutdown (the flush of every file) is not timed
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(root, saved)
        (saved / "abort").touch()  # as a process killed before its clean shutdown leaves it

    def run() -> None:
        store = MessageStore(_config(saved))
        state["store"] = store
        store.load()

    return prepare, run, finish


def _decode(root: Path, n: int) -> Steps:
    from rocketstore.columns._arrow import QueueRange, RangeDecoder
    from rocketstore.store.read._reader import StoreReader

    _fill(root, n)

    def run() -> None:
        with StoreReader(root) as reader:
            decoder = RangeDecoder(reader)
            for topic in reader.topics():
                for qid in reader.queue_ids(topic):
                    r = QueueRange(topic, qid, 0, reader.max_offset(topic, qid))
                    for _ in decoder.batches(r):
                        pass

    return (lambda: None), run, lambda: None


PATHS = {"put": _put, "get": _get, "recover": _recover, "decode": _decode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", choices=sorted(PATHS))
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--dir", help="a directory to work in (default: a temporary one)")
    args = parser.parse_args()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="rocketstore-profile-"))
    root = base / "store"
    try:
        prepare, run, finish = PATHS[args.path](root, args.messages)
        try:
            prepare()
            run()  # warm: files made, caches filled
            prepare()
            started = time.perf_counter()
            run()
            plain = time.perf_counter() - started
            prepare()
            profile = cProfile.Profile()
            profile.enable()
            run()
            profile.disable()
        finally:
            finish()
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    stats = pstats.Stats(profile)
    rows = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in rows.values())
    per = 1e6 / args.messages
    compiled = "pure Python" if os.environ.get("ROCKETSTORE_NO_EXTENSIONS") else "compiled core"
    print(
        f"{args.path}: {args.messages} messages ({compiled}), load average "
        f"{os.getloadavg()[0]:.2f}; {plain * per:.2f} us a message without the profiler, "
        f"{total * per:.2f} with it"
    )
    top = sorted(rows.items(), key=lambda kv: kv[1][2], reverse=True)[: args.top]
    print(f"{'own us/msg':>10} {'share':>6} {'calls/msg':>9}  function")
    for (file, line, name), (_, calls, own, _, _) in top:
        where = f"{Path(file).name}:{line}" if line else file
        print(
            f"{own * per:10.3f} {own / total:6.1%} {calls / args.messages:9.2f}  {name} ({where})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
