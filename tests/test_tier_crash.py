"""Crash safety of tiering: a process tiering a store is killed with SIGKILL at seeded random
moments, again and again, each run going on from what the last one left. After every kill:

- every file a manifest lists exists, is a complete Parquet file and holds the rows it says;
- the tier's rows below ``covered`` and the commit log's messages from ``covered`` on are
  every message of the store, each once;
- the next run deletes the leftovers and ends with the whole store tiered, as one run does.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rocketstore.store._store import MessageStore
from rocketstore.tier._manifest import (
    crash_leftovers,
    load_covered,
    load_manifest,
    tiered_topics,
    topic_dir,
)
from support.tier_helpers import (
    assert_same_rows,
    fill,
    source_rows,
    split_at,
    store_config,
    tier_rows,
)

_CHILD = """
import sys
from rocketstore.tier._service import tier_store
from rocketstore.tier._writer import WriterOptions
print("ready", flush=True)
tier_store(sys.argv[1], sys.argv[2], options=WriterOptions(row_group_rows=40))
print("done", flush=True)
"""


def _start(store: Path, tiered: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(store / "commitlog"), str(tiered)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc


def _check(tiered: Path, expected: pa.Table) -> int:
    covered = load_covered(tiered)
    for topic in tiered_topics(tiered):
        for f in load_manifest(tiered, topic).files:  # listed: complete and readable
            table = pq.read_table(topic_dir(tiered, topic) / f.name)
            assert table.num_rows == f.rows
    rows = tier_rows(tiered)
    keys = pc.binary_join_element_wise(
        rows.column("topic"),
        pc.cast(rows.column("queue_id"), pa.string()),
        pc.cast(rows.column("queue_offset"), pa.string()),
        "/",
    )
    assert len(pc.unique(keys)) == rows.num_rows, "a message is in the tier twice"
    below, above = split_at(expected, covered)
    assert_same_rows(rows, below)
    assert below.num_rows + above.num_rows == expected.num_rows
    return covered


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table, float]:
    root = tmp_path_factory.mktemp("crash") / "store"
    with MessageStore(store_config(root)) as s:
        fill(s, 3000)
    tiered = root.parent / "whole"
    began = time.monotonic()
    proc = _start(root, tiered)
    assert proc.wait(120) == 0
    took = time.monotonic() - began
    expected = source_rows(root)
    assert _check(tiered, expected) == max(
        int(p.name) for p in (root / "commitlog").iterdir() if p.read_bytes()[:8] != bytes(8)
    )
    shutil.rmtree(tiered)
    return root, expected, took


def _cycles(tmp_path: Path, store: tuple[Path, pa.Table, float], count: int, seed: int) -> None:
    root, expected, took = store
    rng = random.Random(seed)
    tiered = tmp_path / "tier"
    kills = torn = cycles = 0
    while kills < count and cycles < 4 * count:  # a run that ends before its kill is no cycle
        cycles += 1
        proc = _start(root, tiered)
        time.sleep(rng.uniform(0, took))
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.wait(60)
        covered = _check(tiered, expected)
        torn += bool(crash_leftovers(tiered)) or any(
            f.commitlog[1] > covered
            for t in tiered_topics(tiered)
            for f in load_manifest(tiered, t).files
        )
        if proc.returncode == 0:
            shutil.rmtree(tiered)  # done: start over
    proc = _start(root, tiered)  # a last run completes what the kills left
    assert proc.wait(120) == 0
    _check(tiered, expected)
    assert not list(tiered.glob("*/.*.tmp"))
    whole = tier_rows(tiered)
    below, _ = split_at(expected, load_covered(tiered))
    assert_same_rows(whole, below)
    assert kills == count, f"only {kills} of {cycles} runs were killed before they ended"
    assert torn >= 1, "no kill came in the middle of a range"


def test_kill_during_tiering(tmp_path: Path, store: tuple[Path, pa.Table, float]) -> None:
    # eight kills (and the runs that ended before theirs); the hundred: the test below
    _cycles(tmp_path, store, 8, seed=7)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("ROCKETSTORE_LONG_TESTS"),
    reason="100 kills take minutes: set ROCKETSTORE_LONG_TESTS=1",
)
def test_kill_during_tiering_many_times(
    tmp_path: Path, store: tuple[Path, pa.Table, float]
) -> None:
    _cycles(tmp_path, store, 100, seed=11)
