"""A plain send's header read straight from its frame, for the send frame path (``_send_frame``).

``scan_send(frame)`` takes a SEND_MESSAGE (10) or SEND_MESSAGE_V2 (310) frame without its
length prefix (int32 serialize type << 24 | header length, the header, the body) and returns
the fields a plain send needs, as one tuple::

    (code, opaque, flag, version, serialize_type, topic, queue_id, properties, sys_flag,
     message_flag, born_timestamp, reconsume_times, body_at)

(``body_at``: where the body starts in ``frame``), or None for anything else. None is no
verdict: the connection then decodes the frame as any other and the send processor's general
path decides (and refuses what it must, with the error it gives today). So the scanner only
has to be right about what it accepts:

- the JSON serialize type: a header that is one JSON object (whitespace as JSON allows) of
  ``code`` (10 or 310), ``opaque``, ``flag``, ``version`` (integers), ``language`` (text),
  ``remark`` (text or null), ``serializeTypeCurrentRPC`` (any scalar) and ``extFields``, and
  nothing else; no name given twice, in the header or in ``extFields``;
- or the ROCKETMQ (binary) serialize type, as RocketMQ's own benchmark clients send: a header
  the connection's decode reads (``_command._decode_binary_header``), every text UTF-8, no
  ext name given twice;
- ``extFields`` holds only the send's names in the spelling of its code (SEND_MESSAGE's long
  names, SEND_MESSAGE_V2's one-letter names) and a request signature's (``SIGNATURE_NAMES``,
  which only the ACL reads: the frame path serves only while it is off), each a string,
  integer, boolean or null: a request that mixes the two spellings, or adds another name,
  goes to the general path;
- ``topic`` and ``properties`` are text; ``queueId``, ``sysFlag``, ``flag`` and
  ``reconsumeTimes`` are non-negative integers of at most 10 decimal digits, the three flags
  and counts below 2^31, ``bornTimestamp`` one of at most 18 digits, each sent as a JSON
  integer or as ASCII digits; ``batch`` is absent, null, false, ``"false"`` or ``"0"``.

This module is the reference; ``_send_scan_c.pyx`` is its compiled twin, which may refuse
more (an escaped surrogate, for one) but accepts nothing this one refuses and returns the same
tuple for what both accept (tests/test_send_frame.py compares them). The process uses the
compiled twin when it is built; without it the send frame path is not installed at all (the
frames take the connection's decode, as before), so the pure-Python build does no more work
than it did.

Loop thread (pure functions; any thread may call them).
"""

from __future__ import annotations

import json
import struct
from typing import Any

from ..._speedups import EXTENSIONS_ENABLED, missing

SendHeader = tuple[int, int, int, int, int, str, int, str, int, int, int, int, int]

SEND_MESSAGE = 10
SEND_MESSAGE_V2 = 310
# the send's ext field names by spelling: topic, queue id, properties, sys flag, message flag,
# born timestamp, reconsume times, batch; then the ones a plain send does not read
NAMES_V1 = (
    "topic",
    "queueId",
    "properties",
    "sysFlag",
    "flag",
    "bornTimestamp",
    "reconsumeTimes",
    "batch",
    "producerGroup",
    "defaultTopic",
    "defaultTopicQueueNums",
    "unitMode",
    "maxReconsumeTimes",
    "brokerName",
)
# n: the broker's name, which RocketMQ 4.9.8's Java client adds to SEND_MESSAGE_V2
NAMES_V2 = ("b", "e", "i", "f", "h", "g", "j", "m", "a", "c", "d", "k", "l", "n")
# a request signature's names (RocketMQ's clients sign with them; the C++ client sends them
# empty when it has no credentials): read by the ACL alone, and the frame path serves only
# while the ACL is off
SIGNATURE_NAMES = ("AccessKey", "Signature", "SecurityToken", "OnsChannel")
_ACCEPTED_V1 = frozenset(NAMES_V1 + SIGNATURE_NAMES)
_ACCEPTED_V2 = frozenset(NAMES_V2 + SIGNATURE_NAMES)
HEADER_NAMES = frozenset(
    ("code", "opaque", "flag", "version", "language", "remark", "serializeTypeCurrentRPC")
)
INT32_LIMIT = 1 << 31

_MARK = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_SCALARS = (str, int, bool, type(None))


class _Twice(Exception):
    """A name given twice in one JSON object."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Twice
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)


def plain_int(value: Any, digits: int) -> int | None:
    """A non-negative integer of at most ``digits`` decimal digits, sent as a JSON integer or
    as ASCII digits; None for anything else."""
    if type(value) is int:
        return value if 0 <= value < 10**digits else None
    if type(value) is str and 0 < len(value) <= digits and value.isdigit() and value.isascii():
        return int(value)
    return None


def _json(header: memoryview) -> tuple[int, int, int, int, dict[str, Any]] | None:
    """(code, opaque, flag, version, ext fields) of a JSON header, or None."""
    try:
        h = _DECODER.decode(str(header, "utf-8"))
    except (_Twice, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if type(h) is not dict or not HEADER_NAMES.issuperset(h.keys() - {"extFields"}):
        return None
    code = h.get("code")
    opaque = h.get("opaque", 0)
    flag = h.get("flag", 0)
    version = h.get("version", 0)
    remark = h.get("remark")
    ext = h.get("extFields")
    if (
        type(code) is not int
        or type(opaque) is not int
        or type(flag) is not int
        or type(version) is not int
        or type(h.get("language", "JAVA")) is not str
        or not (remark is None or type(remark) is str)
        or type(h.get("serializeTypeCurrentRPC")) not in _SCALARS
        or type(ext) is not dict
    ):
        return None
    return code, opaque, flag, version, ext


def _binary(raw: bytes) -> tuple[int, int, int, int, dict[str, Any]] | None:
    """(code, opaque, flag, version, ext fields) of a binary header, as
    ``_decode_binary_header`` reads it, or None (where it raises, and for a name given
    twice)."""
    size = len(raw)
    try:
        code, _language, version, opaque, flag = _BINARY_FIXED.unpack_from(raw, 0)
        pos = _BINARY_FIXED.size
        (remark_len,) = _MARK.unpack_from(raw, pos)
        pos += 4
        if remark_len > 0:
            if pos + remark_len > size:
                return None
            raw[pos : pos + remark_len].decode("utf-8")
            pos += remark_len
        (ext_len,) = _MARK.unpack_from(raw, pos)
        pos += 4
        ext: dict[str, Any] = {}
        if ext_len > 0:
            end = pos + ext_len
            if end > size:
                return None
            while pos < end:
                (klen,) = _SHORT.unpack_from(raw, pos)
                pos += 2
                if klen < 0 or pos + klen + 4 > end:
                    return None
                key = raw[pos : pos + klen].decode("utf-8")
                pos += klen
                (vlen,) = _MARK.unpack_from(raw, pos)
                pos += 4
                if vlen < 0 or pos + vlen > end or key in ext:
                    return None
                ext[key] = raw[pos : pos + vlen].decode("utf-8")
                pos += vlen
    except (struct.error, UnicodeDecodeError):
        return None
    return code, opaque, flag, version, ext


def scan_send_py(frame: bytes | bytearray | memoryview) -> SendHeader | None:
    """The plain send in ``frame`` (see the module's docstring), or None."""
    view = memoryview(frame)
    if len(view) < 4:
        return None
    (mark,) = _MARK.unpack_from(view, 0)
    body_at = 4 + (mark & 0xFFFFFF)
    serialize_type = (mark >> 24) & 0xFF
    if body_at > len(view):
        return None
    if serialize_type == 0:
        parsed = _json(view[4:body_at])
    elif serialize_type == 1:
        parsed = _binary(bytes(view[4:body_at]))
    else:
        return None
    if parsed is None:
        return None
    code, opaque, flag, version, ext = parsed
    if code not in (SEND_MESSAGE, SEND_MESSAGE_V2) or not all(
        abs(v) < 10**18 for v in (opaque, flag, version)
    ):
        return None
    names = NAMES_V1 if code == SEND_MESSAGE else NAMES_V2
    accepted = _ACCEPTED_V1 if code == SEND_MESSAGE else _ACCEPTED_V2
    if not accepted.issuperset(ext) or not all(type(v) in _SCALARS for v in ext.values()):
        return None
    topic_name, queue_name, props_name, sys_name, flag_name, born_name, re_name, batch_name = names[
        :8
    ]
    batch = ext.get(batch_name)
    if not (batch is None or batch is False or batch == "false" or batch == "0"):
        return None
    topic = ext.get(topic_name)
    properties = ext.get(props_name)
    queue_id = plain_int(ext.get(queue_name), 10)
    sys_flag = plain_int(ext.get(sys_name), 10)
    message_flag = plain_int(ext.get(flag_name), 10)
    born = plain_int(ext.get(born_name), 18)
    reconsume = plain_int(ext.get(re_name), 10)
    if (
        type(topic) is not str
        or type(properties) is not str
        or queue_id is None
        or sys_flag is None
        or sys_flag >= INT32_LIMIT
        or message_flag is None
        or message_flag >= INT32_LIMIT
        or born is None
        or reconsume is None
        or reconsume >= INT32_LIMIT
    ):
        return None
    return (
        code,
        opaque,
        flag,
        version,
        serialize_type,
        topic,
        queue_id,
        properties,
        sys_flag,
        message_flag,
        born,
        reconsume,
        body_at,
    )


scan_send: Any = None
"""The compiled scanner, or None where it is not built (or ROCKETSTORE_NO_EXTENSIONS is set)."""
if EXTENSIONS_ENABLED:
    try:
        from ._send_scan_c import scan_send as scan_send
    except ImportError:
        missing("rocketstore.broker.messaging._send_scan_c")
