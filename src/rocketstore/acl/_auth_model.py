"""RocketMQ 5.3's ACL 2.0 model: users, and the ACL (policies) of each subject.

A user (``UserInfo`` on the wire)::

    {"username": "alice", "password": "secret12", "userType": "Normal", "userStatus": "enable"}

    userType    Super (passes every authorisation check) or Normal
    userStatus  enable or disable (a disabled user is refused)

An ACL (``AclInfo`` on the wire), one per subject ``User:<name>``::

    {"subject": "User:alice",
     "policies": [{"policyType": "Custom",
                   "entries": [{"resource": "Topic:orders",
                                "actions": ["Pub", "Sub"],
                                "sourceIps": ["10.0.0.0/8"],
                                "decision": "Allow"}]}]}

    policyType  Custom (what an operator grants) or Default (what the subject gets where no
                custom entry matches)
    resource    ``*`` (anything), ``Cluster:<name>``, ``Namespace:<name>``, ``Topic:<name>``,
                ``Group:<name>``; a name is literal, a prefix (``Topic:orders-*``) or ``*``
                (every resource of the type)
    actions     Pub, Sub, Create, Update, Delete, Get, List, All
    sourceIps   addresses or CIDR blocks the entry is limited to (none: every address)
    decision    Allow or Deny

Names are matched case-insensitively on the way in and written back in RocketMQ's spelling.
One entry per resource in a policy: an entry for a resource already there replaces it.

Immutable values; any thread.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ._errors import AuthMetadataError

SUPER = "Super"
NORMAL = "Normal"
ENABLE = "enable"
DISABLE = "disable"
CUSTOM = "Custom"
DEFAULT = "Default"
ALLOW = "Allow"
DENY = "Deny"

# actions, as RocketMQ names them; ANY is what a request names when any entry on the
# resource decides it (never granted)
ALL = "All"
ANY = "Any"
PUB = "Pub"
SUB = "Sub"
CREATE = "Create"
UPDATE = "Update"
DELETE = "Delete"
GET = "Get"
LIST = "List"
ACTIONS = (ALL, ANY, PUB, SUB, CREATE, UPDATE, DELETE, GET, LIST)

# resource types and patterns
TYPE_ANY = "Any"
CLUSTER = "Cluster"
NAMESPACE = "Namespace"
TOPIC = "Topic"
GROUP = "Group"
RESOURCE_TYPES = (CLUSTER, NAMESPACE, TOPIC, GROUP)
LITERAL = "LITERAL"
PREFIXED = "PREFIXED"
PATTERN_ANY = "ANY"

USER_PREFIX = "User:"


def _named(value: Any, names: Iterable[str], what: str) -> str:
    """``value`` in RocketMQ's spelling of one of ``names`` (any case); AuthMetadataError."""
    if isinstance(value, str):
        for name in names:
            if value.strip().lower() == name.lower():
                return name
    raise AuthMetadataError(f"The {what} {value!r} is illegal.")


def _maybe_named(value: Any, names: Iterable[str], what: str) -> str | None:
    return None if value is None or value == "" else _named(value, names, what)


@dataclass(frozen=True, slots=True)
class User:
    username: str
    password: str = field(default="", repr=False)
    user_type: str = NORMAL
    user_status: str = ENABLE

    @property
    def is_super(self) -> bool:
        return self.user_type == SUPER

    @property
    def enabled(self) -> bool:
        return self.user_status != DISABLE

    def to_json(self) -> dict[str, Any]:
        return {
            "username": self.username,
            "password": self.password,
            "userType": self.user_type,
            "userStatus": self.user_status,
        }


@dataclass(frozen=True, slots=True)
class UserChange:
    """A ``UserInfo`` as a request sends it: what is absent stays as it was (an update) or
    takes its default (a create)."""

    username: str
    password: str | None = field(default=None, repr=False)
    user_type: str | None = None
    user_status: str | None = None

    @classmethod
    def from_json(cls, doc: Any, username: str) -> UserChange:
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise AuthMetadataError("The body of user is not a UserInfo object.")
        password = doc.get("password")
        if password is not None and not isinstance(password, str):
            raise AuthMetadataError("The password must be text.")
        return cls(
            username=username,
            password=password,
            user_type=_maybe_named(doc.get("userType"), (SUPER, NORMAL), "userType"),
            user_status=_maybe_named(doc.get("userStatus"), (ENABLE, DISABLE), "userStatus"),
        )

    def created(self) -> User:
        if not self.username.strip():
            raise AuthMetadataError("username can not be blank")
        if not self.password or not self.password.strip():
            raise AuthMetadataError("password can not be blank")
        return User(
            self.username, self.password, self.user_type or NORMAL, self.user_status or ENABLE
        )

    def applied_to(self, old: User) -> User:
        return User(
            old.username,
            self.password if self.password and self.password.strip() else old.password,
            self.user_type or old.user_type,
            self.user_status or old.user_status,
        )


def user_from_json(doc: Any) -> User:
    """A stored user; AuthMetadataError when it is not one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("username"), str):
        raise AuthMetadataError(f"not a user: {doc!r}")
    return UserChange.from_json(doc, doc["username"]).created()


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource a policy entry names, or a request acts on (then always LITERAL)."""

    type: str
    name: str = ""
    pattern: str = LITERAL

    @classmethod
    def parse(cls, key: Any) -> Resource:
        """``*``, ``Type:name``, ``Type:prefix*``, ``Type:*``; AuthMetadataError."""
        if not isinstance(key, str) or not key.strip():
            raise AuthMetadataError("The resource is null.")
        text = key.strip()
        if text == "*":
            return cls(TYPE_ANY, "", PATTERN_ANY)
        kind, colon, name = text.partition(":")
        if not colon:
            raise AuthMetadataError(f"The resource {key!r} is not Type:name.")
        rtype = _named(kind, RESOURCE_TYPES, "resource type")
        if name == "*":
            return cls(rtype, "", PATTERN_ANY)
        if name.endswith("*"):
            return cls(rtype, name[:-1], PREFIXED)
        return cls(rtype, name, LITERAL)

    @property
    def key(self) -> str:
        if self.type == TYPE_ANY:
            return "*"
        if self.pattern == PATTERN_ANY:
            return f"{self.type}:*"
        if self.pattern == PREFIXED:
            return f"{self.type}:{self.name}*"
        return f"{self.type}:{self.name}"

    def matches(self, target: Resource) -> bool:
        """Whether this (an entry's resource) covers ``target`` (a request's)."""
        if self.type == TYPE_ANY:
            return True
        if self.type != target.type:
            return False
        if self.pattern == PATTERN_ANY:
            return True
        if self.pattern == PREFIXED:
            return target.name.startswith(self.name)
        return target.name == self.name

    def specificity(self) -> tuple[int, int]:
        """Higher is more specific: a literal name, then the longest prefix, then a type's
        ``*``, then ``*`` (RocketMQ 5.3's order of matching entries)."""
        if self.type == TYPE_ANY:
            return (0, 0)
        if self.pattern == LITERAL:
            return (3, 0)
        if self.pattern == PREFIXED:
            return (2, len(self.name))
        return (1, 0)


def _source_ip(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise AuthMetadataError("The source ip is empty.")
    try:
        ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise AuthMetadataError(f"The source ip {text!r} is invalid.") from None
    return text.strip()


def ip_in(host: str, source_ips: Iterable[str]) -> bool:
    """Whether ``host`` is one of the addresses or CIDR blocks."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for text in source_ips:
        try:
            if ip in ipaddress.ip_network(text, strict=False):
                return True
        except (ValueError, TypeError):
            continue
    return False


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    resource: Resource
    actions: tuple[str, ...]
    source_ips: tuple[str, ...] = ()
    decision: str = ALLOW

    @classmethod
    def from_json(cls, doc: Any) -> PolicyEntry:
        if not isinstance(doc, dict):
            raise AuthMetadataError("A policy entry must be a PolicyEntryInfo object.")
        actions_doc = doc.get("actions") or []
        if isinstance(actions_doc, str):
            actions_doc = [a for a in actions_doc.split(",") if a.strip()]
        if not isinstance(actions_doc, list):
            raise AuthMetadataError("The actions must be a list.")
        # RocketMQ drops action names it does not know
        actions = tuple(
            dict.fromkeys(a for a in (_maybe_known(x) for x in actions_doc) if a is not None)
        )
        if not actions:
            raise AuthMetadataError("The actions is empty.")
        if ANY in actions:
            raise AuthMetadataError("The actions can not be Any.")
        ips_doc = doc.get("sourceIps") or []
        if not isinstance(ips_doc, list):
            raise AuthMetadataError("The sourceIps must be a list.")
        decision = doc.get("decision")
        if decision is None:
            raise AuthMetadataError("The decision is null or illegal.")
        return cls(
            Resource.parse(doc.get("resource")),
            actions,
            tuple(_source_ip(ip) for ip in ips_doc),
            _named(decision, (ALLOW, DENY), "decision"),
        )

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's PolicyEntryInfo; no ``sourceIps`` for an entry without addresses (5.3
        sends none, and mqadmin prints that as null)."""
        doc: dict[str, Any] = {"resource": self.resource.key, "actions": list(self.actions)}
        if self.source_ips:
            doc["sourceIps"] = list(self.source_ips)
        doc["decision"] = self.decision
        return doc

    def matches_actions(self, wanted: Iterable[str]) -> bool:
        wanted = tuple(wanted)
        if ANY in wanted:
            return True
        return ALL in self.actions or any(a in self.actions for a in wanted)

    def matches_ip(self, host: str) -> bool:
        return not self.source_ips or ip_in(host, self.source_ips)


def _maybe_known(value: Any) -> str | None:
    try:
        return _named(value, ACTIONS, "action")
    except AuthMetadataError:
        return None


@dataclass(frozen=True, slots=True)
class Policy:
    policy_type: str
    entries: tuple[PolicyEntry, ...]

    @classmethod
    def from_json(cls, doc: Any) -> Policy:
        if not isinstance(doc, dict):
            raise AuthMetadataError("A policy must be a PolicyInfo object.")
        entries_doc = doc.get("entries") or []
        if not isinstance(entries_doc, list) or not entries_doc:
            raise AuthMetadataError("The policy entries is empty.")
        policy_type = _maybe_named(doc.get("policyType"), (CUSTOM, DEFAULT), "policyType")
        by_resource: dict[Resource, PolicyEntry] = {}
        for e in entries_doc:
            entry = PolicyEntry.from_json(e)
            by_resource[entry.resource] = entry
        return cls(policy_type or CUSTOM, tuple(by_resource.values()))

    def to_json(self) -> dict[str, Any]:
        return {"policyType": self.policy_type, "entries": [e.to_json() for e in self.entries]}

    def updated(self, entries: Iterable[PolicyEntry]) -> Policy:
        """These entries with ``entries`` put in (one per resource: a new one replaces)."""
        by_resource = {e.resource: e for e in self.entries}
        for e in entries:
            by_resource[e.resource] = e
        return replace(self, entries=tuple(by_resource.values()))

    def without(self, resource: Resource) -> Policy:
        return replace(self, entries=tuple(e for e in self.entries if e.resource != resource))


def subject_key(text: Any) -> str:
    """A subject as ``User:<name>``; AuthMetadataError for any other."""
    if not isinstance(text, str) or not text.strip():
        raise AuthMetadataError("The subject is null.")
    kind, colon, name = text.strip().partition(":")
    if not colon or kind.lower() != "user" or not name:
        raise AuthMetadataError(f"The subject {text!r} is not User:<name>.")
    return USER_PREFIX + name


@dataclass(frozen=True, slots=True)
class Acl:
    subject: str
    policies: tuple[Policy, ...]

    @property
    def username(self) -> str:
        return self.subject[len(USER_PREFIX) :]

    @classmethod
    def from_json(cls, doc: Any, subject: str | None = None) -> Acl:
        """An ``AclInfo``; the header's ``subject`` when the body names none."""
        if not isinstance(doc, dict):
            raise AuthMetadataError("The body of acl is null")
        policies_doc = doc.get("policies")
        if not isinstance(policies_doc, list) or not policies_doc:
            raise AuthMetadataError("The policies is empty.")
        named = doc.get("subject") or subject
        return cls(subject_key(named), tuple(Policy.from_json(p) for p in policies_doc))

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "policies": [p.to_json() for p in self.policies]}

    def policy(self, policy_type: str) -> Policy | None:
        for p in self.policies:
            if p.policy_type == policy_type:
                return p
        return None

    def updated(self, policies: Iterable[Policy]) -> Acl:
        """This ACL with ``policies`` merged in, entry by entry (RocketMQ's create and update
        both merge)."""
        out = list(self.policies)
        for new in policies:
            for i, old in enumerate(out):
                if old.policy_type == new.policy_type:
                    out[i] = old.updated(new.entries)
                    break
            else:
                out.append(new)
        return replace(self, policies=tuple(out))

    def without(self, policy_type: str, resource: Resource) -> Acl:
        out = []
        for p in self.policies:
            if p.policy_type == policy_type:
                p = p.without(resource)
                if not p.entries:
                    continue
            out.append(p)
        return replace(self, policies=tuple(out))

    def filtered(self, resource_filter: str) -> Acl:
        """Only the entries whose resource key contains ``resource_filter`` (listAcl's)."""
        out = []
        for p in self.policies:
            kept = tuple(e for e in p.entries if resource_filter in e.resource.key)
            if kept:
                out.append(replace(p, entries=kept))
        return replace(self, policies=tuple(out))
