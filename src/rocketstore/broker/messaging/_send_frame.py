"""The send frame path: a plain send served from its frame's bytes to its answer's bytes.

The remoting connection hands every request frame to ``SendFramePath.serve`` before it decodes
it (``Connection.frame_path``). For a plain SEND_MESSAGE / SEND_MESSAGE_V2 (what
``_send_scan.scan_send`` accepts: one header, JSON or binary, of the send's own fields,
nothing unusual) to a known topic's queue, with properties that need no general-path handling
(``_send.plain_properties``) and with the ACL off, it reads the header's fields straight from
the frame (no header dictionary, no command object), stores the message through the send
processor's ``put_plain`` (the store's put of a record's fields) and returns the answer
frame's bytes, written from a template: the same bytes the connection would write for the
general path's answer. A put that waits is answered when its wait ends, in one write a
connection for the answers ready together: a slave's acknowledgement on a SYNC_MASTER with
ASYNC_FLUSH (``SlaveWaits``), the group commit under SYNC_FLUSH (``PutWaits``). The broker's
request statistics count what the handler table's timing counts: the sends answered in a read
by read (``BrokerStats.sent_in_read``: one clock read when the read's answers are written),
the sends that waited one by one when answered (``BrokerStats.note_sent``).

Anything else returns None before anything is stored, and the connection decodes the frame
and calls the handler as before: the send processor's general path decides, refuses what it
must and answers as it always did. So this path changes no answer and no stored byte
(tests/test_send_frame.py and tests/test_send_fast_path.py send the same frames both ways and
compare the stores, the answers and the statistics).

It is the one plain send path of both builds: the compiled header scanner where it is built,
its pure-Python twin (the reference) otherwise.

Loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from concurrent.futures import Future
from typing import Any, Protocol

from ...remoting import Connection, RemotingCommand, RequestError, ResponseCode
from ...remoting._codes import LanguageCode
from ...remoting._command import ONEWAY_FLAG, RESPONSE_FLAG, SERIALIZE_ROCKETMQ, SERVER_VERSION
from ...store.log._message import PutMessageResult, PutMessageStatus
from ..state._stats import BrokerStats
from ._send import PutWaits, SendProcessor
from ._send_scan import scan_send, scan_send_py
from ._slave_waits import SlaveWait, SlaveWaits

log = logging.getLogger(__name__)
_PUT_OK = PutMessageStatus.PUT_OK
_NO_RESULT = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR)  # until the put's waits end
_PREFIX = struct.Struct(">ii")
# the answer to a stored send, as the connection encodes the processor's answer: fixed fields,
# extFields in the processor's order, the field the Java side adds
_ANSWER_HEAD = f'{{"code":0,"language":"PYTHON","version":{SERVER_VERSION:d},"opaque":'
_ANSWER_ID = ',"flag":1,"extFields":{"msgId":"'
_ANSWER_QUEUE = '","queueId":"'
_ANSWER_OFFSET = '","queueOffset":"'
_ANSWER_TAIL = '","MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"serializeTypeCurrentRPC":"JSON"}'
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_PYTHON = int(LanguageCode.PYTHON)
_INT64 = struct.Struct(">q")


def _ext_name(name: str) -> bytes:
    return _INT16.pack(len(name)) + name.encode()


def _ext_pair(name: str, value: str) -> bytes:
    return _ext_name(name) + _INT32.pack(len(value)) + value.encode()


# the binary answer: the length prefix, the fixed fields, the remark's length (0), the ext
# fields' length, then the ext fields as one latin-1 text: before each value its name and
# its length's three high bytes (zero), the value's length the character before it
_BINARY_HEAD = struct.Struct(">iihbhiiii")
_BINARY_MARK = SERIALIZE_ROCKETMQ << 24
_HEAD_AROUND = _BINARY_FIXED.size + 8  # the header's bytes besides the ext fields
_TEXT_MSG_ID = (_ext_name("msgId") + b"\x00\x00\x00").decode("latin-1")
_TEXT_QUEUE_ID = (_ext_name("queueId") + b"\x00\x00\x00").decode("latin-1")
_TEXT_QUEUE_OFFSET = (_ext_name("queueOffset") + b"\x00\x00\x00").decode("latin-1")
_TEXT_TAIL = (_ext_pair("MSG_REGION", "DefaultRegion") + _ext_pair("TRACE_ON", "true")).decode(
    "latin-1"
)


class HasAclState(Protocol):
    @property
    def acl(self) -> Any: ...


def answer_frame(
    opaque: int, msg_id: str, queue_id: int, queue_offset: int, serialize_type: int = 0
) -> bytes:
    """The frame (length prefix included) answering a stored send: SUCCESS with its message
    id (upper-case hex), queue id and queue offset, in the request's serialize type (0 JSON,
    1 ROCKETMQ's binary form)."""
    if serialize_type == SERIALIZE_ROCKETMQ:
        return _binary_answer(opaque, msg_id, str(queue_id), str(queue_offset))
    header = (
        _ANSWER_HEAD
        + str(opaque)
        + _ANSWER_ID
        + msg_id
        + _ANSWER_QUEUE
        + str(queue_id)
        + _ANSWER_OFFSET
        + str(queue_offset)
        + _ANSWER_TAIL
    )
    n = len(header)  # ASCII: as many bytes as characters
    if n < 0xFFFC and header.isascii():
        # the length prefix as four characters each, then the whole frame encoded at once
        m = n + 4
        prefix = "\x00\x00" + chr(m >> 8) + chr(m & 0xFF) + "\x00\x00" + chr(n >> 8) + chr(n & 0xFF)
        return (prefix + header).encode("latin-1")
    data = header.encode()
    return _PREFIX.pack(4 + len(data), len(data)) + data


def _binary_answer(opaque: int, msg_id: str, queue_id: str, queue_offset: str) -> bytes:
    """``answer_frame`` in the binary serialize type: the fixed fields (code 0, language
    PYTHON, the server's version, the opaque, the response flag), an empty remark, then the ext
    fields as (int16 length, name, int32 length, value), as ``_encode_binary_header`` writes
    them. Every text here is ASCII and shorter than 256 characters, so the ext fields are
    written as one text (each length's low byte a character) and encoded once."""
    ext = (
        _TEXT_MSG_ID
        + chr(len(msg_id))
        + msg_id
        + _TEXT_QUEUE_ID
        + chr(len(queue_id))
        + queue_id
        + _TEXT_QUEUE_OFFSET
        + chr(len(queue_offset))
        + queue_offset
        + _TEXT_TAIL
    )
    n = len(ext)
    h = _HEAD_AROUND + n  # the header's length
    return _BINARY_HEAD.pack(
        4 + h, _BINARY_MARK | h, 0, _PYTHON, SERVER_VERSION, opaque, RESPONSE_FLAG, 0, n
    ) + ext.encode("latin-1")


def failure_answer(exc: Exception, code: int, peer: str) -> RemotingCommand:
    """The answer to a send whose put raised, logged, as the connection answers a handler
    that raised (``Connection._failed``)."""
    if isinstance(exc, ValueError):
        response_code = exc.code if isinstance(exc, RequestError) else ResponseCode.SYSTEM_ERROR
        remark = str(exc) or type(exc).__name__
        log.warning("remoting: refused request code %s from %s: %s", code, peer, remark)
    else:
        response_code = ResponseCode.SYSTEM_ERROR
        remark = f"{type(exc).__name__}: {exc}"
        log.error("remoting: request code %s from %s failed", code, peer, exc_info=exc)
    return RemotingCommand.response(response_code, remark)


def _encoded(answer: RemotingCommand, opaque: int, serialize_type: int) -> bytes:
    answer.opaque = opaque
    answer.flag |= RESPONSE_FLAG
    answer.serialize_type = serialize_type
    return answer.encode()


class SendFramePath:
    """``serve`` a connection's request frame when it is a plain send; None otherwise."""

    def __init__(self, processor: SendProcessor, broker: HasAclState, stats: BrokerStats) -> None:
        self.processor = processor
        self.broker = broker
        self.stats = stats
        self.served = 0  # sends answered here (the tests and benchmarks read it)
        self._waits: SlaveWaits | None = None
        self._put_waits: PutWaits | None = None
        self._scan = scan_send if scan_send is not None else scan_send_py

    def serve(self, frame: memoryview, conn: Connection) -> bytes | None:
        """The answer frame to ``frame`` (without its length prefix) when this path served it
        (empty when the send waits for a slave: ``_answer_waits`` writes it), None when the
        connection must decode and dispatch it."""
        processor = self.processor
        if not processor.fast_path or self.broker.acl is not None:
            return None
        waits: SlaveWaits | None = None
        if not processor.puts_never_wait():
            waits = self._slave_waits()
            if waits is None and self._loop_waits() is None:
                return None
        stats = self.stats
        timing = stats.timing
        began = stats.read_began() if timing else 0.0
        h = self._scan(frame)
        if h is None:
            return None
        (
            code,
            opaque,
            flag,
            _version,
            serialize_type,
            topic,
            queue_id,
            text,
            sys_flag,
            message_flag,
            born,
            reconsume,
            body_at,
        ) = h
        if flag & (RESPONSE_FLAG | ONEWAY_FLAG) or not processor.plain_queue(topic, queue_id):
            return None
        body = bytes(frame[body_at:])
        try:
            r = processor.put_plain(
                topic,
                queue_id,
                text,
                sys_flag,
                message_flag,
                born,
                reconsume,
                body,
                conn.peer,
                waits,
            )
            if r is None:
                return None
            if r.__class__ is SlaveWait or r.__class__ is not PutMessageResult:
                if r.__class__ is SlaveWait:  # answered when a slave holds it
                    w: SlaveWait = r  # type: ignore[assignment]
                else:  # a future: answered when the put's waits end (SYNC_FLUSH)
                    w = SlaveWait(0, 0.0, _NO_RESULT, queue_id)
                    w.held = True
                    put_waits = self._loop_waits()
                    assert put_waits is not None  # a loop runs: serve checked it
                    put_waits.watch(r, w)  # type: ignore[arg-type]
                w.conn = conn
                w.opaque = opaque
                w.serialize_type = serialize_type
                w.code = code
                w.topic = topic
                w.properties = text
                w.size = len(body)
                w.began = began
                self.served += 1
                return b""
            result: PutMessageResult = r  # type: ignore[assignment]  # no future: see put_plain
            if result.status is _PUT_OK:
                # PutMessageResult.msg_id's id (a stored put has its offset and host), here
                # without the calls into the interpreted property
                msg_id = (result.store_host + _INT64.pack(result.wrote_offset)).hex().upper()
                out = answer_frame(opaque, msg_id, queue_id, result.queue_offset, serialize_type)
                response_code = 0
            else:
                answer = processor._answer(result, queue_id, False)
                out = _encoded(answer, opaque, serialize_type)
                response_code = answer.code
        except Exception as exc:  # answered as the connection answers a handler that raised
            answer = failure_answer(exc, code, conn.peer)
            out = _encoded(answer, opaque, serialize_type)
            response_code = answer.code
        if timing:
            stats.sent_in_read(code, response_code, topic, text, len(body), began, conn)
        self.served += 1
        return out

    # ---- sends waiting for a slave ----------------------------------------------------------

    def _slave_waits(self) -> SlaveWaits | None:
        """The loop's queue of sends waiting for a slave, when a slave's acknowledgement is a
        put's only wait (SYNC_MASTER on ASYNC_FLUSH); None otherwise."""
        stage = self.processor.slave_stage()
        if stage is None:
            return None
        waits = self._waits
        if waits is None or waits.transfer is not stage:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # frames fed without a loop (a benchmark): the general path
                return None
            waits = self._waits = SlaveWaits(loop, stage, self._answer_waits)
        return waits

    def _loop_waits(self) -> PutWaits | None:
        """The loop's queue of plain sends whose put waits (SYNC_FLUSH, put stages); None
        without a running loop (frames fed by a benchmark: the general path)."""
        waits = self._put_waits
        if waits is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return None
            waits = self._put_waits = PutWaits(loop, self._deliver)
        return waits

    def _deliver(self, ready: list[tuple[Any, Future[PutMessageResult]]]) -> None:
        """Answer plain sends whose put's waits ended (``PutWaits``). Loop thread."""
        done: list[SlaveWait] = []
        for w, fut in ready:
            exc = fut.exception()
            if exc is not None:
                w.error = exc if isinstance(exc, Exception) else RuntimeError(repr(exc))
            else:
                w.result = fut.result()
            done.append(w)
        self._answer_waits(done)

    def _answer_waits(self, waits: list[SlaveWait]) -> None:
        """Answer sends whose wait for a slave ended (each ``result`` the answer): the
        answers of one connection in one write, counted as ``serve`` counts, each timed until
        the answers were built (one clock read for them all). Loop thread."""
        processor = self.processor
        stats = self.stats
        timing = stats.timing
        out: dict[Connection, list[bytes]] = {}
        answered: list[SlaveWait] = []  # timed when all are answered: one clock read
        for w in waits:
            conn: Connection = w.conn
            if conn is None or conn.closed:
                continue  # nobody to answer
            r = w.result
            if w.error is not None:
                answer = failure_answer(w.error, w.code, conn.peer)
                data = _encoded(answer, w.opaque, w.serialize_type)
                response_code = answer.code
            elif r.status is _PUT_OK:
                msg_id = r.msg_id
                assert msg_id is not None
                data = answer_frame(w.opaque, msg_id, w.queue_id, r.queue_offset, w.serialize_type)
                response_code = 0
            else:
                answer = processor._answer(r, w.queue_id, False)
                data = _encoded(answer, w.opaque, w.serialize_type)
                response_code = answer.code
            if timing:
                w.response_code = response_code
                answered.append(w)
            parts = out.get(conn)
            if parts is None:
                out[conn] = [data]
            else:
                parts.append(data)
        if answered:
            ended = stats.now()
            for w in answered:
                stats.note_sent(
                    w.code, w.response_code, w.topic, w.properties, w.size, w.began, w.held, ended
                )
        for conn, parts in out.items():
            conn.write_frames(parts[0] if len(parts) == 1 else b"".join(parts))
