"""Plain records of one topic and queue encoded column-wise, as one buffer (numpy + pyarrow).

A batch append in two steps (the Spark writer's path):

1. ``encode_plain_batch`` (outside the put lock): the fixed head of every record is built as
   a numpy record array (lengths, CRCs, hosts), the topic and properties-length pieces as
   another, and the records are put together back to back by one Arrow kernel: a
   ``binary_view`` array of four views a record (head, body, topic + properties length,
   properties) pointing into those arrays and into the caller's Arrow buffers, cast to
   ``binary``. Bodies and properties are read where Arrow holds them: the only copy of a body
   is into the batch.
2. ``stamp`` (under the put lock, after the batch is copied into the commit log at its
   position): the fields known only then, written with numpy at every record's offset:
   QUEUEOFFSET, PHYSICALOFFSET, BORNTIMESTAMP and STORETIMESTAMP.

Records are V1 with IPv4 hosts, flag / sys flag / reconsume times 0, born when stored: what
``CommitLog.put_messages`` writes for the same rows as Messages, byte for byte (see the record
layout in ``_record``). ``CommitLog.put_encoded_batch`` is the append itself (the checks, the
file position, one copy of the batch into the file or write buffer, ``stamp``, the batch
published for dispatch); ``encode_plain_rows`` encodes rows given as Python lists.

Threads: ``encode_plain_batch`` and ``encode_plain_rows`` any thread; ``stamp`` with the put
lock held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ._record import (
    DEFAULT_BORN_HOST,
    HEAD_V4_FIELDS,
    HEAD_V4_SIZE,
    MAGIC_V1,
    OFFSET_BORN_TIMESTAMP,
    OFFSET_PHYSICAL_OFFSET,
    OFFSET_QUEUE_OFFSET,
    OFFSET_STORE_TIMESTAMP_V4,
    crc32,
    tags_code,
)

HEAD = np.dtype(HEAD_V4_FIELDS)
"""The fixed part of a V1 record with IPv4 hosts, up to and including BODYLENGTH."""
assert HEAD.itemsize == HEAD_V4_SIZE

_INLINE = 12  # binary_view values up to this length live in the view itself


@dataclass(frozen=True)
class EncodedBatch:
    """Records of one topic and queue, back to back in ``data`` (offsets and times unset)."""

    topic: str
    queue_id: int
    data: pa.Buffer
    starts: np.ndarray  # int64: each record's start in ``data``
    sizes: tuple[int, ...]
    tags_codes: tuple[int, ...]
    max_body: int
    max_properties: int
    store_host: bytes
    keys: tuple[str | None, ...] = ()  # each record's KEYS value (for the index), or none

    @property
    def total(self) -> int:
        return int(self.data.size)

    def __len__(self) -> int:
        return len(self.sizes)


def _value_offsets(arr: pa.Array) -> tuple[np.ndarray, pa.Buffer | None]:
    """(int64 offsets of the n + 1 value bounds, data buffer) of a binary array."""
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    return offsets.astype(np.int64), buffers[2]


def _views(
    lengths: np.ndarray, buffer_index: int, starts: np.ndarray, source: np.ndarray
) -> np.ndarray:
    """binary_view views (n, 4) int32 of the values ``source[starts[i]:+lengths[i]]``, which
    sit in variadic buffer ``buffer_index``: short values inline, others by reference. The
    views of long values leave their 4-byte prefix zero: they are only cast, which reads the
    buffers (reading every prefix would cost a cache miss a value)."""
    n = len(lengths)
    views = np.zeros((n, 4), dtype="<i4")
    views[:, 0] = lengths
    short = lengths <= _INLINE
    if short.all():
        rows = np.arange(n)
    else:
        long_rows = ~short
        views[long_rows, 2] = buffer_index
        views[long_rows, 3] = starts[long_rows]
        rows = np.flatnonzero(short)
    if len(rows):
        ss = starts[rows]
        span = np.arange(_INLINE, dtype=np.int64)
        inside = span < lengths[rows][:, None]
        raw = np.zeros((len(rows), _INLINE), dtype=np.uint8)
        if len(source):
            idx = np.minimum(ss[:, None] + span, len(source) - 1)
            raw[:] = np.where(inside, source[idx], 0)
        views[rows, 1:] = raw.view("<i4")
    return views


def encode_plain_batch(
    topic: str,
    queue_id: int,
    bodies: pa.Array,
    properties: pa.Array,
    tags_codes: Sequence[int],
    store_host: bytes,
    rows: np.ndarray | None = None,
    keys: Sequence[str | None] = (),
    born_host: bytes = DEFAULT_BORN_HOST,
) -> EncodedBatch:
    """Encode rows ``rows`` (all, in order, when None) of ``bodies`` and ``properties``
    (binary arrays without nulls; properties already encoded as ``name\\x01value`` pairs
    joined by ``\\x02``) as records of ``topic`` / ``queue_id``. ``tags_codes``: each
    encoded record's consume-queue tags code; ``keys``: each encoded record's KEYS value
    (None or empty: not indexed), or nothing. Hosts are 8-byte IPv4 blocks."""
    if len(store_host) != 8 or len(born_host) != 8:
        raise ValueError("encode_plain_batch writes IPv4 hosts only")
    topic_b = topic.encode()
    if not 0 < len(topic_b) <= 127:
        raise ValueError(f"topic {topic!r} needs 1..127 bytes")
    b_off, b_buf = _value_offsets(bodies)
    p_off, p_buf = _value_offsets(properties)
    if rows is None:
        rows = np.arange(len(bodies), dtype=np.int64)
    n = len(rows)
    if n == 0:
        raise ValueError("an empty batch")
    b_start, b_len = b_off[rows], b_off[rows + 1] - b_off[rows]
    p_start, p_len = p_off[rows], p_off[rows + 1] - p_off[rows]
    t = len(topic_b)
    sizes = HEAD_V4_SIZE + b_len + 1 + t + 2 + p_len
    heads = np.zeros(n, dtype=HEAD)
    heads["total"] = sizes
    heads["magic"] = MAGIC_V1
    heads["queue_id"] = queue_id
    heads["born_host"] = np.frombuffer(born_host, dtype=np.uint8)
    heads["store_host"] = np.frombuffer(store_host, dtype=np.uint8)
    heads["body_length"] = b_len
    body_bytes = np.frombuffer(b_buf, dtype=np.uint8) if b_buf is not None else np.zeros(0, "u1")
    if b_buf is not None and int(b_len.sum()):
        mem = memoryview(b_buf)  # type: ignore[arg-type]
        ends = (b_start + b_len).tolist()
        crcs = map(crc32, map(mem.__getitem__, map(slice, b_start.tolist(), ends)))
        heads["crc"] = np.fromiter(crcs, dtype=np.int64, count=n) & 0x7FFFFFFF
        mem.release()
    else:
        heads["crc"] = crc32(b"") & 0x7FFFFFFF
    mids = np.empty((n, t + 3), dtype=np.uint8)  # TOPICLENGTH, topic, PROPERTIESLENGTH
    mids[:, 0] = t
    mids[:, 1 : t + 1] = np.frombuffer(topic_b, dtype=np.uint8)
    mids[:, t + 1 :] = p_len.astype(">u2").view(np.uint8).reshape(n, 2)
    props_bytes = np.frombuffer(p_buf, dtype=np.uint8) if p_buf is not None else np.zeros(0, "u1")
    heads_bytes = heads.view(np.uint8)
    mids_bytes = mids.reshape(-1)
    views = np.empty((n, 4, 4), dtype="<i4")
    views[:, 0] = _views(
        np.full(n, HEAD_V4_SIZE, dtype=np.int64),
        0,
        np.arange(n, dtype=np.int64) * HEAD_V4_SIZE,
        heads_bytes,
    )
    views[:, 1] = _views(b_len, 1, b_start, body_bytes)
    views[:, 2] = _views(
        np.full(n, t + 3, dtype=np.int64), 2, np.arange(n, dtype=np.int64) * (t + 3), mids_bytes
    )
    views[:, 3] = _views(p_len, 3, p_start, props_bytes)
    empty = pa.py_buffer(b"")
    parts = pa.Array.from_buffers(
        pa.binary_view(),
        4 * n,
        [
            None,
            pa.py_buffer(views),
            pa.py_buffer(heads_bytes),
            b_buf if b_buf is not None else empty,
            pa.py_buffer(mids_bytes),
            p_buf if p_buf is not None else empty,
        ],
    )
    joined = parts.cast(pa.binary())
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    total = int(starts[-1] + sizes[-1])
    data: Any = joined.buffers()[2]
    return EncodedBatch(
        topic,
        queue_id,
        data.slice(0, total),
        starts,
        tuple(sizes.tolist()),
        tuple(tags_codes),
        int(b_len.max()),
        int(p_len.max()),
        store_host,
        tuple(keys),
    )


def stamp(
    target: Any, at: int, batch: EncodedBatch, first_phys: int, first_queue_offset: int, now: int
) -> tuple[int, ...]:
    """Write the queue offsets, commit-log offsets and born / store times of ``batch``, which
    has been copied into the writable buffer ``target`` at ``at`` and starts at commit-log
    offset ``first_phys``. Returns each record's commit-log offset. Put lock held."""
    n = len(batch)
    limit = at + batch.total
    longs = np.ndarray(shape=(limit - 7,), dtype=">i8", buffer=target, strides=(1,))
    try:
        pos = batch.starts + at
        longs[pos + OFFSET_QUEUE_OFFSET] = np.arange(
            first_queue_offset, first_queue_offset + n, dtype=np.int64
        )
        phys = batch.starts + first_phys
        longs[pos + OFFSET_PHYSICAL_OFFSET] = phys
        longs[pos + OFFSET_BORN_TIMESTAMP] = now
        longs[pos + OFFSET_STORE_TIMESTAMP_V4] = now
    finally:
        del longs
    return tuple(phys.tolist())


def encode_plain_rows(
    topic: str,
    queue_id: int,
    bodies: Sequence[bytes],
    properties: Sequence[bytes],
    tags: Sequence[str | None],
    keys: Sequence[str | None],
    store_host: bytes,
) -> EncodedBatch:
    """``encode_plain_batch`` of rows given as lists: row ``i`` is ``bodies[i]`` with the
    encoded PROPERTIES field ``properties[i]`` (may be empty), whose TAGS and KEYS values are
    ``tags[i]`` / ``keys[i]`` (None when absent)."""
    codes = {t: tags_code(t) for t in set(tags)}
    return encode_plain_batch(
        topic,
        queue_id,
        pa.array(bodies, pa.binary()),
        pa.array(properties, pa.binary()),
        [codes[t] for t in tags],
        store_host,
        keys=keys,
    )
