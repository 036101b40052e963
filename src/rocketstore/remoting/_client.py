"""Remoting clients: an asyncio one (many requests in flight on one connection per address)
and a blocking one over plain sockets (the CLI, Spark executors, benchmarks).

The asyncio client's connections are Connections with a client's shortcuts: one timer for all
the requests in flight, requests sent encoded already (``invoke_encoded``), and a read holding
one response handed to its waiter without the general parser's steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import ssl
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any

from ._codes import ResponseCode
from ._command import (
    _INT32,
    DEFAULT_MAX_FRAME,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    FrameError,
    RemotingCommand,
    decode_frame,
    frame_length,
    next_opaque,
)
from ._connection import _JOIN_LIMIT, _READ_SIZE, Connection, Handler, RemotingError
from ._signing import signer_from_env
from ._tls import client_context

Signer = Callable[[RemotingCommand], None]
FROM_ENV: Any = object()  # sign with ROCKETSTORE_ACCESS_KEY / ROCKETSTORE_SECRET_KEY when set
_unpack_int32 = _INT32.unpack_from


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) → (host, port); ValueError when malformed."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


_EARLY = 0.001  # a timer may fire this much before its time (the loop's millisecond clock)


class ClientConnection(Connection):
    """A client's connection: the requests in flight share one timer, set for the earliest
    deadline among them and set again for the next when it fires, where each would have a
    timer of its own (made and cancelled: some 2 µs a request); ``invoke`` uses the loop the
    connection was made on. Loop thread only."""

    def __init__(self, handlers: dict[int, Handler], *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        super().__init__(handlers, max_frame=max_frame)
        # opaque → (deadline on the loop's clock, the response's future, code, timeout)
        self._deadlines: dict[int, tuple[float, asyncio.Future[RemotingCommand], int, float]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response; RemotingError on close or timeout."""
        loop = self._loop
        if self.closed or loop is None:
            raise RemotingError(f"connection to {self.peer} closed")
        if cmd.opaque in self._pending:  # the same command sent twice at once: a new id
            cmd.opaque = next_opaque()
        opaque = cmd.opaque
        fut = self._await_response(loop, opaque, cmd.code, timeout)
        try:
            if not self.send(cmd):
                raise RemotingError(f"connection to {self.peer} closed")
            return await fut
        finally:
            self._forget(opaque, fut)

    async def invoke_encoded(
        self,
        head: bytes,
        body: bytes | bytearray | memoryview,
        opaque: int,
        code: int,
        timeout: float,
    ) -> RemotingCommand:
        """``invoke`` for a request encoded already: ``head`` its length prefix and header (with
        ``opaque``, from ``next_opaque``), ``body`` the rest of the frame; RemotingError on
        close or timeout, ValueError when a request with ``opaque`` is in flight here."""
        loop = self._loop
        transport = self.transport
        if self.closed or loop is None or transport is None or transport.is_closing():
            raise RemotingError(f"connection to {self.peer} closed")
        if opaque in self._pending:
            raise ValueError(f"a request with opaque {opaque} is in flight already")
        fut = self._await_response(loop, opaque, code, timeout)
        try:
            if len(body) > _JOIN_LIMIT:  # a large body is not copied into a joined frame
                self._write_parts(transport, head, body)
            else:
                self._write_joined(transport, head + body)
            return await fut
        finally:
            self._forget(opaque, fut)

    def _await_response(
        self, loop: asyncio.AbstractEventLoop, opaque: int, code: int, timeout: float
    ) -> asyncio.Future[RemotingCommand]:
        """The future the response to ``opaque`` completes, failed by the shared timer when
        ``timeout`` passes first."""
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[opaque] = fut
        deadline = loop.time() + timeout
        self._deadlines[opaque] = (deadline, fut, code, timeout)
        if self._timer is None or deadline < self._timer_at:
            self._set_timer(loop, deadline)
        return fut

    def _forget(self, opaque: int, fut: asyncio.Future[RemotingCommand]) -> None:
        """The request ``opaque`` waited for by ``fut`` is over: no response, no deadline."""
        if self._pending.get(opaque) is fut:
            del self._pending[opaque]
        entry = self._deadlines.get(opaque)
        if entry is not None and entry[1] is fut:
            del self._deadlines[opaque]

    def _set_timer(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._expire_due)
        self._timer_at = when

    def _expire_due(self) -> None:
        """Fail the requests whose time is up; set the timer for the next deadline."""
        self._timer = None
        loop = self._loop
        if loop is None or self.closed:
            return
        now = loop.time() + _EARLY
        deadlines = self._deadlines
        later: float | None = None
        for opaque, (deadline, fut, code, timeout) in list(deadlines.items()):
            if deadline <= now:
                del deadlines[opaque]
                if not fut.done():
                    fut.set_exception(
                        RemotingError(f"no response from {self.peer} to code {code} in {timeout} s")
                    )
            elif later is None or deadline < later:
                later = deadline
        if later is not None:
            self._set_timer(loop, later)

    def _parse(self) -> None:
        """A read that holds one whole frame, a response, goes to its waiter here; anything
        else (several frames, part of one, a request, a frame that does not decode) to
        Connection's parser, which decides as it always does."""
        pos = self._rstart
        end = self._rend
        if end - pos > 4:
            buf = self._rbuf
            length: int = _unpack_int32(buf, pos)[0]
            if pos + 4 + length == end and length <= self.max_frame:
                try:
                    cmd: RemotingCommand | None = decode_frame(self._rview[pos + 4 : end])
                except FrameError:
                    cmd = None
                if cmd is not None and cmd.flag & RESPONSE_FLAG:
                    self._need = 0
                    self._rstart = self._rend = 0
                    if len(buf) > self._rsize:  # one large frame's buffer: let it go
                        self._rbuf = bytearray(self._rsize)
                        self._rview = memoryview(self._rbuf)
                    fut = self._pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                    if self._loop is not None:
                        self.last_active = self._loop.time()
                    return
        super()._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadlines.clear()
        super().connection_lost(exc)


class AsyncRemotingClient:
    """Connections by address on the running loop; requests from the servers (such as the
    broker's NOTIFY_CONSUMER_IDS_CHANGED) go to ``handlers``. Loop thread only."""

    def __init__(
        self,
        handlers: dict[int, Handler] | None = None,
        *,
        connect_timeout: float = 3.0,
        max_frame: int = DEFAULT_MAX_FRAME,
        signer: Signer | None = FROM_ENV,
    ) -> None:
        self.handlers = handlers if handlers is not None else {}
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        # signs each request before it is sent (ACL); see remoting._signing
        self.signer: Signer | None = signer_from_env() if signer is FROM_ENV else signer
        self._conns: dict[str, ClientConnection] = {}
        self._connecting: dict[str, asyncio.Future[ClientConnection]] = {}

    async def connection(self, address: str) -> ClientConnection:
        """The open connection to ``address``, made when there is none (one connect for
        callers that ask at the same time); RemotingError when it cannot be made."""
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[ClientConnection] = loop.create_future()
        self._connecting[address] = fut
        try:
            host, port = split_address(address)
            tls = client_context()
            try:
                _, made = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: ClientConnection(self.handlers, max_frame=self.max_frame),
                        host,
                        port,
                        ssl=tls,
                        server_hostname=host if tls is not None else None,
                    ),
                    self.connect_timeout,
                )
            except (OSError, TimeoutError) as exc:
                raise RemotingError(f"cannot connect to {address}: {exc}") from exc
            self._conns[address] = made
            fut.set_result(made)
            return made
        except BaseException as failure:
            if isinstance(failure, asyncio.CancelledError):  # the others were not cancelled
                fut.set_exception(RemotingError(f"connecting to {address} was cancelled"))
            else:
                fut.set_exception(failure)
            fut.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            self._connecting.pop(address, None)

    def connected(self, address: str) -> ClientConnection | None:
        """The open connection to ``address``, or None when there is none (nothing is
        connected here: ``connection`` does that)."""
        conn = self._conns.get(address)
        if conn is None or conn.closed:
            return None
        return conn

    async def invoke(
        self, address: str, cmd: RemotingCommand, timeout: float = 3.0
    ) -> RemotingCommand:
        """Send ``cmd`` and wait for its response; RemotingError on close or timeout."""
        conn = await self.connection(address)
        if self.signer is not None:
            self.signer(cmd)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, address: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` with the one-way flag; RemotingError when the connection is closed."""
        cmd.flag |= ONEWAY_FLAG
        conn = await self.connection(address)
        if self.signer is not None:
            self.signer(cmd)
        if not conn.send(cmd):
            raise RemotingError(f"connection to {address} closed")

    def close(self) -> None:
        """Close every connection; their pending calls fail with RemotingError."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


class RemotingClient:
    """A blocking client: one socket per address, one request at a time per client (a lock
    serialises callers). Any thread. RemotingError when a call fails; the socket of a failed
    call is closed and the next call reconnects, as does a call on a socket the server has
    closed since the last one (checked before sending)."""

    def __init__(
        self,
        *,
        connect_timeout: float = 3.0,
        timeout: float = 3.0,
        max_frame: int = DEFAULT_MAX_FRAME,
        signer: Signer | None = FROM_ENV,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.max_frame = max_frame
        # signs each request before it is sent (ACL); see remoting._signing
        self.signer: Signer | None = signer_from_env() if signer is FROM_ENV else signer
        self._links: dict[str, _Link] = {}
        self._lock = threading.Lock()

    def _link(self, address: str) -> _Link:
        link = self._links.get(address)
        if link is not None and not link.alive():
            self._drop(address)
            link = None
        if link is None:
            host, port = split_address(address)
            tls = client_context()
            try:
                sock = socket.create_connection((host, port), timeout=self.connect_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if tls is not None:
                    sock = tls.wrap_socket(sock, server_hostname=host)
            except OSError as exc:
                raise RemotingError(f"cannot connect to {address}: {exc}") from exc
            link = self._links[address] = _Link(sock)
        return link

    def invoke(
        self, address: str, cmd: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        """Send ``cmd`` and return its response; RemotingError when the call fails or no
        response arrives within ``timeout`` seconds (the client's ``timeout`` when None)."""
        if self.signer is not None:
            self.signer(cmd)
        with self._lock:
            link = self._link(address)
            try:
                link.set_timeout(timeout if timeout is not None else self.timeout)
                link.send(cmd)
                while True:
                    response = link.read(self.max_frame)
                    if response.is_response:
                        if response.opaque == cmd.opaque:
                            return response
                        continue  # a late response to an earlier call: skip it
                    if not response.is_oneway:  # a request from the server: not served here
                        link.send(_not_supported(response))
            except (OSError, FrameError) as exc:
                self._drop(address)
                raise RemotingError(f"call to {address} (code {cmd.code}) failed: {exc}") from exc

    def invoke_oneway(self, address: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` with the one-way flag; no response is read."""
        cmd.flag |= ONEWAY_FLAG
        if self.signer is not None:
            self.signer(cmd)
        with self._lock:
            link = self._link(address)
            try:
                link.set_timeout(self.timeout)
                link.send(cmd)
            except OSError as exc:
                self._drop(address)
                raise RemotingError(f"call to {address} (code {cmd.code}) failed: {exc}") from exc

    def _drop(self, address: str) -> None:
        link = self._links.pop(address, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        with self._lock:
            for address in list(self._links):
                self._drop(address)

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _not_supported(request: RemotingCommand) -> RemotingCommand:
    answer = RemotingCommand.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {request.code} not supported"
    )
    answer.opaque = request.opaque
    answer.serialize_type = request.serialize_type
    return answer


class _Link:
    """One blocking socket and its read buffer. Where the system has them, timeouts are the
    socket's own (SO_RCVTIMEO / SO_SNDTIMEO) on a blocking socket, so a small call costs a
    poll, a send and a recv; elsewhere Python's socket timeout (a poll before each call)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._timeout: float | None = None
        # a TLS socket keeps Python's timeouts: its records are read whole or not at all
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._kernel_timeouts = (
            hasattr(socket, "SO_RCVTIMEO") and sys.platform == "linux" and not self._tls
        )
        if self._kernel_timeouts:
            sock.settimeout(None)
        self._buf = bytearray(_READ_SIZE)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    def alive(self) -> bool:
        """False when the peer has closed the socket (or reset it) since the last call."""
        try:
            if not self._poll.poll(0):
                return True
            if self._end > self._start:
                return True  # a frame (or part of one) is already here
            if self._tls:  # the raw socket under the TLS layer: a record, or the end
                return bool(socket.socket.recv(self.sock, 1, socket.MSG_PEEK))
            return bool(self.sock.recv(1, socket.MSG_PEEK))
        except (OSError, ValueError):
            return False

    def set_timeout(self, timeout: float) -> None:
        if timeout == self._timeout:
            return
        if self._kernel_timeouts:
            whole = int(timeout)
            micros = max(int((timeout - whole) * 1e6), 0 if whole else 1000)
            value = struct.pack("@ll", whole, micros)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        else:
            self.sock.settimeout(timeout)
        self._timeout = timeout

    def send(self, cmd: RemotingCommand) -> None:
        try:
            if len(cmd.body) <= _JOIN_LIMIT:
                self.sock.sendall(cmd.encode())
            else:
                head, body = cmd.encode_parts()
                self.sock.sendall(head)
                self.sock.sendall(body)
        except BlockingIOError:  # SO_SNDTIMEO ran out
            raise TimeoutError(f"send timed out after {self._timeout} s") from None

    def _fill(self, need: int) -> None:
        """Receive until ``need`` bytes past ``_start`` are in the buffer."""
        if self._start + need > len(self._buf):  # move what is here to a buffer that fits
            pending = self._end - self._start
            buf = bytearray(max(_READ_SIZE, need))
            buf[:pending] = self._view[self._start : self._end]
            self._buf, self._view = buf, memoryview(buf)
            self._start, self._end = 0, pending
        view = self._view
        recv_into = self.sock.recv_into
        while self._end - self._start < need:
            try:
                n = recv_into(view[self._end :])
            except BlockingIOError:  # SO_RCVTIMEO ran out
                raise TimeoutError(f"no response in {self._timeout} s") from None
            if n == 0:
                raise OSError("connection closed by the peer")
            self._end += n

    def read(self, max_frame: int) -> RemotingCommand:
        self._fill(4)
        length = frame_length(self._view[self._start : self._start + 4], max_frame)
        self._start += 4
        self._fill(length)
        start = self._start
        cmd = decode_frame(self._view[start : start + length])
        self._start = start + length
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._buf) > _READ_SIZE:  # the buffer of one large frame: let it go
                self._buf = bytearray(_READ_SIZE)
                self._view = memoryview(self._buf)
        return cmd

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
