"""One remoting connection on an asyncio loop, the same for both ends.

A connection cuts the byte stream into frames, answers requests through the handler of their
code and matches responses to the requests it sent by opaque. A server's connections and a
client's differ only in their handlers: a broker's client connection, for example, serves the
broker's NOTIFY_CONSUMER_IDS_CHANGED.

Bad input: a frame longer than the maximum or shorter than a header closes the connection; a
header that is not JSON closes it; a header of the wrong shape is answered with SYSTEM_ERROR;
an unknown code with REQUEST_CODE_NOT_SUPPORTED; a handler that raises with SYSTEM_ERROR. None
of it reaches any other connection.

Everything here runs on the loop thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ._codes import ResponseCode
from ._command import (
    DEFAULT_MAX_FRAME,
    FrameError,
    HeaderError,
    RemotingCommand,
    decode_frame,
    frame_length,
)

log = logging.getLogger(__name__)

HandlerResult = RemotingCommand | Awaitable[RemotingCommand | None] | None
Handler = Callable[[RemotingCommand, "Connection"], HandlerResult]
"""Serves one request code: returns the response (its opaque is set here), an awaitable of it,
or None for no response. Called on the loop thread; must not block."""


class RemotingError(Exception):
    """A remote call that failed: the connection closed, it timed out, or the peer is unreachable."""


class Connection(asyncio.Protocol):
    def __init__(
        self,
        handlers: dict[int, Handler],
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.handlers = handlers
        self.max_frame = max_frame
        self._on_close = on_close
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.attributes: dict[str, Any] = {}  # what the server learns (client id, groups)
        self._buf = bytearray()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._write_ok: asyncio.Event | None = None
        self.closed = False

    # ---- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
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

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        try:
            while end - pos >= 4:
                length = frame_length(buf[pos : pos + 4], self.max_frame)
                if end - pos - 4 < length:
                    break
                frame = buf[pos + 4 : pos + 4 + length]
                pos += 4 + length
                self._frame(frame)
                if self.closed:
                    return
        except FrameError as exc:
            log.warning("remoting: closing %s: %s", self.peer or "connection", exc)
            self.close()
            return
        finally:
            if pos:
                del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
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

    def resume_writing(self) -> None:
        if self._write_ok is not None:
            self._write_ok.set()

    # ---- frames -----------------------------------------------------------------------------

    def _frame(self, frame: bytearray) -> None:
        try:
            cmd = decode_frame(frame)
        except HeaderError as exc:
            if exc.opaque is not None:
                self._answer(
                    exc.opaque, RemotingCommand.response(ResponseCode.SYSTEM_ERROR, str(exc))
                )
                return
            raise
        if cmd.is_response:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            return
        handler = self.handlers.get(cmd.code)
        if handler is None:
            if not cmd.is_oneway:
                remark = f"request type {cmd.code} not supported"
                self._answer(
                    cmd.opaque,
                    RemotingCommand.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark),
                )
            return
        try:
            result = handler(cmd, self)
        except Exception as exc:
            self._failed(cmd, exc)
            return
        if result is None or isinstance(result, RemotingCommand):
            if result is not None and not cmd.is_oneway:
                self._answer(cmd.opaque, result)
            return
        task = asyncio.ensure_future(result)
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._finished, cmd))

    def _finished(self, cmd: RemotingCommand, task: asyncio.Future[RemotingCommand | None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._failed(cmd, exc)
            return
        response = task.result()
        if response is not None and not cmd.is_oneway:
            self._answer(cmd.opaque, response)

    def _failed(self, cmd: RemotingCommand, exc: BaseException) -> None:
        log.error("remoting: request code %s from %s failed", cmd.code, self.peer, exc_info=exc)
        if not cmd.is_oneway:
            remark = f"{type(exc).__name__}: {exc}"
            self._answer(cmd.opaque, RemotingCommand.response(ResponseCode.SYSTEM_ERROR, remark))

    def _answer(self, opaque: int, response: RemotingCommand) -> None:
        response.opaque = opaque
        response.flag |= 1
        self.send(response)

    # ---- sending ----------------------------------------------------------------------------

    def send(self, cmd: RemotingCommand) -> None:
        """Write a command (the body is not copied). Dropped when the connection is closed."""
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return
        head, body = cmd.encode_parts()
        if body:
            transport.writelines((head, body))
        else:
            transport.write(head)

    async def drained(self) -> None:
        """Wait until the peer has taken what was written (flow control for large responses)."""
        ok = self._write_ok
        if ok is not None and not ok.is_set():
            await ok.wait()

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response; RemotingError on close or timeout."""
        if self.closed:
            raise RemotingError(f"connection to {self.peer} closed")
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        self.send(cmd)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise RemotingError(
                f"no response from {self.peer} to code {cmd.code} in {timeout:.3f} s"
            ) from None
        finally:
            self._pending.pop(cmd.opaque, None)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.closed = True
            self.transport.abort()
