"""Helpers shared by the Spark data-source tests: RocketMQ fixtures and their manifests."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "rocketmq-4.9.8"


def unpack_fixture(name: str, dest: Path) -> Path:
    """Unpack ``rocketmq-4.9.8-<name>.tar.gz`` under ``dest`` (the tarball is only read)."""
    with tarfile.open(FIXTURES / f"rocketmq-4.9.8-{name}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return dest / f"rocketmq-4.9.8-{name}"


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
