"""The protocol room's exceptions: a body a peer sent that is not what the protocol says, and a
controller's answer a client cannot use::

    StoreError                        (rocketstore.StoreError)
    └── ProtocolError                 a body that is not what a client or broker sends (also a
        │                             ValueError)
        ├── InvalidSubscriptionError  a subscription expression cannot be parsed
        │                             (SUBSCRIPTION_PARSE_FAILED on the wire)
        └── InvalidHeartbeatError     a heartbeat body is not what a client sends

    ControllerError                   base of the controller's errors (the server's own are in
    │                                 rocketstore.controller)
    ├── ControllerRefusedError        the active controller answered with an error code
    │                                 (``code``, ``remark``; ``access_denied``: its ACL refused
    │                                 the request, and the message says so)
    └── NoActiveControllerError       no controller names an active one

Errors of a request's header or of a controller body are ``remoting.RequestError`` s, answered
on the wire.
"""

from __future__ import annotations

from ..remoting._signing import ACL_EXCEPTION_PREFIX as EXCEPTION_PREFIX
from ..store._errors import StoreError


class ProtocolError(StoreError, ValueError):
    """A body that is not what the protocol says."""


class InvalidSubscriptionError(ProtocolError):
    """A subscription expression (``"TagA || TagB"``) cannot be parsed."""


class InvalidHeartbeatError(ProtocolError):
    """A HEART_BEAT body that is not JSON of the expected shape."""


class ControllerError(Exception):
    """Base of the controller's errors."""


class ControllerRefusedError(ControllerError):
    """The active controller answered a request with ``code`` (not SUCCESS)."""

    def __init__(self, code: int, remark: str | None) -> None:
        text = remark or ""
        self.access_denied = code == 1 and text.startswith(EXCEPTION_PREFIX)  # SYSTEM_ERROR
        if self.access_denied:
            message = f"the controller's ACL refused the request: {text[len(EXCEPTION_PREFIX) :]}"
        else:
            message = f"controller refused: code {code}: {text}".rstrip(": ")
        super().__init__(message)
        self.code = code
        self.remark = remark


class NoActiveControllerError(ControllerError):
    """None of the controllers names an active one (or none can be reached)."""
