"""Remoting clients: an asyncio one (many requests in flight on one connection per address)
and a blocking one over plain sockets (the CLI, Spark executors, benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any

from ._command import (
    DEFAULT_MAX_FRAME,
    FrameError,
    RemotingCommand,
    decode_frame,
    frame_length,
)
from ._connection import Connection, Handler, RemotingError


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
        conn = await self.connection(address)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, address: str, cmd: RemotingCommand) -> None:
        cmd.flag |= 2
        conn = await self.connection(address)
        conn.send(cmd)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


class RemotingClient:
    """A blocking client: one socket per address, one request at a time per client (a lock
    serialises callers). Any thread. RemotingError when a call fails; the socket of a failed
    call is closed and the next call reconnects."""

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
        self._socks: dict[str, socket.socket] = {}
        self._lock = threading.Lock()

    def _socket(self, address: str) -> socket.socket:
        sock = self._socks.get(address)
        if sock is None:
            host, port = split_address(address)
            try:
                sock = socket.create_connection((host, port), timeout=self.connect_timeout)
            except OSError as exc:
                raise RemotingError(f"cannot connect to {address}: {exc}") from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks[address] = sock
        return sock

    def invoke(
        self, address: str, cmd: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        with self._lock:
            sock = self._socket(address)
            try:
                sock.settimeout(timeout if timeout is not None else self.timeout)
                head, body = cmd.encode_parts()
                sock.sendall(head + bytes(body) if body else head)
                while True:
                    response = self._read(sock)
                    if response.is_response and response.opaque == cmd.opaque:
                        return response
                    # a request from the server (or a late response) on this socket: skip it
            except (OSError, FrameError) as exc:
                self._drop(address)
                raise RemotingError(f"call to {address} (code {cmd.code}) failed: {exc}") from exc

    def invoke_oneway(self, address: str, cmd: RemotingCommand) -> None:
        cmd.flag |= 2
        with self._lock:
            sock = self._socket(address)
            try:
                sock.settimeout(self.timeout)
                sock.sendall(cmd.encode())
            except OSError as exc:
                self._drop(address)
                raise RemotingError(f"call to {address} (code {cmd.code}) failed: {exc}") from exc

    def _read(self, sock: socket.socket) -> RemotingCommand:
        length = frame_length(_recv_exact(sock, 4), self.max_frame)
        return decode_frame(_recv_exact(sock, length))

    def _drop(self, address: str) -> None:
        sock = self._socks.pop(address, None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        with self._lock:
            for address in list(self._socks):
                self._drop(address)

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise OSError("connection closed by the peer")
        got += k
    return buf
