"""Retention of the tiered store: its oldest files go past an age or a total size.

- ``retention_hours``: a topic's files whose newest message (``store_time`` max) is older go,
  oldest first (files are listed in commit-log order: the first ones go);
- ``max_bytes``: while the whole tier holds more, the file cut from the lowest commit-log
  offset goes, whichever topic it is of.

A file leaves its manifest first (replaced atomically), then the disk: a crash in between
leaves an unlisted ``part-`` file, which the service deletes when it starts. ``covered`` does
not move back: what retention removed is gone from the tier, as the commit log's retention
removes messages from the commit log.

Threads: the tiering service's thread (the only writer of the tiered directory).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ._manifest import (
    TierFile,
    TopicManifest,
    load_manifest,
    save_manifest,
    tiered_topics,
    topic_dir,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Removed:
    topic: str
    file: TierFile
    why: str  # "age" or "size"


def enforce_retention(
    root: str | os.PathLike[str], *, retention_hours: int, max_bytes: int, now_ms: int
) -> list[Removed]:
    """Delete what ``retention_hours`` and ``max_bytes`` (0: no limit) no longer keep."""
    if retention_hours <= 0 and max_bytes <= 0:
        return []
    base = Path(root)
    manifests = {t: load_manifest(base, t) for t in tiered_topics(base)}
    removed: list[Removed] = []
    if retention_hours > 0:
        cutoff = now_ms - retention_hours * 3_600_000
        for manifest in manifests.values():
            while manifest.files and manifest.files[0].store_time[1] < cutoff:
                removed.append(_remove(base, manifest, "age"))
    if max_bytes > 0:
        total = sum(f.bytes for m in manifests.values() for f in m.files)
        while total > max_bytes:
            oldest = min(
                (m for m in manifests.values() if m.files),
                key=lambda m: (m.files[0].commitlog[0], m.topic),
                default=None,
            )
            if oldest is None:
                break
            gone = _remove(base, oldest, "size")
            total -= gone.file.bytes
            removed.append(gone)
    return removed


def _remove(root: Path, manifest: TopicManifest, why: str) -> Removed:
    entry = manifest.files.pop(0)
    save_manifest(root, manifest)
    (topic_dir(root, manifest.topic) / entry.name).unlink(missing_ok=True)
    log.info(
        "tier retention (%s): deleted %s/%s (commit log %d..%d, %d rows)",
        why,
        manifest.topic,
        entry.name,
        entry.commitlog[0],
        entry.commitlog[1],
        entry.rows,
    )
    return Removed(manifest.topic, entry, why)
