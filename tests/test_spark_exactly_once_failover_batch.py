"""Exactly-once writes through brokers across a failover, for a batch job: RocketMQ 5's
controller mode with two brokers of one group (each a process of its own), the master killed
with kill -9 while a batch job with ``exactlyOnce=true`` holds mid-commit or during its tasks,
the job going on or failing, the killed broker back as the slave and the job run again. A
consumer then reads every source row once: 0 lost, 0 duplicated (ids counted in the pulled
bodies). The streaming query's failovers are test_spark_exactly_once_failover.py's."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from support.chaos_cluster import ChaosCluster
from support.eos_cluster import assert_once
from support.eos_failover import count, create_topic, fill, run_round
from support.eos_spark import WarmChild

pytestmark = [pytest.mark.spark, pytest.mark.timeout(3600)]


def test_batch_job_run_again_after_a_failover_writes_once(
    warm_spark: WarmChild, failover_group: ChaosCluster
) -> None:
    create_topic(failover_group, "FOB_SRC")
    source: set[bytes] = set()
    for point in ("mid_end", "task"):
        dst = f"FOB_DST_{point}"
        create_topic(failover_group, dst)
        source |= fill(failover_group, "FOB_SRC", f"FOB-{point}", 120)  # the job reads all of it
        args = ["batch", failover_group.namesrv_addr, "FOB_SRC", dst, f"job-{point}", "0"]
        run_round(failover_group, warm_spark, args, f"{point}:0")
        assert_once(count(failover_group, dst, source), source)
