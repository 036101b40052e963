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

import enum
import itertools
import json
import struct
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _json_str  # ensure_ascii=False, the C version
from typing import Any

from .._speedups import EXTENSIONS_ENABLED, missing
from ._codes import LanguageCode
from ._limits import RequestError

RESPONSE_FLAG = 1
ONEWAY_FLAG = 2
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
SERVER_VERSION = 409  # the protocol version RocketMQ 4.9.8 answers with

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_PREFIX = struct.Struct(">ii")  # total length, serialize type << 24 | header length
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_LANGUAGE_BY_NUMBER = {c.value: c.name for c in LanguageCode}
_JSON_DECODER = json.JSONDecoder()
_json_scan = _JSON_DECODER.scan_once  # type: ignore[attr-defined]
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"))  # for text UTF-8 cannot carry

_opaques = itertools.count(1)

# orjson parses a header about three times as fast as the json module's scanner; anything it
# refuses (NaN, integers beyond 64 bits, escaped lone surrogates, bad UTF-8, trailing bytes)
# goes to the json module, the reference, which decides what the header is
_orjson_loads: Any = None
_orjson_dumps: Any = None
_PLAIN_TYPES = frozenset((str, int, bool, type(None)))
if EXTENSIONS_ENABLED:
    try:
        import orjson
    except ImportError:  # pragma: no cover - a dependency, optional at run time
        missing("orjson")
    else:
        _orjson_loads = orjson.loads
        _orjson_dumps = orjson.dumps


class FrameError(ValueError):
    """A frame or header that cannot be decoded; the connection that sent it is closed."""


class HeaderError(FrameError):
    """A header that decoded but is not a command (bad field types); carries the opaque and the
    flag when they could be read, so a request can be answered with SYSTEM_ERROR."""

    def __init__(self, message: str, opaque: int | None, flag: int = 0) -> None:
        super().__init__(message)
        self.opaque = opaque
        self.flag = flag


def next_opaque() -> int:
    """A new request id for this process (any thread)."""
    return next(_opaques) & 0x7FFFFFFF


@dataclass(slots=True, init=False)
class RemotingCommand:
    """One request or response. ``ext_fields`` values are ``str`` when we build them; decoded
    ones keep what the peer sent (``str`` or a JSON number). A decoded body is ``bytes``.

    ``header`` and ``grant`` are a server's, for the request it serves (None until set): the
    header decoded once into the object its handler reads (e.g. ``send_header``), and what the
    server's ACL let the request do (see ``rocketstore.acl``); neither goes on the wire."""

    code: int
    opaque: int
    flag: int
    remark: str | None
    ext_fields: dict[str, Any]
    body: bytes | bytearray | memoryview
    language: str
    version: int
    serialize_type: int
    header: Any = field(init=False, repr=False, compare=False)
    grant: Any = field(init=False, repr=False, compare=False)

    # written out (not the dataclass's generated one) so that a compiled build compiles it:
    # a command is made for every request and every answer
    def __init__(
        self,
        code: int,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes | bytearray | memoryview = b"",
        language: str = "PYTHON",
        version: int = SERVER_VERSION,
        serialize_type: int = SERIALIZE_JSON,
    ) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = {} if ext_fields is None else ext_fields
        self.body = body
        self.language = language
        self.version = version
        self.serialize_type = serialize_type
        self.header = None
        self.grant = None

    def __copy__(self) -> RemotingCommand:
        return RemotingCommand(
            self.code,
            self.opaque,
            self.flag,
            self.remark,
            self.ext_fields,
            self.body,
            self.language,
            self.version,
            self.serialize_type,
        )

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, Any] | None = None,
        body: bytes | bytearray | memoryview = b"",
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
        """The header alone, in ``serialize_type``'s form. TypeError / ValueError / struct.error
        when a field cannot be written (a code that is no integer, a binary field too wide)."""
        if self.serialize_type == SERIALIZE_ROCKETMQ:
            return _encode_binary_header(self)
        return _encode_json_header(self)

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
        """The whole frame in one ``bytes`` (the body copied once)."""
        header = self.encode_header()
        body = self.body
        prefix = _PREFIX.pack(
            4 + len(header) + len(body), (self.serialize_type << 24) | len(header)
        )
        return b"".join((prefix, header, body)) if body else prefix + header


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    """The JSON header: by orjson (less than half the time of the hand-written form) when every
    fixed field has its plain type, the same bytes as ``_encode_json_header_py``; that one,
    the reference, for anything else or whatever orjson refuses (a lone surrogate, an integer
    beyond 64 bits, a key that is no text)."""
    dumps = _orjson_dumps
    code = cmd.code
    if type(code) is not int and isinstance(code, enum.IntEnum):
        code = code.value  # a ResponseCode / RequestCode: written as its number either way
    if (
        dumps is not None
        and type(code) is int
        and type(cmd.version) is int
        and type(cmd.opaque) is int
        and type(cmd.flag) is int
        and type(cmd.language) is str
        and (cmd.remark is None or type(cmd.remark) is str)
    ):
        h: dict[str, Any] = {
            "code": code,
            "language": cmd.language,
            "version": cmd.version,
            "opaque": cmd.opaque,
            "flag": cmd.flag,
        }
        if cmd.remark is not None:
            h["remark"] = cmd.remark
        ext = cmd.ext_fields
        if ext:
            h["extFields"] = {
                k: v if type(v) is str else _text(v) for k, v in ext.items() if v is not None
            }
        h["serializeTypeCurrentRPC"] = "JSON"
        try:
            return dumps(h)  # type: ignore[no-any-return]
        except TypeError:  # orjson.JSONEncodeError: the reference decides
            pass
    return _encode_json_header_py(cmd)


def _encode_json_header_py(cmd: RemotingCommand) -> bytes:
    """The JSON header, written by hand (a third of json.dumps' time): the fixed fields, then
    remark and extFields when present, then the field the Java side adds."""
    parts = [
        f'{{"code":{cmd.code:d},"language":{_json_str(cmd.language)},"version":{cmd.version:d}'
        f',"opaque":{cmd.opaque:d},"flag":{cmd.flag:d}'
    ]
    if cmd.remark is not None:
        parts.append(',"remark":')
        parts.append(_json_str(cmd.remark))
    ext = cmd.ext_fields
    if ext:
        fields = [
            f"{_json_str(k)}:{_json_str(v if type(v) is str else _text(v))}"
            for k, v in ext.items()
            if v is not None
        ]
        parts.append(',"extFields":{')
        parts.append(",".join(fields))
        parts.append("}")
    parts.append(',"serializeTypeCurrentRPC":"JSON"}')
    text = "".join(parts)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON's \\u escape carries it
        return _ASCII_ENCODER.encode(json.loads(text)).encode("ascii")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ext_str(ext: dict[str, Any], name: str, default: str | None = None) -> str | None:
    """A text ext field (a JSON number comes back as its decimal text); ``default`` when
    absent."""
    return str_value(ext.get(name), default)


def str_value(value: Any, default: str | None = None) -> str | None:
    """:func:`ext_str` of a field's value as sent."""
    if value is None:
        return default
    return value if type(value) is str else _text(value)


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def ext_int(ext: dict[str, Any], name: str, default: int | None = None) -> int | None:
    """An integer ext field sent as text or as a JSON number; ``default`` when absent or empty.
    Raises RequestError (a ValueError) for a value that is not an integer (``"1.5"``,
    ``"1_000"``, ``true``) or does not fit a Java long, as the Java side parses it."""
    return int_value(ext.get(name), name, default)


def int_value(value: Any, name: str, default: int | None = None) -> int | None:
    """:func:`ext_int` of a field's value as sent (``name`` for the error)."""
    if type(value) is str:
        if not value:
            return default
        if "_" not in value:
            try:
                number = int(value)
            except ValueError:
                pass
            else:
                if _INT64_MIN <= number <= _INT64_MAX:
                    return number
                raise RequestError(f"{name}: out of range: {value!r}")
    elif type(value) is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            return value
        raise RequestError(f"{name}: out of range: {value!r}")
    elif value is None:
        return default
    elif (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, int) and not isinstance(value, bool)
    ):
        if _INT64_MIN <= value <= _INT64_MAX:
            return int(value)
        raise RequestError(f"{name}: out of range: {value!r}")
    raise RequestError(f"{name}: not an integer: {value!r}")


def ext_int32(ext: dict[str, Any], name: str, default: int | None = None) -> int | None:
    """:func:`ext_int` for a field the Java side reads as an ``int`` (queue ids, flags,
    counts): RequestError for a value outside 32 bits."""
    return int32_value(ext.get(name), name, default)


def int32_value(value: Any, name: str, default: int | None = None) -> int | None:
    """:func:`ext_int32` of a field's value as sent (``name`` for the error)."""
    number = int_value(value, name, default)
    if number is not None and not _INT32_MIN <= number <= _INT32_MAX:
        raise RequestError(f"{name}: out of range: {value!r}")
    return number


def ext_bool(ext: dict[str, Any], name: str, default: bool = False) -> bool:
    """A boolean ext field: JSON true / false or the text ``true`` (any case) / anything else."""
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
    """A command from a frame without its length prefix (4 + header + body bytes). The body
    is copied once into ``bytes``; ``frame`` may be a view into a buffer that is reused."""
    view = frame if type(frame) is memoryview else memoryview(frame)
    size = len(view)
    if size < 4:
        raise FrameError("frame shorter than its header length field")
    (mark,) = _INT32.unpack_from(view, 0)
    header_end = 4 + (mark & 0xFFFFFF)
    if header_end > size:
        raise FrameError(f"header length {header_end - 4} beyond the frame ({size - 4} bytes)")
    serialize_type = (mark >> 24) & 0xFF
    if serialize_type == SERIALIZE_JSON:
        cmd = _decode_json_header(view[4:header_end])
    elif serialize_type == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(bytes(view[4:header_end]))
    else:
        raise FrameError(f"unknown serialize type {serialize_type}")
    if header_end < size:
        cmd.body = view[header_end:].tobytes()
    return cmd


def _decode_json_header(header: memoryview | bytes) -> RemotingCommand:
    h: Any = None
    if _orjson_loads is not None:
        try:
            h = _orjson_loads(header)
        except ValueError:  # orjson.JSONDecodeError: the json module decides
            h = None
        else:
            # orjson reads an integer beyond 64 bits as a float, json as an int: unless every
            # field and ext value is a plain str / int / bool / null, json decides
            if type(h) is dict:
                ext = h.pop("extFields", None)
                if not _PLAIN_TYPES.issuperset(map(type, h.values())) or (
                    ext is not None
                    and (
                        type(ext) is not dict
                        or not _PLAIN_TYPES.issuperset(map(type, ext.values()))
                    )
                ):
                    h = None
                elif ext is not None:
                    h["extFields"] = ext
    if h is None:
        h = _json_header(header)
    if type(h) is not dict:
        raise FrameError("header is not a JSON object")
    return _command_of(h)


def _json_header(header: memoryview | bytes) -> Any:
    """The header parsed by the json module (the reference); FrameError when it is no JSON."""
    try:
        text = str(header, "utf-8")
        try:  # the scanner alone: decode()'s whitespace matching costs a tenth
            h, end = _json_scan(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):  # white space around the object, or something after it
            h = _JSON_DECODER.decode(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FrameError(f"header is not JSON: {exc}") from exc
    return h


def _command_of(h: dict[str, Any]) -> RemotingCommand:
    opaque = h.get("opaque", 0)
    if type(opaque) is not int:
        raise FrameError(f"header opaque is not an integer: {opaque!r}")
    code = h.get("code")
    flag = h.get("flag", 0)
    if type(flag) is not int:
        raise HeaderError(f"header flag is not an integer: {flag!r}", opaque)
    ext = h.get("extFields")
    if ext is None:
        ext = {}
    remark = h.get("remark")
    version = h.get("version", 0)
    language = h.get("language", "JAVA")
    if (
        type(code) is not int
        or type(ext) is not dict
        or type(version) is not int
        or (remark is not None and type(remark) is not str)
        or type(language) is not str
    ):
        raise HeaderError("header fields of the wrong type", opaque, flag)
    return RemotingCommand(code, opaque, flag, remark, ext, b"", language, version)


def _decode_binary_header(header: bytes) -> RemotingCommand:
    """ROCKETMQ's binary header. Lengths of zero or below mean absent (as the Java side reads
    them) for the remark and the ext block; a key or value length below zero, or anything
    reaching past the header, is a FrameError."""
    size = len(header)
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        pos = _BINARY_FIXED.size
        (remark_len,) = _INT32.unpack_from(header, pos)
        pos += 4
        remark = None
        if remark_len > 0:
            if pos + remark_len > size:
                raise FrameError("binary header remark beyond the header")
            remark = header[pos : pos + remark_len].decode("utf-8")
            pos += remark_len
        (ext_len,) = _INT32.unpack_from(header, pos)
        pos += 4
        ext: dict[str, Any] = {}
        if ext_len > 0:
            end = pos + ext_len
            if end > size:
                raise FrameError("binary header ext fields beyond the header")
            while pos < end:
                (klen,) = _INT16.unpack_from(header, pos)
                pos += 2
                if klen < 0 or pos + klen + 4 > end:
                    raise FrameError("binary header ext key beyond the ext fields")
                key = header[pos : pos + klen].decode("utf-8")
                pos += klen
                (vlen,) = _INT32.unpack_from(header, pos)
                pos += 4
                if vlen < 0 or pos + vlen > end:
                    raise FrameError("binary header ext value beyond the ext fields")
                ext[key] = header[pos : pos + vlen].decode("utf-8")
                pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"bad binary header: {exc}") from exc
    cmd = RemotingCommand(
        code, opaque, flag, remark, ext, b"", _LANGUAGE_BY_NUMBER.get(language, "OTHER"), version
    )
    cmd.serialize_type = SERIALIZE_ROCKETMQ
    return cmd


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    member = LanguageCode.__members__.get(cmd.language)
    language = member.value if member is not None else LanguageCode.OTHER.value
    parts = [_BINARY_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode("utf-8")
    parts.append(_INT32.pack(len(remark)))
    parts.append(remark)
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        if value is None:
            continue
        k = key.encode("utf-8")
        v = _text(value).encode("utf-8")
        ext += _INT16.pack(len(k))
        ext += k
        ext += _INT32.pack(len(v))
        ext += v
    parts.append(_INT32.pack(len(ext)))
    parts.append(bytes(ext))
    return b"".join(parts)
