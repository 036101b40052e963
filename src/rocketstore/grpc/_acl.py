"""ACL for the gRPC front end: RocketMQ 5.x clients sign every request, and each request is
checked against the broker's accounts (rocketstore.acl), the same ones the remoting port uses.

A client with credentials sends, with each call::

    x-mq-date-time: 20240101T120000Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(secret key, value of x-mq-date-time)>

The broker recomputes the signature with the account's secret key, and takes the date-time
only within ``DATE_WINDOW_S`` (15 minutes) of its clock: a signature cannot be replayed later.
RocketMQ's clients write their local time with a ``Z`` suffix, so the date-time is compared
with the broker's clock both in UTC and in the broker's own time zone; a client in another
time zone must run in UTC (or the broker's zone) to be let in.

Then the request's topics and groups are checked as on the remoting port (a group's
permission is its retry topic's)::

    SendMessage, EndTransaction, RecallMessage              the topic: PUB
    QueryRoute                                              the topic: PUB or SUB
    ReceiveMessage, PullMessage, AckMessage, ChangeInvisibleDuration,
    ForwardMessageToDeadLetterQueue, UpdateOffset, GetOffset, QueryAssignment
                                                            the topic and the group: SUB
    QueryOffset                                             the topic: SUB
    Heartbeat, NotifyClientTermination                      the group (if any): SUB
    Telemetry                                               a known account

A bad or missing signature is UNAUTHORIZED, a permission the account lacks FORBIDDEN; both go
in the response's status, as every refusal of this front end does.

:class:`AclServicer` wraps the MessagingService: it checks, then hands the call on. Loop
thread; the helpers are pure.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..acl import ANY, PUB, SUB, AccessDeniedError, retry_topic
from ..acl._addresses import normalize_host
from ..acl._errors import AclConfigError, PermissionDeniedError
from ..acl._file import parse_key_object, parse_key_pairs
from ..acl._remoting import AclSource
from ..store._errors import StoreConfigError

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_HEADER = "x-mq-date-time"
AUTHORIZATION_HEADER = "authorization"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
DATE_WINDOW_S = 15 * 60


def sign(secret_key: str, date_time: str) -> str:
    """The signature a client sends: lower-case hex of HMAC-SHA1(secret key, date time)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def authorization_header(access_key: str, secret_key: str, date_time: str) -> str:
    """The ``authorization`` value a client sends for ``date_time`` (tests, tools)."""
    return (
        f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_HEADER}, "
        f"Signature={sign(secret_key, date_time)}"
    )


def parse_authorization(value: str) -> tuple[str, str, str]:
    """(access key, signed headers, signature) of an ``authorization`` value. ValueError when it
    is not an MQv2-HMAC-SHA1 authorization."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise ValueError(f"unsupported authorization algorithm {algorithm!r}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, eq, field_value = part.strip().partition("=")
        if eq:
            fields[name.strip()] = field_value.strip()
    try:
        credential = fields["Credential"]
        signed = fields["SignedHeaders"]
        signature = fields["Signature"]
    except KeyError as exc:
        raise ValueError(f"authorization lacks {exc.args[0]}") from None
    access_key = credential.split("/", 1)[0]  # some clients scope the credential: ak/...
    if not access_key or not signature:
        raise ValueError("authorization has an empty credential or signature")
    return access_key, signed, signature


def date_time_now(now_s: float | None = None) -> str:
    """An ``x-mq-date-time`` value for ``now_s`` (default: now), in UTC."""
    when = datetime.datetime.fromtimestamp(time.time() if now_s is None else now_s, datetime.UTC)
    return when.strftime(DATE_TIME_FORMAT)


def date_time_fresh(value: str, now_s: float, window_s: float = DATE_WINDOW_S) -> bool:
    """Whether ``value`` (``yyyyMMddTHHmmssZ``) is within ``window_s`` of ``now_s``, read as
    UTC or as the local time."""
    try:
        when = datetime.datetime.strptime(value.strip(), DATE_TIME_FORMAT)
    except ValueError:
        return False
    utc = datetime.datetime.fromtimestamp(now_s, datetime.UTC).replace(tzinfo=None)
    local = datetime.datetime.fromtimestamp(now_s)
    return any(abs((when - ref).total_seconds()) <= window_s for ref in (utc, local))


class AclChecker:
    """Checks a gRPC request's signature and permissions against the accounts of ``source``."""

    def __init__(
        self,
        source: AclSource,
        *,
        clock: Callable[[], float] = time.time,
        window_s: float = DATE_WINDOW_S,
    ) -> None:
        self.source = source
        self._clock = clock
        self.window_s = window_s

    def check(
        self,
        metadata: Iterable[tuple[str, str | bytes]],
        *,
        peer: str = "",
        needs: Mapping[str, int] | None = None,
    ) -> None:
        """Let the request in, or raise AccessDeniedError (PermissionDeniedError when the
        account is known and signed the request but lacks a permission)."""
        headers: dict[str, str] = {}
        for key, value in metadata:
            if isinstance(value, str):
                headers[key.lower()] = value
        access_key: str | None = None
        signature = ""
        problem: str | None = None
        authorization = headers.get(AUTHORIZATION_HEADER)
        date_time = headers.get(DATE_TIME_HEADER)
        if authorization is None:
            problem = "no authorization header"
        else:
            try:
                access_key, signed, signature = parse_authorization(authorization)
            except ValueError as exc:
                problem = str(exc)
            else:
                if signed.strip().lower() != DATE_TIME_HEADER:
                    problem = f"unsupported signed headers {signed!r}"
                elif date_time is None:
                    problem = f"no {DATE_TIME_HEADER} header"
                elif not date_time_fresh(date_time, self._clock(), self.window_s):
                    problem = (
                        f"{DATE_TIME_HEADER} {date_time!r} is not within "
                        f"{self.window_s:g} s of the broker's clock"
                    )

        def verify(secret_key: str) -> bool:
            if problem is not None or date_time is None:
                return False
            return hmac.compare_digest(sign(secret_key, date_time), signature.lower())

        try:
            self.source.current().authorize(
                host=normalize_host(peer),
                access_key=access_key,
                verify=verify,
                code=0,
                needs=needs or {},
                admin_needed=False,
            )
        except PermissionDeniedError:
            raise
        except AccessDeniedError as exc:
            raise AccessDeniedError(f"{exc} ({problem})" if problem else str(exc)) from None


def _name(resource: Any) -> str | None:
    name = getattr(resource, "name", "")
    return name or None


def request_needs(method: str, request: Any) -> dict[str, int]:
    """The topics and groups (as retry topics) gRPC call ``method`` with ``request`` needs."""
    needs: dict[str, int] = {}

    def add(resource: str | None, perm: int) -> None:
        if resource:
            needs[resource] = perm

    def group_sub() -> None:
        if request.HasField("group"):
            name = _name(request.group)
            add(retry_topic(name) if name else None, SUB)

    if method == "SendMessage":
        for message in request.messages:
            add(_name(message.topic), PUB)
    elif method in ("EndTransaction", "RecallMessage"):
        add(_name(request.topic), PUB)
    elif method == "QueryRoute":
        add(_name(request.topic), ANY)
    elif method in (
        "AckMessage",
        "ChangeInvisibleDuration",
        "ForwardMessageToDeadLetterQueue",
        "QueryAssignment",
    ):
        add(_name(request.topic), SUB)
        group_sub()
    elif method in ("ReceiveMessage", "PullMessage", "UpdateOffset", "GetOffset"):
        add(_name(request.message_queue.topic), SUB)
        group_sub()
    elif method == "QueryOffset":
        add(_name(request.message_queue.topic), SUB)
    elif method in ("Heartbeat", "NotifyClientTermination"):
        group_sub()
    return needs


def parse_credentials(text: str) -> dict[str, str]:
    """``ak:sk[,ak:sk...]`` (``;`` or newlines also separate pairs, ``=`` may replace ``:``)."""
    try:
        return parse_key_pairs(text)
    except AclConfigError as exc:
        raise StoreConfigError(f"ACL credential {exc}") from None


def load_credentials(path: str | os.PathLike[str]) -> dict[str, str]:
    """Credentials from a file: a JSON object of access key → secret key, or one ``ak:sk`` pair
    a line (``#`` starts a comment line)."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        try:
            return parse_key_object(text)
        except AclConfigError as exc:
            raise StoreConfigError(f"{path}: {exc}") from None
    return parse_credentials(text)


# ---- the servicer wrapper -----------------------------------------------------------------------

_UNARY = (
    "QueryRoute",
    "QueryAssignment",
    "Heartbeat",
    "NotifyClientTermination",
    "SendMessage",
    "AckMessage",
    "ChangeInvisibleDuration",
    "ForwardMessageToDeadLetterQueue",
    "UpdateOffset",
    "GetOffset",
    "QueryOffset",
    "EndTransaction",
    "RecallMessage",
    "SyncLiteSubscription",
)
_SERVER_STREAMS = ("ReceiveMessage", "PullMessage")


def _peer(context: Any) -> str:
    try:
        return str(context.peer() or "")
    except Exception:  # a context without a peer (tests)
        return ""


class AclServicer:
    """A MessagingService whose every call is checked by ``checker`` first; a refused call is
    answered with UNAUTHORIZED or FORBIDDEN in its status (``service.auth_failures`` counts
    them) and never reaches ``service``."""

    def __init__(self, service: Any, checker: AclChecker) -> None:
        self.service = service
        self.checker = checker
        for name in _UNARY:
            setattr(self, name, self._unary(name))
        for name in _SERVER_STREAMS:
            setattr(self, name, self._server_stream(name))

    def _refusal(self, method: str, request: Any, context: Any) -> Any:
        """None when the call may go on, else its Status."""
        from ._convert import Code, status

        try:
            self.checker.check(
                [(str(k), v) for k, v in (context.invocation_metadata() or ())],
                peer=_peer(context),
                needs=request_needs(method, request) if request is not None else None,
            )
        except PermissionDeniedError as exc:
            self.service.auth_failures += 1
            return status(Code.FORBIDDEN, f"forbidden: {exc}")
        except AccessDeniedError as exc:
            self.service.auth_failures += 1
            return status(Code.UNAUTHORIZED, f"unauthorized: {exc}")
        return None

    def _unary(self, method: str) -> Callable[[Any, Any], Any]:
        from ._pb import service_pb2 as spb

        inner = getattr(self.service, method)
        response_type = getattr(spb, f"{method}Response")

        async def call(request: Any, context: Any) -> Any:
            refused = self._refusal(method, request, context)
            if refused is not None:
                return response_type(status=refused)
            return await inner(request, context)

        return call

    def _server_stream(self, method: str) -> Callable[[Any, Any], AsyncIterator[Any]]:
        from ._convert import timestamp
        from ._pb import service_pb2 as spb

        inner = getattr(self.service, method)
        response_type = getattr(spb, f"{method}Response")

        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            refused = self._refusal(method, request, context)
            if refused is not None:
                yield response_type(status=refused)
                if method == "ReceiveMessage":
                    yield response_type(delivery_timestamp=timestamp(int(time.time() * 1000)))
                return
            async for item in inner(request, context):
                yield item

        return call

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        from ._pb import service_pb2 as spb

        refused = self._refusal("Telemetry", None, context)
        if refused is not None:
            yield spb.TelemetryCommand(status=refused)
            return
        async for item in self.service.Telemetry(request_iterator, context):
            yield item
