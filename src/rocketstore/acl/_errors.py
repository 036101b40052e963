"""The ACL's errors::

StoreError
├── StoreConfigError
│   └── AclConfigError      a plain_acl.yml that cannot be used
└── AccessDeniedError       a request the ACL refuses (worded as RocketMQ does)
    └── PermissionDeniedError   by a signed, known account that lacks a permission
"""

from __future__ import annotations

from ..store._errors import StoreConfigError, StoreError


class AclConfigError(StoreConfigError):
    """An ACL file that cannot be read or does not follow plain_acl.yml's format."""


class AccessDeniedError(StoreError):
    """A request the ACL refuses; ``str()`` is RocketMQ's AclException message."""


class PermissionDeniedError(AccessDeniedError):
    """A known account that signed its request but lacks a permission (or admin);
    ``resource`` (``topic:T``, ``group:G``) and ``needed`` say which, when it was one."""

    def __init__(self, message: str, *, resource: str = "", needed: str = "") -> None:
        super().__init__(message)
        self.resource = resource
        self.needed = needed
