"""Who may read ``/metrics``: Prometheus's own ways of authenticating a scrape (``--metrics-auth``).

``/metrics`` names topics, consumer groups and clients, so with ACL on it is not open by
default. ``/healthz`` and ``/readyz`` are always open (a supervisor's probe carries no
credentials).

=========================  ====================================================================
``--metrics-auth``         what a scrape must send
=========================  ====================================================================
``basic:file:PATH``        HTTP basic auth, the ``user:password`` that PATH holds (one line)
``basic:env:NAME``         the same, from the environment variable NAME
``bearer:file:PATH``       ``Authorization: Bearer TOKEN``, the token that PATH holds
``bearer:env:NAME``        the same, from the environment variable NAME
``none``                   nothing: /metrics open, ACL or not
(not given), ACL off       nothing (as before)
(not given), ACL on        HTTP basic auth with the access key and secret key of an ``admin``
                           account of the ACL file (re-read as the file changes); a scrape
                           from one of its ``globalWhiteRemoteAddresses`` needs nothing
=========================  ====================================================================

Secrets are named on the command line, never written there (a command line is visible to
every user of the host). Prometheus's scrape configuration sends them with ``basic_auth``
(``username``, ``password_file``) or ``authorization`` (``type: Bearer``, ``credentials_file``).
A refused scrape gets 401 with ``WWW-Authenticate`` (403 for an ACL account that is not
admin). Comparisons take the same time whatever the guess.

Immutable once built; the checks run on the loop thread.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..acl import PlainAcl

AUTH_HELP = (
    "who may read /metrics: basic:file:PATH or basic:env:NAME (user:password), "
    "bearer:file:PATH or bearer:env:NAME (a token), or none; default: open, or with ACL on "
    "basic auth with an admin account's accessKey:secretKey (/healthz, /readyz stay open)"
)
REALM = "rocketstore metrics"


class MetricsAuthError(ValueError):
    """A ``--metrics-auth`` value that cannot be used (its form, its file, its variable)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """How a request for /metrics fares: ``status`` 0 lets it in, else 401 or 403 with the
    ``headers`` and the one-line ``reason`` (the answer's body)."""

    status: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""


ALLOWED = Decision()


class MetricsAuth:
    """What a scrape of /metrics must send; ``check`` decides one request."""

    scheme = ""  # "Basic" or "Bearer"; "" for no authentication

    def check(self, authorization: str | None, host: str) -> Decision:
        """``authorization``: the request's Authorization header (None without one);
        ``host``: the client's address."""
        return ALLOWED

    def describe(self) -> str:
        return "open"

    def _challenge(self, reason: str) -> Decision:
        return Decision(401, {"WWW-Authenticate": f'{self.scheme} realm="{REALM}"'}, reason)


OPEN = MetricsAuth()


def _basic(authorization: str | None) -> tuple[str, str] | None:
    """(user, password) of a Basic Authorization header, or None."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    return (user, password) if sep else None


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class BasicAuth(MetricsAuth):
    scheme = "Basic"

    def __init__(self, user: str, password: str, where: str) -> None:
        self._user = user
        self._password = password
        self._where = where

    def check(self, authorization: str | None, host: str) -> Decision:
        given = _basic(authorization)
        # both compared, always: the time does not tell which one was wrong
        if given is not None and _same(given[0], self._user) & _same(given[1], self._password):
            return ALLOWED
        return self._challenge("authentication required\n")

    def describe(self) -> str:
        return f"basic auth ({self._where})"


class BearerAuth(MetricsAuth):
    scheme = "Bearer"

    def __init__(self, token: str, where: str) -> None:
        self._token = token
        self._where = where

    def check(self, authorization: str | None, host: str) -> Decision:
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() == "bearer" and _same(token.strip(), self._token):
            return ALLOWED
        return self._challenge("authentication required\n")

    def describe(self) -> str:
        return f"bearer token ({self._where})"


class AclAdminAuth(MetricsAuth):
    """Basic auth with an admin account of the ACL in force (``acl()``: read per request, so
    a reloaded file applies); its global white addresses need none."""

    scheme = "Basic"

    def __init__(self, acl: Callable[[], PlainAcl]) -> None:
        self._acl = acl

    def check(self, authorization: str | None, host: str) -> Decision:
        acl = self._acl()
        if any(w.matches(host) for w in acl.global_white):
            return ALLOWED
        given = _basic(authorization)
        if given is None:
            return self._challenge("authentication required: an admin account of the ACL\n")
        account = acl.account(given[0])
        secret = account.secret_key if account is not None else "\0" * 16
        if not _same(given[1], secret) or account is None:
            return self._challenge("wrong access key or secret key\n")
        if not account.admin:
            return Decision(403, {}, f"accessKey={account.access_key} is not an admin account\n")
        return ALLOWED

    def describe(self) -> str:
        return "basic auth with an admin account of the ACL"


def _secret(source: str, env: Mapping[str, str]) -> tuple[str, str]:
    """(the secret, where it came from) of ``file:PATH`` or ``env:NAME``."""
    kind, sep, name = source.partition(":")
    if not sep or not name or kind not in ("file", "env"):
        raise MetricsAuthError(f"expected file:PATH or env:NAME, not {source!r}")
    if kind == "env":
        value = env.get(name)
        if value is None:
            raise MetricsAuthError(f"the environment variable {name} is not set")
        where = f"${name}"
    else:
        try:
            value = Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise MetricsAuthError(f"cannot read {name}: {exc}") from None
        where = name
    value = value.strip("\r\n")
    if not value.strip():
        raise MetricsAuthError(f"{where} is empty")
    return value, where


def parse_metrics_auth(spec: str, env: Mapping[str, str] | None = None) -> MetricsAuth:
    """A ``--metrics-auth`` value (see the module docstring) → its MetricsAuth; reads the file
    or variable it names now. MetricsAuthError when it cannot be used."""
    env = os.environ if env is None else env
    if spec == "none":
        return OPEN
    kind, sep, source = spec.partition(":")
    if kind not in ("basic", "bearer") or not sep:
        raise MetricsAuthError(
            f"--metrics-auth {spec!r}: expected basic:file:PATH, basic:env:NAME, "
            "bearer:file:PATH, bearer:env:NAME or none"
        )
    try:
        secret, where = _secret(source, env)
    except MetricsAuthError as exc:
        raise MetricsAuthError(f"--metrics-auth {spec!r}: {exc}") from None
    if kind == "bearer":
        if any(c.isspace() for c in secret):
            raise MetricsAuthError(f"--metrics-auth {spec!r}: a token has no spaces")
        return BearerAuth(secret, where)
    user, colon, password = secret.partition(":")
    if not colon or not user or not password:
        raise MetricsAuthError(f"--metrics-auth {spec!r}: {where} must hold user:password")
    return BasicAuth(user, password, where)


def check_auth_option(_ctx: object, _param: object, value: str | None) -> str | None:
    """click callback of ``--metrics-auth``: a usage error for a value that cannot be used."""
    import click

    if value is None:
        return None
    try:
        parse_metrics_auth(value)
    except MetricsAuthError as exc:
        raise click.BadParameter(str(exc)) from None
    return value
