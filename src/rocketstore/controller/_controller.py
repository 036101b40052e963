"""The controller: the broker groups' records in a state backend, the brokers' heartbeats, and
the elections (RocketMQ 5.1.4's ControllerManager and DLedgerController over a
``StateBackend`` instead of DLedger).

Every controller of a group serves every request, but only the active one (the holder of the
backend's leadership) answers anything but GET_METADATA_INFO and heartbeats: the others answer
CONTROLLER_NOT_LEADER, and GET_METADATA_INFO names the active one. The requests about a group
are ``requests`` (``_requests.GroupRequests``); this module runs the controller's life, its
leadership and its watch over the brokers.

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
at once when it was the master).

Loop thread: everything runs on the event loop that serves the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..protocol._controller_headers import BrokerHeartbeatRequest, GetMetaDataResponse
from ..remoting import RequestError
from ..remoting._limits import LogLimiter
from ..store._clock import SYSTEM_CLOCK, Clock
from . import _replicas as replicas
from ._backend import Member, StateBackend
from ._config import ControllerConfig
from ._errors import BackendError
from ._heartbeat import BrokerLive, BrokerLiveTable
from ._notify import RoleNotifier
from ._requests import GroupRequests
from ._stats import ControllerSnapshot, ControllerStats, GroupGauges

log = logging.getLogger(__name__)
_full_log = LogLimiter(log)


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
        self.renew_interval = max(config.lease_ttl_s / 3.0, 0.2)
        self._active = False
        self._closing = False
        self._listening_since = clock.monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self._elections: set[asyncio.Task[None]] = set()  # started by a broker's death
        self.requests = GroupRequests(
            backend,
            self.live,
            self.notifier,
            self.stats,
            config=lambda: self.config,
            leadership=self,
        )

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
            self.step_down("its leadership expired")
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
            # at start a matter of course; later a takeover, which an operator wants to see
            log.log(
                logging.WARNING if self._tasks else logging.INFO,
                "controller %s (%s) is now the active controller of %s (%s backend)",
                self.me.member_id,
                self.me.address,
                self.config.group,
                self.backend.kind,
            )
        elif not held and self._active:
            self.step_down("the leadership went to another controller or could not be renewed")

    def step_down(self, why: str) -> None:
        """Stop being the active controller (the leadership was lost)."""
        self._active = False
        log.warning("controller %s is a standby now: %s", self.me.member_id, why)

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
        """Record a broker's heartbeat. One that came over a connection which has closed since
        (its frame read together with the connection's end: the close was handled first) is
        not counted: counting it would bring back to life, for a whole heartbeat timeout, a
        broker just found dead, and the next election could pick it."""
        if connection is not None and getattr(connection, "closed", False):
            log.info(
                "controller: the heartbeat of broker %s of group %s came over a connection "
                "that has closed: not counted",
                req.broker_id,
                req.broker_name,
            )
            return
        new = self.live.heartbeat(req, connection)
        if new is None:
            _full_log.log(
                logging.WARNING,
                "controller: %s brokers known: the heartbeat of broker %s of %s dropped",
                len(self.live),
                req.broker_id,
                req.broker_name,
            )
        elif new:
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
            versioned = await self.requests.read(live.broker_name)
            if versioned is not None and versioned.record.master_id == live.broker_id:
                await self.requests.elect(live.broker_name, None, replicas.BY_CONTROLLER)
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
        self.requests.records = {name: v.record for name, v in every.items()}
        if not self.active:
            return
        listened = self.clock.monotonic() - self._listening_since
        if listened * 1000 < self.config.broker_heartbeat_timeout_ms:
            return  # not every live broker has been heard from yet
        for name, versioned in sorted(every.items()):
            record = versioned.record
            alive = self.live.alive_checker(record.cluster_name, record.broker_name)
            if replicas.needs_election(record, alive):
                await self.requests.elect(name, None, replicas.BY_CONTROLLER)

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
            for name, r in sorted(self.requests.records.items())
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
