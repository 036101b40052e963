"""A small HTTP/1.1 server on asyncio: one request per connection (``Connection: close``),
the request line and headers bounded (``MAX_HEAD`` bytes), a body only with Content-Length
and bounded (``MAX_BODY`` bytes), a deadline for reading the request. Anything malformed gets
a 4xx JSON answer; an exception in a handler a 500 JSON answer; neither stops the server.

Memory: answers count against the server's budget (``max_buffered``, a ``ByteRoom``) from
before they are built until they are written: a request takes ``answer_room`` first (waiting
for it up to ``READ_TIMEOUT_S``, else 503), its answer keeps what it needs (more when it is
larger: taken, or 503), and a client that has not taken its answer ``WRITE_TIMEOUT_S`` after
it was written is disconnected. So clients that ask and never read hold at most the budget.

It runs on the loop that calls :meth:`HttpServer.start` (a broker's loop included), which is
why it is not the standard library's http.server: that one wants a thread of its own and
blocking handlers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..remoting._room import ByteRoom

log = logging.getLogger("rocketstore.console")

MAX_HEAD = 16 * 1024
MAX_BODY = 64 * 1024
READ_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64
WRITE_TIMEOUT_S = 30.0  # a client that does not take its answer in this time is cut
ANSWER_ROOM = 4 * 1024 * 1024  # what a request takes from the budget before its answer is built
MAX_BUFFERED = 64 * 1024 * 1024  # the answers being built or written, all connections


class HttpError(Exception):
    """An answer other than 200 with a JSON ``{"error": message}`` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes
    peer: str = ""

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            key, sep, value = part.strip().partition("=")
            if sep and key == name:
                return value
        return None

    def json(self) -> dict[str, Any]:
        """The body as a JSON object; HttpError 400 / 415 otherwise."""
        ctype = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise HttpError(415, "send the body as application/json")
        try:
            doc = json.loads(self.body.decode("utf-8") or "{}")
        except (UnicodeDecodeError, ValueError) as exc:
            raise HttpError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise HttpError(400, "the body is not a JSON object")
        return doc


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, doc: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(doc, separators=(",", ":")).encode("utf-8"))

    def encode(self) -> bytes:
        reason = (
            HTTPStatus(self.status).phrase if self.status in HTTPStatus._value2member_map_ else ""
        )
        lines = [
            f"HTTP/1.1 {self.status} {reason}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {self.headers.pop('Content-Length', len(self.body))}",
            "Connection: close",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
            "X-Frame-Options: DENY",
            "Content-Security-Policy: default-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'",
            "Referrer-Policy: no-referrer",
        ]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


def error_response(status: int, message: str) -> Response:
    return Response.of_json({"error": message}, status)


Handler = Callable[[Request], Awaitable[Response]]


async def read_request(reader: asyncio.StreamReader, peer: str) -> Request:
    """One request from ``reader``; HttpError for anything out of bounds or malformed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(431, f"request head over {MAX_HEAD} bytes") from None
    except asyncio.IncompleteReadError:
        raise HttpError(400, "the request ended before its head did") from None
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text[:-4].split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise HttpError(505, "only HTTP/1.x is served")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, f"malformed header line {line[:40]!r}")
        headers[name.lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise HttpError(411, "send a body with Content-Length, not Transfer-Encoding")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise HttpError(400, "Content-Length is not a number")
    length = int(length_text)
    if length > MAX_BODY:
        raise HttpError(413, f"body over {MAX_BODY} bytes")
    try:
        body = await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError:
        raise HttpError(400, "the body is shorter than its Content-Length") from None
    parts = urlsplit(target)
    if not parts.path.startswith("/"):
        raise HttpError(400, "the target is not a path")
    try:
        query = {k: v[-1] for k, v in parse_qs(parts.query, strict_parsing=False).items()}
    except ValueError:
        raise HttpError(400, "malformed query string") from None
    return Request(method.upper(), parts.path, query, headers, body, peer)


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0: any free port; see :attr:`port`), at most
    ``max_connections`` at a time, their answers within ``max_buffered`` bytes (see the module
    docstring). A connection beyond them takes the place of the one that has waited longest
    without sending its whole request (so slow or silent connections keep no visitor out);
    when every one has sent its request, it is answered 503 at once. Loop thread only."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        max_connections: int = MAX_CONNECTIONS,
        max_buffered: int = MAX_BUFFERED,
        answer_room: int = ANSWER_ROOM,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.handler = handler
        self.tls = tls  # HTTPS when given
        self.max_connections = max_connections
        self.host = host
        self.port = port
        self.room = ByteRoom(max_buffered)
        self.answer_room = answer_room
        self.write_timeout_s = write_timeout_s
        self.cut = 0  # clients disconnected for not taking their answers
        self.replaced = 0  # connections cut, before they sent their request, for a new one
        # the connections whose request is not read yet, the longest waiting first
        self._reading: dict[asyncio.Task[None], None] = {}
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve,
            self.host,
            self.port,
            limit=MAX_HEAD,
            ssl=self.tls,
            ssl_handshake_timeout=self.write_timeout_s if self.tls is not None else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        peer = writer.get_extra_info("peername")
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
        taken = 0  # bytes of the budget this connection's answer holds
        try:
            if len(self._tasks) > self.max_connections and not self._replace_reading():
                writer.write(error_response(503, "too many connections: try again").encode())
                await writer.drain()
                return
            self._reading[task] = None  # type: ignore[index]
            try:
                request = await asyncio.wait_for(read_request(reader, peer_text), READ_TIMEOUT_S)
            except HttpError as exc:
                response = error_response(exc.status, exc.message)
            except TimeoutError:
                response = error_response(408, "the request was not read in time")
            else:
                self._reading.pop(task, None)  # type: ignore[call-overload]
                if not await self.room.acquire(self.answer_room, READ_TIMEOUT_S):
                    response = error_response(503, "the console is busy: try again")
                else:
                    taken += self.answer_room
                    response = await self._answer(request)
                    if request.method == "HEAD":
                        response.headers["Content-Length"] = str(len(response.body))
                        response.body = b""
            need = len(response.body)  # (its head, a few hundred bytes, is not counted)
            if taken and need > taken:  # a large answer: the rest of its room first
                if await self.room.acquire(need - taken, READ_TIMEOUT_S):
                    taken = need
                else:
                    response = error_response(503, "the console is busy: try again")
                    need = len(response.body)
            if taken > need:
                self.room.release(taken - need)
                taken = need
            writer.write(response.encode())
            del response
            try:
                await asyncio.wait_for(writer.drain(), self.write_timeout_s)
            except TimeoutError:
                self.cut += 1
                writer.transport.abort()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # the server stays up whatever one connection does
            log.exception("console connection from %s failed", peer_text)
        finally:
            if taken:
                self.room.release(taken)
            self._tasks.discard(task)  # type: ignore[arg-type]
            self._reading.pop(task, None)  # type: ignore[call-overload]
            writer.close()

    def _replace_reading(self) -> bool:
        """Cut the connection that has waited longest without sending its whole request, to
        make a place for a new one; False when every connection has sent its request."""
        oldest = next(iter(self._reading), None)
        if oldest is None:
            return False
        del self._reading[oldest]
        oldest.cancel()  # its own finally closes it
        self.replaced += 1
        return True

    async def _answer(self, request: Request) -> Response:
        try:
            return await self.handler(request)
        except HttpError as exc:
            return error_response(exc.status, exc.message)
        except Exception as exc:
            log.exception("console request %s %s failed", request.method, request.path)
            return error_response(500, f"internal error: {type(exc).__name__}")
