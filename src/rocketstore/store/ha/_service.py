"""HAService: replication of one store, RocketMQ 4.x's master / slave pair.

On a master (ASYNC_MASTER, SYNC_MASTER)::

    AcceptSocketService ──accept──► HAConnection (reader + writer thread) per slave
                                        │ acknowledgements
                                        ▼
    put ─► put stage ─────────────► GroupTransferService (SYNC_MASTER: the put's future
                                     completes when a slave holds it; push2SlaveMaxOffset)

On a slave: HAClient, one thread, connected to ``ha_master_address`` (or the address learnt
from the name server, ``update_master_address``).

The store builds it (``MessageStore.ha``), starts it after the commit log and stops it before.
Threads: ``start`` / ``shutdown`` from the store's lifecycle; everything else from any thread.
"""

from __future__ import annotations

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
from ._client import ClientState, HAClient
from ._connection import HAConnection
from ._transfer import GroupTransferService

log = logging.getLogger(__name__)

ACCEPT_TIMEOUT_S = 1.0
JOIN_TIMEOUT_S = 5.0


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
    client_state: str  # READY, TRANSFER, SHUTDOWN ("" on a master)
    reported_offset: int
    bytes_received: int
    client_error: str


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


class HAService:
    def __init__(self, config: StoreConfig, commit_log: CommitLog, clock: Clock) -> None:
        self.config = config
        self.commit_log = commit_log
        self.clock = clock
        self.role = config.broker_role
        self.is_master = self.role != "SLAVE"
        self._lock = threading.Lock()
        self.connections: list[HAConnection] = []
        self._server: socket.socket | None = None
        self._acceptor: AcceptSocketService | None = None
        self.listen_port = 0
        self.transfer = GroupTransferService(
            clock,
            timeout_s=config.sync_flush_timeout / 1000,
            fallbehind_max=config.ha_slave_fallbehind_max,
            connection_count=self.connection_count,
            wake_writers=self.wake_writers,
        )
        self.client: HAClient | None = None
        if not self.is_master:
            self.client = HAClient(
                commit_log,
                clock,
                master_address=config.ha_master_address,
                heartbeat_s=config.ha_send_heartbeat_interval / 1000,
                housekeeping_s=config.ha_housekeeping_interval / 1000,
                reconnect_s=config.ha_reconnect_interval / 1000,
            )
        self._running = False

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Master (a SYNC_MASTER, or an ASYNC_MASTER with ``ha_enable``): listen on
        ``ha_listen_host:ha_listen_port`` (port 0: any free port, see ``listen_port``) and start
        the services; slave: start the client. Raises StoreIOError when the port cannot be
        bound."""
        if self._running:
            return
        if self.config.ha_listens:
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
            self.transfer.start()
            log.info("HA service listening for slaves on %s:%d", host, self.listen_port)
        elif self.client is not None:
            self.client.start()
        self._running = True

    def shutdown(self) -> None:
        """Stop accepting, close every connection, stop the client; pending SYNC_MASTER waits
        end in FLUSH_SLAVE_TIMEOUT. Idempotent."""
        if not self._running:
            return
        self._running = False
        if self._acceptor is not None:
            self._acceptor.stop(join=False)
        if self._server is not None:
            self._server.close()
        if self._acceptor is not None:
            self._acceptor.stop()
            self._acceptor = None
        self._server = None
        with self._lock:
            conns = list(self.connections)
        for c in conns:
            c.close("the master shuts down")
        for c in conns:
            c.join(JOIN_TIMEOUT_S)
        self.transfer.stop()
        if self.client is not None:
            self.client.stop()

    # ---- master -----------------------------------------------------------------------------

    def _accept(self, sock: socket.socket) -> None:
        """The accept thread: a new slave."""
        c = self.config
        conn = HAConnection(
            sock,
            self.commit_log,
            self.clock,
            batch_size=c.ha_transfer_batch_size,
            heartbeat_s=c.ha_send_heartbeat_interval / 1000,
            housekeeping_s=c.ha_housekeeping_interval / 1000,
            on_ack=self.transfer.notify_transfer_some,
            on_closed=self._remove,
        )
        log.info("HA service: slave connected from %s", conn.client_addr)
        with self._lock:
            self.connections = [*self.connections, conn]
        conn.start()

    def _remove(self, conn: HAConnection) -> None:
        with self._lock:
            self.connections = [c for c in self.connections if c is not conn]

    def connection_count(self) -> int:
        return len(self.connections)

    def wake_writers(self) -> None:
        """New data to send: wake the writers that wait. Any thread."""
        for c in self.connections:
            c.wake()

    @property
    def push2slave_max_offset(self) -> int:
        return self.transfer.acked

    def is_slave_ok(self, end: int) -> bool:
        return self.transfer.is_slave_ok(end)

    # ---- slave ------------------------------------------------------------------------------

    def update_master_address(self, addr: str | None) -> None:
        """Replicate from ``addr`` (``host:port`` of the master's HA port), as RocketMQ's
        updateHaMasterAddress: the broker calls it with what the name server answered a
        registration. Ignored on a master. Any thread."""
        if self.client is not None:
            self.client.update_master_address(addr)

    @property
    def master_address(self) -> str:
        return self.client.master_address if self.client is not None else ""

    # ---- statistics -------------------------------------------------------------------------

    def statistics(self) -> HAStatistics:
        master_max = self.commit_log.max_offset
        slaves = tuple(
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
        client = self.client
        t = self.transfer
        return HAStatistics(
            role=self.role,
            listen_port=self.listen_port,
            master_max_offset=master_max if self.is_master else -1,
            push2slave_max_offset=t.acked,
            connection_count=len(slaves),
            slaves=slaves,
            nearest_lag_bytes=min((s.lag_bytes for s in slaves), default=None),
            transfer_waits=t.waits,
            transfer_timeouts=t.timeouts,
            slave_not_available=t.not_available,
            master_address=client.master_address if client is not None else "",
            client_state=(
                (client.state.value if self._running else ClientState.SHUTDOWN.value)
                if client is not None
                else ""
            ),
            reported_offset=client.reported_offset if client is not None else -1,
            bytes_received=client.bytes_received if client is not None else 0,
            client_error=client.last_error if client is not None else "",
        )

    def runtime_info(self) -> dict[str, str]:
        """Replication figures for the store's runtime info (string values)."""
        s = self.statistics()
        info = {"haRole": s.role}
        if self.is_master:
            info["haListenPort"] = str(s.listen_port)
            info["haConnectionCount"] = str(s.connection_count)
            info["haPush2SlaveMaxOffset"] = str(s.push2slave_max_offset)
            if s.nearest_lag_bytes is not None:  # no slave: no lag figure
                info["haNearestSlaveLagBytes"] = str(s.nearest_lag_bytes)
            info["haTransferWaits"] = str(s.transfer_waits)
            info["haTransferTimeouts"] = str(s.transfer_timeouts)
            info["haSlaveNotAvailable"] = str(s.slave_not_available)
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
