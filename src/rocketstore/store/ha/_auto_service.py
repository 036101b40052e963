"""AutoSwitchHAService: replication of one store in controller mode (RocketMQ 5's
AutoSwitchHAService). The controller decides the role; this service switches to it::

    no role ──change_to_master(epoch, set)──► MASTER: accepts slaves (AutoConnection each),
       │                                       SYNC puts wait for the SyncStateSet
       │                                       (InSyncReplicas), epoch file gets the epoch
       └──change_to_slave(epoch, master)────► SLAVE: AutoClient replicates from the master,
                                               cutting the log where it stops matching

It listens on the HA port in every role (the port a master is reached at stays the same across
role changes); the port, its connections and their ids are ``HAPort``'s. A replica id is held
by one connection at a time; with authentication on (``HAGuard``) a slave proves the inner
account's secret under its id, and the id must be one the controller knows (``known_replicas``,
from its replica table, or the SyncStateSet): an unknown one is refused and ``on_unknown_replica``
asks the broker to read the controller's table again. The store starts in no role, refusing writes, until the broker (or a test) gives
it one.

Becoming master: the client stops, a record received only in part is cut, the epoch file
records where the new epoch starts (the log's end; a master confirmed again in its own epoch,
after a restart, keeps its entry), the topic-queue table is rebuilt over every record the log
holds, then the store takes writes. Becoming slave: the store refuses writes first, pending
waits end, the slaves' connections close and the client starts. A role in an epoch older than
the newest the epoch file records is refused (False).

Threads: ``start`` / ``shutdown`` from the store's lifecycle; the role changes from one caller
at a time (the broker's replication task); the rest from any thread.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .._clock import Clock
from .._config import StoreConfig
from ..log._commit_log import CommitLog
from ..log._message import PutMessageStatus
from ._auth import OPEN, HAGuard
from ._auto_client import AutoClient
from ._auto_connection import AutoConnection
from ._epoch import EpochEntry, EpochFile
from ._in_sync import FENCED_PREFIX, InSyncReplicas, Refusal
from ._link import Link
from ._port import HAPort, HAStatistics, runtime_figures
from ._truncate import LogCutter

log = logging.getLogger(__name__)

NO_ROLE = "NONE"
MASTER = "MASTER"
SLAVE = "SLAVE"
FENCED = "fenced"
TABLE_WAIT_S = 3.0  # how long an unknown replica id waits for the controller's table


class RoleHooks(Protocol):
    """What the store does around a role change (the facade implements it)."""

    def on_master(self) -> None:
        """Take writes, start delayed delivery."""

    def on_slave(self) -> None:
        """Refuse writes, stop delayed delivery."""


@dataclass(frozen=True, slots=True)
class ReplicaStatistics:
    """A controller-mode replica at one moment. Immutable."""

    role: str  # MASTER, SLAVE, NONE
    broker_id: int  # the controller's id of this replica (-1: none yet)
    master_epoch: int  # the epoch of the role in force (-1: none)
    last_epoch: int  # the newest epoch the epoch file records
    epochs: tuple[EpochEntry, ...]
    sync_state_set: tuple[int, ...]  # the controller's set (a master's)
    sync_state_set_epoch: int
    proposed_set: tuple[int, ...] | None  # sent to the controller, not answered yet
    in_sync_count: int
    confirm_offset: int
    max_offset: int
    lease_remaining_s: float  # how long the master may acknowledge (inf: no lease in use)
    lease_refusals: int
    fenced: str  # why writes are refused by fencing ("" when they are not)
    truncations: int  # cuts of the log on rejoining
    bytes_truncated: int
    role_changes: int
    master_ha_address: str  # a slave's master


class AutoSwitchHAService(HAPort):
    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        clock: Clock,
        cutter: LogCutter,
        *,
        on_append: Callable[[], None],
        set_refusal: Callable[[str, Refusal], None],
        guard: HAGuard = OPEN,
    ) -> None:
        super().__init__(config, commit_log, clock, guard)
        self.cutter = cutter
        self.on_append = on_append
        self.set_refusal = set_refusal
        self.hooks: RoleHooks | None = None
        self.epochs = EpochFile(config.epoch_file_path)
        self.in_sync = InSyncReplicas(
            clock,
            timeout_s=config.sync_flush_timeout / 1000,
            all_ack=config.all_ack_in_sync_state_set,
            in_sync_replicas=config.in_sync_replicas,
            min_in_sync_replicas=config.min_in_sync_replicas,
            max_not_catchup_ms=config.ha_max_time_slave_not_catchup,
            max_offset=lambda: commit_log.max_offset,
            wake_writers=self.wake_writers,
            set_refusal=set_refusal,
            on_confirm=on_append,
        )
        self.transfer = self.in_sync  # the put stage
        self.role = NO_ROLE
        self.is_master = False
        self.broker_id = -1
        self.master_epoch = -1
        self.role_changes = 0
        self.fenced = ""
        self._role_lock = threading.Lock()
        self.client: AutoClient | None = None
        # the replica ids the controller knows for this group (its replica table), given by
        # the broker; None until it is read
        self.known_replicas: frozenset[int] | None = None
        self.on_unknown_replica: Callable[[int], None] = lambda _id: None
        self._table_read = threading.Condition()
        self._table_reads = 0
        self._running = False

    @property
    def switch(self) -> AutoSwitchHAService:
        """Controller mode's role switch: this service."""
        return self

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Read the epoch file, listen on the HA port, start the wait deadlines. Writes stay
        refused until a role is given. Raises StoreIOError when the port cannot be bound."""
        if self._running:
            return
        self.epochs.load()
        self.set_refusal(
            SLAVE, (PutMessageStatus.SERVICE_NOT_AVAILABLE, "no role from the controller yet")
        )
        self.listen()
        self.in_sync.start()
        self._running = True
        log.info(
            "HA (controller mode) listening on %s:%d%s, epochs %s",
            self.config.ha_listen_host,
            self.listen_port,
            " (slaves prove the inner account)" if self.guard.enabled else "",
            [tuple(e) for e in self.epochs.entries()],
        )

    def shutdown(self) -> None:
        if not self._running:
            return
        self._running = False
        self.stop_listening()
        self.in_sync.stop()
        if self.client is not None:
            self.client.stop()

    # ---- roles ------------------------------------------------------------------------------

    def change_to_master(
        self, epoch: int, broker_id: int, members: frozenset[int], set_epoch: int
    ) -> bool:
        """Become the master of ``epoch`` with the controller's SyncStateSet. False when the
        epoch file records a newer epoch."""
        with self._role_lock:
            last = self.epochs.last_epoch()
            if epoch < last:
                log.warning(
                    "master epoch %d is older than this log's epoch %d: refused", epoch, last
                )
                return False
            old_role = self.role
            client, self.client = self.client, None
            if client is not None:
                client.stop()
            self._close_connections("this broker becomes master")
            end = self.cutter.valid_end()
            if end < self.commit_log.max_offset:
                self.cutter.truncate_log(end)
            if epoch > last:
                self.epochs.append(epoch, self.commit_log.max_offset)
            entry = self.epochs.entry(epoch)
            start = entry.start_offset if entry is not None else self.commit_log.max_offset
            self.cutter.rebuild_queue_table()
            self.broker_id = broker_id
            self.master_epoch = epoch
            self.in_sync.become_master(broker_id, members, set_epoch, start)
            self.role = MASTER
            self.is_master = True
            self.role_changes += 1
            if self.hooks is not None:
                self.hooks.on_master()
            self.set_refusal(SLAVE, None)
        log.info(
            "role change: %s -> MASTER, epoch %d (starts at %d), broker id %d, SyncStateSet %s "
            "(epoch %d)",
            old_role,
            epoch,
            start,
            broker_id,
            sorted(members),
            set_epoch,
        )
        return True

    def change_to_slave(self, epoch: int, broker_id: int, master_ha_address: str = "") -> bool:
        """Become a slave in ``epoch``, replicating from ``master_ha_address`` (or from the
        address ``update_master_address`` gives later). False when the epoch file records a
        newer epoch."""
        with self._role_lock:
            last = self.epochs.last_epoch()
            if epoch < last:
                log.warning(
                    "slave epoch %d is older than this log's epoch %d: refused", epoch, last
                )
                return False
            old_role = self.role
            self.set_refusal(
                SLAVE, (PutMessageStatus.SERVICE_NOT_AVAILABLE, "a slave does not accept writes")
            )
            if self.hooks is not None:
                self.hooks.on_slave()
            self.in_sync.become_slave()
            self.is_master = False
            self._close_connections("this broker becomes a slave")
            old = self.client
            if old is not None and old.broker_id == broker_id:
                self.client = old
            else:
                if old is not None:
                    old.stop()
                c = self.config
                self.client = AutoClient(
                    self.commit_log,
                    self.epochs,
                    self.in_sync,
                    self.clock,
                    broker_id=broker_id,
                    truncate=self.cutter.truncate_log,
                    on_append=self.on_append,
                    heartbeat_s=c.ha_send_heartbeat_interval / 1000,
                    housekeeping_s=c.ha_housekeeping_interval / 1000,
                    reconnect_s=min(c.ha_reconnect_interval / 1000, 1.0),
                    sync_from_last_file=c.sync_from_last_file,
                    guard=self.guard,
                )
                self.client.start()
            # "" as well: a connection to the old master ends now (it must not get acks any more)
            self.client.update_master_address(master_ha_address)
            self.broker_id = broker_id
            self.master_epoch = epoch
            self.role = SLAVE
            self.role_changes += 1
        log.info(
            "role change: %s -> SLAVE, epoch %d, broker id %d, master HA address %r",
            old_role,
            epoch,
            broker_id,
            master_ha_address,
        )
        return True

    def update_master_address(self, addr: str | None) -> None:
        """A slave's master HA address, learnt from the name server. Any thread."""
        client = self.client
        if client is not None and self.role == SLAVE:
            client.update_master_address(addr)

    @property
    def master_address(self) -> str:
        client = self.client
        return client.master_address if client is not None else ""

    def fence(self, reason: str | None) -> None:
        """Refuse writes for ``reason`` (the master cannot renew its standing with the
        controller), or take them again (None). Any thread."""
        if (reason or "") == self.fenced:
            return
        self.fenced = reason or ""
        if reason:
            log.warning("writes fenced: %s", reason)
            self.in_sync.expire_lease()
            refusal = (PutMessageStatus.SERVICE_NOT_AVAILABLE, f"{FENCED_PREFIX}{reason}")
            self.set_refusal(FENCED, refusal)
        else:
            log.info("writes no longer fenced")
            self.set_refusal(FENCED, None)

    def confirm_offset(self) -> int:
        return self.in_sync.confirm_offset()

    # ---- master -----------------------------------------------------------------------------

    def _connection(self, sock: socket.socket) -> Link | None:
        conn = AutoConnection(sock, self._settings(), self.epochs, self.in_sync)
        if not self.is_master:
            log.info("HA: refusing slave %s, this broker is not a master", conn.client_addr)
            sock.close()
            return None
        return conn

    def known(self, slave_id: int) -> str | None:
        """With authentication on, an id the controller knows for this group (its replica
        table, or the SyncStateSet): the others are refused, and the broker asked to read the
        table again (a replica registered since)."""
        if slave_id == self.broker_id and self.is_master:
            return f"{slave_id} is this master's own id"
        if not self.guard.enabled:
            return None
        if self._knows(slave_id):
            return None
        # a replica registered since the table was read: ask for it again and wait a little
        # (this connection's reader thread) rather than refuse a real slave
        with self._table_read:
            seen = self._table_reads
        try:
            self.on_unknown_replica(slave_id)
        except Exception:
            log.exception("HA: asking for the replica table failed")
        with self._table_read:
            self._table_read.wait_for(lambda: self._table_reads != seen, TABLE_WAIT_S)
        if self._knows(slave_id):
            return None
        return f"replica {slave_id} is not in the controller's replica table of this group"

    def _knows(self, slave_id: int) -> bool:
        known = self.known_replicas or frozenset()
        return slave_id in known or slave_id in self.in_sync.confirmed

    def set_known_replicas(self, ids: frozenset[int]) -> None:
        """The replica ids the controller's table holds for this group. Any thread."""
        if ids != self.known_replicas:
            log.info("HA: the controller knows replicas %s", sorted(ids))
        with self._table_read:
            self.known_replicas = frozenset(ids)
            self._table_reads += 1
            self._table_read.notify_all()

    @property
    def push2slave_max_offset(self) -> int:
        return self.in_sync.acked

    # ---- statistics -------------------------------------------------------------------------

    def replica_statistics(self) -> ReplicaStatistics:
        s = self.in_sync
        proposed = s.proposed
        remaining = s.lease_until - self.clock.monotonic()
        client = self.client
        return ReplicaStatistics(
            role=self.role,
            broker_id=self.broker_id,
            master_epoch=self.master_epoch,
            last_epoch=self.epochs.last_epoch(),
            epochs=tuple(self.epochs.entries()),
            sync_state_set=tuple(sorted(s.confirmed)) if self.is_master else (),
            sync_state_set_epoch=s.confirmed_epoch if self.is_master else 0,
            proposed_set=tuple(sorted(proposed)) if proposed is not None else None,
            in_sync_count=s.in_sync_count() if self.is_master else 0,
            confirm_offset=self.confirm_offset(),
            max_offset=self.commit_log.max_offset,
            lease_remaining_s=max(0.0, remaining),
            lease_refusals=s.lease_timeouts,
            fenced=self.fenced,
            truncations=self.cutter.cuts,
            bytes_truncated=self.cutter.bytes_cut,
            role_changes=self.role_changes,
            master_ha_address=client.master_address if client is not None else "",
        )

    def statistics(self) -> HAStatistics:
        client = self.client
        state = client.state.value if client is not None and self.role == SLAVE else ""
        role = "SYNC_MASTER" if self.is_master else "SLAVE"
        master_max = self.commit_log.max_offset
        return self._statistics(role, self.is_master, self.in_sync, client, state, master_max)

    def runtime_info(self) -> dict[str, str]:
        s = self.statistics()
        r = self.replica_statistics()
        info = {
            "haRole": s.role,
            "haListenPort": str(s.listen_port),
            "controllerRole": r.role,
            "controllerBrokerId": str(r.broker_id),
            "masterEpoch": str(r.master_epoch),
            "confirmOffset": str(r.confirm_offset),
            "epochEntries": ";".join(f"{e.epoch}-{e.start_offset}" for e in r.epochs),
        }
        if self.is_master:
            info["syncStateSet"] = ",".join(str(m) for m in r.sync_state_set)
            info["syncStateSetEpoch"] = str(r.sync_state_set_epoch)
        info.update(runtime_figures(s, self.is_master))
        return info
