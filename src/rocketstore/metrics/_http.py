"""MetricsHttpServer: a small asyncio HTTP/1.1 server for Prometheus and process supervisors.

GET (or HEAD) of:

- ``/metrics``: the Prometheus text exposition (``render()``);
- ``/healthz``: 200 while the event loop answers (this server runs on it);
- ``/readyz``: 200 when ``not_ready()`` is empty, else 503 with one reason a line.

Any other path is 404, any other method on these paths 405. A request head larger than
``max_request`` bytes is answered 431, a malformed one 400. One request a connection
(``Connection: close``). ``auth`` decides who may read /metrics (``_auth``: 401 / 403 for the
others); the health paths are open. Loop thread.

Connections, so that a supervisor's health probe is answered whatever other clients do:

- a client that has not sent its whole request head ``timeout_s`` seconds after it connected
  is disconnected (a half-open connection or a slowloris holds a slot that long at most);
- ``max_connections`` requests are answered at once, and ``PROBE_SLOTS`` more connections are
  kept for health probes: a request for ``/healthz`` or ``/readyz`` is answered even when
  every other slot is busy; any other request that finds ``max_connections`` answers under way
  gets 503;
- when all of them are taken, a new connection closes the one that has waited longest for its
  request head (a probe sends its head at once; a half-open connection never does); only when
  every connection has sent its head is the new one closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Sequence

from ..remoting._limits import LogLimiter
from ._auth import OPEN, MetricsAuth

log = logging.getLogger(__name__)

MAX_REQUEST = 8 * 1024
TIMEOUT_S = 5.0
MAX_CONNECTIONS = 32
PROBE_SLOTS = 4  # connections beyond max_connections, answered for the health paths only
HEALTH_PATHS = ("/healthz", "/readyz")
TEXT = "text/plain; charset=utf-8"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PATHS = ("/metrics", "/healthz", "/readyz")

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_refusals_log = LogLimiter(log)


class MetricsHttpServer:
    def __init__(
        self,
        render: Callable[[], bytes],
        not_ready: Callable[[], Sequence[str]],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_request: int = MAX_REQUEST,
        timeout_s: float = TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        auth: MetricsAuth = OPEN,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.render = render
        self.tls = tls  # HTTPS when given
        self.not_ready = not_ready
        self.host = host
        self.port = port
        self.max_request = max_request
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.auth = auth
        self.scrapes = 0
        self.evicted = 0  # connections closed, still without a request head, for a newer one
        self.refused = 0  # connections closed at once: every slot answering
        self.busy = 0  # requests answered 503: max_connections answers under way
        self.unauthorized = 0  # requests for /metrics refused 401 or 403
        self._server: asyncio.Server | None = None
        self._open = 0
        self._answering = 0  # requests being answered, the health paths' not counted
        # connections still reading their request head, oldest first
        self._heads: dict[asyncio.StreamWriter, None] = {}

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve,
            self.host,
            self.port,
            limit=self.max_request,
            ssl=self.tls,
            ssl_handshake_timeout=self.timeout_s if self.tls is not None else None,
        )
        if self.port == 0:
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), self.timeout_s)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self.max_connections + PROBE_SLOTS and not self._evict_one():
            self.refused += 1
            writer.close()
            return
        self._open += 1
        self._heads[writer] = None
        counted = False
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout_s)
            except (asyncio.LimitOverrunError, ValueError):  # (ValueError: inside a chunk)
                head = b""
            finally:
                self._heads.pop(writer, None)
            path, status, headers, body, head_only = self._request(head, writer)
            if path not in HEALTH_PATHS:
                if self._answering >= self.max_connections:
                    self.busy += 1
                    status, headers, body = 503, {"Retry-After": "1"}, b"too many requests\n"
                else:
                    self._answering += 1
                    counted = True
                    if status == 200 and path == "/metrics":
                        status, headers, body = self._metrics()
            self._write(writer, status, headers, b"" if head_only else body, len(body))
            await asyncio.wait_for(writer.drain(), self.timeout_s)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass  # no head in time, or the client went: nothing to answer
        finally:
            self._open -= 1
            if counted:
                self._answering -= 1
            writer.close()

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for its request head; False when
        every connection has sent its head."""
        for writer in self._heads:
            del self._heads[writer]
            self.evicted += 1
            _refusals_log.log(
                logging.WARNING,
                "metrics: every connection taken; closing one without a request head for a "
                "new one (max %d, and %d for health probes)",
                self.max_connections,
                PROBE_SLOTS,
            )
            writer.transport.abort()
            return True
        return False

    def _request(
        self, head: bytes, writer: asyncio.StreamWriter
    ) -> tuple[str, int, dict[str, str], bytes, bool]:
        """(path, status, headers, body, HEAD?) of the answer to ``head`` (b"": too large);
        the body of a /metrics answer that may be served is rendered by the caller."""
        if not head or len(head) > self.max_request:
            return "", 431, {}, b"request too large\n", False
        lines = head.split(b"\r\n")
        try:
            method, target, version = lines[0].decode("ascii").split(" ")
        except (UnicodeDecodeError, ValueError):
            return "", 400, {}, b"bad request line\n", False
        if not version.startswith("HTTP/1."):
            return "", 400, {}, b"HTTP/1.x only\n", False
        path = target.split("?", 1)[0]
        if path not in PATHS:
            return path, 404, {}, b"not found: try /metrics, /healthz or /readyz\n", False
        if method not in ("GET", "HEAD"):
            return path, 405, {"Allow": "GET, HEAD"}, b"method not allowed\n", False
        head_only = method == "HEAD"
        if path == "/healthz":
            return path, 200, {}, b"ok\n", head_only
        if path == "/readyz":
            reasons = list(self.not_ready())
            if reasons:
                return path, 503, {}, "".join(r + "\n" for r in reasons).encode(), head_only
            return path, 200, {}, b"ready\n", head_only
        if self.auth is not OPEN:
            peer = writer.get_extra_info("peername")
            host = peer[0] if isinstance(peer, tuple) and peer else ""
            decision = self.auth.check(_header(lines, b"authorization"), host)
            if decision.status:
                self.unauthorized += 1
                return (
                    path,
                    decision.status,
                    dict(decision.headers),
                    decision.reason.encode(),
                    (head_only),
                )
        return path, 200, {}, b"", head_only

    def _metrics(self) -> tuple[int, dict[str, str], bytes]:
        try:
            body = self.render()
        except Exception:
            log.exception("metrics: collecting failed")
            return 500, {}, b"collecting the metrics failed (see the log)\n"
        self.scrapes += 1
        return 200, {"Content-Type": METRICS_CONTENT_TYPE}, body

    @staticmethod
    def _write(
        writer: asyncio.StreamWriter,
        status: int,
        headers: dict[str, str],
        body: bytes,
        length: int,
    ) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS[status]}"]
        headers = {"Content-Type": TEXT, **headers}
        headers["Content-Length"] = str(length)
        headers["Connection"] = "close"
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body)


def _header(lines: list[bytes], name: bytes) -> str | None:
    """The value of header ``name`` (lower case) in a request head's lines, or None."""
    for line in lines[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return None
