"""The commit-log record format (RocketMQ 4.x), encode and decode in one place.

A record, every integer big-endian (offsets are for IPv4 hosts; an IPv6 host adds 12 bytes)::

     0 TOTALSIZE        int32   whole record, this field included
     4 MAGICCODE        int32   0xDAA320A7 (V1, 1-byte topic length) / 0xDAA320AB (V2, 2-byte)
     8 BODYCRC          int32   crc32(body) & 0x7FFFFFFF
    12 QUEUEID          int32
    16 FLAG             int32
    20 QUEUEOFFSET      int64   logical offset in the consume queue (0 for prepared/rollback)
    28 PHYSICALOFFSET   int64   where this record starts in the commit log
    36 SYSFLAG          int32   0x1 compressed, 0x2 multi tags, 0xC transaction type,
                                0x10 born host IPv6, 0x20 store host IPv6
    40 BORNTIMESTAMP    int64   ms
    48 BORNHOST         4+4     IPv4 address + int32 port (IPv6: 16+4)
    56 STORETIMESTAMP   int64   ms
    64 STOREHOST        4+4     (IPv6: 16+4)
    72 RECONSUMETIMES   int32
    76 PREPAREDTXOFFSET int64
    84 BODYLENGTH       int32   + body
       TOPICLENGTH      int8 (V1) / int16 (V2) + UTF-8 topic
       PROPERTIESLENGTH int16   + UTF-8 properties ``name\\x01value\\x02name\\x01value``

A BLANK record fills the end of a file when the next record does not fit::

     0 SPACE LEFT       int32
     4 BLANK MAGIC      int32   0xCBD43194   (the rest of the file is left as it is)
"""

from __future__ import annotations

import ipaddress
import mmap
import operator
import socket
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from ..._inflate import DEFAULT_MAX_BODY, inflate
from ..._speedups import EXTENSIONS_ENABLED, missing
from .._errors import CorruptRecordError


def _pick_crc32() -> Callable[[bytes | bytearray | memoryview | mmap.mmap], int]:
    """zlib-ng's crc32 when it is installed (the same CRC, about ten times faster on 1 KiB
    bodies: it uses carry-less multiplication), else the standard library's."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:  # pragma: no cover - zlib-ng is a dependency, but optional at run time
        return zlib.crc32
    return zlib_ng.crc32  # type: ignore[no-any-return]


crc32 = _pick_crc32()
"""CRC-32 as zlib computes it (the BODYCRC of a record is ``crc32(body) & 0x7FFFFFFF``)."""

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""Anything records are read from: file mappings, views, byte strings."""

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8  # a record must leave room for a BLANK record behind it

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# property keys the store itself reads
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_WAIT = "WAIT"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
KEY_SEPARATOR = " "
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# property keys the system owns, not the producer: RocketMQ 4.9.8's MessageConst.STRING_HASH_SET
# and the names RocketMQ 5.x adds (timer messages, the gRPC protocol's system properties). The
# gRPC front end and the Spark writer each add the few more they keep out.
RESERVED_PROPERTIES = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        PROPERTY_KEYS,
        PROPERTY_TAGS,
        PROPERTY_WAIT,
        PROPERTY_DELAY,
        "RETRY_TOPIC",
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_TRANSACTION_PREPARED,
        "PGROUP",
        PROPERTY_MIN_OFFSET,
        PROPERTY_MAX_OFFSET,
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        PROPERTY_UNIQ_KEY,
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        # RocketMQ 5.x
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "TRACE_CONTEXT",
        "__CRC32#",
    }
)

# The fixed part up to and including BODYLENGTH, for IPv4 born and store hosts.
HEAD_V4 = struct.Struct(">iiiiiqqiq4siq4siiqi")
HEAD_V4_SIZE = HEAD_V4.size  # 88
HEAD_V4_FIELDS = [  # the same head with 8-byte hosts, as a numpy record (batch writers)
    ("total", ">i4"),
    ("magic", ">i4"),
    ("crc", ">i4"),
    ("queue_id", ">i4"),
    ("flag", ">i4"),
    ("queue_offset", ">i8"),
    ("phys_offset", ">i8"),
    ("sys_flag", ">i4"),
    ("born_timestamp", ">i8"),
    ("born_host", "u1", 8),
    ("store_timestamp", ">i8"),
    ("store_host", "u1", 8),
    ("reconsume_times", ">i4"),
    ("prepared_offset", ">i8"),
    ("body_length", ">i4"),
]
DEFAULT_BORN_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"  # 127.0.0.1:0, no born host given
BLANK = struct.Struct(">ii")
INT32 = struct.Struct(">i")
INT16 = struct.Struct(">h")
INT64 = struct.Struct(">q")
# TOTALSIZE .. SYSFLAG (fields that do not depend on host sizes)
_PREFIX = struct.Struct(">iiiiiqqi")
_PREFIX_SIZE = _PREFIX.size  # 40

OFFSET_TOTAL_SIZE = 0
OFFSET_MAGIC = 4
OFFSET_BODY_CRC = 8
OFFSET_QUEUE_ID = 12
OFFSET_FLAG = 16
OFFSET_QUEUE_OFFSET = 20
OFFSET_PHYSICAL_OFFSET = 28
OFFSET_SYSFLAG = 36
OFFSET_BORN_TIMESTAMP = 40
OFFSET_BORN_HOST = 48
OFFSET_STORE_TIMESTAMP_V4 = 56
OFFSET_BODY_LENGTH_V4 = 84


def record_length(
    body_length: int,
    topic_length: int,
    properties_length: int,
    sys_flag: int = 0,
    topic_length_bytes: int = 1,
) -> int:
    """Total size of a record (RocketMQ's calMsgLength)."""
    born = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
    store = 20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8
    return (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + born
        + 8
        + store
        + 4
        + 8
        + 4
        + body_length
        + topic_length_bytes
        + topic_length
        + 2
        + properties_length
    )


def body_crc(body: bytes | bytearray | memoryview) -> int:
    return crc32(body) & 0x7FFFFFFF


# ---- properties ---------------------------------------------------------------------------


def properties_to_string(properties: Mapping[str, str]) -> str:
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in properties.items())


def string_to_properties(text: str) -> dict[str, str]:
    """Parse ``name\\x01value\\x02...``; a trailing separator or a pair without value is tolerated."""
    props: dict[str, str] = {}
    if not text:
        return props
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            props[name] = value
    return props


# ---- Java compatibility -------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units, int32 arithmetic)."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def tags_code(tags: str | None) -> int:
    """Consume-queue tags code: Java hashCode of the TAGS string, 0 when there is none."""
    return java_string_hash(tags) if tags else 0


# ---- hosts and message ids ----------------------------------------------------------------


@lru_cache(maxsize=4096)
def pack_host(host: str) -> bytes:
    """``"ip:port"`` (or ``"[v6]:port"``) → address bytes + int32 port (8 or 20 bytes)."""
    addr, _, port = host.rpartition(":")
    if not addr:
        raise ValueError(f"host must be ip:port, got {host!r}")
    addr = addr.strip("[]")
    ip = ipaddress.ip_address(addr)
    return ip.packed + INT32.pack(int(port))


def unpack_host(data: bytes | memoryview) -> str:
    if len(data) == 8:
        return (
            f"{socket.inet_ntop(socket.AF_INET, bytes(data[:4]))}:{INT32.unpack_from(data, 4)[0]}"
        )
    return f"{socket.inet_ntop(socket.AF_INET6, bytes(data[:16]))}:{INT32.unpack_from(data, 16)[0]}"


def make_msg_id(store_host: bytes, phys_offset: int) -> str:
    """offsetMsgId: store address + port + commit-log offset, upper-case hex."""
    return (store_host + INT64.pack(phys_offset)).hex().upper()


def decode_msg_id(msg_id: str) -> tuple[str, int]:
    """offsetMsgId → (``"ip:port"``, commit-log offset)."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"not a message id: {msg_id!r}") from None
    if len(raw) not in (16, 28):
        raise ValueError(f"not a message id: {msg_id!r}")
    return unpack_host(raw[:-8]), INT64.unpack_from(raw, len(raw) - 8)[0]


# ---- decoded records ----------------------------------------------------------------------


class DispatchRequest(NamedTuple):
    """What dispatch needs of one record: handed over by the put path or read from the file."""

    topic: str
    queue_id: int
    commitlog_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int


class BatchDispatch(NamedTuple):
    """What dispatch needs of a batch put: one queue, consecutive records and queue offsets.

    Positions 2 and 3 hold the batch's start and length in the commit log, as in a
    DispatchRequest, so dispatch can follow the log with either."""

    topic: str
    queue_id: int
    commitlog_offset: int  # the first record
    msg_size: int  # the whole batch
    first_queue_offset: int
    store_timestamp: int
    offsets: tuple[int, ...]  # each record's commit-log offset
    sizes: tuple[int, ...]
    tags_codes: tuple[int, ...]
    indexed: tuple[DispatchRequest, ...]  # records with KEYS or UNIQ_KEY
    # or, column-wise, records indexed by KEYS alone (no UNIQ_KEY): their offsets and values
    key_offsets: Sequence[int] = ()
    key_values: Sequence[str] = ()


class StoredFields(NamedTuple):
    """The fields of a stored record, in the record's order (see the module docstring)."""

    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commitlog_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int
    body: bytes
    topic_length: int
    topic_bytes: bytes
    properties_length: int
    properties_bytes: bytes


class MessageExt(StoredFields):
    """A message as stored: an immutable record of every field, in the record's order.

    The read path builds it in one step from the tuple a whole-record ``struct`` unpack gives,
    so it is a tuple (equal to another when every stored field is). The topic and the
    properties are kept as their UTF-8 bytes, checked when the record is decoded; ``topic``,
    ``properties_string`` and the parsed ``properties`` (parsed once) are read from them.
    """

    _parsed: dict[str, str]

    @classmethod
    def of(
        cls,
        *,
        topic: str,
        queue_id: int,
        queue_offset: int,
        commitlog_offset: int,
        store_size: int,
        body: bytes,
        body_crc: int,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: bytes,
        store_timestamp: int,
        store_host: bytes,
        reconsume_times: int,
        prepared_transaction_offset: int,
        properties: str,
        magic: int = MAGIC_V1,
        body_length: int | None = None,
    ) -> MessageExt:
        """A message from decoded values (``body_length`` when ``body`` was not read)."""
        raw_topic = topic.encode()
        raw_props = properties.encode()
        return cls(
            store_size,
            magic,
            body_crc,
            queue_id,
            flag,
            queue_offset,
            commitlog_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            len(body) if body_length is None else body_length,
            body,
            len(raw_topic),
            raw_topic,
            len(raw_props),
            raw_props,
        )

    @property
    def topic(self) -> str:
        raw = self[17]
        return _topic_names.get(raw) or _topic_name(raw)

    @property
    def properties_string(self) -> str:
        return self[19].decode() if self[18] else ""

    @property
    def properties(self) -> dict[str, str]:
        try:
            return self._parsed
        except AttributeError:
            parsed = self._parsed = string_to_properties(self.properties_string)
            return parsed

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def msg_id(self) -> str:
        return make_msg_id(self.store_host, self.commitlog_offset)

    @property
    def born_host_str(self) -> str:
        return unpack_host(self.born_host)

    @property
    def store_host_str(self) -> str:
        return unpack_host(self.store_host)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & SYSFLAG_TRANSACTION_MASK

    def decompressed_body(self, max_size: int = DEFAULT_MAX_BODY) -> bytes:
        """The body as the producer wrote it: inflated when the compressed system flag is set.
        InflateLimitError (a ValueError) when it would inflate to more than ``max_size``
        bytes, InflateError when it does not inflate."""
        if not self.sys_flag & SYSFLAG_COMPRESSED:
            return self.body
        return inflate(self.body, max_size, what=f"body of message {self.msg_id}")

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, commitlog_offset={self.commitlog_offset}, "
            f"size={self.store_size}, body={len(self.body)} bytes)"
        )


_topic_names: dict[bytes, str] = {}
_MAX_TOPIC_NAMES = 10_000


def _check_text(raw_topic: bytes, raw_props: bytes, pos: int) -> None:
    """Raise CorruptRecordError unless the topic and the properties of the record at ``pos``
    are UTF-8 (a known topic and ASCII properties pass at once)."""
    try:
        if raw_topic not in _topic_names:
            _topic_name(raw_topic)
        if not raw_props.isascii():
            raw_props.decode()
    except (CorruptRecordError, UnicodeDecodeError):
        raise CorruptRecordError(f"undecodable topic or properties at {pos}") from None


def _topic_name(raw: bytes) -> str:
    """The topic named by ``raw`` (remembered: a store has few topics). Raises
    CorruptRecordError when it is not UTF-8."""
    try:
        name = raw.decode()
    except UnicodeDecodeError:
        raise CorruptRecordError(f"undecodable topic {raw!r}") from None
    if len(_topic_names) < _MAX_TOPIC_NAMES:
        _topic_names[raw] = name
    return name


# ---- encoding -----------------------------------------------------------------------------


def encode_record(
    *,
    topic: str,
    body: bytes,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    phys_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00",
    store_timestamp: int = 0,
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    properties: str = "",
) -> bytes:
    """One whole record as bytes (any host kind, V1 or V2 by topic length)."""
    topic_b = topic.encode()
    props_b = properties.encode()
    if len(born_host) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(store_host) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    v2 = len(topic_b) > 127
    total = record_length(len(body), len(topic_b), len(props_b), sys_flag, 2 if v2 else 1)
    parts = [
        _PREFIX.pack(
            total,
            MAGIC_V2 if v2 else MAGIC_V1,
            body_crc(body),
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            sys_flag,
        ),
        INT64.pack(born_timestamp),
        born_host,
        INT64.pack(store_timestamp),
        store_host,
        INT32.pack(reconsume_times),
        INT64.pack(prepared_transaction_offset),
        INT32.pack(len(body)),
        bytes(body),
        INT16.pack(len(topic_b)) if v2 else bytes((len(topic_b),)),
        topic_b,
        INT16.pack(len(props_b)),
        props_b,
    ]
    out = b"".join(parts)
    assert len(out) == total
    return out


HEAD_V4_8 = struct.Struct(">iiiiiqqiq8sq8siqi")  # HEAD_V4 with 8-byte hosts, packed as one
_HEAD_8 = HEAD_V4_8
_INT64_MAX = 0x7FFFFFFFFFFFFFFF


def _check_parts(pos: int, total: int, blen: int, tlen: int, target_len: int) -> None:
    if HEAD_V4_SIZE + blen + tlen != total:
        raise ValueError(
            f"record of {total} bytes does not match its parts ({HEAD_V4_SIZE} + {blen} + {tlen})"
        )
    if pos < 0 or pos > target_len or total > target_len - pos:
        raise ValueError(f"record of {total} bytes at {pos} does not fit in {target_len} bytes")


def _target_size(target: Any) -> int:
    """The byte size of a buffer to write into (TypeError when it is none)."""
    try:
        with memoryview(target) as view:
            return view.nbytes
    except TypeError:
        raise TypeError("the target is not a writable buffer") from None


def _check_host(host: bytes) -> None:
    if host.__class__ is not bytes or len(host) != 8:
        raise ValueError("hosts must be 8 bytes (IPv4 address and port)")


def write_v4_py(
    target: bytearray | memoryview | mmap.mmap,
    pos: int,
    total: int,
    magic: int,
    crc: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phys_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_offset: int,
    body: bytes | bytearray | memoryview,
    tail: bytes,
    /,
) -> None:
    """Pack one record with IPv4 hosts into ``target`` at ``pos``: the head, the body, then
    ``tail`` (TOPICLENGTH + topic + PROPERTIESLENGTH + properties). Nothing is written unless
    the hosts are 8 bytes (ValueError), the integers fit their fields (struct.error), and the
    parts add up to ``total`` and fit in ``target`` (ValueError), checked in that order.

    The reference for the compiled twin (``_record_c.write_v4``, selected by ``_speedups``).
    """
    if (
        born_host.__class__ is not bytes
        or len(born_host) != 8
        or store_host.__class__ is not bytes
        or len(store_host) != 8
    ):
        raise ValueError("hosts must be 8 bytes (IPv4 address and port)")
    blen = len(body) if body.__class__ is bytes else memoryview(body).nbytes
    head = _HEAD_8.pack(
        total, magic, crc, queue_id, flag, queue_offset, phys_offset, sys_flag,
        born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
        prepared_offset, blen,
    )  # fmt: skip
    tlen = len(tail) if tail.__class__ is bytes else memoryview(tail).nbytes
    q = pos + HEAD_V4_SIZE + blen
    if HEAD_V4_SIZE + blen + tlen != total or pos < 0 or q + tlen > len(target):
        if HEAD_V4_SIZE + blen + tlen == total:
            operator.index(pos)  # what the compiled twin checks next (TypeError)
        _check_parts(pos, total, blen, tlen, _target_size(target))  # raises what applies
    target[pos : pos + HEAD_V4_SIZE] = head
    target[pos + HEAD_V4_SIZE : q] = body
    target[q : pos + total] = tail


def write_batch_v4_py(
    target: bytearray | memoryview | mmap.mmap,
    pos: int,
    base: int,
    queue_id: int,
    queue_offset: int,
    now: int,
    store_host: bytes,
    prepared: list[tuple[Any, ...]],
    /,
) -> list[int]:
    """Pack a batch of the commit log's prepared records (IPv4 hosts, one queue) into
    ``target`` from ``pos``: queue offsets from ``queue_offset`` on, physical offsets from
    ``base + pos``, store time ``now`` (and born time where a record has none). Every record
    is checked (as ``write_v4`` checks one) before the first is written. Returns the records'
    physical offsets.

    A prepared record is the commit log's tuple: (topic, tail, queue_id, body, crc, flag,
    sys_flag, born_timestamp, born_host, reconsume_times, prepared_offset, properties, total,
    ...). The reference for ``_record_c.write_batch_v4``.
    """
    _check_host(store_host)
    _HEAD_8.pack(0, 0, 0, queue_id, 0, queue_offset, base, 0, now, b"", 0, b"", 0, 0, 0)
    if prepared.__class__ is not list:
        raise TypeError("prepared must be a list")
    try:
        view = memoryview(target)
    except TypeError:
        raise TypeError("the target is not a writable buffer") from None
    if view.readonly:
        raise TypeError("the target is not a writable buffer")
    target_len = view.nbytes
    view.release()
    if pos < 0 or pos > target_len:
        raise ValueError(f"position {pos} outside {target_len} bytes")
    parts: list[Any] = []
    offsets: list[int] = []
    end = pos
    pack = _HEAD_8.pack
    check_ends = queue_offset + len(prepared) > _INT64_MAX or base + target_len > _INT64_MAX
    for i, p in enumerate(prepared):
        if check_ends and (queue_offset + i > _INT64_MAX or base + end > _INT64_MAX):
            raise struct.error("argument out of range")
        if p.__class__ is not tuple or len(p) < 13:
            raise TypeError("a prepared record must be a tuple of 13+ fields")
        host = p[8]
        if host.__class__ is not bytes or len(host) != 8:
            raise ValueError("hosts must be 8 bytes (IPv4 address and port)")
        body = p[3]
        blen = len(body) if body.__class__ is bytes else memoryview(body).nbytes
        total = p[12]
        head = pack(
            total, MAGIC_V1, p[4], queue_id, p[5], queue_offset + i, base + end, p[6],
            p[7] or now, host, now, store_host, p[9], p[10], blen,
        )  # fmt: skip
        tail = p[1]
        tlen = len(tail) if tail.__class__ is bytes else memoryview(tail).nbytes
        if HEAD_V4_SIZE + blen + tlen != total or end + total > target_len:
            _check_parts(end, total, blen, tlen, target_len)
        parts += (head, body, tail)
        offsets.append(base + end)
        end += total
    if parts:
        target[pos:end] = b"".join(parts)
    return offsets


write_v4 = write_v4_py
write_batch_v4 = write_batch_v4_py
if EXTENSIONS_ENABLED:
    try:
        from . import _record_c
    except ImportError:
        missing("rocketstore.store.log._record_c")
    else:
        write_v4 = _record_c.write_v4
        write_batch_v4 = _record_c.write_batch_v4


def encode_blank(space_left: int) -> bytes:
    return BLANK.pack(space_left, BLANK_MAGIC)


# ---- decoding -----------------------------------------------------------------------------


class RecordLayout(NamedTuple):
    """Field positions of one record, relative to its start."""

    total_size: int
    magic: int
    born_host: int
    store_timestamp: int
    store_host: int
    reconsume_times: int
    body_length: int
    body: int
    topic_length: int
    topic: int
    properties_length: int
    properties: int


def read_layout(buf: Buffer, pos: int, limit: int) -> RecordLayout:
    """Work out where the fields of the record at ``pos`` sit, checking every length.

    ``limit`` is the end of the readable data. Raises CorruptRecordError when the record does
    not parse or its lengths disagree with TOTALSIZE.
    """
    if pos + _PREFIX_SIZE > limit:
        raise CorruptRecordError(f"truncated record header at {pos}")
    total, magic = BLANK.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise CorruptRecordError(f"bad magic code {magic & 0xFFFFFFFF:#x} at {pos}")
    if total < 91 or pos + total > limit:
        raise CorruptRecordError(f"bad record length {total} at {pos}")
    sys_flag = INT32.unpack_from(buf, pos + OFFSET_SYSFLAG)[0]
    born = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
    store = 20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8
    p_store_ts = OFFSET_BORN_HOST + born
    p_store_host = p_store_ts + 8
    p_reconsume = p_store_host + store
    p_body_len = p_reconsume + 4 + 8
    if p_body_len + 4 + 1 + 2 > total:  # IPv6 hosts need more than 91 bytes
        raise CorruptRecordError(f"bad record length {total} at {pos}")
    body_len = INT32.unpack_from(buf, pos + p_body_len)[0]
    p_topic_len = p_body_len + 4 + body_len
    if body_len < 0 or p_topic_len + 1 > total:
        raise CorruptRecordError(f"bad body length {body_len} at {pos}")
    if magic == MAGIC_V1:
        topic_len = buf[pos + p_topic_len]
        p_topic = p_topic_len + 1
    else:
        topic_len = INT16.unpack_from(buf, pos + p_topic_len)[0]
        p_topic = p_topic_len + 2
    p_props_len = p_topic + topic_len
    if topic_len <= 0 or p_props_len + 2 > total:
        raise CorruptRecordError(f"bad topic length {topic_len} at {pos}")
    props_len = INT16.unpack_from(buf, pos + p_props_len)[0]
    p_props = p_props_len + 2
    if props_len < 0 or p_props + props_len != total:
        raise CorruptRecordError(
            f"record length {total} at {pos} disagrees with its fields "
            f"(body {body_len}, topic {topic_len}, properties {props_len})"
        )
    return RecordLayout(
        total,
        magic,
        OFFSET_BORN_HOST,
        p_store_ts,
        p_store_host,
        p_reconsume,
        p_body_len,
        p_body_len + 4,
        p_topic_len,
        p_topic,
        p_props_len,
        p_props,
    )


def decode_message(
    buf: Buffer,
    pos: int,
    limit: int,
    *,
    check_crc: bool = True,
    read_body: bool = True,
) -> MessageExt:
    """Decode the record at ``pos`` into a MessageExt (the body is copied out of ``buf``)."""
    lay = read_layout(buf, pos, limit)
    (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag) = _PREFIX.unpack_from(
        buf, pos
    )
    born_ts = INT64.unpack_from(buf, pos + OFFSET_BORN_TIMESTAMP)[0]
    born_host = bytes(buf[pos + lay.born_host : pos + lay.store_timestamp])
    store_ts = INT64.unpack_from(buf, pos + lay.store_timestamp)[0]
    store_host = bytes(buf[pos + lay.store_host : pos + lay.reconsume_times])
    reconsume, prepared = struct.unpack_from(">iq", buf, pos + lay.reconsume_times)
    body_start = pos + lay.body
    body_end = pos + lay.topic_length
    body = bytes(buf[body_start:body_end]) if read_body else b""
    if check_crc and read_body and (crc32(body) & 0x7FFFFFFF) != crc:
        raise CorruptRecordError(f"body CRC mismatch in the record at {pos}")
    if check_crc and not read_body:
        if crc32(buf[body_start:body_end]) & 0x7FFFFFFF != crc:
            raise CorruptRecordError(f"body CRC mismatch in the record at {pos}")
    raw_topic = bytes(buf[pos + lay.topic : pos + lay.properties_length])
    raw_props = bytes(buf[pos + lay.properties : pos + total])
    _check_text(raw_topic, raw_props, pos)
    return MessageExt(
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        lay.topic_length - lay.body,
        body,
        len(raw_topic),
        raw_topic,
        len(raw_props),
        raw_props,
    )


DelayTime = Callable[[int, int], int]
"""(delay level, store timestamp) → delivery time; used for SCHEDULE_TOPIC_XXXX tags codes."""


def check_record(
    buf: Buffer,
    pos: int,
    limit: int,
    *,
    check_crc: bool,
    delay_time: DelayTime | None = None,
) -> DispatchRequest | int:
    """Validate the record at ``pos`` the way recovery and dispatch do.

    Returns a DispatchRequest for a message, the BLANK length (an int > 0) for a BLANK record,
    or 0 where the data ends (zeroes or no room for a header). Raises CorruptRecordError for
    anything else: a bad magic code, lengths that disagree, a CRC mismatch.
    """
    if pos + 8 > limit:
        return 0
    total, magic = BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        if total < 8:
            raise CorruptRecordError(f"bad BLANK length {total} at {pos}")
        return int(total)
    if total == 0 and magic == 0:
        return 0
    lay = read_layout(buf, pos, limit)
    (_t, _m, crc, queue_id, _flag, queue_offset, phys, sys_flag) = _PREFIX.unpack_from(buf, pos)
    if check_crc:
        body = buf[pos + lay.body : pos + lay.topic_length]
        if crc32(body) & 0x7FFFFFFF != crc:
            raise CorruptRecordError(f"body CRC mismatch in the record at {pos}")
    store_ts = INT64.unpack_from(buf, pos + lay.store_timestamp)[0]
    prepared = INT64.unpack_from(buf, pos + lay.reconsume_times + 4)[0]
    try:
        topic = bytes(buf[pos + lay.topic : pos + lay.properties_length]).decode()
        props_text = bytes(buf[pos + lay.properties : pos + total]).decode()
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"undecodable topic or properties at {pos}") from exc
    keys = uniq = None
    code = 0
    if props_text:
        props = string_to_properties(props_text)
        keys = props.get(PROPERTY_KEYS)
        uniq = props.get(PROPERTY_UNIQ_KEY)
        tags = props.get(PROPERTY_TAGS)
        if tags:
            code = tags_code(tags)
        if topic == SCHEDULE_TOPIC and delay_time is not None:
            level = props.get(PROPERTY_DELAY)
            if level and level.isdigit() and int(level) > 0:
                code = delay_time(int(level), store_ts)
    return DispatchRequest(
        topic,
        queue_id,
        phys,
        total,
        code,
        store_ts,
        queue_offset,
        keys,
        uniq,
        sys_flag,
        prepared,
    )


# ---- fast decoding for the read path ------------------------------------------------------

_HEAD_HOSTS8 = struct.Struct(">iiiiiqqiq8sq8siqi")  # HEAD_V4 with each host as 8 bytes
_HEAD_HOSTS8_SIZE = _HEAD_HOSTS8.size  # 88
_SYSFLAG_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_MAX_LAYOUTS = 4096


class _Layout(NamedTuple):
    """A whole V1 record with IPv4 hosts as one struct: the fixed part, BODY, TOPICLENGTH,
    TOPIC, PROPERTIESLENGTH and PROPERTIES. ``lengths`` is what fields 14, 16 and 18 of its
    unpack (the body, topic and properties lengths) must be for the struct to fit."""

    struct: struct.Struct
    lengths: tuple[int, int, int]


# record size → the layout last seen at that size
_layouts: dict[int, _Layout] = {}
_make_message: Callable[[type[MessageExt], tuple[Any, ...]], MessageExt] = tuple.__new__


@lru_cache(maxsize=_MAX_LAYOUTS)
def _layout(body_len: int, topic_len: int, props_len: int) -> _Layout:
    return _Layout(
        struct.Struct(f"{_HEAD_HOSTS8.format}{body_len}sB{topic_len}sH{props_len}s"),
        (body_len, topic_len, props_len),
    )


def _learn_layout(buf: bytes | mmap.mmap, pos: int, size: int) -> _Layout | None:
    """The layout of the record at ``pos`` (remembered for its size), or None when it is not
    a V1 record with IPv4 hosts. Raises CorruptRecordError when its lengths disagree."""
    if pos < 0 or pos + max(size, _HEAD_HOSTS8_SIZE) > len(buf):
        raise CorruptRecordError(f"truncated record at {pos}")
    head = _HEAD_HOSTS8.unpack_from(buf, pos)
    total, magic, sys_flag, body_len = head[0], head[1], head[7], head[14]
    if magic != MAGIC_V1 or sys_flag & _SYSFLAG_V6:
        return None
    if total != size or body_len < 0 or body_len + 91 > total:
        raise CorruptRecordError(f"record at {pos}: length {total}/{body_len}, expected {size}")
    e = pos + _HEAD_HOSTS8_SIZE + body_len
    topic_len = buf[e]
    t = e + 1 + topic_len
    end = pos + total
    if t + 2 > end:
        raise CorruptRecordError(f"bad topic length in the record at {pos}")
    props_len = (buf[t] << 8) | buf[t + 1]
    if t + 2 + props_len != end:
        raise CorruptRecordError(f"record length {total} at {pos} disagrees with its fields")
    layout = _layout(body_len, topic_len, props_len)
    if size in _layouts or len(_layouts) < _MAX_LAYOUTS:
        _layouts[size] = layout
    return layout


def _decode_other(buf: bytes | mmap.mmap, pos: int, size: int) -> MessageExt:
    """decode_stored for records other than V1 with IPv4 hosts."""
    msg = decode_message(buf, pos, pos + size)
    if msg.store_size != size:
        raise CorruptRecordError(f"record at {pos} is {msg.store_size} bytes, expected {size}")
    return msg


def decode_stored(buf: bytes | mmap.mmap, pos: int, size: int) -> MessageExt:
    """Decode the record at ``pos`` that a consume-queue unit says is ``size`` bytes long.

    The hot path of get_message, about a microsecond a message, so every step counts. Records
    of one size usually share one layout (the same body, topic and properties lengths), so
    the struct of the whole record is remembered per size: one unpack gives every field in
    the order of a MessageExt, which is made from that tuple as it is. The lengths it read
    are checked against the ones it assumed (another layout is learnt and the record decoded
    again), the body CRC is always checked, and the topic and properties must be UTF-8.
    Records other than V1 with IPv4 hosts go through ``decode_message``. Raises
    CorruptRecordError when the record is damaged or its length is not ``size``.
    """
    layout = _layouts.get(size) or _learn_layout(buf, pos, size)
    if layout is None:
        return _decode_other(buf, pos, size)
    try:
        f = layout.struct.unpack_from(buf, pos)
    except struct.error:
        raise CorruptRecordError(f"truncated record at {pos}") from None
    if (
        f[0] != size
        or f[1] != MAGIC_V1
        or f[7] & _SYSFLAG_V6
        or (f[14], f[16], f[18]) != layout.lengths
    ):
        learnt = _learn_layout(buf, pos, size)  # raises for a damaged record
        if learnt is None:
            return _decode_other(buf, pos, size)
        if learnt is layout:  # it checked out a moment ago
            raise CorruptRecordError(f"the record at {pos} changed while it was read")
        return decode_stored(buf, pos, size)  # with the layout just learnt
    if crc32(f[15]) & 0x7FFFFFFF != f[2]:
        raise CorruptRecordError(f"body CRC mismatch in the record at {pos}")
    if f[17] not in _topic_names or not f[19].isascii():
        _check_text(f[17], f[19], pos)
    return _make_message(MessageExt, f)


def decode_run(
    buf: mmap.mmap,
    base: int,
    units: Iterable[tuple[int, int]],
    topic_bytes: bytes,
    queue_id: int,
    out: list[MessageExt],
) -> int:
    """Decode the records of one queue that ``units`` (commit-log offset, size) point at in
    ``buf``, which starts at commit-log offset ``base`` and holds them all, appending them
    to ``out``: get_message's usual batch in one tight loop.

    It stops at the first record that is not plainly as expected: a V1 record with IPv4
    hosts at a remembered layout, of ``topic_bytes`` and ``queue_id``, its lengths, CRC and
    ASCII properties right. Returns how many it appended; what stopped it is for
    ``decode_stored`` to decode or reject with a reason.
    """
    layouts = _layouts
    make = _make_message
    append = out.append
    start = len(out)
    last = body_len = topic_len = props_len = -1
    unpack = _HEAD_HOSTS8.unpack_from
    for phys, size in units:
        if size != last:
            layout = layouts.get(size)
            if layout is None:
                break
            unpack = layout.struct.unpack_from
            body_len, topic_len, props_len = layout.lengths
            last = size
        f = unpack(buf, phys - base)
        if (
            f[0] != size
            or f[1] != MAGIC_V1
            or f[3] != queue_id
            or f[14] != body_len
            or f[16] != topic_len
            or f[18] != props_len
            or f[17] != topic_bytes
            or f[7] & _SYSFLAG_V6
            or crc32(f[15]) & 0x7FFFFFFF != f[2]
            or not f[19].isascii()
        ):
            break
        append(make(MessageExt, f))
    return len(out) - start
