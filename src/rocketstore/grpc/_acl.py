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

Then the request's topics and groups are checked as on the remoting port, by the method's
entry in ``METHODS`` (a group's permission is its retry topic's; a group's %RETRY% and %DLQ%
topics are the group's)::

    SendMessage, EndTransaction, RecallMessage              the topic: PUB
    QueryRoute                                              the topic: PUB or SUB
    ReceiveMessage, PullMessage, AckMessage, ChangeInvisibleDuration,
    ForwardMessageToDeadLetterQueue, UpdateOffset, GetOffset, QueryAssignment,
    SyncLiteSubscription                                    the topic and the group: SUB
    QueryOffset                                             the topic: SUB
    Heartbeat, NotifyClientTermination                      the group (if any): SUB
    Telemetry                                               any signed account; then each
                                                            Settings it sends: PUB on the
                                                            topics it publishes, SUB on its
                                                            group and subscriptions (refused:
                                                            the stream ends)

Telemetry, Heartbeat, NotifyClientTermination, ReceiveMessage, AckMessage and
ChangeInvisibleDuration under a client id (``x-mq-client-id``) another account holds are
refused too (FORBIDDEN, resource ``client:<id>``): the broker keeps a client's settings, its
Telemetry stream (down which transaction checks go, with the half message) and what it
received by that id, so an id is its first account's while it is in use
(``ClientRegistry.claim``), whichever of these calls used it first; an id a consumer uses only
to receive is held as much as a producer's.

The signature is checked from the call's metadata before its request is read
(``authenticate``, by the front end's handlers in ``_gate``): an unsigned or badly signed call
is answered UNAUTHORIZED and its message, however large, is never read or decoded. The
permissions, which depend on the request, are checked once it is read.

Each refusal goes to the audit log (``rocketstore.acl._audit``).

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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..acl import ANY, PUB, SUB, AccessDeniedError, Account, _audit
from ..acl._addresses import normalize_host
from ..acl._errors import AclConfigError, PermissionDeniedError
from ..acl._file import parse_key_object, parse_key_pairs
from ..acl._remoting import AclSource
from ..acl._request import Need, group_needs, topic_need, topic_needs
from ..store._errors import StoreConfigError
from ._checks import settings_topics

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_HEADER = "x-mq-date-time"
CLIENT_ID_HEADER = "x-mq-client-id"
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
    ) -> Account | None:
        """Let the request in and return its account (None: a white address, unchecked), or
        raise AccessDeniedError (PermissionDeniedError when the account is known and signed
        the request but lacks a permission)."""
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
            account = self.source.current().authenticate(
                host=normalize_host(peer), access_key=access_key, verify=verify
            )
            if account is not None:
                account.check(0, needs or {}, False)
        except PermissionDeniedError:
            raise
        except AccessDeniedError as exc:
            raise AccessDeniedError(f"{exc} ({problem})" if problem else str(exc)) from None
        return account


def _name(resource: Any) -> str | None:
    name = getattr(resource, "name", "")
    return name or None


def _group(request: Any) -> list[Need]:
    """The request's group (when it names one): SUB."""
    if not request.HasField("group"):
        return []
    return group_needs((_name(request.group),))


def _topic(perm: int) -> Callable[[Any], list[Need]]:
    return lambda request: topic_needs((_name(request.topic),), perm)


def _topic_and_group(request: Any) -> list[Need]:
    return topic_needs((_name(request.topic),), SUB) + _group(request)


def _queue_and_group(request: Any) -> list[Need]:
    return topic_needs((_name(request.message_queue.topic),), SUB) + _group(request)


def _sent(request: Any) -> list[Need]:
    return topic_needs((_name(m.topic) for m in request.messages), PUB)


def _route(request: Any) -> list[Need]:
    """QueryRoute: PUB or SUB on the topic (a producer's or a consumer's route)."""
    name = _name(request.topic)
    return [] if name is None else [topic_need(name, ANY)]


def settings_needs(settings: Any) -> list[Need]:
    """What a client's Telemetry settings claim: PUB on the topics it publishes (a producer is
    sent its topics' orphaned transactions, with their messages), SUB on its group and the
    topics it subscribes to."""
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        return topic_needs((_name(t) for t in settings.publishing.topics), PUB)
    if kind == "subscription":
        sub = settings.subscription
        topics = topic_needs((_name(e.topic) for e in sub.subscriptions), SUB)
        return group_needs((_name(sub.group),)) + topics
    return []


@dataclass(frozen=True, slots=True)
class MethodRule:
    """What one MessagingService method needs: ``needs(request)`` on its topics and groups;
    None: any signed account."""

    needs: Callable[[Any], list[Need]] | None


METHODS: Mapping[str, MethodRule] = MappingProxyType(
    {
        "QueryRoute": MethodRule(_route),
        "SendMessage": MethodRule(_sent),
        "EndTransaction": MethodRule(_topic(PUB)),
        "RecallMessage": MethodRule(_topic(PUB)),
        "ReceiveMessage": MethodRule(_queue_and_group),
        "PullMessage": MethodRule(_queue_and_group),
        "UpdateOffset": MethodRule(_queue_and_group),
        "GetOffset": MethodRule(_queue_and_group),
        "QueryOffset": MethodRule(lambda r: topic_needs((_name(r.message_queue.topic),), SUB)),
        "AckMessage": MethodRule(_topic_and_group),
        "ChangeInvisibleDuration": MethodRule(_topic_and_group),
        "ForwardMessageToDeadLetterQueue": MethodRule(_topic_and_group),
        "QueryAssignment": MethodRule(_topic_and_group),
        "SyncLiteSubscription": MethodRule(_topic_and_group),
        "Heartbeat": MethodRule(_group),
        "NotifyClientTermination": MethodRule(_group),
        "Telemetry": MethodRule(None),  # then each settings command: ``settings_needs``
    }
)
"""Every method of MessagingService and what it needs (tests/test_grpc_acl.py walks the
service's methods against it). A group's retry and dead-letter topics need SUB on the group
(``rocketstore.acl._request.topic_need``)."""


def request_needs(method: str, request: Any) -> dict[str, int]:
    """The topics and groups (as retry topics) gRPC call ``method`` with ``request`` needs;
    KeyError for a method the table does not list."""
    needs = METHODS[method].needs
    return {} if needs is None or request is None else dict(needs(request))


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

_SERVER_STREAMS = ("ReceiveMessage", "PullMessage")
# the calls that act on what the broker keeps by client id, or that use the id: its settings
# and Telemetry stream, its heartbeats, its termination (which releases what it received),
# its receives (auto-renewed under the id) and their acks
CLIENT_STATE = frozenset(
    {
        "Telemetry",
        "Heartbeat",
        "NotifyClientTermination",
        "ReceiveMessage",
        "AckMessage",
        "ChangeInvisibleDuration",
    }
)
_BIDIRECTIONAL = ("Telemetry",)


def _peer(context: Any) -> str:
    try:
        return str(context.peer() or "")
    except Exception:  # a context without a peer (tests)
        return ""


def _audit_refusal(
    method: str,
    metadata: list[tuple[str, str | bytes]],
    peer: str,
    needs: Mapping[str, int],
    exc: AccessDeniedError,
) -> None:
    access_key: str | None = None
    for key, value in metadata:
        if key.lower() == AUTHORIZATION_HEADER and isinstance(value, str):
            try:
                access_key = parse_authorization(value)[0]
            except ValueError:
                pass
    resource = getattr(exc, "resource", "") or " ".join(
        (f"group:{r[len('%RETRY%') :]}" if r.startswith("%RETRY%") else f"topic:{r}") for r in needs
    )
    _audit.refused(
        account=access_key,
        source=peer,
        request=f"gRPC {method}",
        resource=resource or "cluster",
        reason=str(exc),
    )


class AclServicer:
    """A MessagingService whose every call is checked by ``checker`` first; a refused call is
    answered with UNAUTHORIZED or FORBIDDEN in its status (``service.auth_failures`` counts
    them) and never reaches ``service``."""

    SendMessage: Callable[[Any, Any], Awaitable[Any]]  # (and every other method, set below)

    def __init__(self, service: Any, checker: AclChecker) -> None:
        self.service = service
        self.checker = checker
        for name in METHODS:
            if name in _SERVER_STREAMS:
                setattr(self, name, self._server_stream(name))
            elif name not in _BIDIRECTIONAL:
                setattr(self, name, self._unary(name))

    def authenticate(self, method: str, context: Any) -> Any:
        """None when the call's signature (its metadata: nothing of its request is read) lets
        it in, else its Status (UNAUTHORIZED). The permissions are checked once the request
        is read (``_refusal``)."""
        from ._convert import Code, status

        metadata = [(str(k), v) for k, v in (context.invocation_metadata() or ())]
        try:
            self.checker.check(metadata, peer=_peer(context))
        except PermissionDeniedError:
            return None  # an account's: what it lacks is told once its request is read
        except AccessDeniedError as exc:
            self.service.auth_failures += 1
            _audit_refusal(method, metadata, _peer(context), {}, exc)
            return status(Code.UNAUTHORIZED, f"unauthorized: {exc}")
        return None

    def refused_stream(self, method: str, refused: Any) -> list[Any]:
        """What a server-streaming call refused before its request was read answers."""
        from ._convert import timestamp
        from ._pb import service_pb2 as spb

        response_type = getattr(spb, f"{method}Response")
        answer = [response_type(status=refused)]
        if method == "ReceiveMessage":
            answer.append(response_type(delivery_timestamp=timestamp(int(time.time() * 1000))))
        return answer

    def _refusal(self, method: str, request: Any, context: Any) -> Any:
        """None when the call may go on, else its Status."""
        from ._convert import Code, status

        metadata = [(str(k), v) for k, v in (context.invocation_metadata() or ())]
        needs = request_needs(method, request)
        try:
            account = self.checker.check(metadata, peer=_peer(context), needs=needs)
            if account is not None and method in CLIENT_STATE:
                self._claim(metadata, account)
        except AccessDeniedError as exc:
            self.service.auth_failures += 1
            _audit_refusal(method, metadata, _peer(context), needs, exc)
            if isinstance(exc, PermissionDeniedError):
                return status(Code.FORBIDDEN, f"forbidden: {exc}")
            return status(Code.UNAUTHORIZED, f"unauthorized: {exc}")
        return None

    def _claim(self, metadata: list[tuple[str, str | bytes]], account: Account) -> None:
        """PermissionDeniedError when the call's client id is another account's."""
        for key, value in metadata:
            if key.lower() == CLIENT_ID_HEADER and isinstance(value, str) and value:
                if not self.service.clients.claim(value, account.access_key):
                    raise PermissionDeniedError(
                        f"client id {value} is in use by another account",
                        resource=f"client:{value}",
                    )
                return

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
        inner = getattr(self.service, method)

        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            refused = self._refusal(method, request, context)
            if refused is not None:
                for answer in self.refused_stream(method, refused):
                    yield answer
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
        metadata = [(str(k), v) for k, v in (context.invocation_metadata() or ())]
        peer = _peer(context)

        async def checked() -> AsyncIterator[Any]:
            """The client's commands, up to a Settings it may not claim (the stream ends)."""
            async for command in request_iterator:
                if command.WhichOneof("command") == "settings" and (
                    settings_topics(command.settings) <= self.service.config.max_settings_topics
                ):  # (more: refused by the service, for what it is)
                    needs = dict(settings_needs(command.settings))
                    try:
                        self.checker.check(metadata, peer=peer, needs=needs)
                    except AccessDeniedError as exc:
                        self.service.auth_failures += 1
                        _audit_refusal("Telemetry", metadata, peer, needs, exc)
                        return
                yield command

        async for item in self.service.Telemetry(checked(), context):
            yield item
