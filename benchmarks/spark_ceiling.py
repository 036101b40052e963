"""Reads of rocketstore against the ceiling source, with the CPU they use.

    python benchmarks/spark_ceiling.py [--rows N] [--rounds K] [--store DIR] [--scratch DIR]
        [--writes]

Writes N messages of 1 KiB (TAGS + KEYS, the bench's rows) with the writer outside Spark
into ``--store`` unless it already holds a store (without ``--store``: into a temporary
directory, removed afterwards; give one to reuse the input between runs), then times ``count + sum(length(body)) +
countDistinct(queue_id)`` over rocketstore and ``rocketstore_ceiling`` (every column, and
``queue_id, body``) and Parquet in alternating rounds. For each run it prints the wall time
and the CPU time the machine spent meanwhile (all processes, from /proc/stat: other load on
the machine shows up here too) and the CPU time of this process and everything under it
(the JVM, Spark's Python workers): CPU a row is far less disturbed by other load than wall
time. ``--writes``: one-task writes of the bench's rows into rocketstore against the
ceiling's writer, which discards its Arrow batches. Everything else it writes (the Parquet
copy, the written stores) goes into a new temporary directory under ``--scratch`` (the
system's temporary directory by default), removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rocketstore.bench.spark import tree_cpu_seconds


def cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine so far (user + nice + system + irq + softirq)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    ticks = sum(int(v) for v in fields[:3]) + int(fields[5]) + int(fields[6])
    return ticks / os.sysconf("SC_CLK_TCK")


def input_store(given: str | None, rows: int, scratch: Path) -> Path:
    """The store the reads run on: ``given`` (filled first when it holds no store) or a new
    one in the scratch directory."""
    store = Path(given) if given else scratch / "input"
    if not (store / "commitlog").is_dir():
        if store.exists() and any(store.iterdir()):
            raise SystemExit(f"{store} holds files but no store: give an empty or new directory")
        make_store(store, rows)
    return store


def make_store(path: Path, rows: int) -> None:
    import pyarrow as pa

    from rocketstore.bench.spark import BODY_SIZE, TOPIC
    from rocketstore.spark._path_writer import WriteSettings, write_batches

    batches = []
    for lo in range(0, rows, 10_000):
        ids = range(lo, min(lo + 10_000, rows))
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "topic": pa.array([TOPIC] * len(ids)),
                    "body": pa.array(
                        [str(i).rjust(BODY_SIZE, "x").encode() for i in ids], pa.binary()
                    ),
                    "tags": pa.array(["even" if i % 2 == 0 else "odd" for i in ids]),
                    "keys": pa.array([f"k{i}" for i in ids]),
                }
            )
        )
    columns = ("topic", "body", "tags", "keys")
    settings = WriteSettings(str(path), None, None, {}, 4, 1000, columns, "ASYNC_FLUSH", 2)
    write_batches(settings, iter(batches))


def writes(rows: int, rounds: int, target: Path, write_buffers: int | None = None) -> None:
    """One-task writes of the bench's cached rows: rocketstore against the discarding writer."""
    from rocketstore.bench.spark import BODY_SIZE, TOPIC, _session
    from rocketstore.spark._ceiling import NAME, CeilingDataSource

    spark = _session()
    spark.dataSource.register(CeilingDataSource)
    source = spark.range(rows, numPartitions=2).selectExpr(
        f"'{TOPIC}' AS topic",
        f"encode(lpad(CAST(id AS STRING), {BODY_SIZE}, 'x'), 'utf-8') AS body",
        "CONCAT('k', CAST(id AS STRING)) AS keys",
        "CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS tags",
    )
    source.cache().count()
    source.limit(1000).coalesce(1).write.format(NAME).mode("append").save()
    warm = source.limit(1000).coalesce(1).write.format("rocketstore")
    warm.option("path", str(target / "warm")).mode("append").save()
    best: dict[str, float] = {}
    per_row: dict[str, float] = {}
    try:
        for _ in range(rounds):
            for name in ("ceiling", "rocketstore"):
                shutil.rmtree(target / "store", ignore_errors=True)
                w = source.coalesce(1).write.format(NAME if name == "ceiling" else "rocketstore")
                if name == "rocketstore":
                    w = w.option("path", str(target / "store"))
                    if write_buffers is not None:
                        w = w.option("writeBuffers", str(write_buffers))
                own = tree_cpu_seconds()
                started = time.perf_counter()
                w.mode("append").save()
                seconds = time.perf_counter() - started
                own = tree_cpu_seconds() - own
                best[name] = max(best.get(name, 0.0), rows / seconds)
                per_row[name] = min(per_row.get(name, 1e9), own / rows * 1e6)
                print(
                    f"write {name:12s} {rows / seconds:>10,.0f} rows/s  {seconds:5.2f} s  "
                    f"Spark's cpu {own / rows * 1e6:.2f} µs/row",
                    flush=True,
                )
    finally:
        spark.stop()
    for name, rate in best.items():
        print(f"best write {name:12s} {rate:>10,.0f} rows/s   {per_row[name]:.2f} µs CPU a row")
    ratio = best["rocketstore"] / best["ceiling"]
    print(
        f"rocketstore ÷ ceiling, write: {ratio:.3f} (CPU a row: "
        f"{per_row['ceiling'] / per_row['rocketstore']:.3f})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store", default=None, help="input store (default: a temporary one)")
    ap.add_argument("--scratch", default=None, help="where temporary output goes")
    ap.add_argument("--only", default="", help="comma-separated sources to run")
    ap.add_argument("--writes", action="store_true", help="time writes instead of reads")
    ap.add_argument("--write-buffers", type=int, default=None, help="option writeBuffers")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocketstore-ceiling-", dir=args.scratch) as tmp:
        scratch = Path(tmp)
        if args.writes:
            writes(args.rows, args.rounds, scratch / "written", args.write_buffers)
            return
        reads(args, input_store(args.store, args.rows, scratch), scratch)


def reads(args: argparse.Namespace, store: Path, scratch: Path) -> None:
    from rocketstore.bench.spark import TWO_COLUMNS, _query, _session
    from rocketstore.spark._ceiling import NAME, CeilingDataSource

    spark = _session()
    spark.dataSource.register(CeilingDataSource)

    def reader(fmt: str, schema: str | None) -> Any:
        r = spark.read.format(fmt).option("path", str(store))
        return (r.schema(schema) if schema else r).load()

    frames = {
        "ceiling_full": reader(NAME, None),
        "rocketstore_full": reader("rocketstore", None),
        "ceiling_two": reader(NAME, TWO_COLUMNS),
        "rocketstore_two": reader("rocketstore", TWO_COLUMNS),
    }
    parquet = scratch / "parquet"
    if not parquet.is_dir():
        frames["rocketstore_full"].write.option("compression", "none").parquet(str(parquet))
    frames["parquet"] = spark.read.parquet(str(parquet))
    if args.only:
        frames = {k: v for k, v in frames.items() if k in args.only.split(",")}
    for df in frames.values():
        _query(df)
    best: dict[str, float] = {}
    per_row: dict[str, float] = {}
    try:
        for _ in range(args.rounds):
            for name, df in frames.items():
                cpu = cpu_seconds()
                own = tree_cpu_seconds()
                seconds, answer = _query(df)
                own = tree_cpu_seconds() - own
                used = cpu_seconds() - cpu
                rows = answer[0]
                best[name] = max(best.get(name, 0.0), rows / seconds)
                per_row[name] = min(per_row.get(name, 1e9), own / rows * 1e6)
                print(
                    f"{name:17s} {rows / seconds:>10,.0f} rows/s  {seconds:5.2f} s  "
                    f"machine cpu {used:5.2f} s ({used / seconds:.2f} cores), "
                    f"Spark's cpu {own / rows * 1e6:.2f} µs/row",
                    flush=True,
                )
    finally:
        spark.stop()
    for name, rate in best.items():
        print(f"best {name:17s} {rate:>10,.0f} rows/s   {per_row[name]:.2f} µs CPU a row")
    for kind in ("full", "two"):
        if f"rocketstore_{kind}" in best and f"ceiling_{kind}" in best:
            ratio = best[f"rocketstore_{kind}"] / best[f"ceiling_{kind}"]
            cpu_ratio = per_row[f"ceiling_{kind}"] / per_row[f"rocketstore_{kind}"]
            print(f"rocketstore ÷ ceiling, {kind}: {ratio:.3f} (CPU a row: {cpu_ratio:.3f})")


if __name__ == "__main__":
    main()
