"""RocketMQ 4.x's plain ACL: the accounts of a ``plain_acl.yml`` and what each may do.

The file (YAML)::

    globalWhiteRemoteAddresses:      # these addresses need no account at all
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ          # more than 6 characters
        secretKey: 12345678          # more than 6 characters
        whiteRemoteAddress:          # from these addresses: no signature, no permission check
        admin: false                 # admin requests (create / delete topics and groups,
                                     # update the broker config); every topic and group when
                                     # the account lists none
        defaultTopicPerm: DENY       # DENY, PUB, SUB or PUB|SUB; a missing value is DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB]

A group's permission is kept under its retry topic ``%RETRY%<group>``, as RocketMQ does, so
a request names the resources it needs in one map (resource → needed permission). The store's
topics that hold other topics' messages (SCHEDULE_TOPIC_XXXX, the transaction topics) take no
default permission: only an admin account, or one that lists them in ``topicPerms``.

:meth:`PlainAcl.authorize` decides a request in RocketMQ's order: a global white address lets
it in; else the access key must be known; the account's white address lets it in; else the
signature must check out, then admin requests need an admin account, then each resource needs
its permission. A refusal is an AccessDeniedError worded as RocketMQ's AclException.

Immutable; any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._addresses import AddressPattern
from ._errors import AccessDeniedError, AclConfigError, PermissionDeniedError

DENY = 1
ANY = 2
PUB = 4
SUB = 8

RETRY_PREFIX = "%RETRY%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
# the store's own topics, which hold other topics' messages (delayed ones, half ones and the
# ends of transactions): no default permission covers them, only an admin account or an
# account that names them in topicPerms
MESSAGE_HOLDING_TOPICS = frozenset(
    {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"}
)
MIN_KEY_LENGTH = 7  # RocketMQ: "length should longer than 6"

_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def parse_perm(text: Any) -> int:
    """``PUB`` / ``SUB`` / ``PUB|SUB`` / ``SUB|PUB`` / ``DENY``; anything else (or nothing) is
    DENY, as RocketMQ reads it."""
    if text is None:
        return DENY
    return _PERMS.get(str(text).strip(), DENY)


def perm_allows(needed: int, owned: int) -> bool:
    """RocketMQ's Permission.checkPermission: DENY wins; ANY needs PUB or SUB."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def perm_text(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return "|".join(n for n, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit) or "DENY"


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    white: AddressPattern = field(default_factory=lambda: AddressPattern.parse(""))
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    # topic → perm, and %RETRY%group → perm; None when the account lists no resources
    resources: Mapping[str, int] | None = None

    def check(
        self, code: int, needs: Mapping[str, int] | Iterable[tuple[str, int]], admin_needed: bool
    ) -> None:
        """AccessDeniedError unless this account may make request ``code`` on ``needs``
        (resource → permission, or such pairs)."""
        if admin_needed and not self.admin:
            raise PermissionDeniedError(
                f"Need admin permission for request code={code}, "
                f"but accessKey={self.access_key} is not"
            )
        self.require(needs.items() if isinstance(needs, Mapping) else needs)

    def require(self, needs: Iterable[tuple[str, int]]) -> None:
        """PermissionDeniedError unless this account has each permission on its resource
        (messages to RMQ_SYS_TRACE_TOPIC may always be written)."""
        if self.resources is None and self.admin:
            return
        owned_map = self.resources or {}
        for resource, needed in needs:
            if resource == TRACE_TOPIC and needed == PUB:
                continue
            is_group = resource.startswith(RETRY_PREFIX)
            owned = owned_map.get(resource)
            if owned is None:
                if resource in MESSAGE_HOLDING_TOPICS:
                    owned = DENY
                else:
                    owned = self.default_group_perm if is_group else self.default_topic_perm
            if not perm_allows(needed, owned):
                name = f"group:{resource[len(RETRY_PREFIX) :]}" if is_group else f"topic:{resource}"
                raise PermissionDeniedError(
                    f"No default permission for {name}", resource=name, needed=perm_text(needed)
                )


@dataclass(frozen=True, slots=True)
class PlainAcl:
    """The accounts and global white addresses of one ACL file."""

    accounts: Mapping[str, Account] = field(default_factory=dict)
    global_white: tuple[AddressPattern, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "accounts", MappingProxyType(dict(self.accounts)))

    def account(self, access_key: str) -> Account | None:
        return self.accounts.get(access_key)

    def authenticate(
        self, *, host: str, access_key: str | None, verify: Callable[[str], bool]
    ) -> Account | None:
        """Who sent a request, or AccessDeniedError: None for a white address (a global one, or
        the account's: no signature and no permission checks), else the account whose secret
        key ``verify(secret_key)`` confirms signed it."""
        if any(w.matches(host) for w in self.global_white):
            return None
        if not access_key:
            raise AccessDeniedError("No accessKey is configured")
        account = self.accounts.get(access_key)
        if account is None:
            raise AccessDeniedError(f"No acl config for {access_key}")
        if account.white.matches(host):
            return None
        if not verify(account.secret_key):
            raise AccessDeniedError(f"Check signature failed for accessKey={access_key}")
        return account

    def authorize(
        self,
        *,
        host: str,
        access_key: str | None,
        verify: Callable[[str], bool],
        code: int,
        needs: Mapping[str, int],
        admin_needed: bool,
    ) -> None:
        """Let a request in or raise AccessDeniedError. ``host``: the client's address;
        ``verify(secret_key)``: whether the request's signature is right for that secret key;
        ``needs``: resource → needed permission (groups as ``%RETRY%group``)."""
        account = self.authenticate(host=host, access_key=access_key, verify=verify)
        if account is not None:
            account.check(code, needs, admin_needed)

    def with_accounts(self, extra: Iterable[Account]) -> PlainAcl:
        """These rules with ``extra`` accounts added (an account of the same key replaced)."""
        accounts = dict(self.accounts)
        accounts.update((a.access_key, a) for a in extra)
        return PlainAcl(accounts, self.global_white)


# ---- the file format ------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    """A scalar as a string (YAML reads 12345678 as a number; RocketMQ takes it as text)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise AclConfigError(f"expected a text value, not {value!r}")


def _list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise AclConfigError(f"{what}: expected a list, not {value!r}")
    return [t for t in (_text(v) for v in value) if t is not None and t.strip()]


def _resource_perms(items: list[str], *, groups: bool, key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, eq, perm = item.partition("=")
        if not eq or not name.strip() or "=" in perm:
            raise AclConfigError(
                f"account {key}: {'groupPerms' if groups else 'topicPerms'} item {item!r} is "
                "not NAME=PERM (e.g. topicA=PUB|SUB)"
            )
        if perm.strip() not in _PERMS:
            raise AclConfigError(
                f"account {key}: {item!r}: the permission must be DENY, PUB, SUB or PUB|SUB"
            )
        name = name.strip()
        out[retry_topic(name) if groups else name] = parse_perm(perm)
    return out


def parse_account(doc: Any) -> Account:
    """One item of ``accounts``; AclConfigError when it is not usable."""
    if not isinstance(doc, dict):
        raise AclConfigError(f"an account must be a mapping, not {doc!r}")
    access_key = _text(doc.get("accessKey")) or ""
    secret_key = _text(doc.get("secretKey")) or ""
    if len(access_key) < MIN_KEY_LENGTH or len(secret_key) < MIN_KEY_LENGTH:
        raise AclConfigError(
            f"account {access_key or '(no accessKey)'}: accessKey and secretKey must both be "
            f"set and longer than {MIN_KEY_LENGTH - 1} characters"
        )
    admin = doc.get("admin", False)
    if isinstance(admin, str):
        admin = admin.strip().lower() == "true"
    resources: dict[str, int] = {}
    resources.update(
        _resource_perms(_list(doc.get("topicPerms"), "topicPerms"), groups=False, key=access_key)
    )
    resources.update(
        _resource_perms(_list(doc.get("groupPerms"), "groupPerms"), groups=True, key=access_key)
    )
    try:
        white = AddressPattern.parse(_text(doc.get("whiteRemoteAddress")))
    except AclConfigError as exc:
        raise AclConfigError(f"account {access_key}: {exc}") from None
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white=white,
        admin=bool(admin),
        default_topic_perm=parse_perm(doc.get("defaultTopicPerm")),
        default_group_perm=parse_perm(doc.get("defaultGroupPerm")),
        resources=resources or None,
    )


def parse_plain_acl(doc: Any) -> PlainAcl:
    """A PlainAcl from a plain_acl.yml's parsed document (an empty file: no accounts)."""
    if doc is None:
        return PlainAcl()
    if not isinstance(doc, dict):
        raise AclConfigError("expected a mapping with globalWhiteRemoteAddresses and accounts")
    white = tuple(
        AddressPattern.parse(t)
        for t in _list(doc.get("globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses")
    )
    accounts_doc = doc.get("accounts") or []
    if not isinstance(accounts_doc, list):
        raise AclConfigError("accounts: expected a list of accounts")
    accounts: dict[str, Account] = {}
    for item in accounts_doc:
        account = parse_account(item)
        if account.access_key in accounts:
            raise AclConfigError(f"account {account.access_key} is listed twice")
        accounts[account.access_key] = account
    return PlainAcl(accounts, white)


def admin_accounts(credentials: Mapping[str, str]) -> PlainAcl:
    """Accounts with every permission for ``access key → secret key`` pairs (the key lists
    ``--grpc-acl`` took before plain_acl.yml files)."""
    return PlainAcl(
        {ak: Account(access_key=ak, secret_key=sk, admin=True) for ak, sk in credentials.items()}
    )
