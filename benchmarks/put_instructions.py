"""Instructions a put (1 KiB bodies, one thread, ASYNC_FLUSH), counted with callgrind.

    python benchmarks/put_instructions.py [--python PY] [--dir DIR] [--mode MODE]

MODE is ``single`` (put_message, the default), ``async`` (put_message_async, its future's
result taken), ``batch`` (put_messages of 32) or ``floor`` (the minimal pure-Python writer of
``rocketstore bench``). Each runs under ``valgrind
--tool=callgrind`` twice, with 10,000 and with 30,000 messages into a fresh store (4 queues,
dispatch in the put path as configured by default, the timed flushes and maintenance off); the
difference divided by 20,000 is the figure, free of start-up. ``ROCKETSTORE_NO_EXTENSIONS=1``
in the environment counts the pure-Python code. Needs valgrind.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from rocketstore import MessageStore, PutMessageStatus
from rocketstore.bench.storage import _config, _messages, floor_rate

FEW, MANY = 10_000, 30_000


def run(root: str, mode: str, n: int) -> None:
    if mode == "floor":
        floor_rate(root, n, file_size=64 * 1024 * 1024)
        return
    msgs = _messages(n, queues=1 if mode == "batch" else 4)
    ok = PutMessageStatus.PUT_OK
    config = _config(
        root,
        mapped_file_size_commit_log=64 * 1024 * 1024,
        flush_interval_commit_log=600_000,  # background flushes off: they are not the put's
        flush_interval_consume_queue=600_000,
    )
    with MessageStore(config, maintenance=False) as store:
        if mode == "batch":
            for i in range(0, n, 32):
                if store.put_messages(msgs[i : i + 32]).status is not ok:
                    raise RuntimeError("put failed")
        elif mode == "async":
            put_async = store.put_message_async
            for m in msgs:
                if put_async(m).result().status is not ok:
                    raise RuntimeError("put failed")
        else:
            put = store.put_message
            for m in msgs:
                if put(m).status is not ok:
                    raise RuntimeError("put failed")


def collected(python: str, root: str, mode: str, n: int) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, __file__]
    out = subprocess.run(
        [*cmd, "--run", str(n), "--mode", mode, "--store", root],
        capture_output=True,
        text=True,
        check=True,
    )
    m = re.search(r"Collected : (\d+)", out.stderr)
    if m is None:
        raise RuntimeError(f"no callgrind total in:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter to count")
    ap.add_argument("--dir", default=None, help="where to make the scratch stores (default: temp)")
    ap.add_argument("--mode", choices=["single", "async", "batch", "floor"], default="single")
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--run", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run is not None:
        run(args.store, args.mode, args.run)
        return
    scratch = tempfile.mkdtemp(prefix="rocketstore-cg-put-", dir=args.dir)
    try:
        few = collected(args.python, os.path.join(scratch, "few"), args.mode, FEW)
        many = collected(args.python, os.path.join(scratch, "many"), args.mode, MANY)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ext = "off" if os.environ.get("ROCKETSTORE_NO_EXTENSIONS") else "on"
    print(f"{args.mode} (extensions {ext}): {(many - few) / (MANY - FEW):,.0f} instructions a put")


if __name__ == "__main__":
    main()
