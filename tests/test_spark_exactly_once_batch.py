"""Exactly-once writes through brokers (``exactlyOnce=true``) of batch jobs: a job killed with
kill -9 mid-commit and run again (and once more: nothing new); halves a killed driver left
answered by the brokers' checks while no query runs. A consumer then reads every source row
once: 0 lost, 0 duplicated (ids counted in the bodies it pulls). The streaming query's kills
are test_spark_exactly_once.py's.

Each run is a child process (its own Spark in local mode and JVM) in a process group of its
own, killed whole; the brokers run in the test process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from rocketstore.client._admin import AdminClient
from rocketstore.spark._eos import DECISION_TOPIC
from rocketstore.spark._eos_checks import ExactlyOnceChecks
from support.eos_cluster import Cluster, read_once, started_cluster
from support.eos_spark import Child, WarmChild

# each run is a JVM of its own: minutes on a loaded machine
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

ROWS = 240
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started_cluster(tmp_path_factory.mktemp("eos-brokers")) as c:
        yield c


def test_batch_job_run_again_writes_once(
    warm_spark: WarmChild, cluster: Cluster, tmp_path: Path
) -> None:
    expected = cluster.fill("EOS_BSRC", ROWS)
    cluster.create_topic("EOS_BDST")
    args = ["batch", cluster.ns, "EOS_BSRC", "EOS_BDST", "job-37", "0"]
    Child(tmp_path).run(args, "mid_end:0", expect_crash=True)
    warm_spark.run(args)  # a driver of its own: the killed one's JVM is gone
    read_once(cluster, "EOS_BDST", expected)
    warm_spark.run(args)  # decided: nothing new
    read_once(cluster, "EOS_BDST", expected)


def test_checks_end_halves_while_no_query_runs(cluster: Cluster, tmp_path: Path) -> None:
    expected = cluster.fill("EOS_CSRC", ROWS)
    cluster.create_topic("EOS_CDST")
    args = ["batch", cluster.ns, "EOS_CSRC", "EOS_CDST", "job-checks", "0"]
    Child(tmp_path).run(args, "mid_end:0", expect_crash=True)
    seen = len(cluster.read("EOS_CDST"))
    assert seen < len(expected)  # the driver died half way through the commits
    with ExactlyOnceChecks(cluster.ns) as checks:
        assert checks.first_heartbeat.wait(WAIT_S)
        deadline = time.monotonic() + WAIT_S * 2
        while len(cluster.read("EOS_CDST")) < len(expected):
            assert time.monotonic() < deadline, f"checks answered {checks.answered}"
            time.sleep(0.2)
        assert checks.answered["commit"] > 0
    read_once(cluster, "EOS_CDST", expected)
    with AdminClient(cluster.ns) as admin:
        assert admin.route(DECISION_TOPIC) is not None
