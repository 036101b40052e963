"""Reading the tiered store: a queue's rows from an offset, the messages and the commit-log
records they were, and messages by key.

A ``TierReader`` goes by the manifests only (``_manifest``): a ``part-`` file no manifest lists
is never read. A read of queue ``q`` from offset ``n`` opens only the files whose manifest range
of ``q`` holds offsets at or past ``n``, and in each only the row groups whose statistics
(``queue_id``, ``queue_offset``) can hold them; rows are sorted by queue id then queue offset, so
the rows of a queue range are one run of each file.

Rows become messages again through the store's own record encoder
(``store.log._record.encode_record``): topic, queue id, queue offset, commit-log offset, system
flag, born and store times and hosts, reconsume times, body and the properties in the map's
order (``name\\x01value`` joined by ``\\x02``). Two fields of a record are not in the rows and
come back as 0: FLAG and PREPAREDTXOFFSET. A record whose properties text had a trailing
separator or items the map drops comes back without them (so a few bytes shorter).

A pull's records (``records``) are those bytes laid end to end, as a broker answers a pull.

Threads: any. Manifests are cached per topic and read again when their file changes (it is
replaced atomically); Parquet footers are cached per listed file (listed files never change).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..columns._arrow import ARROW_SCHEMA, COLUMNS
from ..columns._schema import check_names
from ..store.log._record import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_KEY,
    MessageExt,
    decode_message,
    encode_record,
    pack_host,
    tags_code,
)
from ._manifest import (
    MANIFEST,
    TierError,
    TopicManifest,
    load_manifest,
    tiered_topics,
    topic_dir,
)

_ORDER = ("queue_id", "queue_offset")
_FOOTERS = 256  # Parquet footers kept


@dataclass(frozen=True, slots=True)
class TierRecords:
    """A pull's worth of records from the tier: ``data`` holds ``count`` records end to end;
    ``next_offset`` is the offset after the last row looked at (matched by the tags or not)."""

    data: bytes
    count: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class _Footer:
    metadata: pq.FileMetaData
    leaves: dict[str, int]  # column name → index of its Parquet leaf column (flat columns)


class TierReader:
    """The tiered directory ``root`` for reading. Cheap to make; nothing is opened until a read."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._manifests: dict[str, tuple[tuple[int, int, int], TopicManifest]] = {}
        self._footers: dict[Path, _Footer] = {}

    def __repr__(self) -> str:
        return f"TierReader({str(self.root)!r})"

    # ---- manifests ----------------------------------------------------------------------------

    def manifest(self, topic: str) -> TopicManifest:
        """The topic's manifest as it is now (empty when the topic has none). TierError when it
        cannot be read."""
        path = topic_dir(self.root, topic) / MANIFEST
        try:
            st = path.stat()
        except FileNotFoundError:
            return TopicManifest(topic)
        except OSError as exc:
            raise TierError(f"cannot read {path}: {exc}") from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._manifests.get(topic)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        manifest = load_manifest(self.root, topic)
        with self._lock:
            self._manifests[topic] = (stamp, manifest)
        return manifest

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """Offsets ``[first, end)`` of the queue the tier holds, or None."""
        held = self.manifest(topic).queue_range(queue_id)
        return None if held is None else (held[0], held[1] + 1)

    def holds(self, topic: str, queue_id: int, offset: int) -> bool:
        held = self.queue_range(topic, queue_id)
        return held is not None and held[0] <= offset < held[1]

    def boundary(self, topic: str) -> dict[int, int]:
        """Per queue of the topic, the first offset past the tier (where a read of the commit
        log takes over)."""
        manifest = self.manifest(topic)
        out: dict[int, int] = {}
        for q in manifest.queue_ids():
            held = manifest.queue_range(q)
            assert held is not None
            out[q] = held[1] + 1
        return out

    def files(self, topic: str) -> list[Path]:
        """The topic's listed Parquet files, in commit-log order."""
        directory = topic_dir(self.root, topic)
        return [directory / f.name for f in self.manifest(topic).files]

    # ---- rows ---------------------------------------------------------------------------------

    def _footer(self, path: Path) -> _Footer:
        with self._lock:
            footer = self._footers.get(path)
        if footer is not None:
            return footer
        try:
            metadata = pq.read_metadata(path)
        except (OSError, pa.ArrowException) as exc:
            raise TierError(f"cannot read the tiered file {path}: {exc}") from None
        leaves = {}
        for i in range(metadata.num_columns):
            name = metadata.schema.column(i).path
            if "." not in name:
                leaves[name] = i
        footer = _Footer(metadata, leaves)
        with self._lock:
            if len(self._footers) >= _FOOTERS:
                self._footers.pop(next(iter(self._footers)))
            self._footers[path] = footer
        return footer

    def _row_groups(
        self, footer: _Footer, keep: Callable[[dict[str, tuple[object, object] | None]], bool]
    ) -> list[int]:
        """The row groups whose column statistics ``keep`` accepts (given (min, max) per flat
        column, None where a group has no statistics)."""
        md = footer.metadata
        out = []
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            stats: dict[str, tuple[object, object] | None] = {}
            for name, i in footer.leaves.items():
                s = rg.column(i).statistics
                stats[name] = (s.min, s.max) if s is not None and s.has_min_max else None
            if keep(stats):
                out.append(g)
        return out

    def _read_groups(self, path: Path, groups: Sequence[int], columns: Sequence[str]) -> pa.Table:
        try:
            f = pq.ParquetFile(path, metadata=self._footer(path).metadata)
            try:
                table = f.read_row_groups(list(groups), columns=list(columns))
            finally:
                f.close()
        except (OSError, pa.ArrowException) as exc:
            raise TierError(f"cannot read the tiered file {path}: {exc}") from None
        return table.cast(pa.schema([ARROW_SCHEMA.field(c) for c in columns]))

    def read_rows(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_rows: int,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Up to ``max_rows`` rows of the queue from ``offset`` on (by queue offset), with
        ``columns`` (default every column, in the schema's order). Fewer when the tier ends."""
        names = list(columns) if columns is not None else list(COLUMNS)
        check_names(names)
        schema = pa.schema([ARROW_SCHEMA.field(c) for c in names])
        read = names + [c for c in _ORDER if c not in names]
        parts: list[pa.Table] = []
        got = 0
        directory = topic_dir(self.root, topic)
        for entry in self.manifest(topic).files:
            held = entry.queues.get(queue_id)
            if held is None or held[1] < offset:
                continue
            if got >= max_rows:
                break
            hi = offset + max_rows  # offsets of a queue are consecutive
            path = directory / entry.name
            groups = self._row_groups(self._footer(path), _queue_groups(queue_id, offset, hi))
            if not groups:
                continue
            table = self._read_groups(path, groups, read)
            qid = table.column("queue_id")
            qoff = table.column("queue_offset")
            mask = pc.and_(
                pc.equal(qid, queue_id),
                pc.and_(pc.greater_equal(qoff, offset), pc.less(qoff, hi)),
            )
            table = table.filter(mask)
            if table.num_rows:
                table = table.sort_by([("queue_offset", "ascending")])
                table = table.slice(0, max_rows - got)
                parts.append(table.select(names))
                got += table.num_rows
        if not parts:
            return schema.empty_table()
        return pa.concat_tables(parts)

    def topics(self) -> list[str]:
        """The topics the tier has a manifest for, sorted."""
        return tiered_topics(self.root)

    def at_commitlog_offset(self, offset: int, topic: str | None = None) -> MessageExt | None:
        """The message that was stored at commit-log ``offset`` (of ``topic``, or of any tiered
        topic), or None: the file whose commit-log range holds it is found in the manifests,
        and in it only the row groups whose commit-log offset statistics can hold it are read."""
        for t in [topic] if topic else self.topics():
            for entry in self.manifest(t).files:
                if not entry.commitlog[0] <= offset < entry.commitlog[1]:
                    continue
                path = topic_dir(self.root, t) / entry.name
                groups = self._row_groups(self._footer(path), _offset_groups(offset))
                if not groups:
                    continue
                table = self._read_groups(path, groups, list(COLUMNS))
                table = table.filter(pc.equal(table.column("commitlog_offset"), offset))
                if table.num_rows:
                    return _message(encode_rows(table.slice(0, 1))[0])
        return None

    # ---- messages -----------------------------------------------------------------------------

    def messages(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[MessageExt]:
        """Up to ``max_count`` messages of the queue from ``offset``, as the store's reads give
        them (FLAG and the prepared-transaction offset are 0: the rows do not keep them)."""
        table = self.read_rows(topic, queue_id, offset, max_count)
        return [_message(r) for r in encode_rows(table)]

    def records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        tags_codes: frozenset[int] | None = None,
    ) -> TierRecords:
        """A pull's records of the queue from ``offset``: at most ``max_count`` records and,
        past the first, no more than ``max_bytes`` bytes; with ``tags_codes`` only rows whose
        TAGS hash to one of them (the others are passed over, as the broker's consume-queue
        filter passes them). Zero records when the tier does not hold ``offset``."""
        held = self.queue_range(topic, queue_id)
        if held is None or not held[0] <= offset < held[1]:
            return TierRecords(b"", 0, offset)
        window = max_count if tags_codes is None else max(max_count, 512)
        table = self.read_rows(topic, queue_id, offset, min(window, held[1] - offset))
        if not table.num_rows:
            return TierRecords(b"", 0, offset)
        offsets = table.column("queue_offset").to_pylist()
        if tags_codes is not None:
            tags = table.column("tags").to_pylist()
            matched = [i for i, t in enumerate(tags) if tags_code(t) in tags_codes]
        else:
            matched = list(range(table.num_rows))
        chosen = matched[:max_count]
        records = encode_rows(table.take(pa.array(chosen, pa.int64()))) if chosen else []
        out: list[bytes] = []
        total = 0
        for i, rec in zip(chosen, records, strict=True):
            if out and total + len(rec) > max_bytes:
                # stop before this record: the next pull starts at it
                return TierRecords(b"".join(out), len(out), offsets[i])
            out.append(rec)
            total += len(rec)
        if len(chosen) == max_count and chosen:
            nxt = offsets[chosen[-1]] + 1
        else:
            nxt = offsets[-1] + 1
        return TierRecords(b"".join(out), len(out), nxt)

    def query(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**63 - 1
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose UNIQ_KEY or one of whose KEYS is ``key``, stored within
        [begin, end] (ms): the newest ``max_num``, ascending by commit-log offset, as the store's
        query by key gives them. Only files whose store-time range meets [begin, end] are read,
        and in them only the row groups whose store-time statistics do."""
        lo_us, hi_us = _us(begin), _us(end)
        found: list[pa.Table] = []
        directory = topic_dir(self.root, topic)
        for entry in self.manifest(topic).files:
            if entry.store_time[1] < begin or entry.store_time[0] > end:
                continue
            path = directory / entry.name
            groups = self._row_groups(self._footer(path), _time_groups(lo_us, hi_us))
            if not groups:
                continue
            probe = self._read_groups(path, groups, ["keys", "properties", "store_timestamp"])
            rows = _key_rows(probe, key, lo_us, hi_us)
            if len(rows):
                full = self._read_groups(path, groups, list(COLUMNS))
                found.append(full.take(pa.array(rows)))
        if not found:
            return []
        table = pa.concat_tables(found).sort_by([("commitlog_offset", "ascending")])
        table = table.slice(max(table.num_rows - max_num, 0))
        return [_message(r) for r in encode_rows(table)]


def _queue_groups(
    queue_id: int, lo: int, hi: int
) -> Callable[[dict[str, tuple[object, object] | None]], bool]:
    def keep(stats: dict[str, tuple[object, object] | None]) -> bool:
        q = stats.get("queue_id")
        if q is None:
            return True
        qmin, qmax = q
        if not qmin <= queue_id <= qmax:  # type: ignore[operator]
            return False
        o = stats.get("queue_offset")
        if o is None or qmin != qmax:  # offsets of several queues: no bound on this one's
            return True
        return o[0] < hi and o[1] >= lo  # type: ignore[operator]

    return keep


def _offset_groups(offset: int) -> Callable[[dict[str, tuple[object, object] | None]], bool]:
    def keep(stats: dict[str, tuple[object, object] | None]) -> bool:
        o = stats.get("commitlog_offset")
        return o is None or o[0] <= offset <= o[1]  # type: ignore[operator]

    return keep


def _time_groups(
    lo_us: int, hi_us: int
) -> Callable[[dict[str, tuple[object, object] | None]], bool]:
    def keep(stats: dict[str, tuple[object, object] | None]) -> bool:
        t = stats.get("store_timestamp")
        if t is None:
            return True
        tmin, tmax = (_as_us(v) for v in t)
        return tmin <= hi_us and tmax >= lo_us

    return keep


def _us(ms: int) -> int:
    return max(min(ms, 2**63 // 1000 - 1), -(2**63 // 1000)) * 1000


def _as_us(value: object) -> int:
    """A timestamp statistic (datetime or integer µs) as µs since the epoch."""
    if isinstance(value, int):
        return value
    return int(pa.scalar(value, pa.timestamp("us", tz="UTC")).value)


def _key_rows(probe: pa.Table, key: str, lo_us: int, hi_us: int) -> np.ndarray:
    """Rows of ``probe`` stored within [lo, hi] µs whose KEYS hold ``key`` or whose UNIQ_KEY
    is ``key``."""
    ts = probe.column("store_timestamp").combine_chunks().cast(pa.int64())
    in_time = pc.and_(pc.greater_equal(ts, lo_us), pc.less_equal(ts, hi_us))
    keys = probe.column("keys").combine_chunks()
    hit = np.zeros(probe.num_rows, dtype=bool)
    flat = pc.list_flatten(keys)
    if len(flat):
        parents = pc.list_parent_indices(keys).to_numpy()
        eq = pc.fill_null(pc.equal(flat, key), False).to_numpy(zero_copy_only=False)
        hit[parents[eq]] = True
    uniq = pc.map_lookup(probe.column("properties").combine_chunks(), PROPERTY_UNIQ_KEY, "first")
    hit |= pc.fill_null(pc.equal(uniq, key), False).to_numpy(zero_copy_only=False)
    hit &= pc.fill_null(in_time, False).to_numpy(zero_copy_only=False)
    return np.flatnonzero(hit)


# ---- rows → records --------------------------------------------------------------------------


def encode_rows(table: pa.Table) -> list[bytes]:
    """The commit-log record of every row of ``table`` (which must have every column but
    ``msg_id``, ``tags`` and ``keys``: those are derived), FLAG and PREPAREDTXOFFSET 0."""
    need = [c for c in COLUMNS if c not in ("msg_id", "tags", "keys")]
    missing = [c for c in need if c not in table.column_names]
    if missing:
        raise TierError(f"rows without column(s) {', '.join(missing)} cannot be records")
    cols = {c: table.column(c).combine_chunks() for c in need}
    born = cols["born_timestamp"].cast(pa.int64()).to_numpy(zero_copy_only=False)
    stored = cols["store_timestamp"].cast(pa.int64()).to_numpy(zero_copy_only=False)
    born_ms = np.floor_divide(born, 1000).tolist()
    store_ms = np.floor_divide(stored, 1000).tolist()
    topics = cols["topic"].to_pylist()
    qids = cols["queue_id"].to_pylist()
    qoffs = cols["queue_offset"].to_pylist()
    phys = cols["commitlog_offset"].to_pylist()
    bodies = cols["body"].to_pylist()
    props = cols["properties"].to_pylist()
    born_hosts = cols["born_host"].to_pylist()
    store_hosts = cols["store_host"].to_pylist()
    reconsume = cols["reconsume_times"].to_pylist()
    sys_flags = cols["sys_flag"].to_pylist()
    out = []
    for i in range(table.num_rows):
        out.append(
            encode_record(
                topic=topics[i],
                body=bodies[i] or b"",
                queue_id=qids[i],
                queue_offset=qoffs[i],
                phys_offset=phys[i],
                sys_flag=sys_flags[i] or 0,
                born_timestamp=born_ms[i],
                born_host=pack_host(born_hosts[i]),
                store_timestamp=store_ms[i],
                store_host=pack_host(store_hosts[i]),
                reconsume_times=reconsume[i] or 0,
                properties=_properties_text(props[i]),
            )
        )
    return out


def _properties_text(items: Iterable[tuple[str, str | None]] | None) -> str:
    if not items:
        return ""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v or ''}" for k, v in items)


def _message(record: bytes) -> MessageExt:
    return decode_message(record, 0, len(record))
