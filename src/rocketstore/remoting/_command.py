"""Remoting frames and the command they carry (RocketMQ 4.x), encoded and decoded without I/O.

Frame::

    +----------------+------------------------------------+-------------+------+
    | int32 length   | int32 serialize type << 24 | hlen  | header      | body |
    +----------------+------------------------------------+-------------+------+
      length counts everything after itself: 4 + hlen + len(body)

Header, serialize type 0 (JSON)::

    {"code": 10, "language": "CPP", "version": 63, "opaque": 2, "flag": 0,
     "remark": "...", "extFields": {"topic": "T", "queueId": 0, ...}}

Header, serialize type 1 (ROCKETMQ, binary)::

    int16 code | int8 language | int16 version | int32 opaque | int32 flag
    | int32 remark length + UTF-8 remark
    | int32 ext length + repeated (int16 key length + key, int32 value length + value)

flag bit 0 marks a response (it echoes the request's opaque), bit 1 a one-way request (no
response). extFields values are text on the wire as the Java side writes them; the C++ client
sends some as JSON numbers, so readers go through :func:`ext_int` / :func:`ext_str`.
"""

from __future__ import annotations

import itertools
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from ._codes import LanguageCode

RESPONSE_FLAG = 1
ONEWAY_FLAG = 2
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
SERVER_VERSION = 409  # the protocol version RocketMQ 4.9.8 answers with

_INT32 = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")  # total length, serialize type << 24 | header length
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_LANGUAGE_BY_NUMBER = {c.value: c.name for c in LanguageCode}

_opaques = itertools.count(1)


class FrameError(ValueError):
    """A frame or header that cannot be decoded; the connection that sent it is closed."""


class HeaderError(FrameError):
    """A header that decoded but is not a command (bad field types); carries the opaque when it
    could be read, so the request can be answered with SYSTEM_ERROR."""

    def __init__(self, message: str, opaque: int | None) -> None:
        super().__init__(message)
        self.opaque = opaque


def next_opaque() -> int:
    """A new request id for this process (any thread)."""
    return next(_opaques) & 0x7FFFFFFF


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` values are ``str`` when we build them; decoded
    ones keep what the peer sent (``str`` or a JSON number)."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, Any] = field(default_factory=dict)
    body: bytes | bytearray | memoryview = b""
    language: str = "PYTHON"
    version: int = SERVER_VERSION
    serialize_type: int = SERIALIZE_JSON

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        return cls(
            code,
            next_opaque(),
            ONEWAY_FLAG if oneway else 0,
            None,
            ext_fields if ext_fields is not None else {},
            body,
        )

    @classmethod
    def response(
        cls,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes | bytearray | memoryview = b"",
    ) -> RemotingCommand:
        """A response; the server sets the opaque from the request it answers."""
        return cls(
            code, 0, RESPONSE_FLAG, remark, ext_fields if ext_fields is not None else {}, body
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    # ---- encoding ---------------------------------------------------------------------------

    def encode_header(self) -> bytes:
        if self.serialize_type == SERIALIZE_ROCKETMQ:
            return _encode_binary_header(self)
        header: dict[str, Any] = {
            "code": self.code,
            "language": self.language,
            "version": self.version,
            "opaque": self.opaque,
            "flag": self.flag,
        }
        if self.remark is not None:
            header["remark"] = self.remark
        if self.ext_fields:
            header["extFields"] = {k: _text(v) for k, v in self.ext_fields.items() if v is not None}
        header["serializeTypeCurrentRPC"] = "JSON"
        return json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def encode_parts(self) -> tuple[bytes, bytes | bytearray | memoryview]:
        """(length prefix + header, body): the body is not copied (a pull response's records
        go out as they lie in the file)."""
        header = self.encode_header()
        body = self.body
        prefix = _PREFIX.pack(
            4 + len(header) + len(body), (self.serialize_type << 24) | len(header)
        )
        return prefix + header, body

    def encode(self) -> bytes:
        head, body = self.encode_parts()
        return head + bytes(body)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ext_str(ext: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = ext.get(name)
    if value is None:
        return default
    return value if isinstance(value, str) else _text(value)


def ext_int(ext: dict[str, Any], name: str, default: int | None = None) -> int | None:
    """An integer ext field sent as text or as a JSON number; ``default`` when absent. Raises
    ValueError for a value that is not an integer."""
    value = ext.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ValueError(f"{name}: not an integer: {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: not an integer: {value!r}") from None


def ext_bool(ext: dict[str, Any], name: str, default: bool = False) -> bool:
    value = ext.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).lower() == "true"


# ---- decoding -------------------------------------------------------------------------------


def frame_length(prefix: bytes | bytearray | memoryview, max_frame: int) -> int:
    """The length field of a frame (what follows the first 4 bytes); FrameError when it is
    below the smallest frame or above ``max_frame``."""
    length: int = _INT32.unpack_from(prefix, 0)[0]
    if length < 4 or length > max_frame:
        raise FrameError(f"frame length {length} outside 4..{max_frame}")
    return length


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """A command from a frame without its length prefix (4 + header + body bytes)."""
    if len(frame) < 4:
        raise FrameError("frame shorter than its header length field")
    (mark,) = _INT32.unpack_from(frame, 0)
    serialize_type = (mark >> 24) & 0xFF
    header_len = mark & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(f"header length {header_len} beyond the frame ({len(frame) - 4} bytes)")
    header = bytes(frame[4 : 4 + header_len])
    body = bytes(frame[4 + header_len :])
    if serialize_type == SERIALIZE_JSON:
        cmd = _decode_json_header(header)
    elif serialize_type == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {serialize_type}")
    cmd.body = body
    return cmd


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        h = json.loads(header)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"header is not JSON: {exc}") from exc
    if not isinstance(h, dict):
        raise FrameError("header is not a JSON object")
    opaque = h.get("opaque", 0)
    if not isinstance(opaque, int) or isinstance(opaque, bool):
        raise FrameError(f"header opaque is not an integer: {opaque!r}")
    code = h.get("code")
    flag = h.get("flag", 0)
    ext = h.get("extFields") or {}
    remark = h.get("remark")
    version = h.get("version", 0)
    if (
        not isinstance(code, int)
        or isinstance(code, bool)
        or not isinstance(flag, int)
        or not isinstance(ext, dict)
        or not isinstance(version, int)
        or (remark is not None and not isinstance(remark, str))
    ):
        raise HeaderError("header fields of the wrong type", opaque)
    return RemotingCommand(
        code, opaque, flag, remark, ext, b"", str(h.get("language", "JAVA")), version
    )


def _decode_binary_header(header: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        pos = _BINARY_FIXED.size
        (remark_len,) = _INT32.unpack_from(header, pos)
        pos += 4
        remark = header[pos : pos + remark_len].decode("utf-8") if remark_len > 0 else None
        pos += max(remark_len, 0)
        (ext_len,) = _INT32.unpack_from(header, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(header):
            raise FrameError("binary header ext fields beyond the header")
        ext: dict[str, Any] = {}
        while pos < end:
            (klen,) = struct.unpack_from(">h", header, pos)
            key = header[pos + 2 : pos + 2 + klen].decode("utf-8")
            pos += 2 + klen
            (vlen,) = _INT32.unpack_from(header, pos)
            ext[key] = header[pos + 4 : pos + 4 + vlen].decode("utf-8")
            pos += 4 + vlen
        if pos != end:
            raise FrameError("binary header ext fields overrun")
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"bad binary header: {exc}") from exc
    cmd = RemotingCommand(
        code, opaque, flag, remark, ext, b"", _LANGUAGE_BY_NUMBER.get(language, "OTHER"), version
    )
    cmd.serialize_type = SERIALIZE_ROCKETMQ
    return cmd


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    language = LanguageCode[cmd.language].value if cmd.language in LanguageCode.__members__ else 7
    parts = [_BINARY_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode("utf-8")
    parts.append(_INT32.pack(len(remark)) + remark)
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        if value is None:
            continue
        k = key.encode("utf-8")
        v = _text(value).encode("utf-8")
        ext += struct.pack(">h", len(k)) + k + _INT32.pack(len(v)) + v
    parts.append(_INT32.pack(len(ext)) + bytes(ext))
    return b"".join(parts)
