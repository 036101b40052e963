"""The tiered store's manifests: which Parquet files hold which messages.

A tiered directory holds, per topic, a directory of Parquet files and one ``_manifest.json``,
and at its top ``_tier.json`` (how far the commit log is tiered)::

    <tiered dir>/
      _tier.json                        {"version": 1, "covered": <commit-log offset>}
      <topic>/_manifest.json            the topic's files, below
      <topic>/part-<from:020d>.parquet  the topic's messages of commit-log range [from, to)

Every message of the commit log below ``covered`` is in exactly one listed file (a range of
the commit log is tiered whole: every topic's file of it is listed before ``covered`` moves
past it). A file is written under a name starting with ``.`` (which Spark, pyarrow and DuckDB
skip), fsynced, renamed to its ``part-`` name and only then listed; both JSON files are
replaced atomically (written, fsynced, renamed, directory fsynced). A ``part-`` file that no
manifest lists is left over from a crash and is not part of the tier (readers go by the
manifest, the tiering service deletes such files when it starts). Names starting with ``_`` or
``.`` are skipped by Parquet readers, so a topic's directory is also a plain Parquet dataset.

A topic's manifest::

    {"version": 1, "topic": "T",
     "files": [{"name": "part-00000000000000000000.parquet",
                "commitlog": [from, to],          # the commit-log range the file was cut from
                "rows": 1000, "bytes": 123456,
                "queues": {"0": [first, last]},   # queue offsets held, both ends included
                "store_time": [min_ms, max_ms]}]}

A crash while a range is tiered may leave some topics' files of it listed while ``covered`` has
not moved past it yet (the next run lists the others, then moves ``covered``): a reader that
also reads the commit log from ``covered`` on takes only the files whose range ends at or below
``covered`` (``TopicManifest.covered_files``).

Rows are the ``rocketstore`` data source's (``columns._schema.SCHEMA_DDL``), sorted by
``queue_id`` then ``queue_offset``. Files are listed in commit-log order; within one queue the
offsets of later files are higher. Raises TierError on a manifest that cannot be read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store._durable import fsync_dir, make_dirs_synced, replace_synced
from ..store._errors import StoreError

VERSION = 1
MANIFEST = "_manifest.json"
STATE = "_tier.json"
PART_PREFIX = "part-"
PART_SUFFIX = ".parquet"
_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class TierError(StoreError):
    """A tiered directory or one of its manifests cannot be used."""


def part_name(commitlog_from: int) -> str:
    """The file name of a topic's messages cut from the commit-log range starting here."""
    return f"{PART_PREFIX}{commitlog_from:020d}{PART_SUFFIX}"


@dataclass(frozen=True)
class TierFile:
    """One Parquet file of a topic, as its manifest lists it."""

    name: str
    commitlog: tuple[int, int]
    rows: int
    bytes: int
    queues: Mapping[int, tuple[int, int]]
    store_time: tuple[int, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "commitlog": list(self.commitlog),
            "rows": self.rows,
            "bytes": self.bytes,
            "queues": {str(q): list(r) for q, r in sorted(self.queues.items())},
            "store_time": list(self.store_time),
        }

    @staticmethod
    def from_json(raw: Any) -> TierFile:
        try:
            name = raw["name"]
            if not (
                isinstance(name, str)
                and name.startswith(PART_PREFIX)
                and name.endswith(PART_SUFFIX)
                and "/" not in name
            ):
                raise ValueError(f"file name {name!r}")
            queues = {int(q): _pair(r) for q, r in raw["queues"].items()}
            return TierFile(
                name,
                _pair(raw["commitlog"]),
                _count(raw["rows"]),
                _count(raw["bytes"]),
                queues,
                _pair(raw["store_time"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TierError(f"a file entry of the manifest is malformed: {exc}") from None


def _pair(raw: Any) -> tuple[int, int]:
    if not isinstance(raw, list) or len(raw) != 2:
        raise ValueError(f"expected [low, high], got {raw!r}")
    low, high = (int(v) for v in raw)
    if low > high:
        raise ValueError(f"range [{low}, {high}] runs backwards")
    return low, high


def _count(raw: Any) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(f"negative count {value}")
    return value


@dataclass
class TopicManifest:
    """A topic's tiered files, in commit-log order."""

    topic: str
    files: list[TierFile] = field(default_factory=list)

    def queue_range(self, queue_id: int) -> tuple[int, int] | None:
        """(first, last) queue offsets of ``queue_id`` held by the tier, or None."""
        ranges = [f.queues[queue_id] for f in self.files if queue_id in f.queues]
        if not ranges:
            return None
        return min(r[0] for r in ranges), max(r[1] for r in ranges)

    def covered_files(self, covered: int) -> list[TierFile]:
        """The files whose commit-log range ends at or below ``covered``."""
        return [f for f in self.files if f.commitlog[1] <= covered]

    def queue_ids(self) -> list[int]:
        return sorted({q for f in self.files for q in f.queues})

    def to_bytes(self) -> bytes:
        body = {"version": VERSION, "topic": self.topic, "files": [f.to_json() for f in self.files]}
        return json.dumps(body, indent=1).encode()


def is_topic_name(topic: str) -> bool:
    """Whether ``topic`` is a name a topic can have (and so a directory of the tier)."""
    return bool(_TOPIC.match(topic))


def topic_dir(root: str | os.PathLike[str], topic: str) -> Path:
    if not _TOPIC.match(topic):
        raise TierError(f"topic {topic!r} is not a topic name (^[%|a-zA-Z0-9_-]+$)")
    return Path(root) / topic


def load_manifest(root: str | os.PathLike[str], topic: str) -> TopicManifest:
    """The topic's manifest; an empty one when the topic has none yet."""
    path = topic_dir(root, topic) / MANIFEST
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return TopicManifest(topic)
    except (OSError, ValueError) as exc:
        raise TierError(f"cannot read {path}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("version") != VERSION or raw.get("topic") != topic:
        raise TierError(f"{path} is not a version {VERSION} manifest of topic {topic}")
    files = raw.get("files")
    if not isinstance(files, list):
        raise TierError(f"{path} has no file list")
    return TopicManifest(topic, [TierFile.from_json(f) for f in files])


def save_manifest(root: str | os.PathLike[str], manifest: TopicManifest) -> None:
    """Replace the topic's manifest atomically (and durably)."""
    directory = topic_dir(root, manifest.topic)
    make_dirs_synced(directory)
    replace_synced(directory / MANIFEST, manifest.to_bytes())
    fsync_dir(directory)


def tiered_topics(root: str | os.PathLike[str]) -> list[str]:
    """Topics with a manifest under ``root``, sorted."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(
        d.name
        for d in base.iterdir()
        if d.is_dir() and _TOPIC.match(d.name) and (d / MANIFEST).is_file()
    )


def load_covered(root: str | os.PathLike[str]) -> int:
    """The commit-log offset below which every message is tiered (0 for a new tier)."""
    path = Path(root) / STATE
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        raise TierError(f"cannot read {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise TierError(f"{path} is not a version {VERSION} tier state")
    covered = raw.get("covered")
    if raw.get("version") != VERSION or not isinstance(covered, int) or covered < 0:
        raise TierError(f"{path} is not a version {VERSION} tier state")
    return covered


def save_covered(root: str | os.PathLike[str], covered: int) -> None:
    """Record atomically that the commit log is tiered up to ``covered``."""
    base = Path(root)
    make_dirs_synced(base)
    replace_synced(base / STATE, json.dumps({"version": VERSION, "covered": covered}).encode())
    fsync_dir(base)


def unlisted_parts(root: str | os.PathLike[str], manifests: Iterable[TopicManifest]) -> list[Path]:
    """``part-`` files and hidden temporaries under the listed topics' directories that no
    manifest lists: leftovers of a crash."""
    out: list[Path] = []
    for manifest in manifests:
        directory = topic_dir(root, manifest.topic)
        if not directory.is_dir():
            continue
        listed = {f.name for f in manifest.files}
        for entry in directory.iterdir():
            name = entry.name
            leftover = name.startswith(".") and name.endswith(".tmp")
            if leftover or (name.startswith(PART_PREFIX) and name not in listed):
                out.append(entry)
    return sorted(out)


def crash_leftovers(root: str | os.PathLike[str]) -> list[Path]:
    """``unlisted_parts`` of every topic directory under ``root``, with a manifest or not (a
    crash may come before a topic's first manifest)."""
    base = Path(root)
    if not base.is_dir():
        return []
    manifests = [
        load_manifest(base, d.name) for d in base.iterdir() if d.is_dir() and _TOPIC.match(d.name)
    ]
    return unlisted_parts(base, manifests)
