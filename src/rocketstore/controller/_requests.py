"""The requests about broker groups: each reads the group's record from the state backend,
computes its answer (``_replicas``) and, when the group changes, stores the new record with a
compare-and-set on the revision it read. Changes are made one at a time (as RocketMQ's event
scheduler makes them); one whose record changed under it is computed again, at most
``ATTEMPTS`` times. Anything but the active controller (``Leadership.active``) answers
CONTROLLER_NOT_LEADER; a write the backend refuses for want of leadership steps the controller
down.

Each election is logged (the group, the old and the new master, both epochs, who asked),
counted, and when it made a new master announced to the group's live brokers (``_notify``).

Loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from ..protocol._controller_bodies import SyncStateSet
from ..protocol._controller_headers import (
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    GetNextBrokerIdRequest,
    GetReplicaInfoRequest,
    RegisterBrokerRequest,
    require,
)
from ..remoting import RequestError, ResponseCode
from . import _replicas as replicas
from ._backend import StateBackend, Versioned
from ._config import ControllerConfig
from ._errors import LeadershipLostError
from ._heartbeat import BrokerLive, BrokerLiveTable
from ._notify import RoleNotifier
from ._record import GroupRecord
from ._replicas import Election, Outcome
from ._stats import ControllerStats

log = logging.getLogger(__name__)

ATTEMPTS = 3
FEW_NAMES = 8  # GET_SYNC_STATE_DATA for more groups than this reads them all at once
NOT_LEADER = Outcome(
    code=ResponseCode.CONTROLLER_NOT_LEADER, remark="The controller is not in leader state"
)


class Leadership(Protocol):
    """Whether this controller is the active one, and how it stops being it."""

    @property
    def active(self) -> bool: ...

    def step_down(self, why: str) -> None: ...


class GroupRequests:
    """The group requests of one controller over ``backend``; ``records`` keeps the last read
    of each group (for the metrics)."""

    def __init__(
        self,
        backend: StateBackend,
        live: BrokerLiveTable,
        notifier: RoleNotifier,
        stats: ControllerStats,
        *,
        config: Callable[[], ControllerConfig],
        leadership: Leadership,
    ) -> None:
        self.backend = backend
        self.live = live
        self.notifier = notifier
        self.stats = stats
        self.config = config
        self.leadership = leadership
        self.records: dict[str, GroupRecord] = {}
        self._writing = asyncio.Lock()

    # ---- the state ------------------------------------------------------------------------------

    async def read(self, broker_name: str) -> Versioned | None:
        versioned = await self.backend.read(broker_name)
        if versioned is None:
            self.records.pop(broker_name, None)
        else:
            self.records[broker_name] = versioned.record
        return versioned

    async def change(
        self, broker_name: str, compute: Callable[[GroupRecord | None], Outcome]
    ) -> Outcome:
        """Compute a change of ``broker_name``'s group over its stored record and store it;
        answered NOT_LEADER when this controller is not (or stops being) the active one."""
        if not self.leadership.active:
            return NOT_LEADER
        async with self._writing:
            for _attempt in range(ATTEMPTS):
                if not self.leadership.active:
                    return NOT_LEADER
                versioned = await self.read(broker_name)
                outcome = compute(None if versioned is None else versioned.record)
                if not outcome.writes:
                    return outcome
                revision = 0 if versioned is None else versioned.revision
                try:
                    stored = await self.backend.compare_and_set(
                        broker_name, None if outcome.delete else outcome.record, revision
                    )
                except LeadershipLostError as exc:
                    self.leadership.step_down(str(exc))
                    return NOT_LEADER
                if stored is not None:
                    if outcome.record is None:
                        self.records.pop(broker_name, None)
                    else:
                        self.records[broker_name] = outcome.record
                    return outcome
                log.info("controller: group %s changed while being written; again", broker_name)
        raise RequestError(f"the record of {broker_name} kept changing; try again")

    def _alive(self, record: GroupRecord) -> Callable[[int], bool]:
        return self.live.alive_checker(record.cluster_name, record.broker_name)

    # ---- requests -------------------------------------------------------------------------------

    async def next_broker_id(self, req: GetNextBrokerIdRequest) -> Outcome:
        if not self.leadership.active:
            return NOT_LEADER
        versioned = await self.read(require(req.broker_name, "brokerName"))
        return replicas.next_broker_id(req, None if versioned is None else versioned.record)

    async def apply_broker_id(self, req: ApplyBrokerIdRequest) -> Outcome:
        name = require(req.broker_name, "brokerName")
        outcome = await self.change(name, lambda r: replicas.apply_broker_id(req, r))
        if outcome.record is not None:
            log.info(
                "controller: broker group %s: broker id %s applied by %s",
                name,
                req.applied_broker_id,
                req.register_check_code,
            )
        return outcome

    async def register_broker(self, req: RegisterBrokerRequest) -> Outcome:
        name = require(req.broker_name, "brokerName")
        return await self.change(
            name, lambda r: replicas.register_broker(req, r, self._alive(r) if r else _nobody)
        )

    async def elect_master(self, req: ElectMasterRequest) -> Outcome:
        """ELECT_MASTER from a broker (designateElect false) or an administrator (true)."""
        trigger = replicas.BY_ADMIN if req.designate_elect else replicas.BY_BROKER
        return await self.elect(req.broker_name, req.broker_id, trigger)

    async def elect(self, broker_name: str, broker_id: int | None, trigger: str) -> Outcome:
        def compute(record: GroupRecord | None) -> Outcome:
            if record is None:
                return replicas.elect_master(
                    None, broker_id, trigger=trigger, alive=_nobody, live_info=_unknown,
                    unclean=False,
                )  # fmt: skip
            return replicas.elect_master(
                record,
                broker_id,
                trigger=trigger,
                alive=self._alive(record),
                live_info=self.live.info_getter(record.cluster_name, record.broker_name),
                unclean=self.config().enable_elect_unclean_master,
            )

        outcome = await self.change(broker_name, compute)
        if outcome.election is not None:
            self._elected(outcome.election)
        return outcome

    def _elected(self, election: Election) -> None:
        self.stats.election(election.cluster, election.broker_name, election.result)
        if election.result == replicas.NEW_MASTER_ELECTED:
            log.warning(
                "controller: broker group %s (cluster %s) elected broker %s (%s) master at "
                "master epoch %d, replacing %s; SyncStateSet %s at epoch %d (asked by the %s)",
                election.broker_name,
                election.cluster,
                election.new_master,
                election.master_address,
                election.master_epoch,
                "none" if election.old_master is None else f"broker {election.old_master}",
                sorted(election.sync_state_set),
                election.sync_state_set_epoch,
                election.trigger,
            )
            if self.config().notify_broker_role_changed:
                alive = self.live.alive_checker(election.cluster, election.broker_name)
                self.notifier.notify(election, alive)
        elif election.result == replicas.NO_MASTER_ELECTED:
            log.warning(
                "controller: broker group %s (cluster %s) has no master to elect (old master "
                "%s, master epoch %d, SyncStateSet %s; asked by the %s)",
                election.broker_name,
                election.cluster,
                election.old_master,
                election.master_epoch,
                sorted(election.sync_state_set),
                election.trigger,
            )
        else:
            log.info(
                "controller: broker group %s keeps master %s at master epoch %d (asked by the %s)",
                election.broker_name,
                election.old_master,
                election.master_epoch,
                election.trigger,
            )

    async def alter_sync_state_set(
        self, req: AlterSyncStateSetRequest, proposed: SyncStateSet
    ) -> Outcome:
        name = require(req.broker_name, "brokerName")
        outcome = await self.change(
            name,
            lambda r: replicas.alter_sync_state_set(
                req, proposed, r, self._alive(r) if r else _nobody
            ),
        )
        if outcome.record is not None:
            log.info(
                "controller: broker group %s: SyncStateSet %s at epoch %d (from master %s)",
                name,
                sorted(outcome.record.sync_state_set),
                outcome.record.sync_state_set_epoch,
                req.master_broker_id,
            )
        return outcome

    async def replica_info(self, req: GetReplicaInfoRequest) -> Outcome:
        if not self.leadership.active:
            return NOT_LEADER
        versioned = await self.read(require(req.broker_name, "brokerName"))
        return replicas.replica_info(None if versioned is None else versioned.record)

    async def sync_state_data(self, broker_names: list[str]) -> Outcome:
        if not self.leadership.active:
            return NOT_LEADER
        found: dict[str, GroupRecord] = {}
        if len(broker_names) > FEW_NAMES:  # one poll of every group, not a read per name
            every = await self.backend.read_all()
            found = {n: every[n].record for n in dict.fromkeys(broker_names) if n in every}
        else:
            for name in dict.fromkeys(broker_names):
                versioned = await self.read(name)
                if versioned is not None:
                    found[name] = versioned.record
        return replicas.sync_state_data(found, self._alive)

    async def clean_broker_data(self, req: CleanBrokerDataRequest) -> Outcome:
        def compute(record: GroupRecord | None) -> Outcome:
            cluster = record.cluster_name if record is not None else (req.cluster_name or "")
            alive = self.live.alive_checker(cluster, req.broker_name)
            return replicas.clean_broker_data(req, record, alive)

        outcome = await self.change(req.broker_name, compute)
        if outcome.writes:
            log.warning(
                "controller: broker group %s: %s forgotten (clean broker data)",
                req.broker_name,
                f"brokers {req.broker_controller_ids_to_clean}"
                if outcome.record is not None
                else "the whole group",
            )
        return outcome


def _nobody(_broker_id: int) -> bool:
    return False


def _unknown(_broker_id: int) -> BrokerLive | None:
    return None
