"""An asyncio remoting server: accepts connections and serves requests by code.

Loop thread only (``start`` / ``close`` are coroutines on the server's loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
from collections.abc import Callable

from ._allowance import PROCESS_CONNECTIONS
from ._command import DEFAULT_MAX_FRAME
from ._connection import Connection, FramePath, Handler
from ._limits import (
    DEFAULT_LIMITS,
    BufferBudget,
    LogLimiter,
    ServerLimits,
    ServerStatistics,
)
from ._tls import TlsServerConfig, speaks_tls

log = logging.getLogger(__name__)
_refusals_log = LogLimiter(log)


class _Refused(asyncio.Protocol):
    """A connection over the server's limit: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class RemotingServer:
    """Serves ``handlers`` (request code → handler) on ``host:port`` (port 0: any free port).

    ``idle_timeout``: a connection that has sent nothing for this many seconds is closed (as
    RocketMQ's server does after 120 s; clients heart-beat every 30 s and reconnect on their
    own); None keeps idle connections open. Server connections stop reading from a peer that
    does not read its answers (see Connection's ``backpressure``). ``limits``: how many
    connections, and how many bytes of unsent answers and large frames they may hold (see
    ``ServerLimits``); ``statistics()`` tells where they stand.

    A connection is *established* once it has sent a whole frame, or, when ``authenticated``
    (its handlers check an ACL), once the ACL has let one of its requests in
    (``Connection.establish``). One that is not within ``limits.handshake_timeout`` seconds is
    closed; when every place is taken (``max_connections``, or the process's allowance of
    connections, ``_allowance``) a new connection takes the place of the one that has waited
    longest without being established, so connections that say nothing, or say nothing an
    ACL takes, cannot keep clients out.

    ``tls``: RocketMQ's TLS modes (see ``_tls``): enforcing serves TLS only; permissive looks
    at the first byte each connection sends (within ``limits.handshake_timeout``) and serves
    TLS or plain frames on the one port."""

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
        authenticated: bool = False,
        tls: TlsServerConfig | None = None,
    ) -> None:
        self.handlers = handlers
        self.tls = tls if tls is not None and tls.enabled else None
        self.host = host
        self.port = port
        self.max_frame = max_frame
        self.name = name
        self.idle_timeout = idle_timeout
        self.limits = limits
        self.authenticated = authenticated
        self.connections: set[Connection] = set()
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop it serves on (at start)
        # the connections not established yet, the longest waiting first
        self._unestablished: dict[Connection, None] = {}
        self.budget = BufferBudget(limits, self.connections, name)
        self.refused_connections = 0
        self.closed_unestablished = 0  # closed, or replaced, before they were established
        self.closed_stalled = 0
        self.close_listeners: list[Callable[[Connection], None]] = []
        # serves a request frame before it is decoded (see Connection's ``frame_path``); set
        # before ``start``: a connection takes the one set when it is made
        self.frame_path: FramePath | None = None
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        # permissive TLS: the listening socket this server accepts on itself, and the accepted
        # sockets whose first byte has not come yet (socket → loop time accepted)
        self._listener: socket.socket | None = None
        self._sniffing: dict[socket.socket, float] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def register(self, code: int, handler: Handler) -> None:
        self.handlers[int(code)] = handler

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # asyncio accepts up to the backlog at once, each an open file until the loop turns
        # (a connection refused too): a burst stays a small part of the process's allowance
        backlog = max(16, min(1024, PROCESS_CONNECTIONS.allowance() // 8))
        context = self.tls.context() if self.tls is not None else None
        if context is not None and self.tls is not None and self.tls.mode == "permissive":
            sock = await self._listen_permissive(loop, backlog, context)
        else:
            self._server = await loop.create_server(
                self._new_connection,
                self.host,
                self.port,
                reuse_address=True,
                backlog=backlog,
                ssl=context,
                ssl_handshake_timeout=self.limits.handshake_timeout if context else None,
            )
            sock = self._server.sockets[0]  # type: ignore[assignment]
        self.port = sock.getsockname()[1]
        self.loop = loop
        PROCESS_CONNECTIONS.add(self)
        self._sweeper = asyncio.create_task(self._sweep())
        log.info("%s: listening on %s", self.name, self.address)

    async def _listen_permissive(
        self, loop: asyncio.AbstractEventLoop, backlog: int, context: ssl.SSLContext
    ) -> socket.socket:
        """Listen on a socket of this server's own, accepting in ``_accept``."""
        infos = await loop.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _name, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._listener = sock
        loop.add_reader(sock.fileno(), self._accept, loop, sock, context)
        return sock

    def _accept(
        self, loop: asyncio.AbstractEventLoop, listener: socket.socket, context: ssl.SSLContext
    ) -> None:
        """Take the waiting connections; each is served once its first byte says which way."""
        for _ in range(64):  # a burst at a time, then the loop turns
            try:
                conn, _peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of files: the next turn tries again
                _refusals_log.log(logging.WARNING, "%s: accept failed: %s", self.name, exc)
                return
            conn.setblocking(False)
            if len(self._sniffing) >= self.limits.max_connections:  # silent ones make room
                oldest = next(iter(self._sniffing))
                self._drop_silent_sniffing(loop, self._sniffing[oldest] + 1e-9)
            self._sniffing[conn] = loop.time()
            loop.add_reader(conn.fileno(), self._sniff, loop, conn, context)

    def _sniff(
        self, loop: asyncio.AbstractEventLoop, conn: socket.socket, context: ssl.SSLContext
    ) -> None:
        try:
            first = conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        loop.remove_reader(conn.fileno())
        self._sniffing.pop(conn, None)
        if not first:  # closed before it said anything
            conn.close()
            return
        tls = speaks_tls(first[0])
        task = loop.create_task(
            loop.connect_accepted_socket(  # type: ignore[arg-type]
                self._new_connection,
                conn,
                ssl=context if tls else None,
                ssl_handshake_timeout=self.limits.handshake_timeout if tls else None,
            )
        )
        task.add_done_callback(functools.partial(self._served, conn))

    def _served(self, conn: socket.socket, task: asyncio.Task[object]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        log.info("%s: a connection failed at its start: %s", self.name, task.exception())
        conn.close()

    def _drop_silent_sniffing(self, loop: asyncio.AbstractEventLoop, older_than: float) -> None:
        """Close the accepted sockets that sent nothing within the handshake timeout."""
        for conn, since in list(self._sniffing.items()):
            if since < older_than:
                del self._sniffing[conn]
                with contextlib.suppress(OSError, ValueError):
                    loop.remove_reader(conn.fileno())
                conn.close()
                self.closed_unestablished += 1

    def _new_connection(self) -> asyncio.BaseProtocol:
        loop = asyncio.get_running_loop()
        if len(self.connections) >= self.limits.max_connections:
            placed = self.replace_unestablished()
        elif PROCESS_CONNECTIONS.full():  # another server's waiting connection will do
            placed = PROCESS_CONNECTIONS.replace_unestablished(loop)
        else:
            placed = True
        if not placed:
            self.refused_connections += 1
            _refusals_log.log(
                logging.WARNING,
                "%s: refusing a connection: %s connections open (max_connections), "
                "%s in the process's servers (%s allowed), every one established",
                self.name,
                f"{len(self.connections):,}",
                f"{PROCESS_CONNECTIONS.in_use():,}",
                f"{PROCESS_CONNECTIONS.allowance():,}",
            )
            return _Refused()
        conn = Connection(
            self.handlers,
            max_frame=self.max_frame,
            on_close=self._closed,
            backpressure=True,
            budget=self.budget,
            on_established=self._established,
            establish_on_frame=not self.authenticated,
            frame_path=self.frame_path,
        )
        conn.connected_at = loop.time()
        self.connections.add(conn)
        self._unestablished[conn] = None
        return conn

    def _established(self, conn: Connection) -> None:
        self._unestablished.pop(conn, None)

    def waiting_since(self) -> float | None:
        """Loop time the connection waiting longest without being established was accepted
        (None: every connection is established). Loop thread."""
        for conn in self._unestablished:
            return conn.connected_at
        return None

    def replace_unestablished(self) -> bool:
        """Close the connection that has waited longest without being established, to make a
        place for a new one; False when every connection is established. Loop thread."""
        conn = next(iter(self._unestablished), None)
        if conn is None:
            return False
        self._drop_unestablished(conn, "replaced by a new connection")
        return True

    def _drop_unestablished(self, conn: Connection, why: str) -> None:
        self._unestablished.pop(conn, None)
        self.connections.discard(conn)  # its place is free now; close listeners run later
        self.closed_unestablished += 1
        _refusals_log.log(
            logging.WARNING,
            "%s: closing %s: %s (no request %s within %g s)",
            self.name,
            conn.peer or "a connection",
            why,
            "its ACL took" if self.authenticated else "sent",
            self.limits.handshake_timeout,
        )
        conn.abort()

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
            closed_unestablished=self.closed_unestablished,
            closed_over_budget=self.budget.closed_over_budget,
            closed_stalled=self.closed_stalled,
        )

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._unestablished.pop(conn, None)
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
        handshake_timeout = self.limits.handshake_timeout
        shortest = min(stall_timeout, handshake_timeout)
        if idle_timeout is not None:
            shortest = min(shortest, idle_timeout)
        period = min(max(shortest / 4, 0.01), 10.0)
        counted_at: float | None = None  # the previous sweep's count
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            if self._sniffing:
                self._drop_silent_sniffing(loop, now - handshake_timeout)
            for conn in list(self._unestablished):  # the longest waiting first
                if conn.connected_at >= now - handshake_timeout:
                    break
                self._drop_unestablished(conn, "not established")
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
                elif idle_timeout is not None and conn.last_frame < now - idle_timeout:
                    log.info("%s: closing %s, idle for %g s", self.name, conn.peer, idle_timeout)
                    conn.close()
                elif conn.last_active < now - period:
                    conn.maybe_shrink()
            self.budget.recount(counted_at)
            counted_at = now
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
        PROCESS_CONNECTIONS.remove(self)
        if self._server is not None:
            self._server.close()
        if self._listener is not None:
            running = asyncio.get_running_loop()
            running.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
            for sniffing in list(self._sniffing):
                with contextlib.suppress(OSError, ValueError):
                    running.remove_reader(sniffing.fileno())
                sniffing.close()
            self._sniffing.clear()
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
