"""Helpers shared by the Spark data-source tests: RocketMQ fixtures and their manifests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _fixtures import FIXTURES as FIXTURES
from _fixtures import unpack_fixture as unpack_fixture


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
