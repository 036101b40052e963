"""What the store's callers see of replication (``MessageStore.ha``): one interface over both
services, RocketMQ 4.x's ``HAService`` and controller mode's ``AutoSwitchHAService``. Callers
that act on controller mode's roles ask ``ha.switch`` (None outside controller mode) instead of
the service's class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ._auto_service import ReplicaStatistics
from ._epoch import EpochFile
from ._follower import Follower
from ._in_sync import InSyncReplicas
from ._link import Link
from ._port import HAStatistics
from ._transfer import GroupTransferService


class RoleSwitch(Protocol):
    """Controller mode: the role the controller gives, the SyncStateSet and the epochs."""

    @property
    def in_sync(self) -> InSyncReplicas: ...

    @property
    def epochs(self) -> EpochFile: ...

    @property
    def fenced(self) -> str: ...

    on_unknown_replica: Callable[[int], None]

    def change_to_master(
        self, epoch: int, broker_id: int, members: frozenset[int], set_epoch: int
    ) -> bool: ...

    def change_to_slave(self, epoch: int, broker_id: int, master_ha_address: str = "") -> bool: ...

    def fence(self, reason: str | None) -> None: ...

    def confirm_offset(self) -> int: ...

    def set_known_replicas(self, ids: frozenset[int]) -> None: ...

    def replica_statistics(self) -> ReplicaStatistics: ...

    def update_master_address(self, addr: str | None) -> None: ...


class Replication(Protocol):
    """A store's replication: the master's HA port and put stage, a slave's client."""

    @property
    def transfer(self) -> GroupTransferService:
        """The put stage: a SYNC put waits here for the slaves (the SyncStateSet)."""

    @property
    def listen_port(self) -> int: ...

    @property
    def connections(self) -> Sequence[Link]: ...

    @property
    def client(self) -> Follower | None: ...

    @property
    def master_address(self) -> str: ...

    @property
    def push2slave_max_offset(self) -> int: ...

    @property
    def switch(self) -> RoleSwitch | None:
        """Controller mode's role switch (None: the role is the configuration's)."""

    def start(self) -> None: ...

    def shutdown(self) -> None: ...

    def connection_count(self) -> int: ...

    def update_master_address(self, addr: str | None) -> None: ...

    def statistics(self) -> HAStatistics: ...

    def runtime_info(self) -> dict[str, str]: ...
