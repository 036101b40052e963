"""The controller's exceptions, one tree under the protocol room's ``ControllerError``::

    ControllerError                (rocketstore.protocol._errors)
    ├── ControllerConfigError      a setting that cannot be used (also a ValueError)
    ├── StateCorruptError          a stored group record or state file that does not decode
    ├── BackendError               the state backend could not do what was asked
    │   ├── BackendUnavailableError   not reachable now (etcd down, no quorum): try again
    │   └── LeadershipLostError       a write refused because this controller no longer holds
    │                                 the leadership it wrote under
    ├── ControllerRefusedError     (a client's, rocketstore.protocol._errors) the active
    │                              controller answered with an error code
    └── NoActiveControllerError    (a client's, rocketstore.protocol._errors) no controller
                                   names an active one

Errors of a request (a header field missing, a body that does not decode) are
``remoting.RequestError`` s, answered on the wire; these are the controller's own.
"""

from __future__ import annotations

from ..protocol._errors import ControllerError


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
