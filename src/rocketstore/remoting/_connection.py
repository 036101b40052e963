"""One remoting connection on an asyncio loop, the same for both ends.

A connection cuts the byte stream into frames, answers requests through the handler of their
code and matches responses to the requests it sent by opaque. A server's connections and a
client's differ only in their handlers: a broker's client connection, for example, serves the
broker's NOTIFY_CONSUMER_IDS_CHANGED.

Bad input: a frame longer than the maximum or shorter than a header closes the connection; a
header that is not JSON closes it; a header of the wrong shape is answered with SYSTEM_ERROR;
an unknown code with REQUEST_CODE_NOT_SUPPORTED. A handler that raises a ValueError (bad input:
a field missing or not a number, a body that does not decode) is answered with SYSTEM_ERROR, or
the code of a RequestError, and the error as the remark, and logged as one line; any other
exception is an internal error, answered with SYSTEM_ERROR and logged with its traceback. Both
logs are rate-limited (``LogLimiter``): a peer that sends nothing but bad requests writes a few
lines a minute. None of it reaches any other connection.

Reading: the connection is a BufferedProtocol, so the transport receives straight into its
buffer; a frame larger than the buffer gets a buffer of its own, sized for it, and its body is
copied once, into the command's ``bytes``. Writing: the responses to the frames of one read go
out in one write (a pipelining client gets one send per read, not one per request), and so do
the frames written outside a read in one turn of the loop (answers completed by a future,
requests a client sends), at the turn's end; a large body is written on its own, not copied
into a joined frame. With ``backpressure`` (servers),
a full write buffer stops both reading and serving the frames already read until the peer
has taken the answers. A handler that builds a large answer away from the loop counts it
first (``reserve`` / ``room``, see ``_limits``); while a request waits for room, reading and
serving stop too.

Everything here runs on the loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ._codes import ResponseCode
from ._command import (
    _INT32,
    DEFAULT_MAX_FRAME,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    FrameError,
    HeaderError,
    RemotingCommand,
    decode_frame,
    next_opaque,
)
from ._limits import BufferBudget, LogLimiter, RequestError

log = logging.getLogger(__name__)
_bad_input_log = LogLimiter(log)  # requests and frames refused as the peer's mistake
_failure_log = LogLimiter(log)  # handlers that failed: internal errors, with tracebacks

FramePath = Callable[[memoryview, "Connection"], bytes | None]
"""Serves a request frame (without its length prefix) before it is decoded: the answer frame's
bytes (length prefix included), or None to let the connection decode the frame and call its
handler. It must decide None before doing anything the handler would do again. Loop thread."""

HandlerResult = RemotingCommand | bytes | Awaitable[RemotingCommand | None] | None
Handler = Callable[[RemotingCommand, "Connection"], HandlerResult]
"""Serves one request code: returns the response (its opaque is set here), the response's
whole frame as ``bytes`` (length prefix, the request's opaque and serialize type included:
written as it is, with the answers of the same read), an awaitable of a response, or None for
no response. Called on the loop thread; must not block. Cheapest first: a
response returned at once; an asyncio Future (answered when it completes, at once when it
is done already); a coroutine (a Task of its own: some 10 µs more a request on Python 3.11)."""

_FIRST_READ_SIZE = 8 * 1024  # a connection's first read buffer (an idle one holds no more)
_READ_SIZE = 64 * 1024  # its buffer once a read has filled the first; larger frames get
# a buffer of their own, sized for them
_MIN_FREE = 2 * 1024  # less free space than this at the buffer's end: start a new buffer
_TRUST_SIZE = (4096 + 64) * 1024  # a frame up to this size (a 4 MiB message, RocketMQ's
# default maximum, and its header) gets its whole buffer at once
_JOIN_LIMIT = 16 * 1024  # bodies up to this size are joined to their header in one write
_CORK_LIMIT = 64 * 1024  # responses held during one read are written once they reach this
_unpack_int32 = _INT32.unpack_from
_EAGER = sys.version_info >= (3, 12)  # Task(eager_start=True): a handler that does not wait
# for anything answers without a trip through the loop


class RemotingError(Exception):
    """A remote call that failed: the connection closed, it timed out, or the peer is unreachable."""


class Connection(asyncio.BufferedProtocol):
    """``backpressure``: stop reading from the peer while the transport's write buffer is above
    its high-water mark (a peer that sends requests but does not read the answers cannot make
    this side buffer without bound). Servers turn it on; clients leave it off, so two
    connections of this kind never both wait for the other to read.

    ``budget``: the server's count of what its connections hold (unsent answers, large read
    buffers), with the water marks and limits it enforces (see ``_limits``)."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        on_close: Callable[[Connection], None] | None = None,
        backpressure: bool = False,
        budget: BufferBudget | None = None,
        on_established: Callable[[Connection], None] | None = None,
        establish_on_frame: bool = True,
        frame_path: FramePath | None = None,
    ) -> None:
        self.handlers = handlers
        self.frame_path = frame_path
        # called once when the read being parsed ends, after its answers are written, then
        # cleared: set by the frame path to count the read's sends (BrokerStats.sent_in_read)
        self.after_read: Callable[[], None] | None = None
        self.max_frame = max_frame
        self._on_close = on_close
        self._backpressure = backpressure
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.attributes: dict[str, Any] = {}  # what the server learns (client id, groups)
        self.last_active = 0.0  # loop time of the connection or its last read
        self.last_frame = 0.0  # loop time of the connection or the last whole frame it sent
        self.connected_at = 0.0  # loop time it was accepted (or made)
        # established: it sent a whole frame (``establish_on_frame``), or its server's ACL let
        # one of its requests in (``establish``); a server closes a connection that is not,
        # soon after it is made, and lets a new one take its place when every place is taken
        self.established = False
        self._establish_on_frame = establish_on_frame
        self._on_established = on_established
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rsize = _FIRST_READ_SIZE  # the size of a new read buffer
        self._rbuf = bytearray(self._rsize)
        self._rview = memoryview(self._rbuf)
        self._offered = 0  # the space get_buffer gave last
        self._rstart = 0  # first byte not yet parsed
        self._rend = 0  # end of the bytes received
        self._need = 0  # size of the frame being received (prefix included), once known
        # answers held while one read is parsed, or, written outside a read, until the end of
        # the loop's turn (``_flush_turn``)
        self._cork: list[bytes] | None = None
        self._corked = 0  # their size
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._write_ok: asyncio.Event | None = None
        self._held = False  # backpressure: frames are left unparsed until resume_writing
        self._busy = False  # too many requests in flight: frames are left unparsed until fewer
        self.held_since = 0.0  # loop time reading stopped for unread answers (when _held)
        self.stalled_since = 0.0  # loop time since which its unsent answers have not gone
        # down, as seen by the counts (0.0: nothing unsent)
        self._unsent = 0  # its unsent bytes at the last count
        self._budget = budget
        self._buffered = 0  # what this connection holds, as last counted into the budget
        # room counted for answers not written yet (see _limits): in all, by request opaque,
        # and given to the request waiting in the read buffer
        self._reserved = 0
        self._room: dict[int, int] = {}
        self._granted = 0
        self._full = False  # a request waits for room: frames are left unparsed until it has it
        self._deferred = False  # the frame just served waits for room in the read buffer
        self.closed = False

    # ---- asyncio.BufferedProtocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.closed:  # aborted before it was made (a server gave its place away)
            transport.abort()  # type: ignore[attr-defined]
            return
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self._loop = asyncio.get_running_loop()
        self.last_active = self.last_frame = self._loop.time()
        if not self.connected_at:
            self.connected_at = self.last_active
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                import socket

                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if self._backpressure:
            set_limits = getattr(transport, "set_write_buffer_limits", None)
            if set_limits is not None:
                if self._budget is not None:
                    limits = self._budget.limits
                    set_limits(high=limits.write_high_water, low=limits.write_low_water)
                else:
                    set_limits(high=1024 * 1024, low=256 * 1024)

    def get_buffer(self, sizehint: int) -> memoryview:
        end = self._rend
        cap = len(self._rbuf)
        if cap - end < _MIN_FREE and not end < self._rstart + self._need <= cap:
            self._new_buffer()
            end = self._rend
            cap = len(self._rbuf)
        self._offered = cap - end
        return self._rview[end:]

    def _new_buffer(self) -> None:
        """Move the unparsed bytes to the front of a new buffer: the standard size, or the
        size of the frame being received when that is larger. A frame over _TRUST_SIZE gets
        its full size only once a sixteenth of it is here (a peer that announces 16 MiB and
        sends little makes this side hold some 4 MiB, not 16)."""
        start, end = self._rstart, self._rend
        pending = end - start
        need = min(self._need, max(_TRUST_SIZE, 16 * pending))
        budget = self._budget
        if budget is not None and need > _READ_SIZE and need > budget.room():
            need = min(need, 2 * pending)  # no trust beyond the budget: grow with the bytes
        buf = bytearray(max(self._rsize, need, pending + _MIN_FREE))
        if pending:
            buf[:pending] = self._rview[start:end]
        self._rbuf = buf
        self._rview = memoryview(buf)
        self._rstart = 0
        self._rend = pending
        if budget is not None and len(buf) > _READ_SIZE:
            self._recount()
            budget.changed(self, defer=True)

    def buffer_updated(self, nbytes: int) -> None:
        self._rend += nbytes
        if nbytes >= self._offered:  # the peer had more to send: read in larger pieces
            self._rsize = _READ_SIZE
        if not self.closed and not self._held and not self._busy and not self._full:
            self._parse()

    def _parse(self) -> None:
        """Serve the whole frames received; with backpressure on, stop at the first frame
        whose answer fills the write buffer (the rest waits for resume_writing)."""
        end = self._rend
        buf = self._rbuf
        view = self._rview
        pos = self._rstart
        max_frame = self.max_frame
        cork = self._cork  # answers of this turn written before the read: go on after them
        if cork is None:
            cork = self._cork = []
        framed = False
        try:
            while end - pos >= 4:
                length: int = _unpack_int32(buf, pos)[0]
                if length < 4 or length > max_frame:
                    raise FrameError(f"frame length {length} outside 4..{max_frame}")
                stop = pos + 4 + length
                if stop > end:
                    self._need = 4 + length
                    break
                self._need = 0
                framed = True
                if not self.established and self._establish_on_frame:
                    self.establish()
                self._frame(view[pos + 4 : stop])
                if self._deferred:  # no room for its answer: served again from here
                    self._deferred = False
                    break
                pos = stop
                if self.closed or self._held or self._busy or self._full:
                    break
        except FrameError as exc:
            _bad_input_log.log(
                logging.WARNING, "remoting: closing %s: %s", self.peer or "connection", exc
            )
            self.close()
            return
        finally:
            self._cork = None
            if cork:
                self._flush(cork)
            after = self.after_read
            if after is not None:
                self.after_read = None
                after()
            if pos == end:
                pos = end = 0
                self._rend = 0
                if len(buf) > self._rsize and not self.closed:  # one large frame's: let it go
                    self._rbuf = bytearray(self._rsize)
                    self._rview = memoryview(self._rbuf)
                    if self._budget is not None:
                        self._recount()
            self._rstart = pos
        if self._loop is not None:
            self.last_active = now = self._loop.time()
            if framed:
                self.last_frame = now

    def establish(self) -> None:
        """The peer is a client of the server's (see ``established``). Loop thread."""
        if not self.established:
            self.established = True
            if self._on_established is not None:
                self._on_established(self)

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release()
        for waiting in [t for t in self._tasks if not isinstance(t, asyncio.Task)]:
            waiting.cancel()  # nobody to answer: a held request lets go of what it holds
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(RemotingError(f"connection to {self.peer} closed"))
        if self._write_ok is not None:
            self._write_ok.set()
        if self._on_close is not None:
            try:
                self._on_close(self)
            except Exception:
                log.exception("remoting: close listener failed")

    def pause_writing(self) -> None:
        if self._write_ok is None:
            self._write_ok = asyncio.Event()
        self._write_ok.clear()
        if self._backpressure and self.transport is not None and not self.closed:
            if not self._held and not self._busy and not self._full:
                self.transport.pause_reading()
            self._held = True
            if self._loop is not None:
                self.held_since = self._loop.time()

    def resume_writing(self) -> None:
        if self._write_ok is not None:
            self._write_ok.set()
        if self._held:
            self._held = False
            self._maybe_resume()
        budget = self._budget
        if budget is not None and budget.waiting:
            budget.wake()

    def _maybe_resume(self) -> None:
        """Read again once neither unread answers, requests in flight nor a request waiting
        for room hold reading."""
        if self._held or self._busy or self._full or self.transport is None or self.closed:
            return
        self.transport.resume_reading()
        if self._loop is not None:  # frames read before the pause, outside this call
            self._loop.call_soon(self._parse_held)

    def _parse_held(self) -> None:
        if not self.closed and not self._held and not self._busy and not self._full:
            self._parse()

    @property
    def reading(self) -> bool:
        """False while reading is stopped because the peer does not take its answers."""
        return not self._held

    # ---- what this connection holds ---------------------------------------------------------

    def _recount(self) -> int:
        """Count what this connection holds (its unsent answers, the room counted for answers
        not written yet and the part of its read buffer beyond the standard size) into the
        budget; returns it."""
        transport = self.transport
        if self.closed or transport is None:
            held = self._reserved
        else:
            unsent = transport.get_write_buffer_size()
            if not unsent:
                self.stalled_since = 0.0
            elif unsent < self._unsent or not self.stalled_since:  # (some went out)
                self.stalled_since = self._loop.time() if self._loop is not None else 0.0
            self._unsent = unsent
            held = unsent + max(0, len(self._rbuf) - _READ_SIZE) + self._reserved
        budget = self._budget
        if budget is not None:
            budget.total += held - self._buffered
        self._buffered = held
        return held

    def _count(self) -> None:
        """Recount after a write; over a limit, the budget acts at once (this connection may
        be aborted)."""
        budget = self._budget
        if budget is not None:
            self._recount()
            budget.changed(self)

    def maybe_shrink(self) -> bool:
        """Let a read buffer larger than the first go while nothing is pending in it (the
        server's sweep does this for idle connections: one holds 8 KiB then, not 64)."""
        if self.closed or self._rend or len(self._rbuf) <= _FIRST_READ_SIZE:
            return False
        self._rsize = _FIRST_READ_SIZE
        self._rbuf = bytearray(_FIRST_READ_SIZE)
        self._rview = memoryview(self._rbuf)
        self._rstart = 0
        self._recount()
        return True

    @property
    def read_buffer_size(self) -> int:
        return len(self._rbuf)

    def _release(self) -> None:
        """Closed: let the read buffer go and take this connection (its room and waiting
        requests too) out of the budget."""
        freed = len(self._rbuf) + self._buffered
        self._rbuf = bytearray(0)
        self._rview = memoryview(self._rbuf)
        self._rstart = self._rend = self._need = 0
        self._cork = None
        budget = self._budget
        if budget is not None:
            budget.drop(self)
        self._recount()
        if budget is not None:
            budget.released += freed
            budget.wake()

    # ---- room for answers built away from the loop ------------------------------------------

    def reserve(self, cmd: RemotingCommand, nbytes: int) -> bool:
        """Count an answer of ``nbytes`` to ``cmd`` against this connection's share and the
        server's budget before it is built (see ``_limits``); counted until it is written.
        True when it fits (always, without a budget: clients). False when it does not: the
        handler then returns None and builds nothing; the request stays in the read buffer,
        this connection stops reading and serving, and the request is served again (its
        handler called again) once there is room. Loop thread, from a handler."""
        budget = self._budget
        if budget is None or budget.reserve(self, cmd.opaque, nbytes):
            return True
        budget.wait(self, cmd.opaque, nbytes, None)
        self._deferred = True
        self._stop_for_room()
        return False

    async def room(self, cmd: RemotingCommand, nbytes: int) -> None:
        """As ``reserve``, for a handler's coroutine that learns the answer's size on its way:
        returns once room for it is counted (at once when it fits); meanwhile this connection
        stops reading and serving. Cancelled when the connection closes."""
        budget = self._budget
        if budget is None or budget.reserve(self, cmd.opaque, nbytes):
            return
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        budget.wait(self, cmd.opaque, nbytes, fut)
        self._stop_for_room()
        await fut

    def _stop_for_room(self) -> None:
        if not self._full:
            transport = self.transport
            if not self._held and not self._busy and transport is not None and not self.closed:
                transport.pause_reading()
            self._full = True

    def _room_found(self) -> None:
        """The budget found room for this connection's waiting requests: serve on."""
        if self._full:
            self._full = False
            self._maybe_resume()

    # ---- frames -----------------------------------------------------------------------------

    def _frame(self, frame: memoryview) -> None:
        frame_path = self.frame_path
        if frame_path is not None:
            answer = frame_path(frame, self)  # answers its own failures: it never raises
            if answer is not None:
                transport = self.transport
                if transport is not None and not self.closed and not transport.is_closing():
                    self._write_joined(transport, answer)
                return
        try:
            cmd = decode_frame(frame)
        except HeaderError as exc:
            if exc.opaque is None:
                raise
            if exc.flag & (RESPONSE_FLAG | ONEWAY_FLAG):  # nobody waits for an answer
                _bad_input_log.log(
                    logging.WARNING, "remoting: dropped a frame from %s: %s", self.peer, exc
                )
            else:
                error = RemotingCommand.response(ResponseCode.SYSTEM_ERROR, str(exc))
                self._answer(exc.opaque, error, 0)
            return
        if cmd.flag & RESPONSE_FLAG:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            return
        handler = self.handlers.get(cmd.code)
        if handler is None:
            if not cmd.flag & ONEWAY_FLAG:
                remark = f"request type {cmd.code} not supported"
                self._reply(
                    cmd, RemotingCommand.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark)
                )
            return
        try:
            result = handler(cmd, self)
        except Exception as failure:
            self._failed(cmd, failure)
            return
        if result is None:
            return
        if type(result) is RemotingCommand or isinstance(result, RemotingCommand):
            if not cmd.flag & ONEWAY_FLAG:
                self._reply(cmd, result)
            return
        if type(result) is bytes:  # the answer's frame, written by the handler's template
            if not cmd.flag & ONEWAY_FLAG:
                transport = self.transport
                if transport is not None and not self.closed and not transport.is_closing():
                    self._write_joined(transport, result)
            return
        if isinstance(result, asyncio.Future):  # held by whoever completes it
            if result.done():
                self._finished(cmd, result)
            else:
                self._tasks.add(result)  # cancelled if the connection goes first
                result.add_done_callback(lambda f: self._finished(cmd, f))
                self._maybe_busy()
            return
        try:
            if _EAGER and asyncio.iscoroutine(result):  # runs to its first wait right here
                task: asyncio.Future[Any] = asyncio.Task(result, loop=self._loop, eager_start=True)  # type: ignore[call-arg]
            else:
                task = asyncio.ensure_future(result)  # type: ignore[arg-type]
        except TypeError as wrong:  # neither a command nor an awaitable
            self._failed(cmd, wrong)
            return
        if task.done():
            self._finished(cmd, task)
            return
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._finished(cmd, t))
        self._maybe_busy()

    def _maybe_busy(self) -> None:
        """Stop reading while the server's limit of requests in flight is reached."""
        budget = self._budget
        if (
            budget is None
            or self._busy
            or len(self._tasks) < budget.limits.max_in_flight
            or self.transport is None
            or self.closed
        ):
            return
        if not self._held and not self._full:
            self.transport.pause_reading()
        self._busy = True

    def _finished(self, cmd: RemotingCommand, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if self._busy and self._budget is not None:
            if len(self._tasks) <= self._budget.limits.max_in_flight * 3 // 4:
                self._busy = False
                self._maybe_resume()
        if task.cancelled():  # the caller is told rather than left to its timeout
            if not cmd.is_oneway and not self.closed:
                remark = f"request code {cmd.code} was cancelled"
                self._reply(cmd, RemotingCommand.response(ResponseCode.SYSTEM_ERROR, remark))
            return
        exc = task.exception()
        if exc is not None:
            self._failed(cmd, exc)
            return
        response = task.result()
        if response is not None and not cmd.is_oneway:
            if isinstance(response, RemotingCommand):
                self._reply(cmd, response)
            elif type(response) is bytes:  # the answer's frame (a held pull's template)
                transport = self.transport
                if transport is not None and not self.closed and not transport.is_closing():
                    self._write_joined(transport, response)
            else:
                self._failed(cmd, TypeError(f"handler answered {type(response).__name__}"))

    def _failed(self, cmd: RemotingCommand, exc: BaseException) -> None:
        """Answer a request whose handler raised: a ValueError is bad input (one log line), any
        other exception an internal error (a traceback); both logs rate-limited."""
        if isinstance(exc, ValueError):
            code = exc.code if isinstance(exc, RequestError) else ResponseCode.SYSTEM_ERROR
            remark = str(exc) or type(exc).__name__
            _bad_input_log.log(
                logging.WARNING,
                "remoting: refused request code %s from %s: %s",
                cmd.code,
                self.peer,
                remark,
            )
        else:
            code = ResponseCode.SYSTEM_ERROR
            remark = f"{type(exc).__name__}: {exc}"
            _failure_log.log(
                logging.ERROR,
                "remoting: request code %s from %s failed",
                cmd.code,
                self.peer,
                exc_info=exc,
            )
        if not cmd.is_oneway:
            self._reply(cmd, RemotingCommand.response(code, remark))

    def _reply(self, request: RemotingCommand, response: RemotingCommand) -> None:
        self._answer(request.opaque, response, request.serialize_type)

    def _answer(self, opaque: int, response: RemotingCommand, serialize_type: int) -> None:
        """Send ``response`` for the request ``opaque``, in the request's serialize type; a
        response that cannot be encoded is answered with SYSTEM_ERROR instead."""
        response.opaque = opaque
        response.flag |= RESPONSE_FLAG
        response.serialize_type = serialize_type
        budget = self._budget
        released = False
        if self._room and budget is not None:  # the unsent bytes take its room's place
            budget.release(self, opaque)
            released = True
        try:
            self.send(response)
        except Exception as exc:  # TypeError, ValueError, struct.error from the encoder
            self._unencodable(opaque, response, exc)
        if (released or self._full) and budget is not None:
            budget.wake()

    def _unencodable(self, opaque: int, response: RemotingCommand, exc: Exception) -> None:
        _failure_log.log(
            logging.ERROR,
            "remoting: response code %s to %s cannot be encoded: %s",
            response.code,
            self.peer,
            exc,
        )
        error = RemotingCommand.response(
            ResponseCode.SYSTEM_ERROR, f"response cannot be encoded: {type(exc).__name__}: {exc}"
        )
        error.opaque = opaque
        self.send(error)

    # ---- sending ----------------------------------------------------------------------------

    def send(self, cmd: RemotingCommand) -> bool:
        """Write a command (a large body is not copied). False when the connection is closed
        and nothing was written; encoding errors (TypeError, ValueError, struct.error) raise."""
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return False
        if len(cmd.body) <= _JOIN_LIMIT:
            self._write_joined(transport, cmd.encode())
        else:
            head, body = cmd.encode_parts()
            self._write_parts(transport, head, body)
        return True

    def write_frames(self, data: bytes) -> bool:
        """Write whole encoded frames: answers completed outside this connection's reads
        (sends that waited for a slave, ``broker/messaging/_slave_waits.py``). False when the
        connection is closed and nothing was written. Loop thread."""
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return False
        self._write_joined(transport, data)
        return True

    def _write_joined(self, transport: asyncio.Transport, data: bytes) -> None:
        """Write a whole frame: held with the answers of the read being parsed, or, outside a
        read, with the others written in this turn of the loop (held pulls woken together,
        sends that waited for a slave): one write for them all, at the turn's end."""
        cork = self._cork
        if cork is None:
            loop = self._loop
            if loop is None:
                transport.write(data)
                return
            cork = self._cork = []
            loop.call_soon(self._flush_turn)
        cork.append(data)
        self._corked += len(data)
        if self._corked >= _CORK_LIMIT:  # let the transport see it (backpressure)
            self._flush(cork)

    def _flush_turn(self) -> None:
        """The loop's turn ended: write what was held outside a read."""
        cork = self._cork
        if cork is not None and not self.closed:
            self._cork = None
            if cork:
                self._flush(cork)

    def _write_parts(
        self, transport: asyncio.Transport, head: bytes, body: bytes | bytearray | memoryview
    ) -> None:
        """Write a frame with a large body, which is not copied: after what is held."""
        if self._cork:
            self._flush(self._cork)
        transport.write(head)
        transport.write(body)
        if self._budget is not None:
            self._count()

    def _flush(self, cork: list[bytes]) -> None:
        """Write the held responses (and empty the list: each goes out once)."""
        data = cork[0] if len(cork) == 1 else b"".join(cork)
        cork.clear()
        self._corked = 0
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)
            if self._budget is not None and (self._buffered or transport.get_write_buffer_size()):
                self._count()

    async def drained(self) -> None:
        """Wait until the peer has taken what was written (flow control for large responses)."""
        ok = self._write_ok
        if ok is not None and not ok.is_set():
            await ok.wait()

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response; RemotingError on close or timeout."""
        if self.closed:
            raise RemotingError(f"connection to {self.peer} closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        pending = self._pending
        if cmd.opaque in pending:  # the same command sent twice at once: give it a new id
            cmd.opaque = next_opaque()
        opaque = cmd.opaque
        pending[opaque] = fut
        timer = loop.call_later(timeout, _expire, fut, self.peer, cmd.code, timeout)
        try:
            if not self.send(cmd):
                raise RemotingError(f"connection to {self.peer} closed")
            return await fut
        finally:
            timer.cancel()
            if pending.get(opaque) is fut:
                del pending[opaque]

    def close(self) -> None:
        """Close after what is written has been sent."""
        if self.transport is not None and not self.closed:
            if self._cork:  # answers to the frames before the one that closes
                self._flush(self._cork)
            self.closed = True
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is not sent yet (before it is made: as soon as it is)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
            self._release()


def _expire(fut: asyncio.Future[RemotingCommand], peer: str, code: int, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(RemotingError(f"no response from {peer} to code {code} in {timeout} s"))
