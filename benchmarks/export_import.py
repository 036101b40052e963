"""``rocketstore export`` and ``import`` as a user runs them: without Spark (pyarrow in the
command's process) against ``--spark`` (local[2], a JVM started by the command), timed as whole
commands.

    python benchmarks/export_import.py [--messages 50,100000] [--rounds 3] [--dir DIR]

For each size a store is filled with messages of 1 KiB bodies (random bytes, each message's
own) with TAGS and KEYS over 4 queues.
Each round runs, alternating the two ways so a change in the machine's speed hits both alike:
export to Parquet, export to JSON lines, and import of the Parquet export into a new store. A
command's time is its wall time from start to exit (the interpreter's and, with Spark, the
JVM's start-up included: what the user waits for; the JVM is not a child the command waits
for, so its CPU time cannot be counted here). Reported: every round's time and the median, each
round's Spark ÷ pyarrow ratio (a round is an alternated pair), and the load average at the start
and the end. Everything is made under a new temporary directory (or one under
``--dir``) and removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "rocketstore.cli"]
BODY = 1024
QUEUES = 4


def _body(noise: bytes, i: int) -> bytes:
    start = (i * 7919) % (len(noise) - BODY)
    return i.to_bytes(8, "big") + noise[start : start + BODY - 8]


def fill(root: Path, count: int) -> None:
    from rocketstore import Message, MessageStore, StoreConfig

    noise = os.urandom(BODY * 64)  # bodies that differ (one body repeated compresses to nothing)
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=256 << 20)
    with MessageStore(config) as store:
        for lo in range(0, count, 512):
            batch = [
                Message("Bench", _body(noise, i), i % QUEUES, tags="TagA", keys=[f"k{i}"])
                for i in range(lo, min(count, lo + 512))
            ]
            for q in range(QUEUES):
                mine = [m for m in batch if m.queue_id == q]
                if mine:
                    assert store.put_messages(mine).ok


def run(args: list[str], cwd: Path) -> float:
    """The command's wall time in seconds."""
    began = time.perf_counter()
    done = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return wall


def measure(work: Path, count: int, rounds: int) -> dict[str, list[float]]:
    store = work / f"store-{count}"
    fill(store, count)
    times: dict[str, list[float]] = {}
    for k in range(rounds):
        ways = [("pyarrow", ()), ("spark", ("--spark",))]
        if k % 2:
            ways.reverse()
        for way, extra in ways:
            base = work / f"{way}-{count}-{k}"
            steps = {
                "export parquet": ["export", "--store", str(store), "--to", f"{base}.parquet"],
                "export json": [
                    *("export", "--store", str(store), "--to", f"{base}.json"),
                    *("--format", "json"),
                ],
                "import parquet": [
                    *("import", "--store", f"{base}.store", "--from", f"{base}.parquet"),
                    *("--commit-log-file-size", str(256 << 20)),
                ],
            }
            for step, args in steps.items():
                times.setdefault(f"{step} ({way})", []).append(run([*args, *extra], work))
            for suffix in (".parquet", ".json", ".store"):
                shutil.rmtree(f"{base}{suffix}", ignore_errors=True)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", default="50,100000", help="store sizes, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default=None, help="where to make the temporary directory")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="export-import-", dir=a.dir))
    try:
        print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
        for count in (int(n) for n in a.messages.split(",")):
            print(f"\n{count} messages of {BODY} B, {a.rounds} rounds (wall seconds)")
            times = measure(work, count, a.rounds)
            for name, walls in times.items():
                rounds = " ".join(f"{w:7.2f}" for w in walls)
                print(f"  {name:26s} {rounds}   median {statistics.median(walls):7.2f}")
            for step in ("export parquet", "export json", "import parquet"):
                plain, spark = times[f"{step} (pyarrow)"], times[f"{step} (spark)"]
                ratios = " ".join(f"{b / a:6.1f}" for a, b in zip(plain, spark, strict=True))
                print(f"  {step}: Spark ÷ pyarrow by round {ratios}")
        print(f"\nload average at end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
