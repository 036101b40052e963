"""The controller: the broker groups' records in a state backend, the brokers' heartbeats, and
the elections (RocketMQ 5.1.4's ControllerManager and DLedgerController over a
``StateBackend`` instead of DLedger).

Every controller of a group serves every request, but only the active one (the holder of the
backend's leadership) answers anything but GET_METADATA_INFO and heartbeats: the others answer
CONTROLLER_NOT_LEADER, and GET_METADATA_INFO names the active one. A request that changes a group
reads its record, computes the answer (``_replicas``) and stores the new record with a
compare-and-set on the revision it read; changes are made one at a time, and one whose record
changed under it is computed again (at most ``ATTEMPTS`` times).

Background work (``start``):

- the leadership loop: takes or renews the backend's leadership every ``renew_interval``
  seconds (a third of the etcd lease), logging each change of role;
- the heartbeat scan (every ``scanNotActiveBrokerInterval``): brokers whose heartbeats stopped
  are dropped, and a group whose master was one of them gets an election;
- the master scan (every ``scanInactiveMasterInterval``): a group whose master is not alive but
  that has a replica that is gets an election. A controller judges no master by silence before
  it has listened for heartbeats for a whole heartbeat timeout (a controller just started, or
  just made active, has not heard from every broker yet).

A broker whose heartbeat connection closes is known dead at once (its group's election follows
at once when it was the master). Each election is logged (the group, the old and the new
master, both epochs, who asked) and, when it made a new master, announced to the group's live
brokers (``_notify``).

Loop thread: everything runs on the event loop that serves the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..remoting import RequestError, ResponseCode
from ..store._clock import SYSTEM_CLOCK, Clock
from . import _replicas as replicas
from ._backend import Member, StateBackend, Versioned
from ._bodies import SyncStateSet
from ._config import ControllerConfig
from ._errors import BackendError, LeadershipLostError
from ._headers import (
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerHeartbeatRequest,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    GetMetaDataResponse,
    GetNextBrokerIdRequest,
    GetReplicaInfoRequest,
    RegisterBrokerRequest,
    require,
)
from ._heartbeat import BrokerLive, BrokerLiveTable
from ._notify import RoleNotifier
from ._record import GroupRecord
from ._replicas import Election, Outcome
from ._stats import ControllerSnapshot, ControllerStats, GroupGauges

log = logging.getLogger(__name__)

ATTEMPTS = 3
NOT_LEADER = Outcome(
    code=ResponseCode.CONTROLLER_NOT_LEADER, remark="The controller is not in leader state"
)


class Controller:
    """One controller over ``backend``. ``start(address)`` with the address it serves on."""

    def __init__(
        self,
        config: ControllerConfig,
        backend: StateBackend,
        *,
        clock: Clock = SYSTEM_CLOCK,
        notifier: RoleNotifier | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.clock = clock
        self.live = BrokerLiveTable(clock, config.broker_heartbeat_timeout_ms)
        self.notifier = notifier if notifier is not None else RoleNotifier()
        self.stats = ControllerStats()
        self.me = Member(config.self_id, config.address)
        self.records: dict[str, GroupRecord] = {}  # the last read of each group (metrics)
        self.renew_interval = max(config.lease_ttl_s / 3.0, 0.2)
        self._active = False
        self._closing = False
        self._listening_since = clock.monotonic()
        self._writing = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._elections: set[asyncio.Task[None]] = set()  # started by a broker's death

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self, address: str) -> None:
        """Open the backend and start the background work; ``address``: where brokers and
        tools reach this controller (GET_METADATA_INFO's leader address)."""
        self.me = Member(self.config.self_id, address)
        await self.backend.open()
        self._listening_since = self.clock.monotonic()
        await self._campaign()
        loops: list[tuple[str, Callable[[], Awaitable[None]], Callable[[], float]]] = [
            ("leadership", self._campaign, lambda: self.renew_interval),
            (
                "heartbeat-scan",
                self._scan_heartbeats,
                lambda: self.config.scan_not_active_broker_interval_ms / 1000,
            ),
            (
                "master-scan",
                self._scan_masters,
                lambda: self.config.scan_inactive_master_interval_ms / 1000,
            ),
        ]
        for name, step, interval in loops:
            self._tasks.append(
                asyncio.create_task(self._every(step, interval), name=f"controller-{name}")
            )

    def quiesce(self) -> None:
        """Stop acting on what the brokers' connections do: the server is closing them (a
        controller shutting down must not take its brokers for dead)."""
        self._closing = True

    async def stop(self) -> None:
        """Stop the background work, give up the leadership, close the backend."""
        self._closing = True
        tasks = [*self._tasks, *self._elections]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._elections.clear()
        await self.notifier.close()
        if self._active:
            log.info("controller %s: giving up the leadership (shutting down)", self.me.member_id)
        self._active = False
        try:
            await self.backend.close()
        except BackendError as exc:
            log.warning("controller %s: closing the backend: %s", self.me.member_id, exc)

    async def _every(
        self, step: Callable[[], Awaitable[None]], interval: Callable[[], float]
    ) -> None:
        while True:
            await asyncio.sleep(interval())
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller %s: background step failed", self.me.member_id)

    # ---- leadership -----------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether this controller is the active one (holds the backend's leadership) now."""
        if self._closing:
            return False
        held = self.backend.holds_leadership()
        if self._active and not held:
            self._step_down("its leadership expired")
        return held and self._active

    async def _campaign(self) -> None:
        try:
            held = await self.backend.take_leadership(self.me)
        except BackendError as exc:
            if self._active:
                log.warning(
                    "controller %s: cannot renew the leadership: %s", self.me.member_id, exc
                )
            held = self.backend.holds_leadership()
        if held and not self._active:
            self._active = True
            self._listening_since = min(self._listening_since, self.clock.monotonic())
            log.warning(
                "controller %s (%s) is now the active controller of %s (%s backend)",
                self.me.member_id,
                self.me.address,
                self.config.group,
                self.backend.kind,
            )
        elif not held and self._active:
            self._step_down("the leadership went to another controller or could not be renewed")

    def _step_down(self, why: str) -> None:
        self._active = False
        log.warning("controller %s is a standby now: %s", self.me.member_id, why)

    # ---- the state ------------------------------------------------------------------------------

    async def _read(self, broker_name: str) -> Versioned | None:
        versioned = await self.backend.read(broker_name)
        if versioned is None:
            self.records.pop(broker_name, None)
        else:
            self.records[broker_name] = versioned.record
        return versioned

    async def _change(
        self, broker_name: str, compute: Callable[[GroupRecord | None], Outcome]
    ) -> Outcome:
        """Compute a change of ``broker_name``'s group over its stored record and store it;
        answered NOT_LEADER when this controller is not (or stops being) the active one."""
        if not self.active:
            return NOT_LEADER
        async with self._writing:
            for _attempt in range(ATTEMPTS):
                if not self.active:
                    return NOT_LEADER
                versioned = await self._read(broker_name)
                outcome = compute(None if versioned is None else versioned.record)
                if not outcome.writes:
                    return outcome
                revision = 0 if versioned is None else versioned.revision
                try:
                    stored = await self.backend.compare_and_set(
                        broker_name, None if outcome.delete else outcome.record, revision
                    )
                except LeadershipLostError as exc:
                    self._active = False
                    self._step_down(str(exc))
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
        if not self.active:
            return NOT_LEADER
        versioned = await self._read(require(req.broker_name, "brokerName"))
        return replicas.next_broker_id(req, None if versioned is None else versioned.record)

    async def apply_broker_id(self, req: ApplyBrokerIdRequest) -> Outcome:
        name = require(req.broker_name, "brokerName")
        outcome = await self._change(name, lambda r: replicas.apply_broker_id(req, r))
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
        return await self._change(
            name, lambda r: replicas.register_broker(req, r, self._alive(r) if r else _nobody)
        )

    async def elect_master(self, req: ElectMasterRequest) -> Outcome:
        """ELECT_MASTER from a broker (designateElect false) or an administrator (true)."""
        trigger = replicas.BY_ADMIN if req.designate_elect else replicas.BY_BROKER
        return await self._elect(req.broker_name, req.broker_id, trigger)

    async def _elect(self, broker_name: str, broker_id: int | None, trigger: str) -> Outcome:
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
                unclean=self.config.enable_elect_unclean_master,
            )

        outcome = await self._change(broker_name, compute)
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
            if self.config.notify_broker_role_changed:
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
        outcome = await self._change(
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
        if not self.active:
            return NOT_LEADER
        versioned = await self._read(require(req.broker_name, "brokerName"))
        return replicas.replica_info(None if versioned is None else versioned.record)

    async def sync_state_data(self, broker_names: list[str]) -> Outcome:
        if not self.active:
            return NOT_LEADER
        found: dict[str, GroupRecord] = {}
        for name in broker_names:
            versioned = await self._read(name)
            if versioned is not None:
                found[name] = versioned.record
        return replicas.sync_state_data(found, self._alive)

    async def clean_broker_data(self, req: CleanBrokerDataRequest) -> Outcome:
        def compute(record: GroupRecord | None) -> Outcome:
            cluster = record.cluster_name if record is not None else (req.cluster_name or "")
            alive = self.live.alive_checker(cluster, req.broker_name)
            return replicas.clean_broker_data(req, record, alive)

        outcome = await self._change(req.broker_name, compute)
        if outcome.writes:
            log.warning(
                "controller: broker group %s: %s forgotten (clean broker data)",
                req.broker_name,
                f"brokers {req.broker_controller_ids_to_clean}"
                if outcome.record is not None
                else "the whole group",
            )
        return outcome

    async def metadata(self) -> GetMetaDataResponse:
        """GET_METADATA_INFO: the group, the active controller, whether it is this one, and
        the controllers the backend knows (this one when it cannot be asked)."""
        active = self.active
        try:
            leader = self.me if active else await self.backend.leader()
            members = await self.backend.members()
        except BackendError as exc:
            log.info("controller %s: metadata without the backend: %s", self.me.member_id, exc)
            leader = self.me if active else None
            members = [self.me]
        if self.me not in members:
            members = [self.me, *members]
        peers = "".join(f"{m.member_id}:{m.address};" for m in members)
        return GetMetaDataResponse(
            self.config.group,
            None if leader is None else leader.member_id,
            None if leader is None else leader.address,
            active,
            peers,
        )

    def update_config(self, config: ControllerConfig) -> None:
        self.config = config
        self.live.default_timeout_ms = config.broker_heartbeat_timeout_ms

    # ---- heartbeats and elections the controller starts -----------------------------------------

    def heartbeat(self, req: BrokerHeartbeatRequest, connection: object | None) -> None:
        if self.live.heartbeat(req, connection):
            log.info(
                "controller: broker %s of group %s (cluster %s) at %s heard from",
                req.broker_id,
                req.broker_name,
                req.cluster_name,
                req.broker_addr,
            )

    def connection_closed(self, connection: object) -> None:
        """A connection closed: the brokers whose heartbeats came over it are dead."""
        if self._closing:
            return
        gone = self.live.closed(connection)
        if gone:
            self._inactive(gone, "its connection closed")

    async def _scan_heartbeats(self) -> None:
        gone = self.live.expire()
        if gone:
            self._inactive(gone, "its heartbeats stopped")

    def _inactive(self, gone: list[BrokerLive], why: str) -> None:
        for live in gone:
            log.warning(
                "controller: broker %s of group %s (%s) is not alive: %s",
                live.broker_id,
                live.broker_name,
                live.address,
                why,
            )
            if self.active:
                task = asyncio.create_task(self._maybe_elect_after(live), name="controller-elect")
                self._elections.add(task)
                task.add_done_callback(self._elections.discard)

    async def _maybe_elect_after(self, live: BrokerLive) -> None:
        """The dead broker's group gets an election when it was its master."""
        try:
            versioned = await self._read(live.broker_name)
            if versioned is not None and versioned.record.master_id == live.broker_id:
                await self._elect(live.broker_name, None, replicas.BY_CONTROLLER)
        except (BackendError, RequestError) as exc:
            log.warning("controller: no election for %s now: %s", live.broker_name, exc)
        except Exception:
            log.exception("controller: the election for %s failed", live.broker_name)

    async def _scan_masters(self) -> None:
        """Poll every group (metrics), and elect where the master is not alive."""
        try:
            every = await self.backend.read_all()
        except BackendError as exc:
            log.info("controller %s: cannot poll the groups: %s", self.me.member_id, exc)
            return
        self.records = {name: v.record for name, v in every.items()}
        if not self.active:
            return
        listened = self.clock.monotonic() - self._listening_since
        if listened * 1000 < self.config.broker_heartbeat_timeout_ms:
            return  # not every live broker has been heard from yet
        for name, versioned in sorted(every.items()):
            if replicas.needs_election(versioned.record, self._alive(versioned.record)):
                await self._elect(name, None, replicas.BY_CONTROLLER)

    # ---- metrics --------------------------------------------------------------------------------

    def snapshot(self) -> ControllerSnapshot:
        counts = self.live.active_counts()
        groups = tuple(
            GroupGauges(
                r.cluster_name,
                name,
                r.master_id,
                r.master_epoch,
                r.sync_state_set_epoch,
                len(r.sync_state_set),
                counts.get((r.cluster_name, name), 0),
            )
            for name, r in sorted(self.records.items())
        )
        return ControllerSnapshot(
            self.me.member_id,
            self.me.address,
            self.config.group,
            self.active,
            self.stats.requests,
            self.stats.elections,
            groups,
        )


def _nobody(_broker_id: int) -> bool:
    return False


def _unknown(_broker_id: int) -> BrokerLive | None:
    return None
