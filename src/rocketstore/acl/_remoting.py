"""The ACL on a remoting port (a broker's, a name server's): every request is checked before
its handler runs, by the rule of its code in the authorisation table (``_table``).

The guard authenticates the request (its signature, or a white address), decodes what the
rule reads (the header the handler then uses: ``cmd.header``), checks the rule's needs, and
leaves a :class:`Grant` on the command (``cmd.grant``): the handler checks with it what it
learns only later (``check_then``: the topic of a message it looked up, the groups of a body
it decoded), before it does or returns anything.

A request that authenticates (a white address, or a known account's signature) establishes
its connection (``Connection.establish``): a server whose handlers are guarded closes a
connection none of whose requests did so, soon after it was made (``RemotingServer``'s
``authenticated``).

A refusal is answered as RocketMQ's broker answers an AclException thrown by its RPC hook:
SYSTEM_ERROR with the remark ``org.apache.rocketmq.acl.common.AclException: <why>``. One-way
requests get no answer. The connection stays open. Each refusal and each admin request that
changes state goes to the audit log (``_audit``). A header the rule cannot read (a send
that spells a field twice) is a bad request: SYSTEM_ERROR with the reason.

Loop thread (``Grant`` is immutable: any thread).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..remoting import Connection, Handler, RemotingCommand, ResponseCode
from ..remoting._limits import LogLimiter
from ..remoting._signing import (
    ACCESS_KEY,
    ACL_EXCEPTION_PREFIX,
    SIGNATURE,
    UNIQUE_KEY_QUERY,
    field_text,
    signature,
    signed_content,
)
from . import _audit
from ._auth_eval import AuthRules, AuthSettings, Principal
from ._auth_model import Resource
from ._errors import AccessDeniedError, PermissionDeniedError
from ._file import AclSource as AclSource
from ._plain import Account, PlainAcl
from ._request import Need
from ._table import BROKER, Access, Rule, rule

log = logging.getLogger(__name__)
_refusals_log = LogLimiter(log)

EXCEPTION_PREFIX = ACL_EXCEPTION_PREFIX
PRODUCER_GRANTS = "producer_grants"
"""A connection's attribute: producer group → the grant of the heartbeat that registered the
connection there (a transaction check goes only to a producer whose account may send the
message it carries)."""


def _get(ext: Mapping[str, Any], key: str) -> str | None:
    value = ext.get(key)
    return None if value is None else field_text(value)


def authenticate(acl: PlainAcl, cmd: RemotingCommand, host: str) -> Account | None:
    """The account that signed ``cmd`` (None: a white address lets it in unchecked), or
    AccessDeniedError (RocketMQ's wording)."""
    ext = cmd.ext_fields
    given = _get(ext, SIGNATURE)

    def verify(secret_key: str) -> bool:
        if given is None:
            return False
        # RocketMQ's broker leaves _UNIQUE_KEY_QUERY out, its Java client signs it: take both
        skips: list[tuple[str, ...]] = [(SIGNATURE, UNIQUE_KEY_QUERY)]
        if UNIQUE_KEY_QUERY in ext:
            skips.append((SIGNATURE,))
        return any(
            hmac.compare_digest(
                signature(signed_content(ext, cmd.body, skip=skip), secret_key), given
            )
            for skip in skips
        )

    return acl.authenticate(host=host, access_key=_get(ext, ACCESS_KEY), verify=verify)


class Grant:
    """What the ACL let one request do: its ``account`` (None: a white address, every
    resource), the ``rule`` of its code, who sent it. Immutable; any thread."""

    __slots__ = ("access_key", "account", "code", "rule", "source")

    def __init__(
        self, account: Account | None, access_key: str | None, rule: Rule, code: int, source: str
    ) -> None:
        self.account = account
        self.access_key = access_key
        self.rule = rule
        self.code = code
        self.source = source

    def require(self, needs: Iterable[Need]) -> None:
        """PermissionDeniedError unless the account has each permission."""
        if isinstance(self.account, Principal):
            self.account.require(needs, self.rule.actions)
        elif self.account is not None:
            self.account.require(needs)

    def allows(self, needs: Iterable[Need]) -> bool:
        try:
            self.require(needs)
        except AccessDeniedError:
            return False
        return True

    @property
    def request(self) -> str:
        return f"{self.code} {self.rule.name}"


def check_request(
    acl: PlainAcl, cmd: RemotingCommand, host: str, table: Mapping[int, Rule] = BROKER
) -> Grant:
    """Let ``cmd`` from ``host`` in by its rule in ``table`` and return its grant, or raise
    AccessDeniedError (RocketMQ's wording); RequestError for a header its rule cannot read."""
    try:
        account = authenticate(acl, cmd, host)
    except AccessDeniedError:
        if not isinstance(acl, AuthRules) or cmd.code not in acl.settings.authentication_whitelist:
            raise
        account = acl.unauthenticated(host, _get(cmd.ext_fields, ACCESS_KEY))
    r = rule(table, cmd.code)
    if isinstance(account, Principal):
        if cmd.code not in acl_settings(account).authorization_whitelist:
            check_v2(account, r, cmd)
    elif account is not None:
        if r.access is Access.ADMIN:
            account.check(cmd.code, (), True)
        elif r.needs is not None:
            account.require(r.needs(cmd))
    return Grant(account, _get(cmd.ext_fields, ACCESS_KEY), r, cmd.code, host)


def acl_settings(principal: Principal) -> AuthSettings:
    return principal.rules.settings if principal.rules is not None else AuthSettings()


def check_v2(principal: Principal, r: Rule, cmd: RemotingCommand) -> None:
    """ACL 2.0's decision on a request by its rule: an admin rule's actions on its target
    (the cluster, or the topic or group a field names; the user and ACL requests too, as
    RocketMQ 5.3 decides them), a scoped rule's needs with its actions."""
    if r.access is Access.ADMIN:
        kind, field = r.target
        if field:
            name = _get(cmd.ext_fields, field) or ""
            principal.authorize([(Resource(kind, name), r.actions)])
        else:
            principal.authorize([(principal.cluster(), r.actions)])
    elif r.needs is not None:
        principal.require(r.needs(cmd), r.actions)


def refusal(exc: AccessDeniedError, acl2: bool = False) -> RemotingCommand:
    """The answer to a refused request (the connection sends none to a one-way request): the
    plain ACL's as RocketMQ 4.x's (SYSTEM_ERROR, an AclException), ACL 2.0's (``acl2``) as
    RocketMQ 5.3's (NO_PERMISSION, the reason alone)."""
    if acl2:
        return RemotingCommand.response(ResponseCode.NO_PERMISSION, str(exc))
    return RemotingCommand.response(ResponseCode.SYSTEM_ERROR, EXCEPTION_PREFIX + str(exc))


def _audit_refusal(
    cmd: RemotingCommand, access_key: str | None, source: str, request: str, exc: Exception
) -> None:
    resource = getattr(exc, "resource", "") or _audit.resource_text(cmd.ext_fields)
    _audit.refused(
        account=access_key, source=source, request=request, resource=resource, reason=str(exc)
    )
    _refusals_log.log(
        logging.WARNING, "ACL: refused request code %s from %s: %s", request, source or "?", exc
    )


def check_then(cmd: RemotingCommand, value: Any) -> RemotingCommand | None:
    """The handler's check of what it learned (its rule's ``then``: a message's topic, a
    decoded body): None when the request may go on (or the ACL is off), else the refusal to
    answer with (audited; the connection sends none to a one-way request), and the handler
    does nothing more. Loop thread or a worker thread."""
    grant = cmd.grant
    if not isinstance(grant, Grant) or grant.rule.then is None:
        return None
    try:
        grant.require(grant.rule.then(value))
    except PermissionDeniedError as exc:
        _audit_refusal(cmd, grant.access_key, grant.source, grant.request, exc)
        return refusal(exc, isinstance(grant.account, Principal))
    return None


def allows_then(cmd: RemotingCommand, value: Any) -> bool:
    """Whether the handler may hand out ``value`` (its rule's ``then``), without a refusal:
    for a result of many messages, each left out when its topic is not the account's."""
    grant = cmd.grant
    if not isinstance(grant, Grant) or grant.rule.then is None:
        return True
    return grant.allows(grant.rule.then(value))


def peer_host(conn: Connection) -> str:
    """The client's address without its port (``host:port`` → ``host``)."""
    return conn.peer.rpartition(":")[0] if ":" in conn.peer else conn.peer


class RemotingAcl:
    """Wraps a server's request handlers so that each request is checked first, by the rules
    of ``table`` (the broker's, or the name server's)."""

    def __init__(self, source: AclSource, table: Mapping[int, Rule] = BROKER) -> None:
        self.source = source
        self.table = table
        self.refused = 0

    def guard(self, handler: Handler) -> Handler:
        table = self.table

        def guarded(cmd: RemotingCommand, conn: Connection) -> Any:
            acl = self.source.current()
            try:
                grant = check_request(acl, cmd, peer_host(conn), table)
            except AccessDeniedError as exc:
                if isinstance(exc, PermissionDeniedError):
                    conn.establish()  # a known account that signed: refused, but a client
                self.refused += 1
                r = rule(table, cmd.code)
                key = _get(cmd.ext_fields, ACCESS_KEY)
                _audit_refusal(cmd, key, conn.peer, f"{cmd.code} {r.name}", exc)
                return refusal(exc, isinstance(acl, AuthRules))
            conn.establish()
            cmd.grant = grant
            if grant.rule.changes:
                _audit.allowed(
                    account=grant.access_key,
                    source=conn.peer,
                    request=grant.request,
                    resource=_audit.resource_text(cmd.ext_fields),
                )
                principal = grant.account
                if isinstance(principal, Principal) and grant.rule.auth_admin:
                    _audit.authorization(
                        subject=principal.subject,
                        decision="Allow",
                        actions=",".join(grant.rule.actions),
                        source=principal.host,
                        resource=principal.cluster().key,
                        request=str(cmd.code),
                    )
            return handler(cmd, conn)

        return guarded

    def guard_all(self, handlers: Mapping[int, Handler]) -> dict[int, Handler]:
        return {code: self.guard(handler) for code, handler in handlers.items()}


def request_needs(cmd: RemotingCommand, table: Mapping[int, Rule] = BROKER) -> dict[str, int]:
    """What ``cmd``'s rule checks before its handler runs: resource → permission."""
    r = rule(table, cmd.code)
    return dict(r.needs(cmd)) if r.needs is not None else {}
