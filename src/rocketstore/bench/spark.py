"""Spark benchmarks: the rocketstore data source against the ceiling of PySpark's Python data
sources and against Parquet, in one Spark session.

``spark-read-write`` (local[2], N messages of 1 KiB with TAGS and KEYS, default 400k):

- write: the cached rows written through one task (``coalesce(1)``: a store has one owner)
  into rocketstore, and into ``rocketstore_ceiling``'s writer, which discards its Arrow
  batches (the most a Python Arrow writer can take from one task);
- read: ``count + sum(length(body)) + countDistinct(queue_id)`` over rocketstore with every
  column and with ``.schema("queue_id int, body binary")``, over ``rocketstore_ceiling`` (the
  same partitions and rows, decoding nothing) with the same two schemas, and over the rows
  written as uncompressed Parquet;
- decode: the store → Arrow batches outside Spark (one thread, every column and the two).

Before anything is timed, a 1,000-row write and one read of each source start Spark's Python
workers and warm the JVM. Writes and reads are then timed in alternating rounds (every source
once a round, five rounds) and the best of each is reported, so a change in the machine's
speed hits every source alike. Ratios: rocketstore ÷ ceiling and rocketstore ÷ Parquet. Each
job's CPU time (this process, the JVM and Spark's Python workers; the least of the rounds) is
reported as µs a row too: on a machine shared with other work it moves far less than wall
time, and the ratio of two sources' CPU a row is what their throughputs' ratio would be with
the CPU as the limit.
Needs the ``spark`` extra and Java.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import Figures, scenario

DEFAULT_COUNT = 400_000
BODY_SIZE = 1024
TOPIC = "SparkBench"
ROUNDS = 5
TWO_COLUMNS = "queue_id int, body binary"


def _session() -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rocketstore-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds used so far by this process and every process below it (Spark's JVM and
    its Python workers), live or finished. Per row, far less disturbed by other work on the
    machine than wall time."""
    root = root or os.getpid()
    parent: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    total = 0
    for pid, ticks in used.items():
        p = pid
        while p and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += ticks
    return total / os.sysconf("SC_CLK_TCK")


def _query(df: Any) -> tuple[float, tuple[int, int, int]]:
    """Seconds for count + sum(length(body)) + countDistinct(queue_id), and the answer."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    row = df.agg(F.count(F.lit(1)), F.sum(F.length("body")), F.countDistinct("queue_id")).collect()[
        0
    ]
    return time.perf_counter() - started, (int(row[0]), int(row[1] or 0), int(row[2]))


def _best_rounds(
    jobs: dict[str, Callable[[], float]], rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Run every job once a round, in the same order each round: the best wall time and the
    least CPU time (this process and below) of each."""
    best = {name: float("inf") for name in jobs}
    cpu = {name: float("inf") for name in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            used = tree_cpu_seconds()
            best[name] = min(best[name], job())
            cpu[name] = min(cpu[name], tree_cpu_seconds() - used)
    return best, cpu


def decode_rate(store: str, two_columns: bool, rounds: int = 3) -> float:
    """Rows/s of store → Arrow batches outside Spark (one thread, best of ``rounds``)."""
    import pyarrow as pa

    from ..spark._arrow import ARROW_SCHEMA, QueueRange, RangeDecoder
    from ..store._reader import StoreReader

    schema = ARROW_SCHEMA
    if two_columns:
        schema = pa.schema([ARROW_SCHEMA.field("queue_id"), ARROW_SCHEMA.field("body")])
    best = 0.0
    for _ in range(rounds):
        with StoreReader(store) as reader:
            decoder = RangeDecoder(reader, schema=schema)
            rows = 0
            started = time.perf_counter()
            for topic in reader.topics():
                for qid in reader.queue_ids(topic):
                    r = QueueRange(topic, qid, 0, reader.max_offset(topic, qid))
                    rows += sum(b.num_rows for b in decoder.batches(r))
            best = max(best, rows / (time.perf_counter() - started))
    return best


@scenario(
    "spark-read-write",
    "spark",
    "data source write and read of 1 KiB messages vs the Python data source ceiling and Parquet",
)
def spark_read_write(store_dir: str, count: int | None) -> Figures:
    from ..spark._ceiling import NAME as CEILING
    from ..spark._ceiling import CeilingDataSource

    n = count or DEFAULT_COUNT
    spark = _session()
    spark.dataSource.register(CeilingDataSource)
    root = Path(store_dir)
    store = root / "store"
    source = spark.range(n, numPartitions=2).selectExpr(
        f"'{TOPIC}' AS topic",
        f"encode(lpad(CAST(id AS STRING), {BODY_SIZE}, 'x'), 'utf-8') AS body",
        "CONCAT('k', CAST(id AS STRING)) AS keys",
        "CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS tags",
    )
    source.cache().count()  # generate the rows before timing the writes
    # warm-up (untimed): starts the Python workers and imports the data sources in them
    warm = source.limit(1000).coalesce(1).write
    warm.format("rocketstore").option("path", str(root / "warmup")).mode("append").save()
    source.limit(1000).coalesce(1).write.format(CEILING).mode("append").save()

    def write_rocketstore() -> float:
        shutil.rmtree(store, ignore_errors=True)
        started = time.perf_counter()
        # one write task: the store has one owner (see docs/spark.md)
        source.coalesce(1).write.format("rocketstore").option("path", str(store)).mode(
            "append"
        ).save()
        return time.perf_counter() - started

    def write_ceiling() -> float:
        started = time.perf_counter()
        source.coalesce(1).write.format(CEILING).mode("append").save()
        return time.perf_counter() - started

    writes, write_cpu = _best_rounds(
        {"ceiling": write_ceiling, "rocketstore": write_rocketstore}, ROUNDS
    )
    source.unpersist()

    def reader(fmt: str, schema: str | None) -> Any:
        r = spark.read.format(fmt).option("path", str(store))
        return (r.schema(schema) if schema else r).load()

    frames = {
        "ceiling_full": reader(CEILING, None),
        "rocketstore_full": reader("rocketstore", None),
        "ceiling_two": reader(CEILING, TWO_COLUMNS),
        "rocketstore_two": reader("rocketstore", TWO_COLUMNS),
    }
    parquet = str(root / "parquet")
    frames["rocketstore_full"].write.option("compression", "none").parquet(parquet)
    frames["parquet"] = spark.read.parquet(parquet)
    answers: dict[str, tuple[int, int, int]] = {}

    def job(name: str) -> Callable[[], float]:
        def run() -> float:
            seconds, answers[name] = _query(frames[name])
            return seconds

        return run

    jobs = {name: job(name) for name in frames}
    for run in jobs.values():  # warm-up (untimed)
        run()
    reads, read_cpu = _best_rounds(jobs, ROUNDS)
    spark.stop()
    want = (n, n * BODY_SIZE, answers["parquet"][2])
    for name, got in answers.items():
        if got != want:
            raise RuntimeError(f"{name} answered {got}, expected {want}")
    decode_full = decode_rate(str(store), False)
    decode_two = decode_rate(str(store), True)
    rate = {name: n / s for name, s in reads.items()}
    write_rate = {name: n / s for name, s in writes.items()}
    us = {name: round(c / n * 1e6, 2) for name, c in read_cpu.items()}
    write_us = {name: round(c / n * 1e6, 2) for name, c in write_cpu.items()}
    return {
        "messages": n,
        "write_rows_per_s": round(write_rate["rocketstore"]),
        "write_ceiling_rows_per_s": round(write_rate["ceiling"]),
        "write_vs_ceiling": round(write_rate["rocketstore"] / write_rate["ceiling"], 3),
        "write_cpu_us_per_row": write_us["rocketstore"],
        "write_ceiling_cpu_us_per_row": write_us["ceiling"],
        "write_target": 0.7,
        "read_full_rows_per_s": round(rate["rocketstore_full"]),
        "ceiling_full_rows_per_s": round(rate["ceiling_full"]),
        "read_full_vs_ceiling": round(rate["rocketstore_full"] / rate["ceiling_full"], 3),
        "read_full_cpu_us_per_row": us["rocketstore_full"],
        "ceiling_full_cpu_us_per_row": us["ceiling_full"],
        "read_two_rows_per_s": round(rate["rocketstore_two"]),
        "ceiling_two_rows_per_s": round(rate["ceiling_two"]),
        "read_two_vs_ceiling": round(rate["rocketstore_two"] / rate["ceiling_two"], 3),
        "read_two_cpu_us_per_row": us["rocketstore_two"],
        "ceiling_two_cpu_us_per_row": us["ceiling_two"],
        "read_target": 0.9,
        "parquet_rows_per_s": round(rate["parquet"]),
        "parquet_cpu_us_per_row": us["parquet"],
        "read_full_vs_parquet": round(rate["rocketstore_full"] / rate["parquet"], 3),
        "read_two_vs_parquet": round(rate["rocketstore_two"] / rate["parquet"], 3),
        "decode_full_rows_per_s": round(decode_full),
        "decode_two_rows_per_s": round(decode_two),
        "decode_target": 1_000_000,
    }
