"""The ACL's errors::

StoreError
├── StoreConfigError
│   └── AclConfigError      a plain_acl.yml that cannot be used
├── AuthMetadataError       an ACL 2.0 user or ACL that cannot be stored (RocketMQ's wording)
└── AccessDeniedError       a request the ACL refuses (worded as RocketMQ does)
    └── PermissionDeniedError   by a signed, known account that lacks a permission
"""

from __future__ import annotations

from ..store._errors import StoreConfigError, StoreError


class AclConfigError(StoreConfigError):
    """An ACL file that cannot be read or does not follow plain_acl.yml's format."""


class AuthMetadataError(StoreError):
    """An ACL 2.0 user or ACL a request or file gives that cannot be used, or a change that
    cannot be made (a user that exists already, an ACL of a subject with no user)."""


class AccessDeniedError(StoreError):
    """A request the ACL refuses; ``str()`` is RocketMQ's AclException message."""


class PermissionDeniedError(AccessDeniedError):
    """A known account that signed its request but lacks a permission (or admin);
    ``resource`` (``topic:T``, ``group:G``) and ``needed`` say which, when it was one."""

    def __init__(self, message: str, *, resource: str = "", needed: str = "") -> None:
        super().__init__(message)
        self.resource = resource
        self.needed = needed
