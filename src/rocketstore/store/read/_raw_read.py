"""Raw reads for pull responses: the stored records of a queue exactly as they lie in the
commit log, concatenated (RocketMQ's PULL_MESSAGE body), without decoding them.

Each record is still checked before it is sent: its unit must point at a record of the same
queue (length, magic, queue id, topic) and its body CRC must match, so a damaged record is
never handed out. A damaged record ends the batch before it; when it is the first, the
result is CorruptRecordError as for get_message. Batch limits, statuses and the
next-begin-offset rules are get_message's (ReadApi); tags are filtered by the units' tags
codes only, as RocketMQ's broker does (the client re-checks the tag string).

Threads: any.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..._speedups import EXTENSIONS_ENABLED, missing
from .._errors import CorruptRecordError
from ..log._message import GetMessageResult, GetMessageStatus
from ..log._record import (
    INT32,
    MAGIC_V1,
    MAGIC_V2,
    OFFSET_BODY_LENGTH_V4,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    crc32,
    read_layout,
)
from ..queue._consume_queue import UNIT_SIZE, UNIT_WITHOUT_TAGS

if TYPE_CHECKING:
    from ..log._mapped_file import MappedFile
    from ._read_api import ReadApi

S = GetMessageStatus
_HEAD = struct.Struct(">iiiii8x8xi")  # total, magic, crc, queue id, flag, sys_flag
_TAGS_AT = 12  # a unit's tags code after its offset and size
_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_TAGS_CODE = struct.Struct(">q")


class RawGetResult(NamedTuple):
    """A pull's worth of stored records (``data``, ``msg_count`` of them) with get_message's
    status and offsets."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    data: bytes = b""
    msg_count: int = 0
    suggest_pulling_from_slave: bool = False


def get_raw(
    reader: ReadApi,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    tags_codes: frozenset[int] | None = None,
) -> RawGetResult:
    """Up to ``max_msg_nums`` records of ``topic``/``queue_id`` from ``offset``; with
    ``tags_codes`` only units whose tags code is in it."""
    if not isinstance(max_msg_nums, int) or max_msg_nums <= 0:
        raise ValueError(f"max_msg_nums must be a positive integer, got {max_msg_nums!r}")
    bounds = reader.bounds(topic, queue_id, offset)
    if isinstance(bounds, GetMessageResult):
        reader.get_miss += 1
        return RawGetResult(
            bounds.status, bounds.next_begin_offset, bounds.min_offset, bounds.max_offset
        )
    cq, min_offset, max_offset = bounds
    units = cq.select_units(offset)
    if units is None:
        reader.get_miss += 1
        nxt = reader.correct(offset, cq.roll_next_file(offset))
        return RawGetResult(S.OFFSET_FOUND_NULL, nxt, min_offset, max_offset)
    try:
        limit = min(units.size // UNIT_SIZE, max(16000 // UNIT_SIZE, max_msg_nums))
        status, examined, data, count, last = _collect(
            reader,
            topic,
            queue_id,
            offset,
            units.buffer[: limit * UNIT_SIZE],
            max_msg_nums,
            tags_codes,
        )
    finally:
        units.release()
    if count:
        reader.get_found += 1
        reader.transferred += count
    else:
        reader.get_miss += 1
    from_slave = reader.commit_log.max_offset - last > reader.memory
    return RawGetResult(status, offset + examined, min_offset, max_offset, data, count, from_slave)


def _collect(
    reader: ReadApi,
    topic: str,
    queue_id: int,
    offset: int,
    units: memoryview,
    max_msg_nums: int,
    tags_codes: frozenset[int] | None,
) -> tuple[GetMessageStatus, int, bytes, int, int]:
    """(status, units examined, the records (their runs copied once, out of the mapped files),
    records, commit-log offset of the last unit)."""
    cl = reader.commit_log
    max_phys = cl.max_offset
    on_disk_below = max_phys - reader.memory
    count_memory = min(max_msg_nums, reader.max_count_memory)
    count_disk = min(max_msg_nums, reader.max_count_disk)
    bytes_memory = reader.max_bytes_memory
    bytes_disk = reader.max_bytes_disk
    raw_topic = topic.encode()
    files = cl.queue
    file_size = cl.file_size
    min_phys = cl.min_offset
    chunks: list[memoryview] = []  # runs of adjacent records, views of the mapped files
    data = b""
    status = S.NO_MATCHED_MESSAGE
    n = total = examined = 0
    phys = 0
    next_file_start = -1
    held: list[MappedFile] = []
    views: list[memoryview] = []
    mf: MappedFile | None = None
    view = memoryview(b"")
    mf_from = mf_end = -1
    run_start = run_end = -1  # the run of adjacent records being gathered, file positions
    try:
        for phys, size in UNIT_WITHOUT_TAGS.iter_unpack(units):
            if phys < next_file_start:
                examined += 1
                continue
            if n:
                if phys < on_disk_below:
                    if n >= count_disk or total + size > bytes_disk:
                        break
                elif n >= count_memory or total + size > bytes_memory:
                    break
            examined += 1
            if tags_codes is not None and (
                _TAGS_CODE.unpack_from(units, (examined - 1) * UNIT_SIZE + _TAGS_AT)[0]
                not in tags_codes
            ):
                continue
            if not (mf_from <= phys and phys + size <= mf_end and size > 0):
                if phys < 0 or size <= 0 or size >= 0x7FFFFFFF:
                    if not n:
                        status = S.MESSAGE_WAS_REMOVING
                    continue
                if run_start >= 0:
                    chunks.append(view[run_start:run_end])
                    run_start = -1
                mf = files.find_mapped_file_by_offset(phys)
                if mf is not None and mf not in held:
                    if mf.hold():
                        held.append(mf)
                    else:
                        mf = None
                if mf is None or phys + size > mf.from_offset + mf.read_position:
                    if not n:
                        status = S.MESSAGE_WAS_REMOVING
                    if phys < min_phys:
                        next_file_start = phys + file_size - phys % file_size
                    mf_from = mf_end = -1
                    continue
                mf_from = mf.from_offset
                mf_end = mf_from + mf.read_position
                view = memoryview(mf.mm)  # type: ignore[arg-type]
                views.append(view)
            pos = phys - mf_from
            try:
                if check_v4 is None or not check_v4(view, pos, size, raw_topic, queue_id, crc32):
                    _check(view, pos, size, raw_topic, queue_id)
            except CorruptRecordError as exc:
                where = f"{topic}/{queue_id} offset {offset + examined - 1} → commit log {phys}"
                if n:
                    examined -= 1
                    break
                raise CorruptRecordError(f"{where}: {exc}") from None
            if pos == run_end:
                run_end = pos + size
            else:
                if run_start >= 0:
                    chunks.append(view[run_start:run_end])
                run_start, run_end = pos, pos + size
            n += 1
            total += size
            next_file_start = -1
        if run_start >= 0:
            chunks.append(view[run_start:run_end])
        data = b"".join(chunks)
    finally:
        for c in chunks:
            c.release()
        for v in views:
            v.release()
        for f in held:
            f.release()
    if n:
        status = S.FOUND
    return status, examined, data, n, phys


def _check(buf: memoryview, pos: int, size: int, raw_topic: bytes, queue_id: int) -> None:
    """The record at ``pos`` is ``size`` bytes of ``queue_id`` of the topic, with a good CRC."""
    total, magic, crc, qid, _flag, sys_flag = _HEAD.unpack_from(buf, pos)
    if total != size or qid != queue_id or magic not in (MAGIC_V1, MAGIC_V2):
        raise CorruptRecordError(
            f"the record at {pos} is not the unit's ({total} bytes, queue {qid})"
        )
    if magic == MAGIC_V1 and not sys_flag & _V6:
        body_len = INT32.unpack_from(buf, pos + OFFSET_BODY_LENGTH_V4)[0]
        body = pos + OFFSET_BODY_LENGTH_V4 + 4
        topic_at = body + body_len
        n = len(raw_topic)
        if body_len < 0 or topic_at + 1 + n + 2 > pos + total:
            raise CorruptRecordError(f"bad body length {body_len} at {pos}")
        if buf[topic_at] != n or buf[topic_at + 1 : topic_at + 1 + n] != raw_topic:
            raise CorruptRecordError(f"the record at {pos} belongs to another topic")
    else:
        lay = read_layout(buf, pos, pos + size)
        body = pos + lay.body
        topic_at = pos + lay.topic_length
        if buf[pos + lay.topic : pos + lay.properties_length] != raw_topic:
            raise CorruptRecordError(f"the record at {pos} belongs to another topic")
    if crc32(buf[body:topic_at]) & 0x7FFFFFFF != crc:
        raise CorruptRecordError(f"body CRC mismatch in the record at {pos}")


check_v4: Callable[[memoryview, int, int, bytes, int, Callable[[Any], int]], bool] | None = None
"""The compiled check of a plain record (``_raw_read_c``): True when it passes ``_check``'s
checks, False to let ``_check`` decide; None in pure Python."""
if EXTENSIONS_ENABLED:
    try:
        from ._raw_read_c import check_v4
    except ImportError:
        missing("rocketstore.store.read._raw_read_c")
