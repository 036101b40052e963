"""Plain ACL (``plain_acl.yml``) → ACL 2.0, as RocketMQ 5.3 migrates it at start with
``migrateAuthFromV1Enabled=true``.

Each account that is not a user yet becomes one (an existing user is left as it is):

    accessKey / secretKey      username / password
    admin: true                userType Super (passes every check), else Normal
    topicPerms  T=PERM         Custom policy, ``Topic:T``
    groupPerms  G=PERM         Custom policy, ``Group:G``
    defaultTopicPerm PERM      Default policy, ``Topic:*``
    defaultGroupPerm PERM      Default policy, ``Group:*``
    whiteRemoteAddress         Custom policy, ``*`` All Allow from those addresses (as CIDR
                               blocks): what the account could do unsigned from there, it
                               may do signed; its own entries still decide where they name a
                               resource

    PUB → Pub Allow, SUB → Sub Allow, PUB|SUB → Pub, Sub Allow, DENY → All Deny

A default permission the file does not give is taken as DENY (plain ACL's reading, and the
same decisions as no Default entry: ACL 2.0 refuses what no entry allows).
``globalWhiteRemoteAddresses`` have no ACL 2.0 counterpart (every request names a user)
and are not carried over. Pure functions; any thread.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable

from ._addresses import AddressPattern
from ._auth_model import (
    ALL,
    ALLOW,
    CUSTOM,
    DEFAULT,
    DENY,
    GROUP,
    LITERAL,
    NORMAL,
    PATTERN_ANY,
    PUB,
    SUB,
    SUPER,
    TOPIC,
    TYPE_ANY,
    USER_PREFIX,
    Acl,
    Policy,
    PolicyEntry,
    Resource,
    User,
)
from ._plain import DENY as PERM_DENY
from ._plain import PUB as PERM_PUB
from ._plain import RETRY_PREFIX, Account, PlainAcl
from ._plain import SUB as PERM_SUB

log = logging.getLogger(__name__)


def perm_entry(resource: Resource, perm: int, source_ips: tuple[str, ...] = ()) -> PolicyEntry:
    """A plain ACL permission on ``resource`` as a policy entry."""
    if perm & PERM_DENY or not perm & (PERM_PUB | PERM_SUB):
        return PolicyEntry(resource, (ALL,), source_ips, DENY)
    actions = tuple(a for a, bit in ((PUB, PERM_PUB), (SUB, PERM_SUB)) if perm & bit)
    return PolicyEntry(resource, actions, source_ips, ALLOW)


def white_cidrs(white: AddressPattern) -> tuple[str, ...]:
    """A white remote address as the CIDR blocks it covers (``*``: every address)."""
    if white.everybody:
        return ("0.0.0.0/0", "::/0")
    out: list[str] = []
    for p in white.patterns:
        bits = 16 if p.v6 else 8
        lows = [lo for lo, _ in p.spans]
        highs = [hi for _, hi in p.spans]
        start = sum(v << (bits * (len(lows) - 1 - i)) for i, v in enumerate(lows))
        end = sum(v << (bits * (len(highs) - 1 - i)) for i, v in enumerate(highs))
        cls = ipaddress.IPv6Address if p.v6 else ipaddress.IPv4Address
        for net in ipaddress.summarize_address_range(cls(start), cls(end)):
            out.append(str(net))
    return tuple(dict.fromkeys(out))


def account_user(account: Account) -> User:
    return User(account.access_key, account.secret_key, SUPER if account.admin else NORMAL)


def account_acl(account: Account) -> Acl | None:
    """The ACL a plain account migrates to (None: it grants nothing an ACL would hold)."""
    custom: list[PolicyEntry] = []
    for name, perm in (account.resources or {}).items():
        if name.startswith(RETRY_PREFIX):
            resource = Resource(GROUP, name[len(RETRY_PREFIX) :], LITERAL)
        else:
            resource = Resource(TOPIC, name, LITERAL)
        custom.append(perm_entry(resource, perm))
    white = white_cidrs(account.white)
    if white:
        custom.append(PolicyEntry(Resource(TYPE_ANY, "", PATTERN_ANY), (ALL,), white, ALLOW))
    defaults = [
        perm_entry(Resource(TOPIC, "", PATTERN_ANY), account.default_topic_perm),
        perm_entry(Resource(GROUP, "", PATTERN_ANY), account.default_group_perm),
    ]
    policies = []
    if custom:
        policies.append(Policy(CUSTOM, tuple(custom)))
    policies.append(Policy(DEFAULT, tuple(defaults)))
    return Acl(USER_PREFIX + account.access_key, tuple(policies))


def migrate(plain: PlainAcl, existing: Iterable[str]) -> tuple[list[User], list[Acl]]:
    """The users and ACLs to create for ``plain``'s accounts whose names are not in
    ``existing``."""
    have = set(existing)
    users: list[User] = []
    acls: list[Acl] = []
    for account in plain.accounts.values():
        if account.access_key in have:
            continue
        users.append(account_user(account))
        acl = account_acl(account)
        if acl is not None:
            acls.append(acl)
    if plain.global_white:
        log.warning(
            "plain ACL's globalWhiteRemoteAddresses (%s) are not migrated: ACL 2.0 has no "
            "unsigned access",
            ", ".join(w.text for w in plain.global_white),
        )
    return users, acls
