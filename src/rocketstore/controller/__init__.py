"""RocketMQ 5's controller: it keeps each broker group's replicas, master, SyncStateSet and
epochs, watches the brokers' heartbeats and elects a new master when a group loses its own
(controller mode). Its state lives in an existing consensus engine behind one interface
(``StateBackend``): a durable local file for one controller, or etcd for several.

This package is the server. What a broker or an administrator speaks to it with is the
protocol room's (``rocketstore.protocol``): the header codecs (``_controller_headers``), the body
codecs (``_controller_bodies``), a broker's client of the active controller
(``_controller_client``) and the client's errors (``_errors``), none of which loads this
package. See docs/controller.md.
"""

from ._backend import Member as Member
from ._backend import StateBackend as StateBackend
from ._backend import Versioned as Versioned
from ._config import ControllerConfig as ControllerConfig
from ._config import enabled_in_namesrv as enabled_in_namesrv
from ._controller import Controller as Controller
from ._errors import BackendError as BackendError
from ._errors import BackendUnavailableError as BackendUnavailableError
from ._errors import ControllerConfigError as ControllerConfigError
from ._errors import LeadershipLostError as LeadershipLostError
from ._errors import StateCorruptError as StateCorruptError
from ._etcd_backend import EtcdBackend as EtcdBackend
from ._etcd_client import EtcdAuthError as EtcdAuthError
from ._etcd_client import EtcdSecurity as EtcdSecurity
from ._file_backend import FileBackend as FileBackend
from ._processor import ControllerProcessor as ControllerProcessor
from ._record import GroupRecord as GroupRecord
from ._stats import ControllerSnapshot as ControllerSnapshot
from ._stats import GroupGauges as GroupGauges

__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "Controller",
    "ControllerConfig",
    "ControllerConfigError",
    "ControllerProcessor",
    "ControllerSnapshot",
    "EtcdAuthError",
    "EtcdBackend",
    "EtcdSecurity",
    "FileBackend",
    "GroupGauges",
    "GroupRecord",
    "LeadershipLostError",
    "Member",
    "StateBackend",
    "StateCorruptError",
    "Versioned",
    "enabled_in_namesrv",
]
