"""Messages of one queue range → pyarrow RecordBatches in Spark's exact Arrow schema.

A read asks for some of the columns of ``ARROW_SCHEMA`` (any subset, any order: see
``select_schema``) and only those are decoded: a read of ``queue_id`` and ``body`` never looks
at properties, hosts or times.

Records are decoded a run at a time (the records of one queue in one commit-log file) by
``_kernels``: fixed header fields as numpy views, bodies and properties gathered with one Arrow
kernel each, properties split with numpy and Arrow compute. Every record is checked first
(magic, lengths, topic, queue id, queue offset, commit-log offset, body CRC unless
``check_crc`` is off); a record that fails, or whose properties are not UTF-8 or repeat a
name, goes through the per-record decoder (``decode_message``), the reference that the
whole-batch path must agree with. A record that fails a check there is never returned: it
raises CorruptRecordError, or with ``fail_on_data_loss=False`` it is skipped.

The same decoder takes records pulled from a broker (``RangeDecoder.records``: a PULL_MESSAGE
body is the records as the commit log holds them), so broker mode and path mode give the same
rows.

The text of topic and properties is checked as UTF-8 only where it is decoded: a read that
leaves out ``properties``, ``tags`` and ``keys`` returns a record whose properties are not
UTF-8 (the full read rejects it).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pyarrow as pa

from ..store._errors import CorruptRecordError
from ..store.log._record import MessageExt, decode_message
from ..store.read._reader import StoreReader
from . import _kernels as col
from ._schema import COLUMN_TYPES, SCHEMA_DDL, ColumnError, check_names

log = logging.getLogger(__name__)

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

COLUMNS: tuple[str, ...] = tuple(ARROW_SCHEMA.names)
_PROPERTY_COLUMNS = frozenset({"tags", "keys", "properties"})
_MAX_BATCH_BYTES = 256 << 20
_INT32 = struct.Struct(">i")  # a batch's records; Arrow binary columns hold < 2 GiB


def select_schema(fields: Sequence[pa.Field]) -> pa.Schema:
    """The Arrow schema of a read that asks for ``fields`` (Spark's conversion of the schema
    it hands the reader): each must be a column of ARROW_SCHEMA with its type; nullability is
    kept as given (Spark compares it). Raises ColumnError naming the valid columns."""
    check_names([f.name for f in fields])
    for f in fields:
        want = ARROW_SCHEMA.field(f.name).type
        if not f.type.equals(want):
            raise ColumnError(
                f"column {f.name} is {COLUMN_TYPES[f.name]} in rocketstore, not {f.type}; "
                f"columns: {SCHEMA_DDL}"
            )
    return pa.schema(fields)


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets ``[begin, end)`` of one queue: the unit of a Spark partition."""

    topic: str
    queue_id: int
    begin: int
    end: int


def _pieces(sizes: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """``[0, len(sizes))`` cut where the running total of ``sizes`` passes multiples of
    ``limit`` (every piece has at least one row)."""
    total = np.cumsum(sizes)
    if not len(total) or int(total[-1]) <= limit:
        return [(0, len(sizes))] if len(sizes) else []
    marks = np.searchsorted(total, np.arange(limit, int(total[-1]), limit), side="right")
    bounds = sorted({0, len(sizes), *(int(m) for m in marks)})
    return list(pairwise(bounds))


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


class RangeDecoder:
    """Decodes the records of one queue range into batches of ``schema`` (a selection of
    ARROW_SCHEMA's columns). One per Spark task, used by one thread.

    ``whole_batch=False`` decodes every record with the per-record decoder (the reference).
    """

    def __init__(
        self,
        reader: StoreReader | None,
        *,
        schema: pa.Schema = ARROW_SCHEMA,
        batch_rows: int = 10_000,
        check_crc: bool = True,
        fail_on_data_loss: bool = True,
        whole_batch: bool = True,
    ) -> None:
        self.reader = reader
        self.schema = schema
        self.batch_rows = batch_rows
        self.check_crc = check_crc
        self.fail_on_data_loss = fail_on_data_loss
        self.whole_batch = whole_batch
        self._names = tuple(schema.names)
        self._want_props = _PROPERTY_COLUMNS & frozenset(self._names)
        self._body = "body" in self._names
        self._props = bool(self._want_props)
        self._empty = _empty(schema)

    def _store(self) -> StoreReader:
        if self.reader is None:
            raise TypeError("this RangeDecoder decodes pulled records only (no store reader)")
        return self.reader

    def batches(self, r: QueueRange) -> Iterator[pa.RecordBatch]:
        """The rows of ``r`` read from the store directory (path mode)."""
        reader = self._store()
        q = reader.queue(r.topic, r.queue_id)
        begin = r.begin
        if begin < q.min_offset or begin < reader.min_offset(r.topic, r.queue_id):
            lowest = reader.min_offset(r.topic, r.queue_id)
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
        unit = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
        for lo in range(begin, end, self.batch_rows):
            hi = min(lo + self.batch_rows, end)
            parts = [np.frombuffer(view, dtype=unit) for _first, view in q.unit_bytes(lo, hi)]
            units = np.concatenate(parts) if len(parts) != 1 else parts[0]
            offsets = np.arange(lo, lo + len(units), dtype=np.int64)
            phys = units["phys"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
            del parts, units
            valid = (phys >= 0) & (sizes > 0) & (sizes != 0x7FFFFFFF)
            if not valid.all():
                phys, sizes, offsets = phys[valid], sizes[valid], offsets[valid]
            for a, b in _pieces(sizes, _MAX_BATCH_BYTES):
                batch = self._decode(r.topic, r.queue_id, offsets[a:b], phys[a:b], sizes[a:b])
                if batch.num_rows:
                    yield batch

    # ---- decoding ---------------------------------------------------------------------------

    def _decode(
        self, topic: str, queue_id: int, offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray
    ) -> pa.RecordBatch:
        file_size = self._store().commit_log_file_size
        starts = phys - phys % file_size
        # one run per commit-log file (units point forward through the log)
        cuts = [0, *(np.flatnonzero(np.diff(starts)) + 1).tolist(), len(phys)]
        out = []
        for i, j in pairwise(cuts):
            batch = self._decode_file(topic, queue_id, offsets[i:j], phys[i:j], sizes[i:j])
            if batch.num_rows:
                out.append(batch)
        if not out:
            return self._empty
        if len(out) == 1:
            return out[0]
        return pa.Table.from_batches(out, self.schema).combine_chunks().to_batches()[0]

    def _bad(self, topic: str, queue_id: int, offset: int, why: str) -> None:
        msg = f"{topic}/{queue_id} offset {offset}: {why}"
        if self.fail_on_data_loss:
            raise CorruptRecordError(msg + " (failOnDataLoss=false skips such records)")
        log.warning("skipping a bad record: %s", msg)

    def _decode_file(
        self, topic: str, queue_id: int, offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray
    ) -> pa.RecordBatch:
        reader = self._store()
        mf = reader.commit_log.file_at(int(phys[0]))
        if mf is None:
            for off in offsets.tolist():
                self._bad(topic, queue_id, off, "its commit-log file is gone")
            return self._empty

        def at(p: int, size: int) -> MessageExt:
            return reader.message_at(p, size, check_crc=self.check_crc)

        if not self.whole_batch:
            return self._slow(topic, queue_id, offsets, phys, sizes, at)[0]
        f = col.Bytes(mf.mm)
        try:
            return self._decode_run(
                f, phys - mf.from_offset, topic, queue_id, offsets, phys, sizes, phys, at
            )
        finally:
            f.release()

    def records(
        self, data: bytes | bytearray, topic: str, queue_id: int, begin: int, end: int
    ) -> pa.RecordBatch:
        """The rows of records laid end to end in ``data`` (a PULL_MESSAGE body, or several
        joined: the records as the commit log holds them) whose queue offsets are in
        ``[begin, end)``, checked and decoded exactly as a path-mode read decodes them.

        The records say their own queue and commit-log offsets; a record of another topic or
        queue, or a damaged one, is a bad record (failOnDataLoss decides). A body that does
        not split into records (a length that runs past its end) raises CorruptRecordError.
        """
        positions: list[int] = []
        pos = 0
        limit = len(data)
        length_at = _INT32.unpack_from
        append = positions.append
        while pos < limit:
            size = length_at(data, pos)[0] if pos + 4 <= limit else 0
            if size < col.MIN_RECORD or pos + size > limit:
                raise CorruptRecordError(
                    f"{topic}/{queue_id}: a pulled record at byte {pos} has length {size} "
                    f"({limit - pos} bytes left)"
                )
            append(pos)
            pos += size
        if not positions:
            return self._empty
        f = col.Bytes(data)
        try:
            p = np.array(positions, dtype=np.int64)
            sizes = np.diff(np.append(p, limit))
            offsets = f.read(p + 20, ">i8")
            phys = f.read(p + 28, ">i8")
            keep = (offsets >= begin) & (offsets < end)
            if not keep.all():
                p, sizes, offsets, phys = p[keep], sizes[keep], offsets[keep], phys[keep]
                if not len(p):
                    return self._empty

            def at(at_pos: int, size: int) -> MessageExt:
                return decode_message(data, at_pos, at_pos + size, check_crc=self.check_crc)

            if not self.whole_batch:
                return self._slow(topic, queue_id, offsets, p, sizes, at)[0]
            return self._decode_run(f, p, topic, queue_id, offsets, phys, sizes, p, at)
        finally:
            f.release()

    def _decode_run(
        self,
        f: col.Bytes,
        pos: np.ndarray,
        topic: str,
        queue_id: int,
        offsets: np.ndarray,
        phys: np.ndarray,
        sizes: np.ndarray,
        where: np.ndarray,
        at: Callable[[int, int], MessageExt],
    ) -> pa.RecordBatch:
        """The batch of the records at ``pos`` in ``f``; records the whole-batch path cannot
        take go to the per-record decoder, which reads the record ``at(where[i], sizes[i])``."""
        located, ok = col.locate(
            f,
            pos,
            sizes,
            offsets,
            phys,
            topic.encode(),
            queue_id,
            self.check_crc and not self._body,  # else on the gathered bodies
        )
        batch: pa.RecordBatch | None = None
        while batch is None:
            good = located if ok.all() else located.take(ok)
            batch, others = self._columns(f, topic, queue_id, good)
            if batch is None:  # rows the per-record decoder must take: again without them
                ok[np.flatnonzero(ok)[others]] = False
        if ok.all():
            return batch
        bad = ~ok
        slow, kept = self._slow(topic, queue_id, offsets[bad], where[bad], sizes[bad], at)
        if not slow.num_rows:
            return batch
        order = np.argsort(np.concatenate([offsets[ok], kept]), kind="stable")
        merged = pa.Table.from_batches([batch, slow], self.schema).take(pa.array(order))
        return merged.combine_chunks().to_batches()[0] if merged.num_rows else self._empty

    def _columns(
        self, f: col.Bytes, topic: str, queue_id: int, loc: col.Located
    ) -> tuple[pa.RecordBatch | None, np.ndarray]:
        """The batch of the checked records ``loc``; or None and the rows (of ``loc``) the
        per-record decoder must take (a body CRC mismatch, properties not UTF-8 or with a
        name twice)."""
        n = len(loc)
        if not n:
            return self._empty, np.zeros(0, dtype=np.int64)
        body: pa.Array | None = None
        if self._body:
            # bodies are copied out first and their CRCs taken from the copy: the mapping is
            # read once
            body = col.gather(f, loc.body_start, loc.body_len)
            if self.check_crc:
                bad = col.crc_mismatches(body, loc.head["crc"])
                if len(bad):
                    return None, bad
        props: col.Properties | None = None
        if self._props:
            raw = col.gather(f, loc.props_start, loc.props_len)
            data, offs = col.binary_parts(raw)
            bad = col.non_utf8_rows(data, offs)
            if len(bad):
                return None, bad
            props = col.split_properties(col.strings(raw), self._want_props)
            if props.repeated is not None:
                return None, props.repeated
        head = loc.head
        born_at = loc.pos + 48
        store_host_at = born_at + loc.born_host_len + 8

        def store_ts() -> pa.Array:
            if not loc.v6:
                return col.timestamps(head["store_ts"])
            return col.timestamps(f.read(born_at + loc.born_host_len, ">i8"))

        def reconsume() -> pa.Array:
            if not loc.v6:
                return pa.array(head["reconsume"].astype(np.int32))
            at = store_host_at + loc.store_host_len
            return pa.array(f.read(at, ">i4").astype(np.int32))

        def msg_id() -> pa.Array:
            if not loc.v6:
                return col.msg_ids_v4(head["store_host"], loc.phys)
            return col.msg_ids(f, store_host_at, loc.store_host_len, loc.phys)

        def host(kind: str) -> pa.Array:
            if not loc.v6:
                return col._hosts_v4(head[kind].astype(np.uint64))
            if kind == "born_host":
                return col.hosts(f, born_at, loc.born_host_len)
            return col.hosts(f, store_host_at, loc.store_host_len)

        build: dict[str, Callable[[], pa.Array]] = {
            "topic": lambda: col.repeat(topic, n),
            "queue_id": lambda: pa.array(np.full(n, queue_id, dtype=np.int32)),
            "queue_offset": lambda: pa.array(loc.queue_offset.astype(np.int64)),
            "commitlog_offset": lambda: pa.array(loc.phys.astype(np.int64)),
            "msg_id": msg_id,
            "body": lambda: body,
            "tags": lambda: props.tags,  # type: ignore[union-attr]
            "keys": lambda: props.keys,  # type: ignore[union-attr]
            "properties": lambda: props.mapping,  # type: ignore[union-attr]
            "born_timestamp": lambda: col.timestamps(head["born_ts"]),
            "store_timestamp": store_ts,
            "born_host": lambda: host("born_host"),
            "store_host": lambda: host("store_host"),
            "reconsume_times": reconsume,
            "sys_flag": lambda: pa.array(loc.sys_flag.astype(np.int32)),
        }
        columns = [build[name]() for name in self._names]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema), np.zeros(0, np.int64)

    def _slow(
        self,
        topic: str,
        queue_id: int,
        offsets: np.ndarray,
        phys: np.ndarray,
        sizes: np.ndarray,
        at: Callable[[int, int], MessageExt],
    ) -> tuple[pa.RecordBatch, np.ndarray]:
        """The per-record decoder: (the batch of the good records, their queue offsets);
        ``at(phys[i], sizes[i])`` decodes and checks one record."""
        msgs: list[MessageExt] = []
        kept: list[int] = []
        for off, p, size in zip(offsets.tolist(), phys.tolist(), sizes.tolist(), strict=True):
            try:
                m = at(p, size)
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
            kept.append(off)
        return messages_to_batch(msgs, self.schema), np.array(kept, dtype=np.int64)


def _column_values(name: str, msgs: list[MessageExt]) -> list[object]:
    if name == "properties":
        return [list(m.properties.items()) for m in msgs]
    if name in ("born_timestamp", "store_timestamp"):
        return [getattr(m, name) for m in msgs]
    if name == "born_host":
        return [m.born_host_str for m in msgs]
    if name == "store_host":
        return [m.store_host_str for m in msgs]
    return [getattr(m, name) for m in msgs]


def messages_to_batch(msgs: list[MessageExt], schema: pa.Schema = ARROW_SCHEMA) -> pa.RecordBatch:
    """Decoded messages → a batch of ``schema`` (the per-record path)."""
    arrays = []
    for field in schema:
        values = _column_values(field.name, msgs)
        if field.type == _TS:  # ms → µs with int64 wrap-around, as the whole-batch path
            arrays.append(col.timestamps(np.array(values, dtype=np.int64)))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
