"""Exactly-once writes into a store path (``exactlyOnce=true``): a batch job killed with
kill -9 in the middle of a task (its rows partly stored) and run again completes the
partition; run once more, it adds nothing. The store then holds every row once.

The killed run is a child process (its own Spark in local mode and JVM) in a process group of
its own, killed whole; the runs after it go to one Spark the module keeps up."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from rocketstore import StoreConfig
from support.eos_spark import Child, WarmChild

# each run is a JVM of its own: minutes on a loaded machine
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]


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


def test_path_batch_killed_mid_task_completes_once(warm_spark: WarmChild, tmp_path: Path) -> None:
    store = tmp_path / "store"
    rows = 300
    args = ["pathbatch", "-", str(store), "EOS_PATH", "path-job", str(rows)]
    Child(tmp_path).run(args, "store_task:0", expect_crash=True)
    partial = _store_bodies(store, "EOS_PATH")
    assert 0 < sum(partial.values()) < rows  # the killed task left some of its rows
    warm_spark.run(args)  # a driver of its own: the killed one's JVM is gone
    warm_spark.run(args)  # complete: nothing new
    got = _store_bodies(store, "EOS_PATH")
    expected = {f"row-{i}".encode() for i in range(rows)}
    assert set(got) == expected
    assert all(n == 1 for n in got.values()), [b for b, n in got.items() if n > 1][:5]
