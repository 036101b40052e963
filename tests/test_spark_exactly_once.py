"""Exactly-once writes through brokers (``exactlyOnce=true``): a query killed with kill -9 at
seeded points (tasks sending, every task done and no decision written, half of the halves
committed, every half committed and Spark's checkpoint not written) and run again from its
checkpoint. A consumer then reads every source row once: 0 lost, 0 duplicated (the checker
counts ids in the bodies it pulls; it never asks the writer). A batch job killed and run again,
and halves a killed driver left answered by the brokers' checks while no query runs:
test_spark_exactly_once_batch.py; a batch job into a store path killed mid-task:
test_spark_exactly_once_path.py (files of their own, so that they run beside this one).

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

from rocketstore.spark._eos import PROP_BATCH, PROP_PARTITION, PROP_QUERY
from support.eos_cluster import Cluster, read_once, started_cluster
from support.eos_spark import Child, WarmChild, next_batch

# each run is a JVM of its own: minutes on a loaded machine
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started_cluster(tmp_path_factory.mktemp("eos-brokers")) as c:
        yield c


POINTS = ("task", "precommit", "mid_end", "postcommit")
PER_TRIGGER = 40


def _kill_loop(
    cluster: Cluster, warm_spark: WarmChild, tmp: Path, rounds: int, seed: int, name: str
) -> dict[str, Any]:
    """``rounds`` rounds of one query: new source rows, then a kill -9 of the driver at each
    point in a seeded order, one micro-batch after another (each crash leaves its batch to be
    replayed by the next run, which goes on to the next batch and point), then a run to the
    end (in the module's warm child, a driver that was never killed) and the count of every
    id so far (printed: a long run's figures so far)."""
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
        warm_spark.run(args)  # a driver of its own: the killed one's JVM is gone
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
        msgs = read_once(cluster, dst, expected)
    # audit: every message names its query, batch and partition; a queue's rows of one
    # writer come in their order
    assert all({PROP_QUERY, PROP_BATCH, PROP_PARTITION} <= set(m.properties) for m in msgs)
    assert len({m.properties[PROP_QUERY] for m in msgs}) == 1
    batches = {int(m.properties[PROP_BATCH]) for m in msgs}
    assert batches >= set(range(rounds * len(POINTS)))
    for (topic_q, writer), seqs in _writer_sequences(msgs).items():
        assert seqs == sorted(seqs), f"{topic_q} {writer} out of order"
    return figures


def test_stream_killed_at_every_point_reads_once(
    warm_spark: WarmChild, cluster: Cluster, tmp_path: Path
) -> None:
    _kill_loop(cluster, warm_spark, tmp_path, 1, 37, "EOS")


@pytest.mark.slow
@pytest.mark.timeout(8 * 3600)
@pytest.mark.skipif(
    not os.environ.get("ROCKETSTORE_LONG_TESTS"),
    reason="80 driver kills (a JVM each) take hours on a loaded machine: set ROCKETSTORE_LONG_TESTS=1",
)
def test_stream_killed_20_times_at_every_point_reads_once(
    warm_spark: WarmChild, cluster: Cluster, tmp_path: Path
) -> None:
    print("driver kills:", _kill_loop(cluster, warm_spark, tmp_path, 20, 3720, "EOS20"))


def _writer_sequences(msgs: list[Any]) -> dict[tuple[int, str], list[int]]:
    out: dict[tuple[int, str], list[int]] = {}
    for m in sorted(msgs, key=lambda m: (m.queue_id, m.store_host_str, m.queue_offset)):
        uniq = m.properties["UNIQ_KEY"]
        out.setdefault((m.queue_id, m.store_host_str + uniq[:-8]), []).append(int(uniq[-8:], 16))
    return out
