"""Helpers shared by the Spark data-source tests: RocketMQ fixtures and their manifests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .fixtures import FIXTURES as FIXTURES
from .fixtures import unpack_fixture as unpack_fixture


def expected_queue_messages(fixture_dir: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """The manifest's consume-queue messages by (topic, queue, offset). For a crashed store,
    only those whose units were dispatched before the crash (what its consume queues hold)."""
    records = [json.loads(line) for line in (fixture_dir / "manifest.jsonl").open()]
    summary = next(r for r in records if r["type"] == "summary")
    stop = summary.get("dispatchStoppedAtPhyOffset", -1)
    out = {}
    for r in records:
        if r["type"] != "msg" or not r["inConsumeQueue"]:
            continue
        if stop >= 0 and r["wroteOffset"] >= stop:
            continue
        out[(r["topic"], r["queueId"], r["queueOffset"])] = r
    return out


# Spark gives the Python worker a streaming source runs in 10 s to connect back (a constant
# of its PythonWorkerFactory); on a loaded machine its start can take longer, and the query
# then fails before it plans a batch, its checkpoint holding no offsets yet
WORKER_LATE = "Python worker failed to connect back"


def run_query(start: Callable[[], Any]) -> Any:
    """Start a streaming query with ``start`` and wait for it to end (an availableNow trigger);
    started again (at most twice more) when it failed only because its Python worker came up
    late. The query that ended well is returned."""
    for attempt in range(3):
        q = start()
        q.awaitTermination(120)
        failure = q.exception()
        if failure is None:
            return q
        if WORKER_LATE not in str(failure) or attempt == 2:
            raise AssertionError(f"the query failed: {failure}")
    raise AssertionError("unreachable")
