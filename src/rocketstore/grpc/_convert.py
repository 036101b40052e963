"""Between the v2 protocol's messages and the store's: statuses, resources, a sent message into
a store ``Message`` (with the checks RocketMQ's proxy applies) and a stored ``MessageExt`` into
the protocol's ``Message``.

Property names are RocketMQ's (MessageConst): what v2 carries in ``system_properties`` is kept
in the stored record as the properties a 4.x client reads (TAGS, KEYS, UNIQ_KEY, DELAY) or as
5.x's own (TIMER_DELIVER_MS, __SHARDINGKEY, TRACE_CONTEXT, __BORNHOST), so either front end can
read what the other wrote.

Pure functions; any thread.
"""

from __future__ import annotations

import ipaddress
import zlib

from google.protobuf.timestamp_pb2 import Timestamp

from .._inflate import DEFAULT_MAX_BODY, ZLIB_OR_GZIP, InflateError, InflateLimitError, inflate
from ..store.log._message import Message
from ..store.log._record import (
    KEY_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RESERVED_PROPERTIES,
    SYSFLAG_COMPRESSED,
    MessageExt,
)
from ..store.services._schedule import PROPERTY_TIMER_DELIVER_MS
from ._pb import definition_pb2 as pb

Code = pb.Code

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"

# properties the system owns: a producer may not set them as user properties, and a consumer
# does not get them back as user properties (RocketMQ's reserved names and the ones v2 carries in
# system_properties)
SYSTEM_PROPERTIES = RESERVED_PROPERTIES | {PROPERTY_SHARDING_KEY}


class GrpcError(Exception):
    """A request refused with a v2 status code (``code``) and a message for the client. Raised
    by the handlers, answered as the response's status at one place (the service)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int, message: str | None = None) -> pb.Status:
    """A Status with ``code`` and ``message`` (the code's name when None)."""
    return pb.Status(code=code, message=message if message is not None else Code.Name(code))  # type: ignore[arg-type]


OK_STATUS = status(Code.OK)


def timestamp(ms: int) -> Timestamp:
    ts = Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def has_control_character(text: str) -> bool:
    """Java's ``Character.isISOControl`` on any character: U+0000..U+001F and U+007F..U+009F."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


def crc32_hex(body: bytes) -> str:
    """The v2 body digest of type CRC32: eight upper-case hex digits."""
    return f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"


# ---- sending -----------------------------------------------------------------------------------


def born_host_of(text: str, peer: str | None) -> str | None:
    """The record's born host (``ip:port``) from a client's ``born_host`` (an IP without a
    port, as the clients send it) or, failing that, from the connection's peer."""
    for candidate in (text, peer or ""):
        candidate = candidate.strip()
        if not candidate:
            continue
        try:
            ip = ipaddress.ip_address(candidate.strip("[]"))
        except ValueError:
            host, _, port = candidate.rpartition(":")
            try:
                ip = ipaddress.ip_address(host.strip("[]"))
                return f"[{ip}]:{int(port)}" if ip.version == 6 else f"{ip}:{int(port)}"
            except ValueError:
                continue
        return f"[{ip}]:0" if ip.version == 6 else f"{ip}:0"
    return None


def decoded_body(message: pb.Message, max_size: int = DEFAULT_MAX_BODY) -> bytes:
    """The body of a sent message as the application wrote it (GZIP bodies are inflated: the
    store keeps plain bodies, which 4.x consumers read too). A body that would inflate past
    ``max_size`` bytes is refused with MESSAGE_BODY_TOO_LARGE as soon as it gets there."""
    body = bytes(message.body)
    encoding = message.system_properties.body_encoding
    if encoding == pb.GZIP:
        try:
            return inflate(body, max_size, wbits=ZLIB_OR_GZIP)
        except InflateLimitError:
            raise GrpcError(
                Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed {max_size}"
            ) from None
        except InflateError as exc:
            raise GrpcError(Code.MESSAGE_CORRUPTED, f"body is not GZIP data: {exc}") from None
    if encoding not in (pb.IDENTITY, pb.ENCODING_UNSPECIFIED):
        raise GrpcError(Code.MESSAGE_CORRUPTED, f"unknown body encoding {encoding}")
    return body


# ---- receiving ---------------------------------------------------------------------------------


def message_type_of(properties: dict[str, str]) -> int:
    if properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if PROPERTY_DELAY in properties or PROPERTY_TIMER_DELIVER_MS in properties:
        return pb.DELAY
    if PROPERTY_SHARDING_KEY in properties:
        return pb.FIFO
    return pb.NORMAL


def to_proto_message(
    msg: MessageExt,
    *,
    topic: str | None = None,
    receipt_handle: str | None = None,
    invisible_ms: int | None = None,
    attempt: int | None = None,
) -> pb.Message:
    """The v2 message for a stored one: user properties, system properties (tag, keys, the
    producer's message id or else the offset message id, CRC32 body digest, encoding, type,
    born / store time and host, delivery time, queue id and offset, message group, trace
    context, dead-letter origin) and, for a receive, the receipt handle, invisible duration and
    delivery attempt (else reconsume times + 1)."""
    props = msg.properties
    sp = pb.SystemProperties()
    tag = props.get(PROPERTY_TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(PROPERTY_KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(KEY_SEPARATOR) if k)
    sp.message_id = props.get(PROPERTY_UNIQ_KEY) or msg.msg_id
    body = msg.body
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = crc32_hex(body)
    sp.body_encoding = pb.GZIP if msg.sys_flag & SYSFLAG_COMPRESSED else pb.IDENTITY
    sp.message_type = message_type_of(props)  # type: ignore[assignment]
    sp.born_timestamp.FromMilliseconds(msg.born_timestamp)
    born_host = props.get(PROPERTY_BORN_HOST)
    if not born_host:
        try:
            born_host = msg.born_host_str
        except ValueError:
            born_host = ""
    sp.born_host = born_host
    sp.store_timestamp.FromMilliseconds(msg.store_timestamp)
    try:
        sp.store_host = msg.store_host_str
    except ValueError:
        pass
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS)
    if deliver is not None and deliver.isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(deliver))
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    group = props.get(PROPERTY_SHARDING_KEY)
    if group is not None:
        sp.message_group = group
    trace = props.get(PROPERTY_TRACE_CONTEXT)
    if trace is not None:
        sp.trace_context = trace
    origin_topic = props.get(PROPERTY_DLQ_ORIGIN_TOPIC)
    origin_id = props.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID)
    if origin_topic is not None and origin_id is not None:
        sp.dead_letter_queue.topic = origin_topic
        sp.dead_letter_queue.message_id = origin_id
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if invisible_ms is not None:
        sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.delivery_attempt = attempt if attempt is not None else msg.reconsume_times + 1
    out = pb.Message(system_properties=sp, body=body)
    out.topic.name = topic if topic is not None else msg.topic
    user = out.user_properties
    for name, value in props.items():
        if name not in SYSTEM_PROPERTIES:
            user[name] = value
    return out


def copy_for_dead_letter(msg: MessageExt, group: str, dlq: str, attempt: int) -> Message:
    """The message to put into ``dlq`` (``%DLQ%<group>``) for ``msg`` after ``attempt``
    deliveries: body, flag and user properties kept, its origin recorded, the properties that
    would make the store act on it again (DELAY, WAIT, REAL_TOPIC, ...) dropped."""
    props = {
        k: v
        for k, v in msg.properties.items()
        if k
        not in (PROPERTY_DELAY, "WAIT", "REAL_TOPIC", "REAL_QID", PROPERTY_TRANSACTION_PREPARED)
    }
    props[PROPERTY_DLQ_ORIGIN_TOPIC] = msg.topic
    props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = props.get(PROPERTY_UNIQ_KEY) or msg.msg_id
    props.setdefault("RETRY_TOPIC", msg.topic)
    try:
        born_host: str | None = msg.born_host_str
    except ValueError:
        born_host = None
    return Message(
        dlq,
        msg.body,
        0,
        properties=props,
        flag=msg.flag,
        sys_flag=msg.sys_flag & SYSFLAG_COMPRESSED,
        born_timestamp=msg.born_timestamp,
        born_host=born_host,
        reconsume_times=attempt,
    )
