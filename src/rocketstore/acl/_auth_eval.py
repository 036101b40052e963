"""ACL 2.0's decisions: who sent a request (authentication) and whether its subject may act
on what it names (authorisation), switched on separately, as RocketMQ 5.3 decides them.

Authentication (``authenticationEnabled``): the request's AccessKey is a user's name and it
is signed with the user's password as the secret key (the same HMAC as plain ACL's); the
user must exist and be enabled. Off, the AccessKey (if any) is taken at its word.

Authorisation (``authorizationEnabled``): each resource a request names, with the actions it
needs there (any one of them suffices), is decided for its subject ``User:<name>``:

1. a Super user may do anything; an unknown or disabled user nothing;
2. the entries of the subject's Custom policy that match the resource, one of the actions
   (or name All) and the source address; when none does, those of its Default policy;
3. of the matching entries the most specific decides: a literal name before the longest
   prefix, before a type's ``*``, before ``*``; of equally specific ones a Deny wins;
4. no matching entry (or no ACL at all) is a refusal.

A request's needs come from the authorisation table (``_table``): a topic with PUB is
``Topic:<t>`` Pub, with SUB ``Topic:<t>`` Sub, a group (its retry topic) ``Group:<g>`` Sub,
either-of ``Pub, Sub``; a rule may name other actions (Get for reads of offsets, Update for
their changes, ...) and cluster-wide requests name ``Cluster:<cluster>`` with Update (they
change something) or Get.

:class:`AuthRules` is a snapshot (immutable; any thread) with the interface the ports use
for plain ACL's rules (``authenticate`` → an account, whose ``check`` / ``require`` decide),
so the remoting guard and the gRPC front end serve either model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ._auth_model import (
    CLUSTER,
    CUSTOM,
    DEFAULT,
    DENY,
    GROUP,
    PUB,
    SUB,
    SUPER,
    TOPIC,
    UPDATE,
    USER_PREFIX,
    Acl,
    PolicyEntry,
    Resource,
    User,
)
from ._errors import AccessDeniedError, PermissionDeniedError
from ._plain import ANY as PERM_ANY
from ._plain import PUB as PERM_PUB
from ._plain import RETRY_PREFIX, Account, PlainAcl

Check = tuple[Resource, tuple[str, ...]]
"""A resource a request acts on and the actions (any one suffices) it needs there."""


def perm_actions(perm: int) -> tuple[str, ...]:
    """Plain ACL's permission needed → ACL 2.0's actions (either-of PUB|SUB → Pub, Sub)."""
    if perm & PERM_ANY:
        return (PUB, SUB)
    return (PUB,) if perm & PERM_PUB else (SUB,)


def need_resource(resource: str) -> Resource:
    """A table need's resource (a topic, or a group as ``%RETRY%<group>``) as ACL 2.0's."""
    if resource.startswith(RETRY_PREFIX):
        return Resource(GROUP, resource[len(RETRY_PREFIX) :])
    return Resource(TOPIC, resource)


def need_checks(needs: Iterable[tuple[str, int]], actions: tuple[str, ...] = ()) -> list[Check]:
    """Table needs as ACL 2.0 checks; ``actions`` (a rule's) instead of the permission's."""
    return [(need_resource(r), actions or perm_actions(p)) for r, p in needs]


def best_entry(entries: Iterable[PolicyEntry]) -> PolicyEntry | None:
    """The entry that decides among matching ones: the most specific, a Deny among equals."""
    best: PolicyEntry | None = None
    best_rank: tuple[int, int, int] = (-1, -1, -1)
    for e in entries:
        rank = (*e.resource.specificity(), 1 if e.decision == DENY else 0)
        if rank > best_rank:
            best, best_rank = e, rank
    return best


def decide(acl: Acl | None, resource: Resource, actions: Iterable[str], host: str) -> str | None:
    """None when ``acl`` allows ``actions`` on ``resource`` from ``host``, else why not."""
    if acl is None:
        return "no matched policies."
    wanted = tuple(actions)
    for policy_type in (CUSTOM, DEFAULT):
        policy = acl.policy(policy_type)
        if policy is None:
            continue
        matching = [
            e
            for e in policy.entries
            if e.resource.matches(resource) and e.matches_actions(wanted) and e.matches_ip(host)
        ]
        if matching:
            entry = best_entry(matching)
            if entry is not None and entry.decision == DENY:
                return "the decision is deny."
            return None
    return "no matched policies."


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """broker.conf's ACL 2.0 switches (RocketMQ 5.3's names in snake_case)."""

    authentication_enabled: bool = False
    authorization_enabled: bool = False
    cluster_name: str = "DefaultCluster"
    # remoting request codes let in without authentication / without authorisation
    authentication_whitelist: frozenset[int] = frozenset()
    authorization_whitelist: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class AuthRules(PlainAcl):
    """The users and ACLs in force and the switches: what the ports decide with. ``accounts``
    (plain ACL's view) has one account per user, admin when Super."""

    users: Mapping[str, User] = field(default_factory=dict)
    acls: Mapping[str, Acl] = field(default_factory=dict)
    settings: AuthSettings = AuthSettings()

    def __post_init__(self) -> None:
        object.__setattr__(self, "users", MappingProxyType(dict(self.users)))
        object.__setattr__(self, "acls", MappingProxyType(dict(self.acls)))
        object.__setattr__(
            self,
            "accounts",
            MappingProxyType(
                {
                    u.username: Account(
                        access_key=u.username, secret_key=u.password, admin=u.is_super
                    )
                    for u in self.users.values()
                    if u.enabled
                }
            ),
        )

    def acl(self, username: str) -> Acl | None:
        return self.acls.get(USER_PREFIX + username)

    def authenticate(
        self, *, host: str, access_key: str | None, verify: Callable[[str], bool]
    ) -> Account | None:
        """The request's principal, or AccessDeniedError (RocketMQ 5.3's wording). None when
        neither switch is on (nothing to check)."""
        s = self.settings
        if not s.authentication_enabled and not s.authorization_enabled:
            return None
        user = self.users.get(access_key) if access_key else None
        if s.authentication_enabled:
            if not access_key:
                raise AccessDeniedError("username cannot be null.")
            if user is None:
                raise AccessDeniedError(f"User:{access_key} is not found.")
            if not user.enabled:
                raise AccessDeniedError(f"User:{access_key} is disabled.")
            if not verify(user.password):
                raise AccessDeniedError("check signature failed.")
        return Principal(
            access_key=access_key or "",
            secret_key=user.password if user else "",
            admin=user is not None and user.is_super,
            user=user,
            rules=self,
            host=host,
        )

    def unauthenticated(self, host: str, access_key: str | None) -> Principal:
        """The principal of a request let in without authentication (its code is in the
        authentication whitelist): the AccessKey it names, unverified."""
        user = self.users.get(access_key) if access_key else None
        return Principal(
            access_key=access_key or "",
            secret_key="",
            admin=False,
            user=user,
            rules=self,
            host=host,
        )

    def with_accounts(self, extra: Iterable[Account]) -> AuthRules:
        """These rules with ``extra`` accounts (the process's own) as Super users."""
        users = dict(self.users)
        users.update(
            (a.access_key, User(a.access_key, a.secret_key, SUPER if a.admin else "Normal"))
            for a in extra
        )
        return AuthRules(users=users, acls=self.acls, settings=self.settings)


@dataclass(frozen=True, slots=True)
class Principal(Account):
    """Who sent one request (a user, or only the AccessKey it named when authentication is
    off) and from where; ``check`` and ``require`` decide as ACL 2.0 does."""

    user: User | None = None
    rules: AuthRules | None = None
    host: str = ""

    @property
    def subject(self) -> str:
        return USER_PREFIX + self.access_key

    def authorize(self, checks: Iterable[Check]) -> None:
        """PermissionDeniedError unless every check passes (nothing when authorisation is
        off, and nothing for a Super user)."""
        rules = self.rules
        if rules is None or not rules.settings.authorization_enabled:
            return
        checks = list(checks)
        if not checks:
            return
        user = self.user
        if user is not None and user.enabled and user.is_super:
            return
        for resource, actions in checks:
            if not self.access_key:
                why = "Authorization failed: the request names no user."
            elif user is None:
                why = f"User:{self.access_key} not found."
            elif not user.enabled:
                why = f"User:{self.access_key} is disabled."
            else:
                reason = decide(rules.acl(user.username), resource, actions, self.host)
                if reason is None:
                    continue
                why = (
                    f"{self.subject} has no permission to access {resource.key} from "
                    f"{self.host}, {reason}"
                )
            raise PermissionDeniedError(why, resource=resource.key, needed=",".join(actions))

    def require(self, needs: Iterable[tuple[str, int]], actions: tuple[str, ...] = ()) -> None:
        self.authorize(need_checks(needs, actions))

    def check(
        self, code: int, needs: Mapping[str, int] | Iterable[tuple[str, int]], admin_needed: bool
    ) -> None:
        items = needs.items() if isinstance(needs, Mapping) else needs
        checks = need_checks(items)
        if admin_needed:
            checks.insert(0, (self.cluster(), (UPDATE,)))
        self.authorize(checks)

    def cluster(self) -> Resource:
        name = self.rules.settings.cluster_name if self.rules is not None else ""
        return Resource(CLUSTER, name)
