"""HAPort: the master's HA port, the part both replication services share (``HAService`` in
RocketMQ 4.x's protocol, ``AutoSwitchHAService`` in controller mode): it listens, accepts
slaves (one ``Link`` each, two threads), keeps their list, and holds the table of replica ids
to connections (one connection per id: a second one under an id that is connected is refused,
never put in its place). Refusals are audited through the store's ``HAGuard``.

A new connection beyond ``MAX_CONNECTIONS`` takes the place of the oldest one that has not
said where to start yet, else it is closed: peers that connect and say nothing cannot keep
the slaves out.

Threads: ``listen`` / ``stop_listening`` from the store's lifecycle; ``_accept`` from the
accept thread; ``admit`` and ``_remove`` from the connections' threads; the rest from any.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .._clock import Clock
from .._config import StoreConfig
from .._errors import StoreIOError
from .._service import ServiceThread
from ..log._commit_log import CommitLog
from ._auth import HAGuard
from ._follower import Follower
from ._link import Link, LinkSettings
from ._transfer import GroupTransferService

log = logging.getLogger(__name__)

ACCEPT_TIMEOUT_S = 1.0
JOIN_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 16
"""Slaves a master serves at once (each costs two threads)."""
REFUSALS_LOG_S = 10.0  # connections refused for the limit are told at most once in this time


@dataclass(frozen=True, slots=True)
class SlaveConnectionStats:
    """One slave as its master sees it."""

    address: str
    state: str  # HANDSHAKE, TRANSFER, SHUTDOWN
    request_offset: int  # its first report (-1 before it)
    ack_offset: int  # its newest report
    next_transfer_offset: int  # where the next frame starts
    lag_bytes: int  # the master's max offset minus ack_offset
    bytes_sent: int
    connected_at_ms: int


@dataclass(frozen=True, slots=True)
class HAStatistics:
    """Replication at one moment (``MessageStore.statistics().ha``). Immutable."""

    role: str
    listen_port: int  # 0 on a slave
    master_max_offset: int
    push2slave_max_offset: int  # the highest offset a slave acknowledged
    connection_count: int
    slaves: tuple[SlaveConnectionStats, ...]
    nearest_lag_bytes: int | None  # of the nearest slave; None with no slave connected
    transfer_waits: int  # SYNC_MASTER puts that waited for a slave
    transfer_timeouts: int  # ... and ended in FLUSH_SLAVE_TIMEOUT
    slave_not_available: int  # puts answered SLAVE_NOT_AVAILABLE
    # slave side
    master_address: str
    client_state: str  # READY, HANDSHAKE, TRANSFER, SHUTDOWN ("" on a master)
    reported_offset: int
    bytes_received: int
    client_error: str
    refused_peers: int = 0  # peers refused on the HA port (no proof, unknown or taken id)


class AcceptSocketService(ServiceThread):
    """Accepts slaves on the HA port and hands each socket to ``on_accept``."""

    def __init__(self, server: socket.socket, on_accept: Callable[[socket.socket], None]) -> None:
        super().__init__("AcceptSocketService")
        self.server = server
        self.on_accept = on_accept

    def run(self) -> None:
        while not self.stopped:
            try:
                sock, _addr = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.stopped:
                    break
                log.exception("HA accept failed")
                self.wait_for_running(ACCEPT_TIMEOUT_S)
                continue
            try:
                self.on_accept(sock)
            except Exception:
                log.exception("new HA connection failed")
                sock.close()


class HAPort:
    def __init__(
        self, config: StoreConfig, commit_log: CommitLog, clock: Clock, guard: HAGuard
    ) -> None:
        self.config = config
        self.commit_log = commit_log
        self.clock = clock
        # the connections' guard counts each refusal before it is audited
        self.guard = dataclasses.replace(guard, audit=self._refused)
        self._audit = guard.audit
        self._lock = threading.Lock()
        self.connections: list[Link] = []
        self.holders: dict[int, Link] = {}  # replica id → the connection that holds it
        self._server: socket.socket | None = None
        self._acceptor: AcceptSocketService | None = None
        self.listen_port = 0
        self.refused_connections = 0  # beyond MAX_CONNECTIONS
        self.refused_peers = 0  # no proof, an unknown id or one already held
        self._refusals_told = 0.0  # monotonic time refusals were last logged
        self._refusals_untold = 0

    # ---- the port ---------------------------------------------------------------------------

    def listen(self) -> None:
        """Listen on ``ha_listen_host:ha_listen_port`` (port 0: any free port, see
        ``listen_port``) and accept. Raises StoreIOError when the port cannot be bound."""
        host = self.config.ha_listen_host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server = socket.socket(family, socket.SOCK_STREAM)
        try:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((host, self.config.ha_listen_port))
            server.listen(16)
        except OSError as exc:
            server.close()
            raise StoreIOError(
                f"cannot listen for slaves on {host}:{self.config.ha_listen_port}: {exc}"
            ) from exc
        server.settimeout(ACCEPT_TIMEOUT_S)
        self._server = server
        self.listen_port = int(server.getsockname()[1])
        self._acceptor = AcceptSocketService(server, self._accept)
        self._acceptor.start()

    def stop_listening(self) -> None:
        """Stop accepting and close every connection. Idempotent."""
        if self._acceptor is not None:
            self._acceptor.stop(join=False)
        if self._server is not None:
            self._server.close()
        if self._acceptor is not None:
            self._acceptor.stop()
            self._acceptor = None
        self._server = None
        self._close_connections("the master shuts down")

    # ---- connections ------------------------------------------------------------------------

    def _connection(self, sock: socket.socket) -> Link | None:
        """A connection over ``sock`` (not started), or None to refuse it. The protocol's."""
        raise NotImplementedError

    def _settings(self) -> LinkSettings:
        c = self.config
        return LinkSettings(
            self.commit_log,
            self.clock,
            c.ha_transfer_batch_size,
            c.ha_send_heartbeat_interval / 1000,
            c.ha_housekeeping_interval / 1000,
            self.guard,
            self.admit,
            self._remove,
        )

    def _accept(self, sock: socket.socket) -> None:
        """The accept thread: a new slave (or, beyond MAX_CONNECTIONS, none)."""
        with self._lock:
            current = list(self.connections)
        if len(current) >= MAX_CONNECTIONS:
            waiting = [c for c in current if c.request_offset < 0 and not c.closed]
            if not waiting:
                self._refuse_beyond_limit(sock)
                return
            min(waiting, key=lambda c: c.connected_at).close("replaced by a new connection")
        conn = self._connection(sock)
        if conn is None:
            return
        log.info("HA service: slave connected from %s", conn.client_addr)
        with self._lock:
            self.connections = [*self.connections, conn]
        conn.start()

    def _refuse_beyond_limit(self, sock: socket.socket) -> None:
        self.refused_connections += 1
        self._refusals_untold += 1
        try:
            sock.close()
        except OSError:
            pass
        now = self.clock.monotonic()
        if now - self._refusals_told >= REFUSALS_LOG_S:
            log.warning(
                "HA service: refused %d connection(s): %d slaves connected (the most served "
                "at once), every one replicating",
                self._refusals_untold,
                MAX_CONNECTIONS,
            )
            self._refusals_told = now
            self._refusals_untold = 0

    def known(self, slave_id: int) -> str | None:
        """Why ``slave_id`` is not a replica this master knows (None: it is). The mode's."""
        return None

    def admit(self, conn: Link, slave_id: int) -> str | None:
        """Let ``conn`` hold ``slave_id``: None, or why not (the connection refuses its peer,
        counted here). A connection's reader."""
        why = self.known(slave_id)
        if why is None:
            with self._lock:
                holder = self.holders.get(slave_id)
                if holder is not None and holder is not conn and not holder.closed:
                    why = f"replica {slave_id} is connected already (from {holder.client_addr})"
                else:
                    self.holders[slave_id] = conn
        return why

    def _refused(self, source: str, account: str, claimed: str, reason: str) -> None:
        self.refused_peers += 1
        self._audit(source, account, claimed, reason)

    def _remove(self, conn: Link) -> None:
        with self._lock:
            self.connections = [c for c in self.connections if c is not conn]
            if conn.holds_id and self.holders.get(conn.slave_id) is conn:
                del self.holders[conn.slave_id]

    def _close_connections(self, reason: str) -> None:
        with self._lock:
            conns = list(self.connections)
        for c in conns:
            c.close(reason)
        for c in conns:
            c.join(JOIN_TIMEOUT_S)

    def connection_count(self) -> int:
        """Slaves connected (with authentication on: those that proved themselves)."""
        if not self.guard.enabled:
            return len(self.connections)
        return sum(1 for c in self.connections if c.proven)

    def wake_writers(self) -> None:
        """New data to send: wake the writers that wait. Any thread."""
        for c in self.connections:
            c.wake()

    # ---- statistics -------------------------------------------------------------------------

    def _statistics(
        self,
        role: str,
        is_master: bool,
        transfer: GroupTransferService,
        client: Follower | None,
        client_state: str,
        no_slave_lag: int | None,
    ) -> HAStatistics:
        master_max = self.commit_log.max_offset
        slaves = self.slave_statistics()
        return HAStatistics(
            role=role,
            listen_port=self.listen_port,
            master_max_offset=master_max if is_master else -1,
            push2slave_max_offset=transfer.acked,
            connection_count=len(slaves),
            slaves=slaves,
            nearest_lag_bytes=min((s.lag_bytes for s in slaves), default=no_slave_lag),
            transfer_waits=transfer.waits,
            transfer_timeouts=transfer.timeouts,
            slave_not_available=transfer.not_available,
            master_address=client.master_address if client is not None else "",
            client_state=client_state,
            reported_offset=client.reported_offset if client is not None else -1,
            bytes_received=client.bytes_received if client is not None else 0,
            client_error=client.last_error if client is not None else "",
            refused_peers=self.refused_peers,
        )

    def slave_statistics(self) -> tuple[SlaveConnectionStats, ...]:
        master_max = self.commit_log.max_offset
        return tuple(
            SlaveConnectionStats(
                c.client_addr,
                c.state.value,
                c.request_offset,
                c.ack_offset,
                c.next_transfer,
                c.lag(master_max),
                c.bytes_sent,
                c.connected_at,
            )
            for c in self.connections
        )


def runtime_figures(s: HAStatistics, is_master: bool) -> dict[str, str]:
    """The replication figures both services show in the store's runtime info."""
    info: dict[str, str] = {}
    if is_master:
        info["haConnectionCount"] = str(s.connection_count)
        info["haPush2SlaveMaxOffset"] = str(s.push2slave_max_offset)
        if s.nearest_lag_bytes is not None:  # no slave: no lag figure
            info["haNearestSlaveLagBytes"] = str(s.nearest_lag_bytes)
        info["haTransferWaits"] = str(s.transfer_waits)
        info["haTransferTimeouts"] = str(s.transfer_timeouts)
        info["haRefusedPeers"] = str(s.refused_peers)
        for sl in s.slaves:
            info[f"haSlave_{sl.address}"] = (
                f"state={sl.state} ackOffset={sl.ack_offset} lagBytes={sl.lag_bytes}"
            )
    else:
        info["haMasterAddress"] = s.master_address
        info["haClientState"] = s.client_state
        info["haReportedOffset"] = str(s.reported_offset)
        info["haBytesReceived"] = str(s.bytes_received)
    return info
