"""Exactly-once writes through brokers (``exactlyOnce=true``): a query killed with kill -9 at
seeded points (tasks sending, every task done and no decision written, half of the halves
committed, every half committed and Spark's checkpoint not written) and run again from its
checkpoint; a batch job killed and run again; halves a killed driver left answered by the
brokers' checks while no query runs. A consumer then reads every source row once: 0 lost,
0 duplicated (the checker counts ids in the bodies it pulls; it never asks the writer).

Each run is a child process (its own Spark in local mode and JVM) in a process group of its
own, killed whole; the brokers run in the test process."""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from rocketstore import StoreConfig
from rocketstore.client._admin import AdminClient
from rocketstore.spark._eos import DECISION_TOPIC, PROP_BATCH, PROP_PARTITION, PROP_QUERY
from rocketstore.spark._eos_checks import ExactlyOnceChecks
from support.eos_cluster import BROKERS, Cluster

# each run is a JVM of its own: minutes on a loaded machine
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

ROWS = 240
WAIT_S = 60.0
RUN_S = 300.0

CHILD = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    mode, ns, src, dst, where, per_trigger = sys.argv[1:7]
    b = SparkSession.builder.master("local[2]").appName("eos-child")
    for k, v in {
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "16",
    }.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if mode == "stream":
        rows = (
            spark.readStream.format("rocketstore").option("namesrv", ns).option("topics", src)
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_trigger)
            .load().selectExpr(f"'{dst}' AS topic", "body")
        )
        q = (
            rows.writeStream.format("rocketstore").option("namesrv", ns)
            .option("exactlyOnce", "true").option("checkpointLocation", where)
            .trigger(availableNow=True).start()
        )
        q.awaitTermination()
    elif mode == "pathbatch":
        rows = spark.range(0, int(per_trigger), 1, 3).selectExpr(
            f"'{dst}' AS topic", "concat('row-', cast(id AS string)) AS body"
        )
        # writeBuffers=0: puts go straight into the mapped file, so a killed task's rows
        # outlive it and the run after it has a partial partition to complete
        (rows.write.format("rocketstore").option("path", src).option("exactlyOnce", "true")
            .option("writeBuffers", "0").option("exactlyOnceId", where).mode("append").save())
    else:
        rows = (
            spark.read.format("rocketstore").option("namesrv", ns).option("topics", src).load()
            .selectExpr(f"'{dst}' AS topic", "body").repartition(3)
        )
        (rows.write.format("rocketstore").option("namesrv", ns).option("exactlyOnce", "true")
            .option("exactlyOnceId", where).mode("append").save())
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("eos-brokers"))
    try:
        for name in BROKERS:
            c.start(name)
        yield c
    finally:
        c.stop()


def _run_child(
    tmp: Path, args: list[str], crash: str | None, *, expect_crash: bool
) -> subprocess.CompletedProcess[str] | None:
    """Run the child; with ``crash`` set, wait for it to reach the point and kill its process
    group with SIGKILL."""
    script = tmp / "child.py"
    script.write_text(CHILD)
    marker = tmp / "crashed"
    marker.unlink(missing_ok=True)
    env = dict(os.environ)
    env.pop("ROCKETSTORE_SPARK_CRASH", None)
    if crash:
        env["ROCKETSTORE_SPARK_CRASH"] = crash
        env["ROCKETSTORE_SPARK_CRASH_FILE"] = str(marker)
    log = (tmp / "child.log").open("a")
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline:
            if crash and marker.exists():
                # the query's process group, and the Python worker that reached the point
                # (Spark's workers may run in a process group of their own)
                _kill_session(proc)
                return None
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"child {args[0]} did not finish (crash point {crash})")
        assert not expect_crash, f"the child finished without reaching {crash}"
        assert proc.returncode == 0, (tmp / "child.log").read_text()[-4000:]
        return None
    finally:
        _kill_session(proc)  # a JVM or Python worker left behind
        log.close()


def _session_of(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[3])


def _kill_session(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child and every process of its session (its JVM, and Spark's Python
    workers, which run in process groups of their own), and wait until none is left."""
    deadline = time.monotonic() + WAIT_S
    while True:
        left = [int(p) for p in os.listdir("/proc") if p.isdigit() and _session_of(p) == proc.pid]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
        if not left and proc.poll() is not None:
            return
        assert time.monotonic() < deadline, f"processes {left} outlived SIGKILL"
        time.sleep(0.05)


def _exactly_once(c: Cluster, topic: str, expected: set[bytes]) -> list[Any]:
    msgs = c.read(topic)
    counts = collections.Counter(bytes(m.body) for m in msgs)
    duplicated = {b: n for b, n in counts.items() if n > 1}
    lost = expected - set(counts)
    extra = set(counts) - expected
    assert not duplicated and not lost and not extra, (
        f"{len(lost)} lost, {len(duplicated)} duplicated, {len(extra)} unknown"
    )
    return msgs


def test_stream_killed_at_every_point_reads_once(cluster: Cluster, tmp_path: Path) -> None:
    expected = cluster.fill("EOS_SRC", ROWS)
    cluster.create_topic("EOS_DST")
    expected = {b.replace(b"EOS_SRC", b"EOS_SRC") for b in expected}
    ckpt = tmp_path / "ckpt"
    args = ["stream", cluster.ns, "EOS_SRC", "EOS_DST", str(ckpt), "40"]
    # the batches that reach each point, seeded: every point once, in an order of batches a
    # restart from the checkpoint reaches (each crash leaves its batch to be replayed)
    rng = random.Random(37)
    points = ["task", "precommit", "mid_end", "postcommit"]
    rng.shuffle(points)
    for batch, point in enumerate(points):
        _run_child(tmp_path, args, f"{point}:{batch}", expect_crash=True)
    _run_child(tmp_path, args, None, expect_crash=False)
    msgs = _exactly_once(cluster, "EOS_DST", expected)
    # audit: every message names its query, batch and partition; a queue's rows of one
    # writer come in their order
    assert all({PROP_QUERY, PROP_BATCH, PROP_PARTITION} <= set(m.properties) for m in msgs)
    assert len({m.properties[PROP_QUERY] for m in msgs}) == 1
    batches = {int(m.properties[PROP_BATCH]) for m in msgs}
    assert batches >= set(range(len(points)))
    for (topic_q, writer), seqs in _writer_sequences(msgs).items():
        assert seqs == sorted(seqs), f"{topic_q} {writer} out of order"


def _writer_sequences(msgs: list[Any]) -> dict[tuple[int, str], list[int]]:
    out: dict[tuple[int, str], list[int]] = {}
    for m in sorted(msgs, key=lambda m: (m.queue_id, m.store_host_str, m.queue_offset)):
        uniq = m.properties["UNIQ_KEY"]
        out.setdefault((m.queue_id, m.store_host_str + uniq[:-8]), []).append(int(uniq[-8:], 16))
    return out


def test_batch_job_run_again_writes_once(cluster: Cluster, tmp_path: Path) -> None:
    expected = cluster.fill("EOS_BSRC", ROWS)
    cluster.create_topic("EOS_BDST")
    args = ["batch", cluster.ns, "EOS_BSRC", "EOS_BDST", "job-37", "0"]
    _run_child(tmp_path, args, "mid_end:0", expect_crash=True)
    _run_child(tmp_path, args, None, expect_crash=False)
    _exactly_once(cluster, "EOS_BDST", expected)
    _run_child(tmp_path, args, None, expect_crash=False)  # decided: nothing new
    _exactly_once(cluster, "EOS_BDST", expected)


def test_checks_end_halves_while_no_query_runs(cluster: Cluster, tmp_path: Path) -> None:
    expected = cluster.fill("EOS_CSRC", ROWS)
    cluster.create_topic("EOS_CDST")
    args = ["batch", cluster.ns, "EOS_CSRC", "EOS_CDST", "job-checks", "0"]
    _run_child(tmp_path, args, "mid_end:0", expect_crash=True)
    seen = len(cluster.read("EOS_CDST"))
    assert seen < len(expected)  # the driver died half way through the commits
    with ExactlyOnceChecks(cluster.ns) as checks:
        assert checks.first_heartbeat.wait(WAIT_S)
        deadline = time.monotonic() + WAIT_S * 2
        while len(cluster.read("EOS_CDST")) < len(expected):
            assert time.monotonic() < deadline, f"checks answered {checks.answered}"
            time.sleep(0.2)
        assert checks.answered["commit"] > 0
    _exactly_once(cluster, "EOS_CDST", expected)
    with AdminClient(cluster.ns) as admin:
        assert admin.route(DECISION_TOPIC) is not None


def _store_bodies(path: Path, topic: str) -> collections.Counter[bytes]:
    from rocketstore import MessageStore

    store = MessageStore(StoreConfig(store_path_root_dir=str(path)))
    store.load()
    store.start()
    try:
        out: collections.Counter[bytes] = collections.Counter()
        for q in range(8):
            offset = 0
            while True:
                r = store.get_message("audit", topic, q, offset, 64)
                if not r.messages:
                    break
                out.update(bytes(m.body) for m in r.messages)
                offset = r.next_begin_offset
        return out
    finally:
        store.shutdown()


def test_path_batch_killed_mid_task_completes_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rows = 300
    args = ["pathbatch", "-", str(store), "EOS_PATH", "path-job", str(rows)]
    _run_child(tmp_path, args, "store_task:0", expect_crash=True)
    partial = _store_bodies(store, "EOS_PATH")
    assert 0 < sum(partial.values()) < rows  # the killed task left some of its rows
    _run_child(tmp_path, args, None, expect_crash=False)
    _run_child(tmp_path, args, None, expect_crash=False)  # complete: nothing new
    got = _store_bodies(store, "EOS_PATH")
    expected = {f"row-{i}".encode() for i in range(rows)}
    assert set(got) == expected
    assert all(n == 1 for n in got.values()), [b for b, n in got.items() if n > 1][:5]
