"""A topic read from the tiered store and the commit log as one DataFrame.

``read_topic`` reads the tier's Parquet files natively (``spark.read.parquet`` of exactly the
files the manifests list, never a glob: a file left over from a crash is not read) and the rest
through the ``rocketstore`` source, from the first offset past the tier of each queue. Files
and boundary come from one reading of each topic's manifest, and a queue's tiered offsets are
``[first, last]`` with nothing missing (a commit-log range is tiered whole), so no message is
read twice or missed. When retention removed commit-log files past the boundary the read of
the source fails (``failOnDataLoss``), as a read of the source alone does.

A stream cannot be the union of a static Parquet read and a stream; ``tier_snapshot`` gives the
tier's files and the ``startingOffsets`` of a stream that takes over where they end, from one
reading of the manifests (see docs/spark.md).

With ``namesrv`` instead of a path, ``read_topic`` asks the running brokers where their tiers
are and reads the files of those it can reach itself (``_tiered_broker``).

Driver only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..columns._arrow import COLUMNS
from ..columns._schema import check_names, schema_ddl
from ..store.read._reader import StoreReader
from ..tier._manifest import TopicManifest, topic_dir
from ..tier._read import TierReader

EARLIEST = -2
# options of the source read that read_topic sets itself (a start of its own would read some
# of the tier's messages twice)
_SET_HERE = frozenset(
    {
        "startingOffsets",
        "startingTimestamp",
        "topics",
        "topic",
        "columns",
        "path",
        "namesrv",
        "broker",
    }
)


def _topics(topics: str | Iterable[str]) -> list[str]:
    names = [topics] if isinstance(topics, str) else list(topics)
    out = [t.strip() for n in names for t in n.split(",") if t.strip()]
    if not out:
        raise ValueError("give at least one topic")
    return out


def _manifests(tiered_dir: str | None, topics: Sequence[str]) -> dict[str, TopicManifest]:
    """Each topic's manifest, read once (files and boundary both come from it)."""
    if not tiered_dir:
        return {t: TopicManifest(t) for t in topics}
    tier = TierReader(tiered_dir)
    return {t: tier.manifest(t) for t in topics}


def _boundary(manifest: TopicManifest) -> dict[str, int]:
    out = {}
    for q in manifest.queue_ids():
        held = manifest.queue_range(q)
        assert held is not None
        out[str(q)] = held[1] + 1
    return out


@dataclass(frozen=True)
class TierSnapshot:
    """The tier's files of some topics and the ``startingOffsets`` JSON of a read of the store
    that takes over where those files end, from one reading of each manifest."""

    files: list[str]
    starting_offsets: str


def tier_snapshot(path: str, topics: str | Iterable[str], tiered_dir: str) -> TierSnapshot:
    """The files the tier lists for ``topics`` (in commit-log order per topic) and, per queue
    of the store at ``path``, the first offset past them (-2, earliest, for queues the tier
    does not hold): a batch read of the files and a stream from the offsets read every message
    once."""
    names = _topics(topics)
    manifests = _manifests(tiered_dir, names)
    with StoreReader(path) as reader:
        present = set(reader.topics())
        queues = {t: reader.queue_ids(t) for t in names if t in present}
    start: dict[str, dict[str, int]] = {}
    for t in names:
        per = {str(q): EARLIEST for q in queues.get(t, [])}
        per.update(_boundary(manifests[t]))
        start[t] = {q: per[q] for q in sorted(per, key=int)}
    files = [str(topic_dir(tiered_dir, t) / f.name) for t in names for f in manifests[t].files]
    return TierSnapshot(files, json.dumps(start))


def tier_files(tiered_dir: str, topics: str | Iterable[str]) -> list[str]:
    """The Parquet files the tier lists for ``topics``, in commit-log order per topic."""
    names = _topics(topics)
    manifests = _manifests(tiered_dir, names)
    return [str(topic_dir(tiered_dir, t) / f.name) for t in names for f in manifests[t].files]


def tiered_boundary(path: str, topics: str | Iterable[str], tiered_dir: str) -> str:
    """The ``startingOffsets`` JSON of ``tier_snapshot``: where a read of the store at
    ``path`` takes over from the tier."""
    return tier_snapshot(path, topics, tiered_dir).starting_offsets


def read_topic(
    spark: Any,
    path: str | None = None,
    topics: str | Iterable[str] | None = None,
    columns: Sequence[str] | None = None,
    tiered_dir: str | None = None,
    options: Mapping[str, str] | None = None,
    *,
    namesrv: str | None = None,
) -> Any:
    """``topics`` (names, or one comma-separated string) as one DataFrame with ``columns``
    (default: every column, in the schema's order): a tier's listed Parquet files, union by
    name with the ``rocketstore`` source read from each queue's first offset past the tier.

    Path mode (``path``, the store directory, and its tiered store ``tiered_dir``; without it
    the source read alone). Broker mode (``namesrv``, ``host:port[;host:port]``, instead of
    ``path``): each broker group of the topics' routes tells where its tier is
    (GET_TIER_MANIFEST); the files of the tiers reachable here are read as Parquet and the
    pulls start past them, the other groups are read by pulling alone (``_tiered_broker``).

    ``options``: more options of the source read (``failOnDataLoss``, ``checkCrc``, ...; not
    ``startingOffsets``, ``startingTimestamp``, ``topics``, ``columns``, ``path``,
    ``namesrv``, ``broker``).
    ValueError when a topic is unknown, or for both or neither of ``path`` and ``namesrv``."""
    names = list(columns) if columns is not None else list(COLUMNS)
    check_names(names)
    if (path is None) == (namesrv is None):
        raise ValueError("give either path (a store directory) or namesrv (running brokers)")
    if topics is None:
        raise ValueError("give at least one topic")
    wanted = _topics(topics)
    extra = dict(options or {})
    clash = _SET_HERE & set(extra)
    if clash:
        raise ValueError(f"read_topic sets option(s) {', '.join(sorted(clash))} itself")
    if namesrv is not None:
        if tiered_dir:
            raise ValueError("tiered_dir is for path mode: brokers tell where their tiers are")
        return _read_brokers(spark, namesrv, wanted, names, extra)
    assert path is not None
    manifests = _manifests(tiered_dir, wanted)
    with StoreReader(path) as reader:
        present = set(reader.topics())
    unknown = [t for t in wanted if t not in present and not manifests[t].files]
    if unknown:
        raise ValueError(
            f"unknown topic(s) {', '.join(unknown)}: not in the store at {path}"
            + (f" nor in the tiered store at {tiered_dir}" if tiered_dir else "")
        )
    ddl = schema_ddl(names)
    frames = []
    files = [
        str(topic_dir(tiered_dir, t) / f.name)
        for t in wanted
        for f in manifests[t].files
        if tiered_dir
    ]
    if files:
        frames.append(spark.read.schema(ddl).parquet(*files).select(*names))
    live = [t for t in wanted if t in present]
    if live:
        start = {t: _boundary(manifests[t]) for t in live}
        source = (
            spark.read.format("rocketstore")
            .option("path", path)
            .option("topics", ",".join(live))
            .option("columns", ",".join(names))
        )
        if any(start.values()):
            source = source.option("startingOffsets", json.dumps(start))
        for key, value in extra.items():
            source = source.option(key, value)
        frames.append(source.load().select(*names))
    return _union(frames)


def _union(frames: list[Any]) -> Any:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _read_brokers(
    spark: Any, namesrv: str, topics: list[str], names: list[str], extra: dict[str, str]
) -> Any:
    """Broker mode of ``read_topic``: the reachable tiers' files, then the pulls past them."""
    from ..client._admin import AdminClient
    from ._options import RemoteOptions
    from ._tiered_broker import broker_tiers

    remote = RemoteOptions.parse({**extra, "namesrv": namesrv})
    assert remote is not None
    with AdminClient(namesrv, signer=remote.signer()) as admin:
        tiers = broker_tiers(admin, topics)
    frames = []
    if tiers.files:
        frames.append(spark.read.schema(schema_ddl(names)).parquet(*tiers.files).select(*names))
    source = (
        spark.read.format("rocketstore")
        .option("namesrv", namesrv)
        .option("topics", ",".join(topics))
        .option("columns", ",".join(names))
    )
    if tiers.starting:
        source = source.option("startingOffsets", json.dumps(tiers.starting))
    for key, value in extra.items():
        source = source.option(key, value)
    frames.append(source.load().select(*names))
    return _union(frames)
