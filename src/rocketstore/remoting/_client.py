"""Remoting clients: an asyncio one (many requests in flight on one connection per address)
and a blocking one over plain sockets (the CLI, Spark executors, benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
from typing import Any

from ._command import (
    DEFAULT_MAX_FRAME,
    ONEWAY_FLAG,
    FrameError,
    RemotingCommand,
    decode_frame,
    frame_length,
)
from ._connection import _JOIN_LIMIT, _READ_SIZE, Connection, Handler, RemotingError


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) → (host, port); ValueError when malformed."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


class AsyncRemotingClient:
    """Connections by address on the running loop; requests from the servers (such as the
    broker's NOTIFY_CONSUMER_IDS_CHANGED) go to ``handlers``. Loop thread only."""

    def __init__(
        self,
        handlers: dict[int, Handler] | None = None,
        *,
        connect_timeout: float = 3.0,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        self.handlers = handlers if handlers is not None else {}
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}

    async def connection(self, address: str) -> Connection:
        """The open connection to ``address``, made when there is none (one connect for
        callers that ask at the same time); RemotingError when it cannot be made."""
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Connection] = loop.create_future()
        self._connecting[address] = fut
        try:
            host, port = split_address(address)
            try:
                _, made = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: Connection(self.handlers, max_frame=self.max_frame), host, port
                    ),
                    self.connect_timeout,
                )
            except (OSError, TimeoutError) as exc:
                raise RemotingError(f"cannot connect to {address}: {exc}") from exc
            self._conns[address] = made
            fut.set_result(made)
            return made
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            self._connecting.pop(address, None)

    async def invoke(
        self, address: str, cmd: RemotingCommand, timeout: float = 3.0
    ) -> RemotingCommand:
        """Send ``cmd`` and wait for its response; RemotingError on close or timeout."""
        conn = await self.connection(address)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, address: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` with the one-way flag; RemotingError when the connection is closed."""
        cmd.flag |= ONEWAY_FLAG
        conn = await self.connection(address)
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
    ) -> None:
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.max_frame = max_frame
        self._links: dict[str, _Link] = {}
        self._lock = threading.Lock()

    def _link(self, address: str) -> _Link:
        link = self._links.get(address)
        if link is not None and not link.alive():
            self._drop(address)
            link = None
        if link is None:
            host, port = split_address(address)
            try:
                sock = socket.create_connection((host, port), timeout=self.connect_timeout)
            except OSError as exc:
                raise RemotingError(f"cannot connect to {address}: {exc}") from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = self._links[address] = _Link(sock)
        return link

    def invoke(
        self, address: str, cmd: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        """Send ``cmd`` and return its response; RemotingError when the call fails or no
        response arrives within ``timeout`` seconds (the client's ``timeout`` when None)."""
        with self._lock:
            link = self._link(address)
            try:
                link.sock.settimeout(timeout if timeout is not None else self.timeout)
                link.send(cmd)
                while True:
                    response = link.read(self.max_frame)
                    if response.is_response and response.opaque == cmd.opaque:
                        return response
                    # a request from the server (or a late response) on this socket: skip it
            except (OSError, FrameError) as exc:
                self._drop(address)
                raise RemotingError(f"call to {address} (code {cmd.code}) failed: {exc}") from exc

    def invoke_oneway(self, address: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` with the one-way flag; no response is read."""
        cmd.flag |= ONEWAY_FLAG
        with self._lock:
            link = self._link(address)
            try:
                link.sock.settimeout(self.timeout)
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


class _Link:
    """One blocking socket and its read buffer (a small response costs one recv)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb", buffering=_READ_SIZE)
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    def alive(self) -> bool:
        """False when the peer has closed the socket (or reset it) since the last call."""
        try:
            if not self._poll.poll(0):
                return True
            return bool(self.sock.recv(1, socket.MSG_PEEK))
        except (OSError, ValueError):
            return False

    def send(self, cmd: RemotingCommand) -> None:
        if len(cmd.body) <= _JOIN_LIMIT:
            self.sock.sendall(cmd.encode())
        else:
            head, body = cmd.encode_parts()
            self.sock.sendall(head)
            self.sock.sendall(body)

    def read(self, max_frame: int) -> RemotingCommand:
        prefix = self.reader.read(4)
        if len(prefix) < 4:
            raise OSError("connection closed by the peer")
        length = frame_length(prefix, max_frame)
        frame = self.reader.read(length)
        if len(frame) < length:
            raise OSError("connection closed by the peer")
        return decode_frame(frame)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.reader.close()
        with contextlib.suppress(OSError):
            self.sock.close()
