"""The name server (RocketMQ 4.9.8's NamesrvController): the route table behind a remoting
server, a scan that drops brokers not heard from for 120 s (every 10 s, the first 5 s after
start), and the housekeeping that drops a broker as soon as its connection closes.

With an ACL (``acl``), every request is checked by the name server's rules of the
authorisation table (``rocketstore.acl._table.NAMESRV``): whatever changes state (a broker's
registration, write permissions, the KV config, the settings, a topic's deletion) needs an
admin account, the reads any signed account. RocketMQ 4.9's name server checks nothing; a
broker that cannot sign (RocketMQ's own) needs a white address there (docs/security.md).

``start`` / ``close`` are coroutines on the event loop that serves the name server; everything
else runs on that loop too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from ..acl._remoting import AclSource, RemotingAcl
from ..acl._table import NAMESRV
from ..protocol._namesrv_bodies import MAX_REGISTER_BODY
from ..remoting import DEFAULT_MAX_FRAME, Connection, RemotingServer, ServerLimits
from ..remoting._limits import DEFAULT_LIMITS
from ..remoting._tls import TlsServerConfig
from ..store._clock import SYSTEM_CLOCK, Clock
from ._kv import KVConfigManager
from ._processor import NamesrvProcessor
from ._route_table import BROKER_CHANNEL_EXPIRED_SECONDS, RouteInfoManager

log = logging.getLogger(__name__)

SCAN_INITIAL_DELAY_SECONDS = 5.0
SCAN_INTERVAL_SECONDS = 10.0


class NameServer:
    """A name server on ``host:port`` (port 0: any free port; ``address`` tells which after
    ``start``). ``routes`` is its route table. ``max_register_body``: what a compressed
    REGISTER_BROKER body may inflate to (larger ones are answered with SYSTEM_ERROR).
    ``limits``: the connections and buffered bytes its clients may hold. ``kv_config_path``:
    the file of its KV config (RocketMQ's kvConfig.json), read here (KVConfigError when it is
    not KV config JSON) and rewritten on each change; None keeps the KV config in memory.
    ``acl``: the accounts every request is checked against (None: no ACL). ``tls``: its
    port's TLS (RocketMQ's tls.server.mode; None: plain TCP)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9876,
        clock: Clock = SYSTEM_CLOCK,
        *,
        broker_expiry_s: float = BROKER_CHANNEL_EXPIRED_SECONDS,
        scan_interval_s: float = SCAN_INTERVAL_SECONDS,
        scan_initial_delay_s: float = SCAN_INITIAL_DELAY_SECONDS,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_register_body: int = MAX_REGISTER_BODY,
        limits: ServerLimits = DEFAULT_LIMITS,
        kv_config_path: str | os.PathLike[str] | None = None,
        acl: AclSource | None = None,
        tls: TlsServerConfig | None = None,
    ) -> None:
        self.clock = clock
        self.scan_interval_s = scan_interval_s
        self.scan_initial_delay_s = scan_initial_delay_s
        self.routes = RouteInfoManager(clock, expiry_s=broker_expiry_s)
        self.kv = KVConfigManager(kv_config_path)
        self.kv.load()
        self.processor = NamesrvProcessor(
            self.routes, max_register_body=max_register_body, kv=self.kv
        )
        if kv_config_path is not None:
            self.processor.config["kvConfigPath"] = os.fspath(kv_config_path)
        self.acl = acl
        handlers = self.processor.handlers()
        if acl is not None:
            handlers = RemotingAcl(acl, NAMESRV).guard_all(handlers)
        self.server = RemotingServer(
            handlers,
            host,
            port,
            max_frame=max_frame,
            name="namesrv",
            limits=limits,
            authenticated=acl is not None,
            tls=tls,
        )
        self.server.close_listeners.append(self._connection_closed)
        self._scan_task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        await self.server.start()
        self.processor.config["listenPort"] = self.address.rpartition(":")[2]
        self._scan_task = asyncio.create_task(self._scan_loop(), name="namesrv-scan")
        log.info(
            "name server listening on %s%s",
            self.address,
            ", ACL on: changes need an admin account" if self.acl is not None else "",
        )

    async def close(self) -> None:
        """Stop the scan, stop accepting and close every connection."""
        task, self._scan_task = self._scan_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.server.close()

    async def __aenter__(self) -> NameServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def scan_not_active_brokers(self) -> int:
        """Drop the brokers not heard from for longer than the expiry and close their
        connections; returns how many were dropped."""
        expired = self.routes.scan_not_active_brokers()
        for _, channel in expired:
            if isinstance(channel, Connection):
                channel.close()
        return len(expired)

    async def _scan_loop(self) -> None:
        await asyncio.sleep(self.scan_initial_delay_s)
        while True:
            try:
                self.scan_not_active_brokers()
            except Exception:
                log.exception("name server: broker scan failed")
            await asyncio.sleep(self.scan_interval_s)

    def _connection_closed(self, conn: Connection) -> None:
        self.routes.on_channel_destroy(conn)
