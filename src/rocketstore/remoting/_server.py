"""An asyncio remoting server: accepts connections and serves requests by code.

Loop thread only (``start`` / ``close`` are coroutines on the server's loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ._command import DEFAULT_MAX_FRAME
from ._connection import Connection, FramePath, Handler
from ._limits import (
    DEFAULT_LIMITS,
    BufferBudget,
    LogLimiter,
    ServerLimits,
    ServerStatistics,
)

log = logging.getLogger(__name__)
_refusals_log = LogLimiter(log)


class _Refused(asyncio.Protocol):
    """A connection over the server's limit: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class RemotingServer:
    """Serves ``handlers`` (request code → handler) on ``host:port`` (port 0: any free port).

    ``idle_timeout``: a connection that has sent nothing for this many seconds is closed (as
    RocketMQ's server does after 120 s; clients heart-beat every 30 s and reconnect on their
    own); None keeps idle connections open. Server connections stop reading from a peer that
    does not read its answers (see Connection's ``backpressure``). ``limits``: how many
    connections, and how many bytes of unsent answers and large frames they may hold (see
    ``ServerLimits``); ``statistics()`` tells where they stand."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        name: str = "remoting",
        idle_timeout: float | None = 120.0,
        limits: ServerLimits = DEFAULT_LIMITS,
    ) -> None:
        self.handlers = handlers
        self.host = host
        self.port = port
        self.max_frame = max_frame
        self.name = name
        self.idle_timeout = idle_timeout
        self.limits = limits
        self.connections: set[Connection] = set()
        self.budget = BufferBudget(limits, self.connections, name)
        self.refused_connections = 0
        self.closed_stalled = 0
        self.close_listeners: list[Callable[[Connection], None]] = []
        # serves a request frame before it is decoded (see Connection's ``frame_path``); set
        # before ``start``: a connection takes the one set when it is made
        self.frame_path: FramePath | None = None
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def register(self, code: int, handler: Handler) -> None:
        self.handlers[int(code)] = handler

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, self.host, self.port, reuse_address=True, backlog=1024
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self._sweeper = asyncio.create_task(self._sweep())
        log.info("%s: listening on %s", self.name, self.address)

    def _new_connection(self) -> asyncio.BaseProtocol:
        if len(self.connections) >= self.limits.max_connections:
            self.refused_connections += 1
            _refusals_log.log(
                logging.WARNING,
                "%s: refusing a connection: %s connections open (max_connections)",
                self.name,
                f"{len(self.connections):,}",
            )
            return _Refused()
        conn = Connection(
            self.handlers,
            max_frame=self.max_frame,
            on_close=self._closed,
            backpressure=True,
            budget=self.budget,
            frame_path=self.frame_path,
        )
        self.connections.add(conn)
        return conn

    def statistics(self) -> ServerStatistics:
        """Where the connections stand, counted now (loop thread)."""
        buffered = self.budget.recount()
        unsent = read_buffers = 0
        for conn in self.connections:
            read_buffers += conn.read_buffer_size
            transport = conn.transport
            if transport is not None and not conn.closed:
                unsent += transport.get_write_buffer_size()
        return ServerStatistics(
            connections=len(self.connections),
            buffered_bytes=buffered,
            unsent_bytes=unsent,
            read_buffer_bytes=read_buffers,
            refused_connections=self.refused_connections,
            closed_over_budget=self.budget.closed_over_budget,
            closed_stalled=self.closed_stalled,
        )

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for listener in self.close_listeners:
            try:
                listener(conn)
            except Exception:
                log.exception("%s: connection close listener failed", self.name)

    async def _sweep(self) -> None:
        """Close the connections idle for ``idle_timeout`` seconds, abort those that have not
        taken their answers for ``write_stall_timeout`` seconds, shrink the read buffers of
        those that have sent nothing since the last sweep, and recount the budget."""
        loop = asyncio.get_running_loop()
        idle_timeout = self.idle_timeout
        stall_timeout = self.limits.write_stall_timeout
        shortest = stall_timeout if idle_timeout is None else min(idle_timeout, stall_timeout)
        period = min(max(shortest / 4, 0.01), 10.0)
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(self.connections):
                if conn.closed:
                    continue
                if (not conn.reading and conn.held_since < now - stall_timeout) or (
                    0 < conn.stalled_since < now - stall_timeout
                ):  # answers unread: above the high-water mark, or none taken below it
                    self.closed_stalled += 1
                    _refusals_log.log(
                        logging.WARNING,
                        "%s: closing %s: its answers unread for %g s",
                        self.name,
                        conn.peer,
                        stall_timeout,
                    )
                    conn.abort()
                elif idle_timeout is not None and conn.last_active < now - idle_timeout:
                    log.info("%s: closing %s, idle for %g s", self.name, conn.peer, idle_timeout)
                    conn.close()
                elif conn.last_active < now - period:
                    conn.maybe_shrink()
            self.budget.recount()
            self.budget.wake()
            self.budget.maybe_trim()

    async def close(self, timeout: float = 5.0) -> None:
        """Stop accepting and close every connection: what is written goes out first, for up
        to ``timeout`` seconds; connections still open then are aborted."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.005)
        for conn in list(self.connections):
            log.warning("%s: aborting %s at close", self.name, conn.peer)
            conn.abort()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), timeout)
            except TimeoutError:
                log.warning("%s: server still open at close", self.name)
            self._server = None
