"""The controller's exceptions, one tree::

    ControllerError
    ├── ControllerConfigError      a setting that cannot be used (also a ValueError)
    ├── StateCorruptError          a stored group record or state file that does not decode
    ├── BackendError               the state backend could not do what was asked
    │   ├── BackendUnavailableError   not reachable now (etcd down, no quorum): try again
    │   └── LeadershipLostError       a write refused because this controller no longer holds
    │                                 the leadership it wrote under
    ├── ControllerRefusedError     (a client's) the active controller answered with an error
    │                              code (``code``, ``remark``; ``access_denied``: its ACL
    │                              refused the request, and the message says so)
    └── NoActiveControllerError    (a client's) no controller names an active one

Errors of a request (a header field missing, a body that does not decode) are
``remoting.RequestError`` s, answered on the wire; these are the controller's own.
"""

from __future__ import annotations

from ..remoting._signing import ACL_EXCEPTION_PREFIX as EXCEPTION_PREFIX


class ControllerError(Exception):
    """Base of the controller's errors."""


class ControllerConfigError(ControllerError, ValueError):
    """A controller setting that is missing, malformed or out of range."""


class StateCorruptError(ControllerError):
    """A stored record that is not a group record (or a state file that is not one)."""


class BackendError(ControllerError):
    """The state backend failed."""


class BackendUnavailableError(BackendError):
    """The backend cannot be reached now (etcd down or without a quorum, a disk error)."""


class LeadershipLostError(BackendError):
    """A write refused: the leadership this controller wrote under is no longer its own."""


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
