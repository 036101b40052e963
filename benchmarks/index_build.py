"""Microseconds per ``IndexService.build_index`` call: one record with a UNIQ_KEY and one KEYS
value, the default file sizes (5,000,000 slots, 20,000,000 entries).

    python benchmarks/index_build.py [--calls N] [--dir DIR] [--instructions]

Two figures: ``fresh``, the first N records into a new index file (slot pages get their disk
blocks as keys land on them, as on a new broker), and ``warm``, N more records into the same
file after every slot page has its blocks. ``ROCKETSTORE_NO_EXTENSIONS=1`` in the environment
times the pure-Python code. ``--instructions`` counts instructions instead (valgrind's
callgrind, user space only: the disk-block reservations' system calls are not in it): both
phases with 10,000 and with 30,000 records, the difference (less the same loop without the
index) divided by the 40,000 calls it adds.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from rocketstore import ManualClock
from rocketstore._speedups import EXTENSIONS_ENABLED
from rocketstore.store.log._record import DispatchRequest
from rocketstore.store.queue._index import IndexService


def _requests(n: int, start: int) -> list[DispatchRequest]:
    ts = 1_795_000_000_000
    return [
        DispatchRequest(
            "BenchTopic",
            i % 4,
            (start + i) * 1024,
            1024,
            0,
            ts + (start + i) // 10,
            start + i,
            f"order-{start + i:010d}",
            f"7F000001{start + i:024X}",
            0,
            0,
        )
        for i in range(n)
    ]


def _skip(req: DispatchRequest) -> None:
    """What the loop costs without the index (subtracted from the instruction counts)."""


def _time(service: IndexService, reqs: list[DispatchRequest]) -> float:
    build = service.build_index if not os.environ.get("INDEX_BUILD_SKIP") else _skip
    t0 = time.perf_counter()
    for r in reqs:
        build(r)
    return (time.perf_counter() - t0) / len(reqs) * 1e6


def _collected(calls: int, scratch: str | None, skip: bool) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
    out = subprocess.run(
        [*cmd, __file__, "--calls", str(calls), *(["--dir", scratch] if scratch else [])],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "INDEX_BUILD_SKIP": "1" if skip else ""},
    )
    m = re.search(r"Collected : (\d+)", out.stderr)
    if m is None:
        raise RuntimeError(f"no callgrind total in:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--dir", default=None, help="where the index file goes (a temp dir)")
    ap.add_argument("--instructions", action="store_true", help="count with callgrind")
    args = ap.parse_args()
    build = "compiled" if EXTENSIONS_ENABLED else "python"
    if args.instructions:
        counts = [_collected(n, args.dir, skip) for skip in (False, True) for n in (10_000, 30_000)]
        index = (counts[1] - counts[0]) - (counts[3] - counts[2])
        print(f"{build}: {index / 40_000:,.0f} instructions a build_index call")
        return
    root = tempfile.mkdtemp(prefix="index-build-", dir=args.dir)
    try:
        service = IndexService(
            os.path.join(root, "index"),
            slot_num=5_000_000,
            index_num=20_000_000,
            clock=ManualClock(1_795_000_000_000),
        )
        fresh = _time(service, _requests(args.calls, 0))
        for f in service.files:
            f.allocate_slot_pages(range(len(f._slot_pages)))
        warm = _time(service, _requests(args.calls, args.calls))
        service.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{build}: fresh {fresh:.2f} us/call, warm {warm:.2f} us/call ({args.calls} calls each)")


if __name__ == "__main__":
    main()
