"""Replication: RocketMQ 4.x's master / slave HA on its own wire protocol (see ``_wire``)."""

from ._client import ClientState as ClientState
from ._client import HAClient as HAClient
from ._connection import ConnectionState as ConnectionState
from ._connection import HAConnection as HAConnection
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
    "HAService",
    "HAStatistics",
    "SlaveConnectionStats",
]
