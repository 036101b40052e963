"""Exactly-once writes through brokers across a failover, for a batch job: RocketMQ 5's
controller mode with two brokers of one group (each a process of its own), the master killed
with kill -9 while a batch job with ``exactlyOnce=true`` holds mid-commit or during its tasks,
the job going on or failing, the killed broker back as the slave and the job run again. A
consumer then reads every source row once: 0 lost, 0 duplicated (ids counted in the pulled
bodies). The streaming query's failovers are test_spark_exactly_once_failover.py's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from support.chaos_cluster import ChaosCluster
from support.eos_cluster import assert_once
from support.eos_failover import count, create_topic, failover_group, fill, run_round
from support.eos_spark import WarmChild, warm_child

pytestmark = [pytest.mark.spark, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmChild]:
    """Every run of the module's queries (none is killed: the brokers are), one Spark."""
    with warm_child(tmp_path_factory.mktemp("eos-warm")) as child:
        yield child


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    with failover_group(tmp_path_factory.mktemp("eos-failover-batch")) as c:
        yield c


def test_batch_job_run_again_after_a_failover_writes_once(
    warm: WarmChild, group: ChaosCluster
) -> None:
    create_topic(group, "FOB_SRC")
    source: set[bytes] = set()
    for point in ("mid_end", "task"):
        dst = f"FOB_DST_{point}"
        create_topic(group, dst)
        source |= fill(group, "FOB_SRC", f"FOB-{point}", 120)  # the job reads all of it
        args = ["batch", group.namesrv_addr, "FOB_SRC", dst, f"job-{point}", "0"]
        run_round(group, warm, args, f"{point}:0")
        assert_once(count(group, dst, source), source)
