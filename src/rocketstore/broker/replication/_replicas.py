"""ReplicasManager: a broker's place in its group in controller mode (RocketMQ 5.1.4's
ReplicasManager), over the store's AutoSwitch HA.

Start (in a task of its own, tried again every few seconds until it works)::

    identity      brokerIdentity names the id; else brokerIdentity-temp, applied again; else
                  GET_NEXT_BROKER_ID, the temp file, APPLY_BROKER_ID, brokerIdentity
                  (``_identity``); an id another broker took sends it back to the start
    register      REGISTER_BROKER: the group's master and SyncStateSet, if it has a master
    heartbeat     BROKER_HEARTBEAT (one-way) to every controller: epoch, max offset, confirm
                  offset, election priority; then every ``brokerHeartbeatInterval``
    role          the registered master's role, else ELECT_MASTER (this broker when the group
                  never had a master; the controller's choice otherwise)

Then it keeps the role the controller gives: GET_REPLICA_INFO every
``syncBrokerMetadataPeriod`` (a master: every heartbeat interval), and NOTIFY_BROKER_ROLE_CHANGED
from the controller, which makes it ask at once. A newer master epoch changes the role: to
master (this broker's id) or to slave of the named master; a group without a master gets an
ELECT_MASTER. Each role change is logged with the old and new role and the epoch, switches the
store (``AutoSwitchHAService``) and goes to ``on_role`` (the broker re-registers with the name
servers under it: broker id 0 for the master).

A master keeps its SyncStateSet with the controller (``_sync_state_set``); a fenced answer there
makes it ask for its role at once.

Its lease: a master acknowledges writes only until ``lease_s`` after the send time of the last
GET_REPLICA_INFO whose answer named it master in its epoch (the controllers cannot elect
another before their heartbeat timeout has passed since its last heartbeat, sent just before).
When a controller connection was made anew (the controller may have taken the old one's close
for this broker's death) no answer renews the lease for a moment. A lease that ran out fences
the store's writes (SERVICE_NOT_AVAILABLE) until the controller confirms the role again.

Loop thread only (the broker's event loop); the store's role changes run in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ...protocol._controller_bodies import SyncStateSet
from ...protocol._controller_client import ControllerClient, split_controller_addresses
from ...protocol._controller_headers import BrokerHeartbeatRequest, RegisterBrokerResponse
from ...protocol._errors import ControllerError, ControllerRefusedError, NoActiveControllerError
from ...remoting import RemotingError, ResponseCode
from ...remoting._client import FROM_ENV, Signer
from ...store._clock import SYSTEM_CLOCK, Clock
from ...store._errors import StoreError
from ...store._store import MessageStore
from ...store.ha._api import RoleSwitch
from .._config import BrokerConfig
from ._identity import IdentityFiles, obtain_broker_id
from ._sync_state_set import SyncStateSetReporter

log = logging.getLogger(__name__)

RETRY_S = 2.0
REPLICA_TABLE_MIN_S = 0.5  # between two reads of the controller's replica table
FENCE_CHECK_S = 0.1
RECONNECT_QUIET_S = 1.0  # after a controller connection was made anew, no renewal this long


@dataclass(frozen=True, slots=True)
class RoleChange:
    """A role the controller gave this broker."""

    role: str  # MASTER or SLAVE
    old_role: str
    epoch: int
    broker_id: int  # this broker's id in the group
    master_id: int
    master_address: str  # the master's broker address
    sync_state_set: frozenset[int] = field(default_factory=frozenset)


class ReplicasManager:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        *,
        address: str,
        client: ControllerClient | None = None,
        signer: Signer | None = FROM_ENV,
        on_role: Callable[[RoleChange], Awaitable[None]] | None = None,
        on_fence: Callable[[bool], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        switch = store.ha.switch
        if switch is None:
            raise StoreError("controller mode needs a store opened with enable_controller_mode")
        self.config = config
        self.store = store
        self.ha: RoleSwitch = switch
        self.address = address
        self.client = client or ControllerClient(
            split_controller_addresses(config.controller_addr), signer=signer
        )
        self.on_role = on_role
        self.on_fence = on_fence
        self.clock = clock
        self.identity = IdentityFiles(
            store.config.store_path_root_dir, config.cluster_name, config.broker_name
        )
        self.cluster = config.cluster_name
        self.name = config.broker_name
        self.lease_s = config.lease_s
        # what the controller said last
        self.broker_id = -1
        self.master_id: int | None = None
        self.master_address = ""
        self.master_epoch = 0
        self.role = "NONE"
        self.registered = False
        self.master_ha_address = ""  # the master's HA address, from the name servers
        # counters (metrics)
        self.role_changes = 0
        self.elections_requested = 0
        self.elections_seen = 0  # master epochs seen to change
        self.notices = 0  # NOTIFY_BROKER_ROLE_CHANGED taken
        self.last_error = ""
        self._role_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._poke = asyncio.Event()  # ask for the role now
        self._table_wanted = asyncio.Event()  # read the controller's replica table now
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._conns: dict[str, int] = {}
        self._reconnected_at = -math.inf
        self._registered_master: tuple[RegisterBrokerResponse, SyncStateSet] | None = None
        self.sync_state_set = SyncStateSetReporter(
            self.client,
            self.ha.in_sync,
            term=self._master_term,
            check_period_s=config.check_sync_state_set_period / 1000,
            on_fenced=self.poke,
            label=lambda: self.label,
        )

    @property
    def label(self) -> str:
        """``broker-a[2]``: the group and this broker's id, for the logs."""
        return f"{self.name}[{self.broker_id}]"

    # ---- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the registration and the periodic work (returns at once). Loop thread."""
        self.sync_state_set.start()
        self._loop = asyncio.get_running_loop()
        self.ha.on_unknown_replica = self._unknown_replica
        self._tasks.append(asyncio.create_task(self._main(), name=f"replicas-{self.name}"))

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.sync_state_set.close()
        self.client.close()

    async def _main(self) -> None:
        while not self._closing:
            try:
                await self._register()
                await self._heartbeat_once()
                if not await self._take_first_role():
                    await asyncio.sleep(RETRY_S)
                    continue
                break
            except (ControllerError, RemotingError, OSError, StoreError) as exc:
                self.last_error = self._why(exc)
                log.warning(
                    "%s: controller registration not done: %s; trying again",
                    self.label,
                    self.last_error,
                )
                await asyncio.sleep(RETRY_S)
        for step, name in (
            (self._heartbeats, "heartbeat"),
            (self._replica_info_loop, "replica-info"),
            (self._fence_loop, "fence"),
            (self._replica_table_loop, "replica-table"),
        ):
            self._tasks.append(asyncio.create_task(step(), name=f"replicas-{self.name}-{name}"))

    def _why(self, exc: Exception) -> str:
        """What stopped a request to the controllers, said as its cause: the controllers' ACL
        (with the account this broker signs as), no controller to reach, or the refusal."""
        if isinstance(exc, ControllerRefusedError) and exc.access_denied:
            signer = self.client.client.signer
            account = getattr(signer, "access_key", None)
            signed = f"signed as {account}" if account else "unsigned"
            return (
                f"{exc} ({signed}; a broker signs with innerClientAuthenticationCredentials, "
                "an admin account of the controllers' ACL)"
            )
        if isinstance(exc, NoActiveControllerError):
            return f"no active controller reached: {exc}"
        if isinstance(exc, RemotingError):
            return f"the controller could not be reached: {exc}"
        return str(exc)

    # ---- registration -----------------------------------------------------------------------

    async def _register(self) -> None:
        if self.broker_id < 0:
            self.broker_id = await obtain_broker_id(
                self.identity, self.client, self.address, self.clock.now_ms()
            )
        response, sset = await self.client.register(
            self.cluster, self.name, self.broker_id, self.address
        )
        self.registered = True
        log.info(
            "%s: registered with the controller as broker %d (master %s at %s, epoch %s)",
            self.label,
            self.broker_id,
            response.master_broker_id,
            response.master_address,
            response.master_epoch,
        )
        self._registered_master = (response, sset)

    async def _take_first_role(self) -> bool:
        if self._registered_master is None:
            return False
        response, sset = self._registered_master
        if response.master_broker_id is not None and response.master_address:
            await self._change_role(
                response.master_broker_id,
                response.master_address,
                response.master_epoch or 0,
                response.sync_state_set_epoch or sset.epoch,
                sset.members,
                confirmed_at=None,
            )
            return True
        return await self._elect()

    async def _elect(self) -> bool:
        """ELECT_MASTER for this group; True when it has a master (and this broker its role)."""
        self.elections_requested += 1
        sent = self.clock.monotonic()
        elected = await self.client.elect(self.cluster, self.name, self.broker_id)
        h = elected.header
        if h.master_broker_id is None or not h.master_address:
            log.info("%s: no master elected (code %d)", self.label, elected.code)
            return False
        members = elected.body.sync_state_set if elected.body is not None else frozenset()
        await self._change_role(
            h.master_broker_id,
            h.master_address,
            h.master_epoch or 0,
            h.sync_state_set_epoch or 0,
            frozenset(members),
            confirmed_at=sent,
        )
        return True

    # ---- heartbeats -------------------------------------------------------------------------

    def _heartbeat_header(self) -> BrokerHeartbeatRequest:
        store = self.store
        return BrokerHeartbeatRequest(
            self.cluster,
            self.address,
            self.name,
            self.broker_id,
            self.ha.epochs.last_epoch(),
            store.max_phy_offset,
            self.ha.confirm_offset(),
            self.config.controller_heart_beat_timeout_mills,
            self.config.broker_election_priority,
        )

    async def _heartbeat_once(self) -> None:
        missed = await self.client.heartbeat(self._heartbeat_header())
        if missed:
            log.debug("%s: heartbeat missed %s", self.label, missed)
        self._watch_connections()

    async def _heartbeats(self) -> None:
        interval = self.config.broker_heartbeat_interval / 1000
        while not self._closing:
            await asyncio.sleep(interval)
            try:
                await self._heartbeat_once()
            except Exception:
                log.exception("%s: heartbeat failed", self.label)

    def _watch_connections(self) -> None:
        """Note when a connection to a controller was made anew (its predecessor closed)."""
        remoting = self.client.client
        addresses = set(self.client.addresses)
        if self.client.leader:
            addresses.add(self.client.leader)
        for address in addresses:
            conn = remoting.connected(address)
            now_id = id(conn) if conn is not None else 0
            before = self._conns.get(address)
            if before is not None and before != now_id:
                self._reconnected_at = self.clock.monotonic()
            self._conns[address] = now_id

    # ---- the role ---------------------------------------------------------------------------

    def _master_term(self) -> tuple[str, int, int] | None:
        if self.role != "MASTER":
            return None
        return self.name, self.broker_id, self.master_epoch

    def poke(self) -> None:
        """Ask the controller for the role now (a notification came, a proposal was fenced)."""
        self._poke.set()

    async def _replica_info_loop(self) -> None:
        while not self._closing:
            period = (
                self.config.broker_heartbeat_interval
                if self.role == "MASTER"
                else self.config.sync_broker_metadata_period
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period / 1000):
                    await self._poke.wait()
            self._poke.clear()
            try:
                await self.sync_role()
            except (ControllerError, RemotingError) as exc:
                self.last_error = self._why(exc)
                log.info(
                    "%s: cannot ask the controller for the role: %s", self.label, self.last_error
                )
            except Exception:
                log.exception("%s: asking the controller for the role failed", self.label)

    async def sync_role(self) -> None:
        """GET_REPLICA_INFO and act on it (RocketMQ's schedulingSyncBrokerMetadata)."""
        sent = self.clock.monotonic()
        try:
            info, sset = await self.client.replica_info(self.name)
        except ControllerRefusedError as exc:
            if exc.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                log.warning(
                    "%s: the controller has no metadata of this group: registering", self.label
                )
                await self._register()
                return
            raise
        self._watch_connections()
        epoch = info.master_epoch or 0
        if epoch > self.master_epoch:
            if info.master_broker_id is not None and info.master_address:
                await self._change_role(
                    info.master_broker_id,
                    info.master_address,
                    epoch,
                    sset.epoch,
                    sset.members,
                    confirmed_at=sent,
                )
            else:
                await self._elect()
            return
        if epoch == self.master_epoch and self.role == "MASTER":
            if info.master_broker_id == self.broker_id:
                self._renew(sent)
                self.ha.in_sync.set_sync_state_set(sset.members, sset.epoch)
        elif info.master_broker_id is None and self.role == "SLAVE":
            await self._elect()

    async def notify(
        self,
        master_id: int | None,
        master_address: str | None,
        epoch: int | None,
        sset: SyncStateSet,
    ) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED from a controller: the role it names, then a
        GET_REPLICA_INFO (whose answer renews a master's lease)."""
        self.notices += 1
        if master_id is not None and master_address and epoch is not None and self.broker_id >= 0:
            if epoch > self.master_epoch:
                await self._change_role(
                    master_id, master_address, epoch, sset.epoch, sset.members, confirmed_at=None
                )
        self.poke()

    async def _change_role(
        self,
        master_id: int,
        master_address: str,
        epoch: int,
        set_epoch: int,
        members: frozenset[int],
        *,
        confirmed_at: float | None,
    ) -> None:
        async with self._role_lock:
            if epoch <= self.master_epoch and self.role != "NONE":
                return
            old_role = self.role
            if epoch > self.master_epoch:
                self.elections_seen += 1 if self.master_epoch > 0 else 0
            if master_id == self.broker_id:
                self.ha.in_sync.expire_lease()
                ok = await asyncio.to_thread(
                    self.ha.change_to_master, epoch, self.broker_id, members, set_epoch
                )
                role = "MASTER"
            else:
                ha_addr = self.master_ha_address if master_id == self.master_id else ""
                ok = await asyncio.to_thread(
                    self.ha.change_to_slave, epoch, self.broker_id, ha_addr
                )
                role = "SLAVE"
            if not ok:
                log.error(
                    "%s: the store refused to become %s in epoch %d (its epoch file is newer)",
                    self.label,
                    role,
                    epoch,
                )
                return
            if master_id != self.master_id:
                self.master_ha_address = ""
            self.master_id = master_id
            self.master_address = master_address
            self.master_epoch = epoch
            self.role = role
            self.role_changes += 1
            if role == "MASTER":
                self._table_wanted.set()
            if role == "MASTER" and confirmed_at is not None:
                self._renew(confirmed_at)
            log.warning(
                "%s: role change %s -> %s, epoch %d (broker %d, master %d at %s, SyncStateSet %s)",
                self.label,
                old_role,
                role,
                epoch,
                self.broker_id,
                master_id,
                master_address,
                sorted(members),
            )
            change = RoleChange(
                role, old_role, epoch, self.broker_id, master_id, master_address, members
            )
        if role == "MASTER" and confirmed_at is None:
            # the lease starts with the controller's answer naming this master (before the
            # name servers hear of it: they route writes to a confirmed master only)
            try:
                await self.sync_role()
            except (ControllerError, RemotingError) as exc:
                log.info("%s: the new role is not confirmed yet: %s", self.label, exc)
                self.poke()
        if self.on_role is not None:
            try:
                await self.on_role(change)
            except Exception:
                log.exception("%s: acting on the role change failed", self.label)

    # ---- the replicas a master serves ----------------------------------------------------------

    def _unknown_replica(self, replica_id: int) -> None:
        """The HA port refused an id the controller's table (as last read) does not hold: read
        it again (a replica registered since). An HA reader thread."""
        loop = self._loop
        if loop is not None and not self._closing:
            loop.call_soon_threadsafe(self._table_wanted.set)

    async def _replica_table_loop(self) -> None:
        """A master reads the controller's replica table of its group (GET_SYNC_STATE_DATA)
        when it takes the role and when its HA port meets an id it does not know, at most
        every REPLICA_TABLE_MIN_S; the HA port accepts only those ids (with authentication
        on)."""
        while not self._closing:
            await self._table_wanted.wait()
            self._table_wanted.clear()
            if self.role != "MASTER":
                continue
            try:
                ids = await self.client.replicas(self.name)
            except (ControllerError, RemotingError) as exc:
                log.info("%s: cannot read the controller's replica table: %s", self.label, exc)
                self._table_wanted.set()
            else:
                self.ha.set_known_replicas(ids)
            await asyncio.sleep(REPLICA_TABLE_MIN_S)

    def learn_master_ha_address(self, ha_address: str | None, master_address: str | None) -> None:
        """The name servers' answer to a slave's registration: its master's HA address (taken
        when the master they name is the controller's). Loop thread."""
        if self.role != "SLAVE" or not ha_address:
            return
        if master_address and self.master_address and master_address != self.master_address:
            return  # the name servers still know the old master
        if ha_address != self.master_ha_address:
            log.info(
                "%s: master %s replicates from %s", self.label, self.master_address, ha_address
            )
            self.master_ha_address = ha_address
        self.ha.update_master_address(ha_address)

    # ---- the lease --------------------------------------------------------------------------

    def _renew(self, sent_at: float) -> None:
        if sent_at < self._reconnected_at + RECONNECT_QUIET_S:
            return
        was_valid = self.ha.in_sync.lease_valid()
        self.ha.in_sync.renew_lease(sent_at + self.lease_s)
        if not was_valid and not self.ha.fenced and self.on_fence is not None:
            self.on_fence(False)  # confirmed again: registered as the master at once
        self._fence(None)

    def _fence(self, reason: str | None) -> None:
        """Fence the store's writes (or lift it); ``on_fence`` hears of each change."""
        was = bool(self.ha.fenced)
        self.ha.fence(reason)
        if was != bool(reason) and self.on_fence is not None:
            try:
                self.on_fence(bool(reason))
            except Exception:
                log.exception("%s: acting on the fence failed", self.label)

    async def _fence_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(FENCE_CHECK_S)
            if self.role != "MASTER":
                self._fence(None)
                continue
            if not self.ha.in_sync.lease_valid():
                self._fence(
                    f"the controller has not confirmed this master (epoch {self.master_epoch}) "
                    f"for {self.lease_s:g} s"
                )
