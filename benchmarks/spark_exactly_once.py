"""Exactly-once streaming writes through brokers: their cost against at-least-once, and many
kill -9 restarts.

    python benchmarks/spark_exactly_once.py [--rows N] [--pairs K] [--per-trigger M]
    python benchmarks/spark_exactly_once.py --crash-rounds R [--rows N] [--per-trigger M]
    python benchmarks/spark_exactly_once.py --at-least-once-only [--pairs K] ...

Starts a name server and two broker groups (two queues a topic each; the transaction checks
at RocketMQ's defaults: a half is checked once 6 s old, a round a minute) in this process, as
the tests do (tests/support/eos_cluster.py), and fills a source topic with N rows of 100
bytes, each body a unique id. The queries run in a child process (tests/support/eos_spark.py).

Throughput (default): K alternated pairs of a streaming query (local[2,4], availableNow,
maxOffsetsPerTrigger M) reading the source through the brokers and writing every row into a
new topic, once at-least-once and once with ``exactlyOnce=true`` (the order alternates in
every pair); prints rows a second of each run with the load average before it, the medians
and their ratio. On a loaded machine the figures say little by themselves; the ratio of
alternated pairs says more. ``--at-least-once-only`` runs the at-least-once query alone K
times: run it from two trees in turn (PYTHONPATH=<tree>/src) to compare their default path.

Crash rounds (``--crash-rounds R``): for each crash point (task, precommit, mid_end,
postcommit), R times: a child process runs the exactly-once query from its checkpoint with the
point set at a batch drawn from a seeded generator, is killed with SIGKILL (its whole session)
when it gets there, and the query is then run to its end; a consumer pulls the
destination topic and counts every id: lost, duplicated and unknown ids are printed (all 0
when the guarantee holds).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.eos_cluster import ROCKETMQ_CHECKS, Cluster
from support.eos_spark import Child

BROKERS = ("bench-a", "bench-b")
ARROW_ROWS = "10000"  # Spark's default maxRecordsPerBatch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--per-trigger", type=int, default=5_000)
    ap.add_argument("--crash-rounds", type=int, default=0)
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument(
        "--at-least-once-only",
        action="store_true",
        help="run only the at-least-once query K times (to compare two trees: run this "
        "script from each in turn)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="eos-bench-") as tmp_s:
        tmp = Path(tmp_s)
        child = Child(tmp, run_s=3600.0)
        c = Cluster(tmp / "brokers", checks=ROCKETMQ_CHECKS, commit_log_size=1 << 30)
        try:
            for name in BROKERS:
                c.start(name)
            expected = c.fill("BENCH_SRC", args.rows, width=100, per_send=256)
            if args.crash_rounds:
                _crash_rounds(c, child, tmp, expected, args)
            else:
                _pairs(c, child, tmp, args)
        finally:
            c.stop()


def _pairs(c: Cluster, child: Child, tmp: Path, args: Any) -> None:
    rates: dict[str, list[float]] = {"at-least-once": [], "exactly-once": []}
    for i in range(args.pairs):
        order = ["false", "true"] if i % 2 == 0 else ["true", "false"]
        if args.at_least_once_only:
            order = ["false"]
        for eos in order:
            name = "exactly-once" if eos == "true" else "at-least-once"
            dst = f"BENCH_DST_{i}_{eos}"
            c.create_topic(dst)
            load = os.getloadavg()[0]
            ckpt = tmp / f"ckpt-{i}-{eos}"
            run = ["stream", c.ns, "BENCH_SRC", dst, str(ckpt), str(args.per_trigger), eos]
            elapsed = child.run([*run, ARROW_ROWS])
            assert elapsed is not None
            rate = args.rows / elapsed
            rates[name].append(rate)
            print(f"pair {i} {name:14s} {rate:10.0f} rows/s  (load average {load:.1f})", flush=True)
    alo = statistics.median(rates["at-least-once"])
    if args.at_least_once_only:
        print(f"median at-least-once {alo:.0f} rows/s")
        return
    eo = statistics.median(rates["exactly-once"])
    print(
        f"median at-least-once {alo:.0f} rows/s, exactly-once {eo:.0f} rows/s, ratio {eo / alo:.2f}"
    )


def _crash_rounds(c: Cluster, child: Child, tmp: Path, expected: set[bytes], args: Any) -> None:
    rng = random.Random(args.seed)
    batches = max(1, args.rows // args.per_trigger)
    for point in ("task", "precommit", "mid_end", "postcommit"):
        lost = dup = unknown = 0
        for r in range(args.crash_rounds):
            dst = f"CRASH_{point}_{r}"
            c.create_topic(dst)
            ckpt = tmp / f"ckpt-{point}-{r}"
            run = ["stream", c.ns, "BENCH_SRC", dst, str(ckpt), str(args.per_trigger), "true"]
            batch = rng.randrange(batches)
            child.run([*run, ARROW_ROWS], f"{point}:{batch}", expect_crash=True)
            child.run([*run, ARROW_ROWS])
            got = c.bodies(dst)
            lost += len(expected - set(got))
            dup += sum(n - 1 for n in got.values() if n > 1)
            unknown += len(set(got) - expected)
            print(f"{point} round {r} (batch {batch}): {len(got)} ids", flush=True)
        print(
            f"{point}: {args.crash_rounds} kills, lost {lost}, duplicated {dup}, unknown {unknown}"
        )


if __name__ == "__main__":
    main()
