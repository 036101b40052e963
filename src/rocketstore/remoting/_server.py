"""An asyncio remoting server: accepts connections and serves requests by code.

Loop thread only (``start`` / ``close`` are coroutines on the server's loop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ._command import DEFAULT_MAX_FRAME
from ._connection import Connection, Handler

log = logging.getLogger(__name__)


class RemotingServer:
    """Serves ``handlers`` (request code → handler) on ``host:port`` (port 0: any free port)."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        name: str = "remoting",
    ) -> None:
        self.handlers = handlers
        self.host = host
        self.port = port
        self.max_frame = max_frame
        self.name = name
        self.connections: set[Connection] = set()
        self.close_listeners: list[Callable[[Connection], None]] = []
        self._server: asyncio.Server | None = None

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
        log.info("%s: listening on %s", self.name, self.address)

    def _new_connection(self) -> Connection:
        conn = Connection(self.handlers, max_frame=self.max_frame, on_close=self._closed)
        self.connections.add(conn)
        return conn

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for listener in self.close_listeners:
            try:
                listener(conn)
            except Exception:
                log.exception("%s: connection close listener failed", self.name)

    async def close(self) -> None:
        """Stop accepting and close every connection."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except TimeoutError:
                log.warning("%s: connections still open at close", self.name)
            self._server = None
