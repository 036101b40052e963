"""Instructions a message of get_message (32 per call, 1 KiB bodies), counted with callgrind.

    python benchmarks/get_message_instructions.py [--python PY] [--dir DIR]

Fills a store with 80,000 messages over 4 queues, then runs get_message under
``valgrind --tool=callgrind`` twice: over 1 queue and over 3. The difference divided by the
40,000 extra messages is the figure, free of start-up and recovery. Callgrind counts do not
move with the machine's load the way timings do. Needs valgrind. The store is made in a new
temporary directory (or a new sub-directory of ``--dir``) and removed afterwards.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile

from rocketstore import MessageStore
from rocketstore.bench.read import BODY_SIZE, TOPIC, _config, _fill, _wait_dispatched

MESSAGES = 80_000
QUEUES = 4
PER_QUEUE = MESSAGES // QUEUES


def _store_config(root: str):  # type: ignore[no-untyped-def]
    return _config(
        root, mapped_file_size_commit_log=64 * 1024 * 1024, warm_mapped_file_enable=False
    )


def fill(root: str) -> None:
    with MessageStore(_store_config(root)) as store:
        _fill(store, MESSAGES, QUEUES, BODY_SIZE, keys=False)
        _wait_dispatched(store)


def read(root: str, queues: int) -> None:
    got = 0
    with MessageStore(_store_config(root), maintenance=False) as store:
        for q in range(queues):
            offset = 0
            while True:
                r = store.get_message("bench", TOPIC, q, offset, 32)
                if not r.messages:
                    break
                got += len(r.messages)
                offset = r.next_begin_offset
    if got != queues * PER_QUEUE:
        raise RuntimeError(f"read {got} messages, expected {queues * PER_QUEUE}")


def collected(python: str, root: str, queues: int) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, __file__]
    out = subprocess.run(
        [*cmd, "--read", str(queues), "--store", root], capture_output=True, text=True, check=True
    )
    m = re.search(r"Collected : (\d+)", out.stderr)
    if m is None:
        raise RuntimeError(f"no callgrind total in:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter to count")
    ap.add_argument("--dir", default=None, help="where to make the scratch store (default: temp)")
    ap.add_argument("--store", help=argparse.SUPPRESS)  # the run under callgrind reads this store
    ap.add_argument("--read", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.read is not None:
        read(args.store, args.read)
        return
    scratch = tempfile.mkdtemp(prefix="rocketstore-cg-get-", dir=args.dir)
    args.store = f"{scratch}/store"
    try:
        fill(args.store)
        one = collected(args.python, args.store, 1)
        three = collected(args.python, args.store, 3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"get_message: {(three - one) // (2 * PER_QUEUE)} instructions a message")


if __name__ == "__main__":
    main()
