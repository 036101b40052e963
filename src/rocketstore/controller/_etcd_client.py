"""A small client of etcd's v3 API through its JSON gateway (etcd 3.4 and later): the calls
the etcd backend needs, over HTTP/1.1 on asyncio, no library beyond the standard one.

Calls (POST, JSON in and out; keys and values base64, 64-bit numbers as JSON strings)::

    /v3/kv/range        {"key", "range_end"}                    → {"header", "kvs": [KV], "count"}
    /v3/kv/txn          {"compare", "success", "failure"}       → {"header", "succeeded",
                                                                    "responses"}
    /v3/lease/grant     {"TTL"}                                 → {"ID", "TTL"}
    /v3/lease/keepalive {"ID"}   (a stream of one answer)       → {"result": {"ID", "TTL"}}
    /v3/lease/revoke    {"ID"}                                  → {"header"}
    /v3/auth/authenticate {"name", "password"}                  → {"header", "token"}

    KV  {"key", "value", "create_revision", "mod_revision", "version", "lease"}

A field that is zero, false or empty is left out of an answer (protobuf's JSON form).

Endpoints are tried in turn, starting with the one that answered last: an endpoint that refuses
the connection, does not answer within ``timeout`` seconds, or answers that it is unavailable
(no leader, no quorum: gRPC codes UNAVAILABLE / DEADLINE_EXCEEDED) is passed over; when none
answers the call raises ``BackendUnavailableError``. Any other error answer raises
``EtcdRequestError`` with etcd's message (such as "requested lease not found").

One connection per call (``Connection: close``): calls are few (a lease renewal every few
seconds, a read or a transaction per controller request) and a dead member costs nothing to
forget.

Security (``EtcdSecurity``):

- **TLS**: an ``https://`` endpoint is reached over TLS, its certificate verified against the
  CA file given (else the system's CAs) and its host name checked; a client certificate and key
  are presented when given (etcd's ``--client-cert-auth``).
- **Authentication** (etcd's auth, ``etcdctl auth enable``): with a user, the client asks
  ``/v3/auth/authenticate`` for a token before its first call and sends it in the
  ``Authorization`` header of every call. A token etcd refuses as invalid (expired: etcd's
  ``--auth-token-ttl``, or a member restarted) is dropped, a new one asked for, and the call
  sent once more. Wrong credentials raise ``EtcdAuthError`` with etcd's reason; so does a
  call etcd refuses for want of permission on the key.

Loop thread.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._errors import BackendError, BackendUnavailableError, ControllerConfigError

log = logging.getLogger(__name__)

MAX_RESPONSE = 64 * 1024 * 1024
_RETRY_GRPC_CODES = frozenset({4, 14})  # DEADLINE_EXCEEDED, UNAVAILABLE
PERMISSION_DENIED = 7
UNAUTHENTICATED = 16
INVALID_TOKEN = "invalid auth token"
AUTHENTICATE = "/v3/auth/authenticate"


class EtcdRequestError(BackendError):
    """etcd answered a call with an error other than being unavailable."""

    def __init__(self, message: str, grpc_code: int | None, reason: str = "") -> None:
        super().__init__(message)
        self.grpc_code = grpc_code
        self.reason = reason or message  # etcd's own words


class EtcdAuthError(EtcdRequestError):
    """etcd refused who the client is: wrong user or password, no credentials where etcd's
    auth is on, or no permission on the keys asked for."""


@dataclass(frozen=True, slots=True)
class EtcdSecurity:
    """How the controller proves itself to etcd and checks etcd: a user and password (etcd's
    auth API), and for ``https://`` endpoints a CA file, a client certificate and its key."""

    user: str = ""
    password: str = field(default="", repr=False)
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of ``https://`` endpoints; ControllerConfigError when a file cannot
        be used."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file or None)
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file or None)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ControllerConfigError(f"etcd TLS files: {exc}") from None
        return context


def b64(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that covers every key starting with ``prefix``."""
    head = bytearray(prefix)
    while head:
        if head[-1] < 0xFF:
            head[-1] += 1
            return bytes(head)
        head.pop()
    return b"\x00"


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> KeyValue:
        return cls(
            unb64(doc.get("key")),
            unb64(doc.get("value")),
            int(doc.get("create_revision", 0)),
            int(doc.get("mod_revision", 0)),
            int(doc.get("lease", 0)),
        )


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    tls: bool

    def __str__(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"


def parse_endpoint(endpoint: str) -> Endpoint:
    """``http://host:port``, ``https://host:port`` or ``host:port`` (http) → the endpoint;
    ControllerConfigError otherwise."""
    text = endpoint.strip()
    tls = text.startswith("https://")
    text = text.removeprefix("https://").removeprefix("http://").rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ControllerConfigError(
            f"etcd endpoint {endpoint!r} is not http://HOST:PORT or https://HOST:PORT"
        )
    return Endpoint(host.strip("[]"), int(port), tls)


class EtcdClient:
    """Calls to an etcd cluster through any of ``endpoints``."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = 2.0,
        security: EtcdSecurity | None = None,
    ) -> None:
        if not endpoints:
            raise ControllerConfigError("the etcd backend needs at least one etcd endpoint")
        self.endpoints = [parse_endpoint(e) for e in endpoints]
        self.timeout = timeout
        self.security = security or EtcdSecurity()
        if (self.security.ca_file or self.security.cert_file) and not any(
            e.tls for e in self.endpoints
        ):
            raise ControllerConfigError(
                "etcd TLS files given but no https:// endpoint: the connection would not be "
                "encrypted"
            )
        self._ssl = self.security.ssl_context() if any(e.tls for e in self.endpoints) else None
        if self.security.user and not all(e.tls for e in self.endpoints):
            log.warning(
                "etcd user %r over http://: its password and tokens cross the network "
                "unencrypted (give https:// endpoints)",
                self.security.user,
            )
        self._preferred = 0
        self._token: str | None = None
        self._token_lock = asyncio.Lock()
        self.authentications = 0  # tokens asked for (the first, and each after a refusal)

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the first endpoint that answers; its JSON answer. With
        a user, the token is sent along (asked for first; asked for again, and the call sent
        once more, when etcd refuses it as invalid)."""
        if not self.security.user:
            return await self._call(path, body, None)
        token = self._token or await self._authenticate(None)
        try:
            return await self._call(path, body, token)
        except EtcdRequestError as exc:
            if not _token_refused(exc):
                raise
        return await self._call(path, body, await self._authenticate(token))

    async def _authenticate(self, refused: str | None) -> str:
        """A token for the user (a new one when ``refused`` is the one held). EtcdAuthError
        when etcd refuses the user or password."""
        async with self._token_lock:
            if self._token is not None and self._token != refused:
                return self._token  # another call got a new one meanwhile
            self._token = None
            body = {"name": self.security.user, "password": self.security.password}
            try:
                doc = await self._call(AUTHENTICATE, body, None)
            except EtcdRequestError as exc:
                raise EtcdAuthError(
                    f"etcd refused user {self.security.user!r}: {exc.reason}", exc.grpc_code
                ) from None
            token = doc.get("token")
            if not isinstance(token, str) or not token:
                raise EtcdAuthError(
                    f"etcd gave user {self.security.user!r} no token (is auth enabled?)", None
                )
            self._token = token
            self.authentications += 1
            return token

    async def _call(self, path: str, body: dict[str, Any], token: str | None) -> dict[str, Any]:
        payload = json.dumps(body).encode("utf-8")
        failures: list[str] = []
        count = len(self.endpoints)
        for step in range(count):
            index = (self._preferred + step) % count
            endpoint = self.endpoints[index]
            try:
                status, data = await asyncio.wait_for(
                    self._post(endpoint, path, payload, token), self.timeout
                )
            except ssl.SSLCertVerificationError as exc:
                failures.append(f"{endpoint}: TLS: {exc.verify_message or exc}")
                continue
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                failures.append(f"{endpoint}: {type(exc).__name__}: {exc}")
                continue
            doc = _json(data)
            if status == 200:
                self._preferred = index
                return doc
            code = doc.get("code") if isinstance(doc.get("code"), int) else None
            message = str(doc.get("error") or doc.get("message") or f"HTTP {status}")
            if code in _RETRY_GRPC_CODES or status >= 502:
                failures.append(f"{endpoint}: {message}")
                continue
            if code in (PERMISSION_DENIED, UNAUTHENTICATED) or "user name is empty" in message:
                who = f"user {self.security.user!r}" if self.security.user else "no credentials"
                raise EtcdAuthError(f"etcd {path}: {message} ({who})", code, message)
            raise EtcdRequestError(f"etcd {path}: {message}", code, message)
        raise BackendUnavailableError(f"etcd {path}: no endpoint answered ({'; '.join(failures)})")

    async def _post(
        self, endpoint: Endpoint, path: str, payload: bytes, token: str | None
    ) -> tuple[int, bytes]:
        host, port = endpoint.host, endpoint.port
        if endpoint.tls:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=self._ssl, server_hostname=host
            )
        else:
            reader, writer = await asyncio.open_connection(host, port)
        try:
            auth = f"Authorization: {token}\r\n" if token else ""
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Content-Type: application/json\r\nConnection: close\r\n{auth}"
                f"Content-Length: {len(payload)}\r\n\r\n"
            ).encode("ascii")
            writer.write(head + payload)
            await writer.drain()
            return await _read_response(reader)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    # ---- the calls ----------------------------------------------------------------------------

    async def range(self, key: bytes, range_end: bytes | None = None) -> list[KeyValue]:
        body: dict[str, Any] = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        doc = await self.call("/v3/kv/range", body)
        return [KeyValue.from_doc(kv) for kv in doc.get("kvs", [])]

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> tuple[bool, int, list[dict[str, Any]]]:
        """(succeeded, the store's revision after it, the responses of the branch taken)."""
        body = {"compare": compare, "success": success, "failure": failure or []}
        doc = await self.call("/v3/kv/txn", body)
        revision = int(doc.get("header", {}).get("revision", 0))
        return bool(doc.get("succeeded", False)), revision, list(doc.get("responses", []))

    async def grant(self, ttl_s: int) -> int:
        doc = await self.call("/v3/lease/grant", {"TTL": str(ttl_s)})
        if doc.get("error"):
            raise EtcdRequestError(f"etcd lease grant: {doc['error']}", None)
        return int(doc["ID"])

    async def keepalive(self, lease_id: int) -> int:
        """The lease's TTL after renewing it; 0 when the lease is gone."""
        doc = await self.call("/v3/lease/keepalive", {"ID": str(lease_id)})
        result = doc.get("result", doc)
        return int(result.get("TTL", 0))

    async def revoke(self, lease_id: int) -> None:
        with contextlib.suppress(EtcdRequestError):  # gone already
            await self.call("/v3/lease/revoke", {"ID": str(lease_id)})


def _token_refused(exc: EtcdRequestError) -> bool:
    """Whether etcd refused the token itself (expired, or unknown to the member), not the user."""
    return exc.grpc_code == UNAUTHENTICATED and INVALID_TOKEN in exc.reason


def _json(data: bytes) -> dict[str, Any]:
    """The first JSON object of an answer (a stream's answers are one a line)."""
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return {}
    try:
        doc, _end = json.JSONDecoder().raw_decode(text)
    except ValueError as exc:
        raise ValueError(f"an answer that is not JSON: {text[:200]!r}") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"an answer that is not a JSON object: {text[:200]!r}")
    return doc


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readline()
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {status_line[:100]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _sep, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = await reader.readline()
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            if len(body) + size > MAX_RESPONSE:
                raise ValueError("an answer larger than 64 MiB")
            body += await reader.readexactly(size)
            await reader.readexactly(2)
            if body.rstrip().endswith(b"}"):  # a stream's first answer is all we want
                with contextlib.suppress(ValueError):
                    _json(bytes(body))
                    return status, bytes(body)
        return status, bytes(body)
    length = headers.get("content-length")
    if length is not None:
        if int(length) > MAX_RESPONSE:
            raise ValueError("an answer larger than 64 MiB")
        return status, await reader.readexactly(int(length))
    return status, await reader.read(MAX_RESPONSE)
