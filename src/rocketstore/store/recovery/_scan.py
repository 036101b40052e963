"""Fast validation of runs of commit-log records: recovery and ``rocketstore inspect``.

``check_record`` (in ``_record``) decides whether one record is valid; it also builds the
DispatchRequest (properties parsed, tags hashed), about 8 µs a record. Recovery only needs to
know where the valid records end, and for the records after the checkpoint a few header fields,
so ``scan_records`` walks a whole file in one loop:

- the common record (magic V1, IPv4 hosts) is checked inline with one ``struct`` unpack of the
  88-byte head, the body CRC over a view of the mapping (no copy), and the UTF-8 decode of the
  topic and properties; every check of ``check_record`` is made, so a record accepted here is
  accepted there;
- anything else (V2 topics, IPv6 hosts, BLANK records, zeroes, and every record that fails a
  fast check) goes to ``check_record`` itself, which gives the verdict and the error message.

Neither function trusts a length before checking it against the end of the data, so a torn or
garbage tail ends the scan at the first bad record and is never skipped into.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .._errors import CorruptRecordError
from ..log._record import (
    MAGIC_V1,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    Buffer,
    DispatchRequest,
    check_record,
    crc32,
)

# TOTALSIZE .. BODYLENGTH with both hosts as 8 bytes (IPv4 address + port)
_HEAD = struct.Struct(">iiiiiqqi8x8xq8x12xi")  # hosts, times and counters skipped
_HEAD_SIZE = _HEAD.size  # 88
_HOSTS_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_MIN_RECORD = 91

END_OF_DATA = "end"  # zeroes, or no room for another record: the data ends here
BLANK_RECORD = "blank"  # a BLANK record: the rest of the file is unused
BAD_RECORD = "corrupt"  # the record at the end position failed a check

ScannedRecord = tuple[int, int, str, int, int, int, int, bool]
"""(phys offset, size, topic, queue id, queue offset, sys flag, store timestamp, has keys):
has keys is True when the properties may hold KEYS or UNIQ_KEY (what the index takes)."""
_KEYS = b"KEYS\x01"
_UNIQ = b"UNIQ_KEY\x01"


class ScanResult(NamedTuple):
    end: int  # file-relative position where the valid records end
    stop: str  # END_OF_DATA, BLANK_RECORD or BAD_RECORD
    error: str | None  # what was wrong with the record at ``end`` (BAD_RECORD only)
    records: int  # valid records between the start and ``end``
    last_store_timestamp: int  # of the last valid record (0: none)


_topics: dict[bytes, str] = {}


def scan_records(
    buf: Buffer,
    start: int,
    limit: int,
    base: int,
    *,
    check_crc: bool,
    collect: list[ScannedRecord] | None = None,
) -> ScanResult:
    """Validate the records of one file from ``start`` up to ``limit`` (file-relative).

    ``base`` is the file's commit-log offset: a record must say it sits at ``base + pos``.
    With ``collect`` every valid record's header fields are appended to it (ScannedRecord).
    """
    view = memoryview(buf)
    unpack = _HEAD.unpack_from
    topics = _topics
    append = collect.append if collect is not None else None
    pos = start
    count = 0
    last_ts = 0
    try:
        while True:
            if pos + _HEAD_SIZE <= limit:
                (total, magic, crc, qid, _flag, qoff, phys, sys_flag, store_ts, body_len) = unpack(
                    view, pos
                )
                end = pos + total
                b = pos + _HEAD_SIZE
                t = b + body_len  # TOPICLENGTH
                if (
                    magic == MAGIC_V1
                    and not sys_flag & _HOSTS_V6
                    and total >= _MIN_RECORD
                    and end <= limit
                    and body_len >= 0
                    and t + 1 <= end
                ):
                    p = t + 1 + view[t]  # PROPERTIESLENGTH
                    if view[t] and p + 2 <= end:
                        props_len = (view[p] << 8) | view[p + 1]
                        if (
                            p + 2 + props_len == end
                            and props_len < 0x8000
                            and phys == base + pos
                            and (not check_crc or crc32(view[b:t]) & 0x7FFFFFFF == crc)
                        ):
                            raw = view[t + 1 : p].tobytes()
                            topic = topics.get(raw)
                            try:
                                if topic is None:
                                    topic = raw.decode()
                                    if len(topics) < 10_000:
                                        topics[raw] = topic
                                keyed = False
                                if props_len:
                                    pb = view[p + 2 : end].tobytes()
                                    pb.decode()
                                    keyed = _KEYS in pb or _UNIQ in pb
                            except UnicodeDecodeError:
                                pass  # check_record below gives the verdict and the message
                            else:
                                if append is not None:
                                    append(
                                        (phys, total, topic, qid, qoff, sys_flag, store_ts, keyed)
                                    )
                                count += 1
                                last_ts = store_ts
                                pos = end
                                continue
            # the slow path: anything the fast path did not accept
            try:
                r = check_record(view, pos, limit, check_crc=check_crc)
            except CorruptRecordError as exc:
                return ScanResult(pos, BAD_RECORD, str(exc), count, last_ts)
            if isinstance(r, int):
                if r == 0:
                    return ScanResult(pos, END_OF_DATA, None, count, last_ts)
                return ScanResult(pos, BLANK_RECORD, None, count, last_ts)
            if r.commitlog_offset != base + pos:
                return ScanResult(
                    pos,
                    BAD_RECORD,
                    f"the record at {base + pos} says it is at {r.commitlog_offset}",
                    count,
                    last_ts,
                )
            if append is not None:
                append(_scanned(r))
            count += 1
            last_ts = r.store_timestamp
            pos += r.msg_size
    finally:
        view.release()


def _scanned(r: DispatchRequest) -> ScannedRecord:
    return (
        r.commitlog_offset,
        r.msg_size,
        r.topic,
        r.queue_id,
        r.queue_offset,
        r.sys_flag,
        r.store_timestamp,
        bool(r.keys or r.uniq_key),
    )


def first_store_timestamp(buf: Buffer, limit: int) -> int:
    """Store time of the record at the start of a file; 0 when it is not a valid record head."""
    try:
        r = check_record(buf, 0, limit, check_crc=False)
    except CorruptRecordError:
        return 0
    return 0 if isinstance(r, int) else r.store_timestamp
