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
import re
import shutil
import signal
import subprocess
import sys
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

    from ..columns._arrow import ARROW_SCHEMA, QueueRange, RangeDecoder
    from ..store.read._reader import StoreReader

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


# ---- through brokers ---------------------------------------------------------------------------

BROKER_COUNT = 200_000
BROKER_QUEUES = 4
_NS_LINE = re.compile(r"^name server listening on (\S+)$", re.M)
_BROKER_LINE = re.compile(r"^broker \S+ \(.*\) listening on ([^,\s]+),", re.M)


class _Server:
    """A ``rocketstore namesrv`` / ``broker`` process (its output in ``log``)."""

    def __init__(self, args: list[str], log: Path, pattern: re.Pattern[str]) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 (closed by stop)
        cmd = [sys.executable, "-c", "from rocketstore.cli import main; main()", *args]
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            found = pattern.search(log.read_text(errors="replace"))
            if found:
                self.address = found.group(1)
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{args[0]} did not start: {log.read_text(errors='replace')}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


def _broker_conf(path: Path, name: str) -> Path:
    # pulls of up to 2,048 messages / 8 MiB (RocketMQ's defaults are 32 / 256 KiB)
    path.write_text(
        f"brokerName={name}\nmaxTransferCountOnMessageInMemory=2048\n"
        "maxTransferBytesOnMessageInMemory=8388608\nmaxTransferCountOnMessageInDisk=2048\n"
        "maxTransferBytesOnMessageInDisk=8388608\nflushDiskType=ASYNC_FLUSH\n"
    )
    return path


@scenario(
    "spark-broker",
    "spark",
    "data source through brokers: reads via one and two broker groups vs path mode, writes "
    "with one and two tasks",
)
def spark_broker(store_dir: str, count: int | None) -> Figures:
    from ..client._admin import AdminClient

    n = count or BROKER_COUNT
    root = Path(store_dir)
    root.mkdir(parents=True, exist_ok=True)
    servers: list[_Server] = []
    spark = None
    try:
        ns = _Server(["namesrv", "--listen", "127.0.0.1:0"], root / "namesrv.log", _NS_LINE)
        servers.append(ns)
        brokers: dict[str, _Server] = {}
        for name in ("broker-a", "broker-b"):
            args = ["broker", "--store", str(root / name), "--namesrv", ns.address]
            args += ["--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0"]
            args += ["-c", str(_broker_conf(root / f"{name}.conf", name))]
            brokers[name] = _Server(args, root / f"{name}.log", _BROKER_LINE)
            servers.append(brokers[name])
        with AdminClient(ns.address) as admin:
            for topic, groups in (
                ("One", ["broker-a"]),
                ("Two", list(brokers)),
                ("W", ["broker-a"]),
            ):
                for name in groups:
                    admin.create_topic(
                        brokers[name].address,
                        topic,
                        read_queue_nums=BROKER_QUEUES,
                        write_queue_nums=BROKER_QUEUES,
                    )
            deadline = time.monotonic() + 30
            while True:
                route = admin.route("Two")
                if route is not None and len(route.brokers) == 2 and admin.route("W"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the name server has no route for the topics")
                time.sleep(0.1)
        spark = _session()
        rows = spark.range(n, numPartitions=2).selectExpr(
            f"encode(lpad(CAST(id AS STRING), {BODY_SIZE}, 'x'), 'utf-8') AS body",
            "CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS tags",
        )
        rows.cache().count()

        def write(topic: str, tasks: int, limit: int | None = None) -> float:
            df = rows.limit(limit) if limit else rows
            df = df.selectExpr(f"'{topic}' AS topic", "body", "tags").repartition(tasks)
            df.cache().count()
            started = time.perf_counter()
            df.write.format("rocketstore").option("namesrv", ns.address).option(
                "sendBatchRows", "512"
            ).mode("append").save()
            seconds = time.perf_counter() - started
            df.unpersist()
            return seconds

        write("W", 1, 1000)  # warm-up: Python workers, connections
        write("One", 2)
        write("Two", 2)
        writes, write_cpu = _best_rounds(
            {"write_1": lambda: write("W", 1), "write_2": lambda: write("W", 2)}, 3
        )
        rows.unpersist()

        def frame(topic: str, *, path: str | None = None) -> Any:
            r = spark.read.format("rocketstore").option("topics", topic)
            r = r.option("path", path) if path else r.option("namesrv", ns.address)
            return r.option("maxRowsPerPartition", "50000").load()

        frames = {
            "path_one": frame("One", path=str(root / "broker-a")),
            "broker_one": frame("One"),
            "broker_two": frame("Two"),
        }
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
        for name, got in answers.items():
            if got[:2] != (n, n * BODY_SIZE):
                raise RuntimeError(f"{name} answered {got}, expected {n} rows")
    finally:
        if spark is not None:
            spark.stop()
        for server in reversed(servers):
            server.stop()
    rate = {name: n / s for name, s in reads.items()}
    write_rate = {name: n / s for name, s in writes.items()}
    return {
        "messages": n,
        "path_rows_per_s": round(rate["path_one"]),
        "broker_one_rows_per_s": round(rate["broker_one"]),
        "broker_two_rows_per_s": round(rate["broker_two"]),
        "one_vs_path": round(rate["broker_one"] / rate["path_one"], 3),
        "one_vs_path_target": 0.5,
        "two_vs_one": round(rate["broker_two"] / rate["broker_one"], 3),
        "two_vs_one_target": 1.6,
        "path_cpu_us_per_row": round(read_cpu["path_one"] / n * 1e6, 2),
        "broker_one_cpu_us_per_row": round(read_cpu["broker_one"] / n * 1e6, 2),
        "broker_two_cpu_us_per_row": round(read_cpu["broker_two"] / n * 1e6, 2),
        "write_1_task_rows_per_s": round(write_rate["write_1"]),
        "write_2_tasks_rows_per_s": round(write_rate["write_2"]),
        "write_2_vs_1": round(write_rate["write_2"] / write_rate["write_1"], 3),
        "write_2_vs_1_target": 1.5,
        "write_1_cpu_us_per_row": round(write_cpu["write_1"] / n * 1e6, 2),
        "write_2_cpu_us_per_row": round(write_cpu["write_2"] / n * 1e6, 2),
        "cpus": os.cpu_count() or 0,
    }
