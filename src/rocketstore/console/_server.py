"""The console: pages and a JSON API over one admin client, on an asyncio loop.

``ConsoleServer(admin, "127.0.0.1:8080")`` serves the pages under ``/`` and the API under
``/api/``; ``await start()`` / ``await close()`` on the loop that should run it (the CLI's
own, or a broker's). The admin client is blocking: every call runs in a worker thread
(asyncio.to_thread).

With ``login=True`` (ACL) each visitor signs in with an account of the brokers'
plain_acl.yml: its keys stay in a server-side session named by an HttpOnly, SameSite=Strict
cookie, and that session's requests are signed with them (its own AdminClient); the brokers
decide what the account may do, and their refusal is shown as it came.

Changes (POST) must be JSON with the ``X-Console`` header, which a page of another origin
cannot send without a CORS preflight that this server never grants; the Host header must name
this server (no DNS rebinding).
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..client._admin import AdminClient
from ..client._route import ClientError, TopicNotFoundError
from ..remoting import RemotingError, ResponseCode
from ..remoting._client import split_address
from ..remoting._signing import RequestSigner
from . import _broker_views as broker_views
from . import _lists as lists
from . import _views as views
from ._http import HttpError, HttpServer, Request, Response
from ._trace_view import message_trace

COOKIE = "rocketstore_console"
ACL_REFUSAL = "AclException"  # how a broker's ACL words a refusal (RocketMQ's and ours)
SESSION_IDLE_S = 8 * 3600
MAX_SESSIONS = 256
# one account's sessions: a new one beyond them ends that account's least recently used one,
# so no account's sign-ins end another's sessions
MAX_SESSIONS_PER_ACCOUNT = 8
ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}


@dataclass
class Session:
    access_key: str
    admin: AdminClient
    last_used: float = field(default_factory=time.monotonic)


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("assets", name).read_bytes()


class ConsoleServer:
    """The console on ``listen`` (``host:port``; port 0 picks a free one, see
    :attr:`address`). Loop thread only, but for the admin calls it hands to worker threads."""

    def __init__(
        self,
        admin: AdminClient,
        listen: str = "127.0.0.1:8080",
        *,
        login: bool = False,
        clock: Callable[[], float] = time.monotonic,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        host, port = split_address(listen)
        self.admin = admin
        self.login = login
        self.clock = clock
        self.http = HttpServer(self.handle, host, port, tls=tls)
        self.sessions: dict[str, Session] = {}
        self._routes: dict[tuple[str, str], Callable[[Request, AdminClient], Any]] = {
            ("GET", "/api/cluster"): lambda r, a: views.cluster(a),
            ("GET", "/api/throughput"): lambda r, a: views.throughput(a),
            ("GET", "/api/broker/config"): lambda r, a: broker_views.broker_config(
                a, _arg(r, "broker")
            ),
            ("GET", "/api/broker/runtime"): lambda r, a: broker_views.broker_runtime(
                a, _arg(r, "broker")
            ),
            ("GET", "/api/topics"): lambda r, a: lists.topic_list(a),
            ("GET", "/api/topic"): lambda r, a: views.topic(a, _arg(r, "topic")),
            ("POST", "/api/topic/create"): lambda r, a: views.create_topic(a, r.json()),
            ("POST", "/api/topic/delete"): lambda r, a: views.delete_topic(a, r.json()),
            ("POST", "/api/topic/perm"): lambda r, a: views.change_perm(a, r.json()),
            ("POST", "/api/topic/send"): lambda r, a: broker_views.send_test_message(a, r.json()),
            ("GET", "/api/producers"): lambda r, a: broker_views.producers(
                a, _arg(r, "topic"), _arg(r, "group")
            ),
            ("GET", "/api/groups"): lambda r, a: lists.group_list(a),
            ("GET", "/api/group"): lambda r, a: views.group(
                a, _arg(r, "group"), r.query.get("topic")
            ),
            ("POST", "/api/group/reset"): lambda r, a: views.reset_offset(a, r.json()),
            ("GET", "/api/messages/time"): lambda r, a: views.messages_by_time(
                a, _arg(r, "topic"), r.query.get("begin"), r.query.get("end")
            ),
            ("GET", "/api/messages/key"): lambda r, a: views.messages_by_key(
                a, _arg(r, "topic"), _arg(r, "key")
            ),
            ("GET", "/api/messages/id"): lambda r, a: views.message_by_id(
                a, _arg(r, "id"), r.query.get("topic")
            ),
            ("GET", "/api/trace"): lambda r, a: message_trace(
                a, _arg(r, "id"), r.query.get("traceTopic")
            ),
        }

    @property
    def address(self) -> str:
        return f"{self.http.host}:{self.http.port}"

    async def start(self) -> None:
        await self.http.start()

    async def close(self) -> None:
        await self.http.close()
        sessions, self.sessions = list(self.sessions.values()), {}
        for s in sessions:
            await asyncio.to_thread(s.admin.close)

    # ---- requests -------------------------------------------------------------------------

    def _check_host(self, request: Request) -> None:
        host = request.headers.get("host", "")
        name, _, port = host.rpartition(":")
        allowed = {self.http.host, "127.0.0.1", "localhost", "[::1]"}
        if port != str(self.http.port) or name not in allowed:
            raise HttpError(421, f"this console answers as {self.address}, not {host!r}")

    async def handle(self, request: Request) -> Response:
        self._check_host(request)
        path = request.path
        if not path.startswith("/api/"):
            if request.method not in ("GET", "HEAD"):
                raise HttpError(405, "pages are read with GET")
            asset = ASSETS.get(path)
            if asset is None:
                raise HttpError(404, f"no page {path}")
            return Response(200, _asset(asset[0]), asset[1])
        if request.method == "POST" and request.headers.get("x-console") != "1":
            raise HttpError(403, "changes need the X-Console: 1 header")
        if path == "/api/session":
            return self._session_doc(request)
        if (request.method, path) == ("POST", "/api/login"):
            return await self._sign_in(request)
        if (request.method, path) == ("POST", "/api/logout"):
            return await self._sign_out(request)
        fn = self._routes.get((request.method, path))
        if fn is None:
            if any(p == path for _, p in self._routes):
                raise HttpError(405, f"{request.method} is not served at {path}")
            raise HttpError(404, f"no API {path}")
        admin = self._admin_for(request)
        try:
            doc = await asyncio.to_thread(fn, request, admin)
        except TopicNotFoundError as exc:
            raise HttpError(404, exc.remark or str(exc)) from None
        except ValueError as exc:  # bad input (a name a broker would refuse included)
            raise HttpError(400, str(exc.remark if isinstance(exc, ClientError) else exc)) from None
        except ClientError as exc:
            if exc.code == ResponseCode.NO_PERMISSION or ACL_REFUSAL in (exc.remark or ""):
                raise HttpError(403, f"the broker refused: {exc.remark}") from None
            if exc.code == ResponseCode.QUERY_NOT_FOUND:
                raise HttpError(404, exc.remark or "not found") from None
            raise HttpError(502, f"the broker refused (code {exc.code}): {exc.remark}") from None
        except RemotingError as exc:
            raise HttpError(502, str(exc)) from None
        return Response.of_json(doc)

    # ---- sessions -------------------------------------------------------------------------

    def _session(self, request: Request) -> Session | None:
        token = request.cookie(COOKIE)
        s = self.sessions.get(token) if token else None
        if s is None:
            return None
        now = self.clock()
        if now - s.last_used > SESSION_IDLE_S:
            self.sessions.pop(token or "", None)
            s.admin.close()
            return None
        s.last_used = now
        return s

    def _admin_for(self, request: Request) -> AdminClient:
        if not self.login:
            return self.admin
        s = self._session(request)
        if s is None:
            raise HttpError(401, "sign in with an ACL account first")
        return s.admin

    def _session_doc(self, request: Request) -> Response:
        s = self._session(request) if self.login else None
        return Response.of_json(
            {
                "login": self.login,
                "user": s.access_key if s else None,
                "resend": views.RESEND_UNSUPPORTED,
            }
        )

    async def _sign_in(self, request: Request) -> Response:
        if not self.login:
            raise HttpError(400, "this console signs requests with its own keys: no sign-in")
        doc = request.json()
        ak, sk = doc.get("accessKey"), doc.get("secretKey")
        if not isinstance(ak, str) or not isinstance(sk, str) or not ak or not sk:
            raise HttpError(400, "give accessKey and secretKey")
        if len(ak) > 256 or len(sk) > 256:
            raise HttpError(400, "accessKey and secretKey are at most 256 characters")
        admin = self.admin.with_signer(RequestSigner(ak, sk))
        try:
            refusal = await asyncio.to_thread(_refusal, admin)
        except BaseException:
            admin.close()
            raise
        if refusal is not None:
            await asyncio.to_thread(admin.close)
            raise HttpError(401, f"the brokers refused this account: {refusal}")
        self._drop_idle()
        own = [t for t, s in self.sessions.items() if s.access_key == ak]
        if len(own) >= MAX_SESSIONS_PER_ACCOUNT:
            self._drop_oldest(own)
        elif len(self.sessions) >= MAX_SESSIONS:
            self._drop_oldest(self._most_signed_in())
        token = secrets.token_urlsafe(32)
        self.sessions[token] = Session(ak, admin, self.clock())
        response = Response.of_json({"user": ak})
        response.headers["Set-Cookie"] = (
            f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={SESSION_IDLE_S}"
        )
        return response

    def _drop_idle(self) -> None:
        now = self.clock()
        for token in [t for t, s in self.sessions.items() if now - s.last_used > SESSION_IDLE_S]:
            self.sessions.pop(token).admin.close()

    def _most_signed_in(self) -> list[str]:
        """The sessions of the account that holds the most (the table is full)."""
        by_account: dict[str, list[str]] = {}
        for token, s in self.sessions.items():
            by_account.setdefault(s.access_key, []).append(token)
        return max(by_account.values(), key=len)

    def _drop_oldest(self, tokens: list[str]) -> None:
        """End the least recently used session of ``tokens``."""
        token = min(tokens, key=lambda t: self.sessions[t].last_used)
        self.sessions.pop(token).admin.close()

    async def _sign_out(self, request: Request) -> Response:
        token = request.cookie(COOKIE)
        s = self.sessions.pop(token, None) if token else None
        if s is not None:
            await asyncio.to_thread(s.admin.close)
        response = Response.of_json({"user": None})
        response.headers["Set-Cookie"] = f"{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
        return response


def _acl_refused(exc: ClientError) -> bool:
    """Whether a broker's ACL refused: the plain ACL's AclException, or ACL 2.0's
    NO_PERMISSION."""
    return exc.code == ResponseCode.NO_PERMISSION or ACL_REFUSAL in (exc.remark or "")


def _refusal(admin: AdminClient) -> str | None:
    """What the first broker that answers says to the account's signed GET_BROKER_RUNTIME_INFO
    when its ACL refuses it (a wrong key or secret, an address not allowed); the name server's
    refusal of the signed cluster query likewise (its ACL is on in ``serve`` with ACL); None
    when a broker lets it in, or none answers (then the brokers judge each request later)."""
    try:
        brokers = admin.brokers()
    except ClientError as exc:
        if _acl_refused(exc):
            return exc.remark or str(exc)
        return None
    except (RemotingError, ValueError):
        return None
    for b in brokers:
        try:
            admin.runtime_info(b.address)
        except ClientError as exc:
            if _acl_refused(exc):
                return exc.remark or str(exc)
            return None
        except (RemotingError, ValueError):
            continue
        return None
    return None


def _arg(request: Request, name: str) -> str:
    value = request.query.get(name, "").strip()
    if not value:
        raise HttpError(400, f"give the {name} parameter")
    return value
