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
from support.eos_spark import Child, next_batch

# each run is a JVM of its own: minutes on a loaded machine
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

ROWS = 240
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("eos-brokers"))
    try:
        for name in BROKERS:
            c.start(name)
        yield c
    finally:
        c.stop()


def _run_child(tmp: Path, args: list[str], crash: str | None, *, expect_crash: bool) -> None:
    Child(tmp).run(args, crash, expect_crash=expect_crash)


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


POINTS = ("task", "precommit", "mid_end", "postcommit")
PER_TRIGGER = 40


def _kill_loop(cluster: Cluster, tmp: Path, rounds: int, seed: int, name: str) -> dict[str, Any]:
    """``rounds`` rounds of one query: new source rows, then a kill -9 of the driver at each
    point in a seeded order, one micro-batch after another (each crash leaves its batch to be
    replayed by the next run, which goes on to the next batch and point), then a run to the
    end and the count of every id so far (printed: a long run's figures so far)."""
    src, dst = f"{name}_SRC", f"{name}_DST"
    cluster.create_topic(src)
    cluster.create_topic(dst)
    ckpt = tmp / "ckpt"
    args = ["stream", cluster.ns, src, dst, str(ckpt), str(PER_TRIGGER)]
    rng = random.Random(seed)
    child = Child(tmp)
    expected: set[bytes] = set()
    kills: collections.Counter[str] = collections.Counter()
    began = time.monotonic()
    figures: dict[str, Any] = {}
    for r in range(rounds):
        expected |= cluster.fill(src, PER_TRIGGER * (len(POINTS) + 1), prefix=f"{name}-{r}")
        points = list(POINTS)
        rng.shuffle(points)
        first = next_batch(ckpt)
        for batch, point in enumerate(points, first):
            child.run(args, f"{point}:{batch}", expect_crash=True)
            kills[point] += 1
        child.run(args)
        counts = cluster.bodies(dst)
        figures = {
            "kills": dict(kills),
            "ids": len(expected),
            "lost": len(expected - set(counts)),
            "duplicated": sum(n - 1 for n in counts.values() if n > 1),
            "unknown": len(set(counts) - expected),
            "seconds": round(time.monotonic() - began),
            "load": os.getloadavg(),
        }
        print(f"{name} round {r + 1} of {rounds}: {figures}", flush=True)
        msgs = _exactly_once(cluster, dst, expected)
    # audit: every message names its query, batch and partition; a queue's rows of one
    # writer come in their order
    assert all({PROP_QUERY, PROP_BATCH, PROP_PARTITION} <= set(m.properties) for m in msgs)
    assert len({m.properties[PROP_QUERY] for m in msgs}) == 1
    batches = {int(m.properties[PROP_BATCH]) for m in msgs}
    assert batches >= set(range(rounds * len(POINTS)))
    for (topic_q, writer), seqs in _writer_sequences(msgs).items():
        assert seqs == sorted(seqs), f"{topic_q} {writer} out of order"
    return figures


def test_stream_killed_at_every_point_reads_once(cluster: Cluster, tmp_path: Path) -> None:
    _kill_loop(cluster, tmp_path, 1, 37, "EOS")


@pytest.mark.slow
@pytest.mark.timeout(8 * 3600)
@pytest.mark.skipif(
    not os.environ.get("ROCKETSTORE_LONG_TESTS"),
    reason="80 driver kills (a JVM each) take hours on a loaded machine: set ROCKETSTORE_LONG_TESTS=1",
)
def test_stream_killed_20_times_at_every_point_reads_once(cluster: Cluster, tmp_path: Path) -> None:
    print("driver kills:", _kill_loop(cluster, tmp_path, 20, 3720, "EOS20"))


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
