"""Messages of one queue range → pyarrow RecordBatches in Spark's exact Arrow schema.

The common record (magic V1, IPv4 hosts) is decoded column-wise with numpy: the fixed header of
every record is gathered straight out of the read-only commit-log mapping, checked as a whole
(magic, length, topic, queue, offsets) and turned into columns; bodies are copied once and
CRC-checked one by one; properties are parsed with Arrow compute kernels. Any other record (IPv6
hosts, V2 topics, undecodable text) goes through the per-record decoder. A record that fails a
check is never returned: it raises CorruptRecordError, or with ``fail_on_data_loss=False`` it is
skipped.
"""

from __future__ import annotations

import binascii
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..store._errors import CorruptRecordError
from ..store._reader import StoreReader
from ..store._record import (
    MAGIC_V1,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    MessageExt,
    crc32,
    unpack_host,
)

log = logging.getLogger(__name__)

SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset long, commitlog_offset long, msg_id string, "
    "body binary, tags string, keys array<string>, properties map<string,string>, "
    "born_timestamp timestamp, store_timestamp timestamp, born_host string, store_host string, "
    "reconsume_times int, sys_flag int"
)

_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("commitlog_offset", pa.int64()),
        pa.field("msg_id", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.list_(pa.field("element", pa.string()))),
        pa.field(
            "properties",
            pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string())),
        ),
        pa.field("born_timestamp", _TS),
        pa.field("store_timestamp", _TS),
        pa.field("born_host", pa.string()),
        pa.field("store_host", pa.string()),
        pa.field("reconsume_times", pa.int32()),
        pa.field("sys_flag", pa.int32()),
    ]
)
"""What Spark derives from SCHEMA_DDL (every field nullable); batches must equal it exactly."""
_EMPTY = pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)

HEAD = 88  # bytes up to and including BODYLENGTH for a V1 record with IPv4 hosts


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets ``[begin, end)`` of one queue: the unit of a Spark partition."""

    topic: str
    queue_id: int
    begin: int
    end: int


def _gather(
    view: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``view[starts[i]:starts[i]+lengths[i]]``: (data, int32 offsets)."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=np.uint8), offsets.astype(np.int32)
    idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return view[idx], offsets.astype(np.int32)


def _strings(data: np.ndarray | bytes, offsets: np.ndarray, n: int) -> pa.Array:
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def _split_properties(props: pa.Array, n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(properties map, tags, keys) from ``name\\x01value\\x02...`` strings."""
    pairs = pc.split_pattern(props, PROPERTY_SEPARATOR)
    flat = pairs.flatten()
    parents = pairs.value_parent_indices().to_numpy()
    kv = pc.split_pattern(flat, NAME_VALUE_SEPARATOR, max_splits=1)
    good = pc.and_(
        pc.equal(pc.list_value_length(kv), 2),
        pc.greater(pc.utf8_length(pc.list_element(kv, 0)), 0),
    )
    good = pc.fill_null(good, False)
    kv = kv.filter(good)
    parents = parents[good.to_numpy(zero_copy_only=False)]
    counts = np.bincount(parents, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    names = pc.list_element(kv, 0)
    values = pc.list_element(kv, 1)
    mapping = pa.MapArray.from_arrays(pa.array(offsets), names, values).cast(
        ARROW_SCHEMA.field("properties").type
    )
    tags = pc.map_lookup(mapping, pa.scalar("TAGS"), "last")
    raw_keys = pc.map_lookup(mapping, pa.scalar("KEYS"), "last")
    keys = _split_keys(raw_keys, n)
    return mapping, tags, keys


def _split_keys(raw: pa.Array, n: int) -> pa.Array:
    """KEYS values (space separated, may be null) → list<string> without empty tokens."""
    tokens = pc.split_pattern(pc.fill_null(raw, ""), " ")
    flat = tokens.flatten()
    parents = tokens.value_parent_indices().to_numpy()
    keep = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    counts = np.bincount(parents[keep], minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(pa.array(keep))).cast(
        ARROW_SCHEMA.field("keys").type
    )


def _hosts(raw: np.ndarray) -> pa.Array:
    """(n, 8) uint8 IPv4 host blocks → "ip:port" strings (few distinct values, formatted once)."""
    keys = np.ascontiguousarray(raw).view(">u8").ravel()
    if len(keys) and (keys == keys[0]).all():
        return _repeat(unpack_host(int(keys[0]).to_bytes(8, "big")), len(keys))
    uniq, inverse = np.unique(keys, return_inverse=True)
    names = pa.array([unpack_host(int(u).to_bytes(8, "big")) for u in uniq], pa.string())
    return names.take(pa.array(inverse.astype(np.int32)))


def _msg_ids(store_hosts: np.ndarray, phys: np.ndarray, n: int) -> pa.Array:
    """offsetMsgId: store host (8 bytes) + commit-log offset, as 32 upper-case hex digits."""
    raw = np.empty((n, 16), dtype=np.uint8)
    raw[:, :8] = store_hosts
    raw[:, 8:] = phys.astype(">i8").view(np.uint8).reshape(n, 8)
    text = binascii.hexlify(raw.tobytes()).upper()
    return _strings(text, np.arange(0, 32 * n + 1, 32, dtype=np.int32), n)


def _timestamps(ms: np.ndarray) -> pa.Array:
    return pa.array(ms * 1000, pa.int64()).view(_TS)


class RangeDecoder:
    """Decodes the records of one queue range into batches. One per Spark task."""

    def __init__(
        self,
        reader: StoreReader,
        *,
        batch_rows: int = 10_000,
        check_crc: bool = True,
        fail_on_data_loss: bool = True,
    ) -> None:
        self.reader = reader
        self.batch_rows = batch_rows
        self.check_crc = check_crc
        self.fail_on_data_loss = fail_on_data_loss

    def batches(self, r: QueueRange) -> Iterator[pa.RecordBatch]:
        q = self.reader.queue(r.topic, r.queue_id)
        begin = r.begin
        if begin < q.min_offset or begin < self.reader.min_offset(r.topic, r.queue_id):
            lowest = self.reader.min_offset(r.topic, r.queue_id)
            if self.fail_on_data_loss:
                raise CorruptRecordError(
                    f"{r.topic}/{r.queue_id}: offsets {begin}..{lowest} are no longer in the "
                    "store (retention removed them); set failOnDataLoss=false to skip them"
                )
            begin = lowest
        end = min(r.end, q.max_offset)
        if end < r.end:
            log.warning(
                "%s/%d: only %d of %d offsets are readable", r.topic, r.queue_id, end, r.end
            )
        for lo in range(begin, end, self.batch_rows):
            hi = min(lo + self.batch_rows, end)
            parts = [
                np.frombuffer(
                    view, dtype=np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
                )
                for _first, view in q.unit_bytes(lo, hi)
            ]
            units = np.concatenate(parts) if len(parts) != 1 else parts[0]
            offsets = np.arange(lo, lo + len(units), dtype=np.int64)
            phys = units["phys"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
            del parts, units
            valid = (phys >= 0) & (sizes > 0) & (sizes != 0x7FFFFFFF)
            if not valid.all():
                phys, sizes, offsets = phys[valid], sizes[valid], offsets[valid]
            batch = self._decode(r.topic, r.queue_id, offsets, phys, sizes)
            if batch.num_rows:
                yield batch

    # ---- decoding ---------------------------------------------------------------------------

    def _decode(
        self, topic: str, queue_id: int, offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray
    ) -> pa.RecordBatch:
        file_size = self.reader.commit_log_file_size
        starts = phys - phys % file_size
        out: list[pa.RecordBatch] = []
        i = 0
        n = len(phys)
        while i < n:  # one run per commit-log file (units point forward through the log)
            j = int(np.searchsorted(starts, starts[i], side="right"))
            out.append(self._decode_file(topic, queue_id, offsets[i:j], phys[i:j], sizes[i:j]))
            i = j
        if not out:
            return _EMPTY
        if len(out) == 1:
            return out[0]
        return pa.Table.from_batches(out, ARROW_SCHEMA).combine_chunks().to_batches()[0]

    def _bad(self, topic: str, queue_id: int, offset: int, why: str) -> None:
        msg = f"{topic}/{queue_id} offset {offset}: {why}"
        if self.fail_on_data_loss:
            raise CorruptRecordError(msg + " (failOnDataLoss=false skips such records)")
        log.warning("skipping a bad record: %s", msg)

    def _decode_file(
        self, topic: str, queue_id: int, offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray
    ) -> pa.RecordBatch:
        mf = self.reader.commit_log.file_at(int(phys[0]))
        if mf is None:
            for off in offsets.tolist():
                self._bad(topic, queue_id, off, "its commit-log file is gone")
            return _EMPTY
        fsize = mf.file_size
        pos = phys - mf.from_offset
        ok = pos + sizes <= fsize
        ok &= sizes >= HEAD + 3
        view = np.frombuffer(mf.mm, dtype=np.uint8)
        try:
            safe = np.where(ok, pos, 0)
            head = np.lib.stride_tricks.sliding_window_view(view, HEAD)[safe]
            total = np.ascontiguousarray(head[:, 0:4]).view(">i4").ravel()
            magic = np.ascontiguousarray(head[:, 4:8]).view(">i4").ravel()
            crc = np.ascontiguousarray(head[:, 8:12]).view(">i4").ravel()
            qids = np.ascontiguousarray(head[:, 12:16]).view(">i4").ravel()
            qoffs = np.ascontiguousarray(head[:, 20:28]).view(">i8").ravel()
            poffs = np.ascontiguousarray(head[:, 28:36]).view(">i8").ravel()
            sysflag = np.ascontiguousarray(head[:, 36:40]).view(">i4").ravel()
            body_len = np.ascontiguousarray(head[:, 84:88]).view(">i4").ravel().astype(np.int64)
            fast = (
                ok
                & (magic == MAGIC_V1)
                & ((sysflag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)) == 0)
            )
            fast &= (total == sizes) & (body_len >= 0) & (HEAD + body_len + 3 <= sizes)
            topic_b = topic.encode()
            tl_pos = np.where(fast, pos + HEAD + body_len, 0)
            tlen = view[tl_pos].astype(np.int64)
            fast &= tlen == len(topic_b)
            pl_pos = np.where(fast, tl_pos + 1 + tlen, 0)
            plen = (view[pl_pos].astype(np.int64) << 8) | view[np.minimum(pl_pos + 1, fsize - 1)]
            fast &= HEAD + body_len + 1 + tlen + 2 + plen == sizes
            if fast.any():
                tb = view[np.where(fast, tl_pos + 1, 0)[:, None] + np.arange(len(topic_b))]
                fast &= (tb == np.frombuffer(topic_b, dtype=np.uint8)).all(axis=1)
            if not fast.all():
                return self._slow(topic, queue_id, offsets, phys, sizes)
            wrong = (qids != queue_id) | (qoffs != offsets) | (poffs != phys)
            keep = np.ones(len(phys), dtype=bool)
            if wrong.any():
                for k in np.flatnonzero(wrong).tolist():
                    self._bad(
                        topic,
                        queue_id,
                        int(offsets[k]),
                        f"its unit points at a record of queue {qids[k]} offset {qoffs[k]} "
                        f"stored at {poffs[k]}",
                    )
                keep &= ~wrong
            # bodies: one copy, CRC-checked record by record
            # zero-copy slices of the mapping, made and checked by C-level map() loops
            mv = memoryview(mf.mm)
            b_start = (pos + HEAD).tolist()
            b_end = (pos + HEAD + body_len).tolist()
            chunks = list(map(mv.__getitem__, map(slice, b_start, b_end)))
            if self.check_crc:
                got = np.fromiter(map(crc32, chunks), dtype=np.int64, count=len(chunks))
                bad_crc = (got & 0x7FFFFFFF) != crc
                if bad_crc.any():
                    for k in np.flatnonzero(bad_crc).tolist():
                        self._bad(topic, queue_id, int(offsets[k]), "body CRC mismatch")
                    keep &= ~bad_crc
            if not keep.all():
                chunks = [c for c, k in zip(chunks, keep.tolist(), strict=True) if k]
                sel = keep
                head, offsets, phys, pos = head[sel], offsets[sel], phys[sel], pos[sel]
                body_len, plen, pl_pos = body_len[sel], plen[sel], pl_pos[sel]
                qids, sysflag = qids[sel], sysflag[sel]
            n = len(chunks)
            body_data = b"".join(chunks)
            del chunks
            mv.release()
            body_offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(body_len, out=body_offsets[1:])
            body = pa.BinaryArray.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(body_offsets), pa.py_buffer(body_data)]
            )
            props_data, props_offsets = _gather(view, pl_pos + 2, plen)
            props = _strings(props_data, props_offsets, n)
            try:
                props.validate(full=True)
            except pa.ArrowInvalid:
                return self._slow(topic, queue_id, offsets, phys, _sizes_of(head))
            mapping, tags, keys = _split_properties(props, n)
            born_ts = np.ascontiguousarray(head[:, 40:48]).view(">i8").ravel().astype(np.int64)
            store_ts = np.ascontiguousarray(head[:, 56:64]).view(">i8").ravel().astype(np.int64)
            reconsume = np.ascontiguousarray(head[:, 72:76]).view(">i4").ravel().astype(np.int32)
            store_hosts = head[:, 64:72]
            columns = [
                _repeat(topic, n),
                pa.array(np.full(n, queue_id, dtype=np.int32)),
                pa.array(offsets.astype(np.int64)),
                pa.array(phys.astype(np.int64)),
                _msg_ids(store_hosts, phys, n),
                body,
                tags,
                keys,
                mapping,
                _timestamps(born_ts),
                _timestamps(store_ts),
                _hosts(head[:, 48:56]),
                _hosts(store_hosts),
                pa.array(reconsume),
                pa.array(sysflag.astype(np.int32)),
            ]
            return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
        finally:
            del view

    def _slow(
        self, topic: str, queue_id: int, offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray
    ) -> pa.RecordBatch:
        msgs: list[MessageExt] = []
        for off, p, size in zip(offsets.tolist(), phys.tolist(), sizes.tolist(), strict=True):
            try:
                m = self.reader.message_at(p, size, check_crc=self.check_crc)
            except (CorruptRecordError, UnicodeDecodeError) as exc:
                self._bad(topic, queue_id, off, str(exc))
                continue
            if m.topic != topic or m.queue_id != queue_id or m.queue_offset != off:
                self._bad(
                    topic,
                    queue_id,
                    off,
                    f"its unit points at a record of {m.topic}/{m.queue_id} offset {m.queue_offset}",
                )
                continue
            msgs.append(m)
        return messages_to_batch(msgs)


def _sizes_of(head: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(head[:, 0:4]).view(">i4").ravel().astype(np.int64)


def _repeat(text: str, n: int) -> pa.Array:
    """``text`` n times (topics are 1..127 bytes)."""
    raw = text.encode()
    return _strings(raw * n, np.arange(0, len(raw) * n + 1, len(raw), dtype=np.int32), n)


def messages_to_batch(msgs: list[MessageExt]) -> pa.RecordBatch:
    """Decoded messages → a batch (the per-record path)."""
    columns = {
        "topic": [m.topic for m in msgs],
        "queue_id": [m.queue_id for m in msgs],
        "queue_offset": [m.queue_offset for m in msgs],
        "commitlog_offset": [m.commitlog_offset for m in msgs],
        "msg_id": [m.msg_id for m in msgs],
        "body": [m.body for m in msgs],
        "tags": [m.tags for m in msgs],
        "keys": [m.keys for m in msgs],
        "properties": [list(m.properties.items()) for m in msgs],
        "born_timestamp": [m.born_timestamp * 1000 for m in msgs],
        "store_timestamp": [m.store_timestamp * 1000 for m in msgs],
        "born_host": [m.born_host_str for m in msgs],
        "store_host": [m.store_host_str for m in msgs],
        "reconsume_times": [m.reconsume_times for m in msgs],
        "sys_flag": [m.sys_flag for m in msgs],
    }
    arrays = []
    for field in ARROW_SCHEMA:
        values = columns[field.name]
        if field.type == _TS:
            arrays.append(pa.array(values, pa.int64()).view(_TS))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
