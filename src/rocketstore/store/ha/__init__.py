"""Replication: RocketMQ 4.x's master / slave HA and controller mode's AutoSwitch HA, one core
under two handshakes.

    _api         Replication (what ``MessageStore.ha`` is) and RoleSwitch (``ha.switch``:
                 controller mode's roles), the interface callers use
    _port        HAPort: the master's HA port, its connections and the id each one holds
    _link        Link: a master's side of one slave (reader, writer, batching, idle waits)
    _follower    Follower: a slave's side (connect, prove, report, append)
    _auth        HAGuard and the proof of membership before either protocol (inner account)
    _tls         HATls and TlsStream: TLS on the HA port (contexts given by the broker)
    _wire        4.x frames          _connection HAConnection   _client HAClient
                                     _service    HAService      _transfer GroupTransferService
    _auto_wire   AutoSwitch frames   _auto_connection AutoConnection   _auto_client AutoClient
                                     _auto_service AutoSwitchHAService  _in_sync InSyncReplicas
    _epoch, _truncate   the epoch file and the cut of a divergent log (AutoSwitch)

Imports: the foundation and ``store.log`` (``store.queue`` for the cut).
"""

from ._api import Replication as Replication
from ._api import RoleSwitch as RoleSwitch
from ._auth import HAGuard as HAGuard
from ._client import HAClient as HAClient
from ._connection import HAConnection as HAConnection
from ._follower import ClientState as ClientState
from ._link import ConnectionState as ConnectionState
from ._service import HAService as HAService
from ._service import HAStatistics as HAStatistics
from ._service import SlaveConnectionStats as SlaveConnectionStats
from ._transfer import GroupTransferService as GroupTransferService

__all__ = [
    "ClientState",
    "ConnectionState",
    "GroupTransferService",
    "HAClient",
    "HAConnection",
    "HAGuard",
    "HAService",
    "HAStatistics",
    "Replication",
    "RoleSwitch",
    "SlaveConnectionStats",
]
