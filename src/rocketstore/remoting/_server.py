"""An asyncio remoting server: accepts connections and serves requests by code.

Loop thread only (``start`` / ``close`` are coroutines on the server's loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ._command import DEFAULT_MAX_FRAME
from ._connection import Connection, Handler

log = logging.getLogger(__name__)


class RemotingServer:
    """Serves ``handlers`` (request code → handler) on ``host:port`` (port 0: any free port).

    ``idle_timeout``: a connection that has sent nothing for this many seconds is closed (as
    RocketMQ's server does after 120 s; clients heart-beat every 30 s and reconnect on their
    own); None keeps idle connections open. Server connections stop reading from a peer that
    does not read its answers (see Connection's ``backpressure``)."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        name: str = "remoting",
        idle_timeout: float | None = 120.0,
    ) -> None:
        self.handlers = handlers
        self.host = host
        self.port = port
        self.max_frame = max_frame
        self.name = name
        self.idle_timeout = idle_timeout
        self.connections: set[Connection] = set()
        self.close_listeners: list[Callable[[Connection], None]] = []
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
        if self.idle_timeout is not None:
            self._sweeper = asyncio.create_task(self._sweep(self.idle_timeout))
        log.info("%s: listening on %s", self.name, self.address)

    def _new_connection(self) -> Connection:
        conn = Connection(
            self.handlers, max_frame=self.max_frame, on_close=self._closed, backpressure=True
        )
        self.connections.add(conn)
        return conn

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for listener in self.close_listeners:
            try:
                listener(conn)
            except Exception:
                log.exception("%s: connection close listener failed", self.name)

    async def _sweep(self, idle_timeout: float) -> None:
        """Close the connections that have been idle for ``idle_timeout`` seconds."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(idle_timeout / 4, 0.01), 10.0))
            deadline = loop.time() - idle_timeout
            for conn in list(self.connections):
                if conn.last_active < deadline and not conn.closed:
                    log.info("%s: closing %s, idle for %g s", self.name, conn.peer, idle_timeout)
                    conn.close()

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
