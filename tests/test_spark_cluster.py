"""The data source on a real Spark standalone cluster (a master and two workers of one core each,
every one a JVM of its own; ``tests/support/spark_cluster.py``), not ``local[*]``: the executors, other
processes than the driver's, read, write, pull from and send to brokers, and stream.

On it: a path-mode read whose partitions both executors run, ``read_topic`` over a tiered store
after retention, a write from tasks on both executors into one store, a read and a write through
brokers of ``rocketstore serve``, and a streaming query stopped in the middle and restarted from
its checkpoint that writes every row once.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from conftest import spark_session
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.client._admin import AdminClient
from rocketstore.spark import read_topic
from rocketstore.spark._broker import drop_pool
from support.spark_cluster import StandaloneCluster
from support.tier_files import expire_oldest, store_rows, tier_store, wait_dispatched
from support.waits import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster]

EXECUTORS = 2
WAIT_S = 240.0  # a busy machine starts JVMs slowly; every wait is a bounded poll
EXECUTOR_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": str(EXECUTORS),
    "spark.python.worker.memory": "256m",
}
ORDER = ["topic", "queue_id", "queue_offset"]


def _executors(session: Any) -> int:
    return int(session.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1


@pytest.fixture
def cluster_spark(spark_cluster: StandaloneCluster, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The SparkSession on the cluster, once both executors have registered. The executors'
    Python is this interpreter, where rocketstore is installed."""
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    conf = dict(EXECUTOR_CONF)
    if os.environ.get("ROCKETSTORE_NO_EXTENSIONS"):
        conf["spark.executorEnv.ROCKETSTORE_NO_EXTENSIONS"] = os.environ[
            "ROCKETSTORE_NO_EXTENSIONS"
        ]
    session = spark_session(spark_cluster.url, conf)
    assert wait_until(lambda: _executors(session) == EXECUTORS, WAIT_S, 0.2), (
        f"{_executors(session)} of {EXECUTORS} executors registered; logs in {spark_cluster.root}"
    )
    return session


def _config(root: Path, **more: Any) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 64,
        **more,
    )


def _put(root: Path, topic: str, queues: int, count: int, start: int = 0) -> list[bytes]:
    bodies = [f"{topic}-{i}".encode() * (1 + i % 5) for i in range(start, start + count)]
    with MessageStore(_config(root)) as store:
        for i, body in enumerate(bodies, start):
            msg = Message(topic, body, i % queues, tags=f"t{i % 3}", keys=[f"k{i}"])
            assert store.put_message(msg).ok
        assert wait_until(
            lambda: (
                sum(store.get_max_offset_in_queue(topic, q) for q in range(queues)) >= start + count
            ),
            30,
        )
    return bodies


def _where_and_how_many(df: Any) -> list[tuple[str, int]]:
    """(the working directory of the executor that read it, rows) of every partition: an
    executor runs in its worker's work directory, so this names the executor."""
    return df.rdd.mapPartitions(lambda rows: [(os.getcwd(), sum(1 for _ in rows))]).collect()


# ---- path mode -------------------------------------------------------------------------------


def test_a_path_mode_read_runs_on_both_executors(
    cluster_spark: Any, spark_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    a = _put(store, "A", 4, 400)
    b = _put(store, "B", 2, 60)
    df = (
        cluster_spark.read.format("rocketstore")
        .option("path", str(store))
        .option("maxRowsPerPartition", "50")
        .load()
    )
    got = sorted((r.topic, bytes(r.body)) for r in df.select("topic", "body").collect())
    assert got == sorted([("A", x) for x in a] + [("B", x) for x in b])
    parts = _where_and_how_many(df)
    assert sum(n for _, n in parts) == 460 and len(parts) >= 10
    executors = {where for where, _ in parts}
    assert len(executors) == EXECUTORS  # the partitions were spread over both
    assert all(where.startswith(str(spark_cluster.root)) for where in executors)
    # a pushed filter plans fewer ranges, on the executors too
    one = df.where("topic = 'A' AND queue_id = 1 AND queue_offset >= 90")
    assert sorted(r.queue_offset for r in one.collect()) == list(range(90, 100))


def test_read_topic_over_a_tiered_store(
    cluster_spark: Any, open_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    s = open_store(file_reserved_time=1, delete_commit_log_files_interval=0)
    for n in range(200):
        for topic in ("SA", "SB"):
            body = f"{topic}{n}".encode() * (120 + n % 30)
            assert s.put_message(Message(topic, body, n % 3, tags=f"t{n % 4}")).ok
    wait_dispatched(s)
    path = str(s.config.store_path_root_dir)
    want = {t: store_rows(path, t).sort_by([(c, "ascending") for c in ORDER]) for t in ("SA", "SB")}
    tiered = tmp_path / "tiered"
    tier_store(path, tiered, files=3)
    expire_oldest(s, 3)  # the tier alone holds those messages now
    df = read_topic(cluster_spark, path=path, topics=["SA", "SB"], tiered_dir=str(tiered))
    got = [tuple(r) for r in df.select(*ORDER, "body").orderBy(*ORDER).collect()]
    expected = [
        tuple(row[c] for c in (*ORDER, "body"))
        for t in ("SA", "SB")
        for row in want[t].select([*ORDER, "body"]).to_pylist()
    ]
    assert len(got) == 400
    assert got == expected


def test_a_write_from_both_executors_into_one_store(cluster_spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "written"
    rows = [("W", f"w{i}".encode(), f"t{i % 2}", [f"k{i}"]) for i in range(600)]
    df = cluster_spark.createDataFrame(
        rows, "topic string, body binary, tags string, keys array<string>"
    )
    (
        df.repartition(4)
        .write.format("rocketstore")
        .option("path", str(target))
        .option("commitLogFileSize", str(1 << 20))
        .mode("append")
        .save()
    )
    back = cluster_spark.read.format("rocketstore").option("path", str(target)).load().collect()
    assert sorted((bytes(r.body), r.tags, r.keys) for r in back) == sorted(
        (b, t, k) for _, b, t, k in rows
    )
    assert {r.queue_id for r in back} == {0, 1, 2, 3}


# ---- through rocketstore serve ---------------------------------------------------------------


def _lines_until(proc: subprocess.Popen[bytes], pattern: re.Pattern[str], timeout: float) -> str:
    """What ``proc`` printed, once a line matches ``pattern``."""
    assert proc.stdout is not None
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
            if pattern.search(out.decode(errors="replace")):
                return out.decode(errors="replace")
    raise AssertionError(f"serve did not start: {out.decode(errors='replace')}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``rocketstore serve`` (name server and broker on ports the system picks; no gRPC,
    metrics or console): (name server, broker) addresses."""
    args = [
        *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(tmp_path / "served")),
        *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--grpc-listen", ""),
        *("--metrics-listen", "", "--console-listen", ""),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        broker_line = re.compile(r"^broker \S+ .*?listening on (127\.0\.0\.1:\d+)", re.M)
        text = _lines_until(proc, broker_line, 60)
        ns = re.search(r"^name server listening on (127\.0\.0\.1:\d+)", text, re.M)
        broker = broker_line.search(text)
        assert ns is not None and broker is not None, text
        yield ns.group(1), broker.group(1)
    finally:
        drop_pool()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_broker_mode_read_and_write_through_serve(
    cluster_spark: Any, served: tuple[str, str]
) -> None:
    ns, broker = served
    with AdminClient(ns) as admin:
        admin.create_topic(broker, "CT", read_queue_nums=4, write_queue_nums=4)
        assert wait_until(lambda: admin.route("CT") is not None, 30, 0.05)
    rows = [("CT", f"c{i}".encode(), f"t{i % 3}") for i in range(400)]
    df = cluster_spark.createDataFrame(rows, "topic string, body binary, tags string")
    df.repartition(4).write.format("rocketstore").option("namesrv", ns).option(
        "sendBatchRows", "32"
    ).mode("append").save()

    def read(**options: str) -> list[Any]:
        reader = cluster_spark.read.format("rocketstore").option("topics", "CT")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load().select("queue_id", "queue_offset", "body", "tags").collect()

    back = read(namesrv=ns, pullBatchSize="16")
    assert sorted((bytes(r.body), r.tags) for r in back) == sorted((b, t) for _, b, t in rows)
    assert {r.queue_id for r in back} == {0, 1, 2, 3}
    for q in range(4):  # every queue's offsets from 0, none missing, none twice
        offsets = sorted(r.queue_offset for r in back if r.queue_id == q)
        assert offsets == list(range(len(offsets)))
    assert sorted(map(tuple, read(broker=broker))) == sorted(map(tuple, back))


# ---- streaming -------------------------------------------------------------------------------


def test_a_stream_stopped_and_restarted_from_its_checkpoint(
    cluster_spark: Any, tmp_path: Path
) -> None:
    """A stream is stopped in the middle of its backlog, messages arrive while it is down, and
    a restart from the checkpoint writes every message once (the Parquet sink keeps only the
    micro-batches it committed)."""
    store, out, checkpoint = tmp_path / "live", tmp_path / "out", tmp_path / "checkpoint"
    first = _put(store, "S", 3, 300)

    def start(**trigger: Any) -> Any:
        stream = (
            cluster_spark.readStream.format("rocketstore")
            .option("path", str(store))
            .option("topics", "S")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "40")
            .load()
            .select("queue_id", "queue_offset", "body")
        )
        return (
            stream.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start(processingTime="200 milliseconds")
    try:
        done = wait_until(lambda: (query.lastProgress or {}).get("batchId", -1) >= 1, WAIT_S, 0.1)
        assert done, f"no micro-batch finished: {query.exception()}"
    finally:
        query.stop()
    assert query.exception() is None
    batches = len(list((checkpoint / "commits").glob("[0-9]*")))
    assert batches >= 2
    second = _put(store, "S", 3, 90, start=300)
    query = start(availableNow=True)
    try:
        assert query.awaitTermination(WAIT_S), "the restarted stream did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    got = cluster_spark.read.parquet(str(out)).collect()
    assert sorted(bytes(r.body) for r in got) == sorted(first + second)  # none lost, none twice
    keys = [(r.queue_id, r.queue_offset) for r in got]
    assert len(set(keys)) == len(keys) == 390


# ---- the command line on the cluster -----------------------------------------------------------


def test_export_with_master_runs_on_the_cluster(
    spark_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """``rocketstore export --master spark://...``: a driver of its own (the test's session is
    stopped first, to leave it the cluster's cores) writes the lines the in-process export
    writes, and Spark's log goes to its log file."""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    if running is not None:
        running.stop()
    store = tmp_path / "store"
    _put(store, "X", 4, 120)
    cli = [sys.executable, "-m", "rocketstore.cli", "export", "--store", str(store)]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_MASTER", None)
    on_cluster = subprocess.run(
        [*cli, "--to", str(tmp_path / "c"), "--format", "json", "--master", spark_cluster.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert on_cluster.returncode == 0, on_cluster.stderr
    assert on_cluster.stderr == ""
    assert '"spark": "spark://127.0.0.1:' in on_cluster.stdout
    here = subprocess.run(
        [*cli, "--to", str(tmp_path / "h"), "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert here.returncode == 0, here.stderr

    def lines(d: Path) -> list[str]:
        return sorted(x for p in d.glob("part-*") for x in p.read_text().splitlines())

    assert len(lines(tmp_path / "h")) == 120
    assert lines(tmp_path / "c") == lines(tmp_path / "h")
    log = (tmp_path / "logs" / "store" / "spark.log").read_text(errors="replace")
    assert f"Connecting to master {spark_cluster.url}" in log or spark_cluster.url in log
