"""HAService: replication of one store, RocketMQ 4.x's master / slave pair.

On a master (ASYNC_MASTER, SYNC_MASTER)::

    AcceptSocketService ──accept──► HAConnection (reader + writer thread) per slave
                                        │ acknowledgements
                                        ▼
    put ─► put stage ─────────────► GroupTransferService (SYNC_MASTER: the put's future
                                     completes when a slave holds it; push2SlaveMaxOffset)

On a slave: HAClient, one thread, connected to ``ha_master_address`` (or the address learnt
from the name server, ``update_master_address``).

The port, its connections and their ids are ``HAPort``'s. With authentication on (``HAGuard``)
a connection is accepted once its slave proves the inner account's secret for this group under
a slave id (1 and up) no other connection holds: the 4.x protocol itself names no id, so the
proof's is the one; with it off every connection is a slave, as in RocketMQ.

The store builds it (``MessageStore.ha``), starts it after the commit log and stops it before.
Threads: ``start`` / ``shutdown`` from the store's lifecycle; everything else from any thread.
"""

from __future__ import annotations

import logging
import socket

from .._clock import Clock
from .._config import StoreConfig
from ..log._commit_log import CommitLog
from ._auth import OPEN, HAGuard
from ._client import ClientState, HAClient
from ._connection import HAConnection
from ._link import Link
from ._port import (
    ACCEPT_TIMEOUT_S,
    JOIN_TIMEOUT_S,
    MAX_CONNECTIONS,
    AcceptSocketService,
    HAPort,
    HAStatistics,
    SlaveConnectionStats,
    runtime_figures,
)
from ._transfer import GroupTransferService

log = logging.getLogger(__name__)

__all__ = [
    "ACCEPT_TIMEOUT_S",
    "JOIN_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "AcceptSocketService",
    "HAService",
    "HAStatistics",
    "SlaveConnectionStats",
]


class HAService(HAPort):
    def __init__(
        self, config: StoreConfig, commit_log: CommitLog, clock: Clock, guard: HAGuard = OPEN
    ) -> None:
        super().__init__(config, commit_log, clock, guard)
        self.role = config.broker_role
        self.is_master = self.role != "SLAVE"
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
                guard=guard,
            )
        self._running = False

    @property
    def switch(self) -> None:
        """Controller mode's role switch: none here (the role is the configuration's)."""
        return None

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Master (a SYNC_MASTER, or an ASYNC_MASTER with ``ha_enable``): listen on the HA port
        and start the services; slave: start the client. Raises StoreIOError when the port
        cannot be bound."""
        if self._running:
            return
        if self.config.ha_listens:
            self.listen()
            self.transfer.start()
            log.info(
                "HA service listening for slaves on %s:%d%s",
                self.config.ha_listen_host,
                self.listen_port,
                " (slaves prove the inner account)" if self.guard.enabled else "",
            )
        elif self.client is not None:
            self.client.start()
        self._running = True

    def shutdown(self) -> None:
        """Stop accepting, close every connection, stop the client; pending SYNC_MASTER waits
        end in FLUSH_SLAVE_TIMEOUT. Idempotent."""
        if not self._running:
            return
        self._running = False
        self.stop_listening()
        self.transfer.stop()
        if self.client is not None:
            self.client.stop()

    # ---- master -----------------------------------------------------------------------------

    def _connection(self, sock: socket.socket) -> Link | None:
        return HAConnection(sock, self._settings(), self.transfer.notify_transfer_some)

    def known(self, slave_id: int) -> str | None:
        if slave_id < 1:
            return f"{slave_id} is not a slave's broker id"
        return None

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
        client = self.client
        state = ""
        if client is not None:
            state = client.state.value if self._running else ClientState.SHUTDOWN.value
        return self._statistics(self.role, self.is_master, self.transfer, client, state, None)

    def runtime_info(self) -> dict[str, str]:
        """Replication figures for the store's runtime info (string values)."""
        s = self.statistics()
        info = {"haRole": s.role}
        if self.is_master:
            info["haListenPort"] = str(s.listen_port)
            info["haSlaveNotAvailable"] = str(s.slave_not_available)
        info.update(runtime_figures(s, self.is_master))
        return info
