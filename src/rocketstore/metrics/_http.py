"""MetricsHttpServer: a small asyncio HTTP/1.1 server for Prometheus and process supervisors.

GET (or HEAD) of:

- ``/metrics``: the Prometheus text exposition (``render()``);
- ``/healthz``: 200 while the event loop answers (this server runs on it);
- ``/readyz``: 200 when ``not_ready()`` is empty, else 503 with one reason a line.

Any other path is 404, any other method on these paths 405. A request head larger than
``max_request`` bytes is answered 431, a malformed one 400; a client that does not send its
head within ``timeout_s`` is disconnected. One request a connection (``Connection: close``);
at most ``max_connections`` at once (more are closed at once). Loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

MAX_REQUEST = 8 * 1024
TIMEOUT_S = 5.0
MAX_CONNECTIONS = 32
TEXT = "text/plain; charset=utf-8"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PATHS = ("/metrics", "/healthz", "/readyz")

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


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
    ) -> None:
        self.render = render
        self.not_ready = not_ready
        self.host = host
        self.port = port
        self.max_request = max_request
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.scrapes = 0
        self._server: asyncio.Server | None = None
        self._open = 0

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=self.max_request
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
        if self._open >= self.max_connections:
            writer.close()
            return
        self._open += 1
        try:
            status, headers, body, head_only = await self._answer(reader)
            if status:
                self._write(writer, status, headers, b"" if head_only else body, len(body))
                await asyncio.wait_for(writer.drain(), self.timeout_s)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open -= 1
            writer.close()

    async def _answer(
        self, reader: asyncio.StreamReader
    ) -> tuple[int, dict[str, str], bytes, bool]:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout_s)
        except asyncio.LimitOverrunError:
            return 431, {}, b"request too large\n", False
        except ValueError:  # the limit was reached inside a chunk
            return 431, {}, b"request too large\n", False
        except (TimeoutError, asyncio.IncompleteReadError):
            return 0, {}, b"", False
        if len(head) > self.max_request:
            return 431, {}, b"request too large\n", False
        try:
            method, target, version = head.split(b"\r\n", 1)[0].decode("ascii").split(" ")
        except (UnicodeDecodeError, ValueError):
            return 400, {}, b"bad request line\n", False
        if not version.startswith("HTTP/1."):
            return 400, {}, b"HTTP/1.x only\n", False
        path = target.split("?", 1)[0]
        if path not in PATHS:
            return 404, {}, b"not found: try /metrics, /healthz or /readyz\n", False
        if method not in ("GET", "HEAD"):
            return 405, {"Allow": "GET, HEAD"}, b"method not allowed\n", False
        head_only = method == "HEAD"
        if path == "/healthz":
            return 200, {}, b"ok\n", head_only
        if path == "/readyz":
            reasons = list(self.not_ready())
            if reasons:
                return 503, {}, "".join(r + "\n" for r in reasons).encode(), head_only
            return 200, {}, b"ready\n", head_only
        try:
            body = self.render()
        except Exception:
            log.exception("metrics: collecting failed")
            return 500, {}, b"collecting the metrics failed (see the log)\n", head_only
        self.scrapes += 1
        return 200, {"Content-Type": METRICS_CONTENT_TYPE}, body, head_only

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
