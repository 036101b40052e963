"""Loopback helpers for remoting tests: an event loop on a thread of its own, a server on it
(127.0.0.1, port 0), and raw-socket frame helpers for feeding a server bytes by hand.

    with serve({10: handler}) as s:          # s.address, s.server, s.run(coro)
        with RemotingClient() as c:
            c.invoke(s.address, RemotingCommand.request(10))

Everything started here is stopped on exit; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest

from rocketstore.remoting import Handler, RemotingCommand, RemotingServer
from rocketstore.remoting._command import decode_frame

T = TypeVar("T")
WAIT = 60.0  # the longest any helper waits, seconds (generous: CI machines are busy)


def new_loop(kind: str = "asyncio") -> asyncio.AbstractEventLoop:
    """A new event loop: the standard one, or uvloop's (the caller skips when it is absent)."""
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run_on(kind: str, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run ``coro`` to its end on a new loop of ``kind`` ("asyncio" or "uvloop"), at most
    ``timeout`` seconds; the test is skipped (and ``coro`` closed) when uvloop is absent."""
    if kind == "uvloop":
        try:
            pytest.importorskip("uvloop")
        except BaseException:  # skipped: the coroutine never runs
            coro.close()
            raise
    with asyncio.Runner(loop_factory=lambda: new_loop(kind)) as runner:
        return runner.run(asyncio.wait_for(coro, timeout))


class LoopThread:
    """An event loop running on a daemon thread; ``run`` executes a coroutine there."""

    def __init__(self, kind: str = "asyncio") -> None:
        self.loop = new_loop(kind)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
        """Run ``coro`` on the loop thread and wait for its result (any thread but that one)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[[], T], timeout: float = WAIT) -> T:
        """Call ``fn`` on the loop thread and return its result."""

        async def call() -> T:
            return fn()

        return self.run(call(), timeout)

    def stop(self) -> None:
        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(drain(), 5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


class Served:
    """A started server and the loop it runs on."""

    def __init__(self, server: RemotingServer, loop: LoopThread) -> None:
        self.server = server
        self.loop = loop

    @property
    def address(self) -> str:
        return self.server.address

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
        return self.loop.run(coro, timeout)

    def call(self, fn: Callable[[], T], timeout: float = WAIT) -> T:
        return self.loop.call(fn, timeout)

    def connection_count(self) -> int:
        return self.call(lambda: len(self.server.connections))


@contextlib.contextmanager
def serve(
    handlers: dict[int, Handler], *, loop: str = "asyncio", **kwargs: Any
) -> Iterator[Served]:
    """A RemotingServer on 127.0.0.1 (ephemeral port) on its own loop thread; ``kwargs`` go to
    the server. Closed, and its loop stopped, on exit."""
    thread = LoopThread(loop)
    server = RemotingServer(handlers, "127.0.0.1", 0, **kwargs)
    try:
        thread.run(server.start())
        yield Served(server, thread)
    finally:
        with contextlib.suppress(Exception):
            thread.run(server.close(timeout=2.0))
        thread.stop()


# ---- raw sockets ----------------------------------------------------------------------------


def raw_connect(address: str, timeout: float = WAIT) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """A frame around an already encoded header (any bytes: tests send malformed ones)."""
    return struct.pack(">ii", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + (
        header + body
    )


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes; fewer only when the peer closes first."""
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def read_command(sock: socket.socket) -> RemotingCommand | None:
    """The next command from ``sock``; None when the peer closed the connection."""
    prefix = recv_exact(sock, 4)
    if len(prefix) < 4:
        return None
    (length,) = struct.unpack(">i", prefix)
    data = recv_exact(sock, length)
    if len(data) < length:
        return None
    return decode_frame(data)


def closed_by_peer(sock: socket.socket, timeout: float = WAIT) -> bool:
    """True when the peer closes ``sock`` within ``timeout`` (bytes before the close are
    skipped); False when it stays open that long."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


class RecordingTransport:
    """A transport that keeps every write (for a server connection fed by hand)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    closed = False
