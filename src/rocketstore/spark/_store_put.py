"""Putting Arrow batches of rows into an open store: what a write into a store directory does
with each batch it is handed (``_store_write`` hands them over, one store thread).

Rows need ``topic`` and ``body`` (binary or string); ``tags`` (string), ``keys`` (array of
strings, or one space-separated string), ``properties`` (map of strings) and ``queue_id`` (int;
null or absent: the row's topic queues are used in turn) are optional. System keys in
``properties`` are left out unless ``keep_system_properties`` (``_system_props``).

No pyspark: the Spark writers and ``rocketstore import`` without Spark both call it. Called from
the one thread that puts into the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import Message, MessageStore
from ..store.log._batch_encode import EncodedBatch, encode_plain_batch
from ..store.log._message import PutMessageResult
from ..store.log._record import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    tags_code,
)
from ._options import WRITE_BUFFERS, SourceOptionError
from ._write_common import without_system_properties

_BATCH_MESSAGES = 1024
_ENCODED_ROWS = 16384  # rows a column-wise put takes at most


@dataclass
class WriteReport:
    """What one write stored: rows, bytes and the last offset written per queue (the Spark
    writer's task report derives from it)."""

    rows: int = 0
    body_bytes: int = 0
    queues: dict[str, int] = field(default_factory=dict)  # "topic/queue" → next offset
    # where the task's time went (seconds): waiting for input batches, putting them, and
    # closing the store (which waits for dispatch and the key index to catch up)
    input_s: float = 0.0
    put_s: float = 0.0
    close_s: float = 0.0


@dataclass(frozen=True)
class WriteSettings:
    path: str
    commit_log_file_size: int | None
    consume_queue_file_size: int | None
    queue_counts: dict[str, int]
    default_queues: int
    lock_timeout_ms: int
    columns: tuple[str, ...]
    flush_disk_type: str
    write_buffers: int = WRITE_BUFFERS
    keep_system_properties: bool = False


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    idx = batch.schema.get_field_index(name)
    return batch.column(idx) if idx >= 0 else None


def _first_null(col: pa.Array) -> int:
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def _queue_ids(
    s: WriteSettings,
    topic_codes: np.ndarray,
    topics: list[str],
    qid_col: pa.Array | None,
    turn: dict[str, int],
    start: int,
) -> np.ndarray:
    """Each row's queue: its queue_id, else the next of its topic's queues in turn."""
    n = len(topic_codes)
    if qid_col is None:
        qids = np.zeros(n, dtype=np.int64)
        unset = np.ones(n, dtype=bool)
    else:
        unset = qid_col.is_null().to_numpy(zero_copy_only=False)
        qids = qid_col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if unset.any():
        for code, topic in enumerate(topics):
            rows = np.flatnonzero(unset & (topic_codes == code))
            if not len(rows):
                continue
            count = s.queue_counts.get(topic, s.default_queues)
            k = turn.get(topic, start)
            turn[topic] = k + len(rows)
            qids[rows] = (k + np.arange(len(rows), dtype=np.int64)) % count
    return qids


def _plain_properties(tags: pa.Array | None, keys: pa.Array | None, n: int) -> pa.Array:
    """The PROPERTIES field of rows without a properties map: TAGS then KEYS, as Message
    orders them (empty tags / keys are left out)."""
    parts = []
    for name, col in ((PROPERTY_TAGS, tags), (PROPERTY_KEYS, keys)):
        if col is not None:
            col = pc.if_else(pc.equal(pc.binary_length(col), 0), None, col)
            parts.append(pc.binary_join_element_wise(name + NAME_VALUE_SEPARATOR, col, ""))
    if not parts:
        return pa.array([b""] * n, pa.binary())
    # (not null_handling="skip": pyarrow drops rows where every part is null)
    both = pc.binary_join_element_wise(*parts, PROPERTY_SEPARATOR) if len(parts) == 2 else None
    joined = pc.coalesce(*([both] if both is not None else []), *parts, pa.scalar(""))
    return joined.cast(pa.binary())


def _has_separator(col: pa.Array | None) -> bool:
    if col is None:
        return False
    found = pc.or_(pc.match_substring(col, "\x01"), pc.match_substring(col, "\x02"))
    return bool(pc.any(found).as_py())


def _chunks(est: np.ndarray, limit: int, most: int = _BATCH_MESSAGES) -> list[tuple[int, int]]:
    """Where the batch puts of a run of rows start and end: up to ``most`` rows, and rows are
    added while the estimated size so far is under ``limit``."""
    total = np.zeros(len(est) + 1, dtype=np.int64)
    np.cumsum(est, out=total[1:])
    out = []
    lo = 0
    while lo < len(est):
        hi = int(np.searchsorted(total, total[lo] + limit, side="left"))
        hi = max(lo + 1, min(hi, lo + most, len(est)))
        out.append((lo, hi))
        lo = hi
    return out


class _ObjectColumns:
    """The Python values of a batch's bodies, properties, tags and keys, taken by row numbers
    (contiguous ones as slices); each column converted from Arrow on first use."""

    def __init__(self, *columns: pa.Array | None) -> None:
        self.columns = columns
        self.lists: list[list[Any] | None] = [None] * len(columns)
        self.arrays: list[np.ndarray | None] = [None] * len(columns)

    def _list(self, k: int) -> list[Any]:
        values = self.lists[k]
        if values is None:
            col = self.columns[k]
            values = col.to_pylist() if col is not None else [None] * self.n
            self.lists[k] = values
        return values

    @property
    def n(self) -> int:
        return next(len(c) for c in self.columns if c is not None)

    def column(self, k: int, idx: np.ndarray) -> list[Any]:
        first = int(idx[0])
        if int(idx[-1]) - first + 1 == len(idx):  # input order (idx ascends within a group)
            return self._list(k)[first : first + len(idx)]
        a = self.arrays[k]
        if a is None:
            a = np.empty(self.n, dtype=object)
            a[:] = self._list(k)
            self.arrays[k] = a
        return a[idx].tolist()  # type: ignore[no-any-return]

    def rows(self, idx: np.ndarray) -> list[list[Any]]:
        return [self.column(k, idx) for k in range(len(self.columns))]


def _tag_codes(tags: pa.Array | None, n: int) -> np.ndarray:
    """Each row's consume-queue tags code (0 without tags), hashed once per distinct tag."""
    if tags is None:
        return np.zeros(n, dtype=np.int64)
    enc = pc.dictionary_encode(tags)
    names = enc.dictionary.to_pylist()
    codes = np.array([tags_code(t or None) for t in names] + [0], dtype=np.int64)
    picked: np.ndarray = codes[enc.indices.fill_null(len(names)).to_numpy(zero_copy_only=False)]
    return picked


def _append(store: MessageStore, batch: EncodedBatch) -> PutMessageResult:
    """Store an encoded batch."""
    return store.put_encoded_batch(batch)


def put_batch(
    store: MessageStore,
    s: WriteSettings,
    batch: pa.RecordBatch,
    turn: dict[str, int],
    start: int,
    report: WriteReport,
) -> None:
    """Rows are grouped by (topic, queue) (input order kept within a group). Rows without a
    properties map are encoded column-wise (``encode_plain_batch``: heads for the whole run
    at once, records joined by one Arrow kernel) and appended one run at a time; rows with
    one go through Message objects and ``put_messages`` (DELAY ones one at a time)."""
    n = batch.num_rows
    if not n:
        return
    batch = without_system_properties(batch, s.keep_system_properties)
    topic_col = _column(batch, "topic")
    body_col = _column(batch, "body")
    assert topic_col is not None and body_col is not None
    for col in (topic_col, body_col):
        if col.null_count:
            raise SourceOptionError(
                f"row {_first_null(col)} of a write batch has a null topic or body"
            )
    if not pa.types.is_binary(body_col.type):
        body_col = body_col.cast(pa.binary())
    tags_col = _column(batch, "tags")
    keys_col = _column(batch, "keys")
    props_col = _column(batch, "properties")
    if keys_col is not None and pa.types.is_list(keys_col.type):
        if pc.list_flatten(keys_col).null_count:  # Message refuses null keys: keep its error
            _put_rows(store, s, batch, turn, start, report)
            return
        keys_col = pc.binary_join(keys_col, KEY_SEPARATOR)
    if _has_separator(tags_col) or _has_separator(keys_col):
        _put_rows(store, s, batch, turn, start, report)  # refused there, as before
        return
    enc = pc.dictionary_encode(topic_col)
    topics = enc.dictionary.to_pylist()
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    qids = _queue_ids(s, codes, topics, _column(batch, "queue_id"), turn, start)
    with_map = (
        ~props_col.is_null().to_numpy(zero_copy_only=False)
        if props_col is not None and props_col.null_count < n
        else np.zeros(n, dtype=bool)
    )
    plain_props = _plain_properties(tags_col, keys_col, n)
    host = store.commit_log.store_host
    encoded = len(host) == 8  # an IPv6 store host: put_plain_batch's general path
    tag_codes = _tag_codes(tags_col, n)
    # the size estimate of each row (body + 200) decides where a batch put ends
    est = pc.binary_length(body_col).to_numpy(zero_copy_only=False).astype(np.int64)
    report.body_bytes += int(est.sum())
    est += 200
    columns = _ObjectColumns(body_col, plain_props, tags_col, keys_col)
    group_key = codes * (1 << 32) + qids
    if len(topics) == 1 and (qids == qids[0]).all():  # one (topic, queue): input order
        order, bounds = np.arange(n), np.zeros(0, dtype=np.int64)
    else:
        order = np.argsort(group_key, kind="stable")
        bounds = np.flatnonzero(np.diff(group_key[order])) + 1
    limit = max(1, (s.commit_log_file_size or 1 << 30) // 4)
    for rows in np.split(order, bounds):
        topic = topics[int(codes[rows[0]])]
        qid = int(qids[rows[0]])
        flags = with_map[rows]
        # runs of rows with and without a properties map, in input order
        cuts = np.flatnonzero(np.diff(flags.astype(np.int8))) + 1
        for run in np.split(rows, cuts):
            if with_map[run[0]]:
                bodies, _props, tags, keys = columns.rows(run)
                props = props_col.take(pa.array(run)).to_pylist()  # type: ignore[union-attr]
                msgs = [
                    Message(
                        topic,
                        body,
                        qid,
                        tags=tag or None,
                        keys=key or None,
                        properties=dict(p) if p else None,
                    )
                    for body, tag, key, p in zip(bodies, tags, keys, props, strict=True)
                ]
                _put_messages(store, msgs, limit, report)
                continue
            if not encoded or not 0 < len(topic.encode()) <= 127:  # the store refuses it
                for lo, hi in _chunks(est[run], limit):
                    r = store.put_plain_batch(topic, qid, *columns.rows(run[lo:hi]))
                    _report(r, topic, qid, hi - lo, report)
                continue
            for lo, hi in _chunks(est[run], limit, _ENCODED_ROWS):
                part = run[lo:hi]
                row_keys = columns.column(3, part) if keys_col is not None else ()
                batch_ = encode_plain_batch(
                    topic,
                    qid,
                    body_col,
                    plain_props,
                    tag_codes[part].tolist(),
                    host,
                    rows=part,
                    keys=row_keys,
                )
                _report(_append(store, batch_), topic, qid, hi - lo, report)


def _put_rows(
    store: MessageStore,
    s: WriteSettings,
    batch: pa.RecordBatch,
    turn: dict[str, int],
    start: int,
    report: WriteReport,
) -> None:
    """The row-by-row path: every row becomes a Message (used when a batch has values the
    column-wise path does not take, so that the store refuses them as it always has)."""
    n = batch.num_rows

    def values(name: str) -> list[Any]:
        col = _column(batch, name)
        return col.to_pylist() if col is not None else [None] * n

    topics, bodies, tags, keys = values("topic"), values("body"), values("tags"), values("keys")
    props, qids = values("properties"), values("queue_id")
    groups: dict[tuple[str, int], list[Message]] = {}
    for i in range(n):
        topic = topics[i]
        body = bodies[i]
        if isinstance(body, str):
            body = body.encode()
        qid = qids[i]
        if qid is None:
            count = s.queue_counts.get(topic, s.default_queues)
            k = turn.get(topic, start)
            turn[topic] = k + 1
            qid = k % count
        p = props[i]
        msg = Message(
            topic, body, qid, tags=tags[i], keys=keys[i] or None, properties=dict(p) if p else None
        )
        groups.setdefault((topic, qid), []).append(msg)
        report.body_bytes += len(body)
    limit = max(1, (s.commit_log_file_size or 1 << 30) // 4)
    for msgs in groups.values():
        _put_messages(store, msgs, limit, report)


def _put_messages(
    store: MessageStore, msgs: list[Message], limit: int, report: WriteReport
) -> None:
    """Messages of one (topic, queue) in batches; DELAY ones one at a time."""
    chunk: list[Message] = []
    size = 0
    for m in msgs:
        if "DELAY" in m.properties:  # the store takes delayed messages one at a time
            _put(store, [m], report)
            continue
        est = len(m.body) + 200
        if chunk and (len(chunk) >= _BATCH_MESSAGES or size + est > limit):
            _put(store, chunk, report)
            chunk, size = [], 0
        chunk.append(m)
        size += est
    if chunk:
        _put(store, chunk, report)


def _report(r: PutMessageResult, topic: str, qid: int, count: int, report: WriteReport) -> None:
    if not r.ok:
        raise RuntimeError(
            f"the store refused {count} message(s) for {topic}/{qid}: "
            f"{r.status.name} {r.error or ''}".strip()
        )
    report.rows += count
    report.queues[f"{topic}/{qid}"] = r.queue_offset + count


def _put(store: MessageStore, msgs: list[Message], report: WriteReport) -> None:
    r = store.put_messages(msgs) if len(msgs) > 1 else store.put_message(msgs[0])
    _report(r, msgs[0].topic, msgs[0].queue_id, len(msgs), report)
