"""The gRPC front end of a broker: a grpc.aio server for ``apache.rocketmq.v2.MessagingService``
on the broker's event loop, with the pop state it serves receives from.

::

    GrpcFrontEnd(broker, config)      attach_grpc(broker, host, port, acl=...)
      start()   pop state loaded from <store>/config/popState.json, server bound and started,
                housekeeping started
      close()   waiting receives answered, server stopped (in-flight RPCs get a grace period),
                consumer offsets committed, pop state persisted

Housekeeping, every ``pop_persist_interval_ms``: each (group, topic, queue)'s pop progress is
committed as the group's consumer offset (what GetOffset and the remoting front end's
QUERY_CONSUMER_OFFSET answer, and where a group starts again if the pop state were lost), and
the pop state file is written when it changed (in a worker thread: it fsyncs).

Crash window (at-least-once): what changed in the pop state since the last write is lost in a
crash (kill -9, power loss), never a message. A message handed out in that window is handed out
again as a first delivery, and the handle its consumer holds is refused; an ack in that window
is forgotten, so the message comes back after its invisible time. A clean shutdown persists
everything, and receipt handles stay valid across it. See ``broker/state/_pop.py``.

Start and close run on the broker's event loop: start after the broker's ``start``, close
between its ``stop_registering`` and ``shutdown`` (``rocketstore.server.BrokerServer`` runs this
order). The broker is seen through the protocols of ``broker/_services.py`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from ..acl import _audit
from ..broker._services import HasAcl, HasClock
from ..broker.state._pop import POP_STATE_FILE, PopState
from ..remoting._allowance import PROCESS_CONNECTIONS
from ..remoting._limits import Trimmer
from ..remoting._room import ByteRoom
from ._clients import ClientRegistry, ClientsContext
from ._config import DEFAULT_GRPC_PORT, GrpcConfig
from ._gate import Gate
from ._pull import PullContext, PullService
from ._receive import PopService, ReceiveContext
from ._routes import ClusterRoutes, RoutesContext
from ._send import SendContext, SendService
from ._service import MessagingService, ServiceContext
from ._transaction import TransactionContext, TransactionFront

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._acl import AclServicer

log = logging.getLogger(__name__)

CLIENT_EXPIRY_CHECK_S = 10.0
# room for a body of max_message_size plus properties and framing
_MESSAGE_OVERHEAD = 1024 * 1024
# what a closed Telemetry stream let go of, counted towards handing memory back
STREAM_COST = 32 * 1024


def _held(host: str, port: int) -> bool:
    """Whether another socket listens on ``host:port`` (a probe bound with SO_REUSEADDR, as the
    servers bind, then closed); port 0 never is."""
    if not port:
        return False
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        return exc.errno == errno.EADDRINUSE
    return False


class FrontEndContext(
    ClientsContext,
    PullContext,
    ReceiveContext,
    RoutesContext,
    SendContext,
    ServiceContext,
    TransactionContext,
    HasAcl,
    HasClock,
    Protocol,
):
    """What the gRPC front end uses of the broker, and what it hands its services."""


def _bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcFrontEnd:
    """``apache.rocketmq.v2.MessagingService`` over ``broker`` (a started BrokerController)."""

    def __init__(
        self,
        broker: FrontEndContext,
        config: GrpcConfig | None = None,
        *,
        pop_state_path: str | Path | None = None,
    ) -> None:
        self.broker = broker
        self.config = config if config is not None else GrpcConfig()
        self._pop_state_path = pop_state_path
        self.pop: PopState
        self.service: MessagingService
        self._server: Any = None
        self._port = 0
        self._housekeeping: asyncio.Task[None] | None = None
        self._started = False
        self.max_connections = 0  # the connections its server takes (set at start)
        self.room: ByteRoom  # the budget of messages held (max_buffered_bytes)
        self.gate: Gate
        self._trimmer = Trimmer()
        self._given_back = 0
        self._closed_streams = 0

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (after ``start``; the chosen one when the config asked for 0)."""
        return self._port

    @property
    def advertised_host(self) -> str:
        if self.config.advertised_host:
            return self.config.advertised_host
        if self.config.host not in ("", "0.0.0.0", "::"):
            return self.config.host
        return self.broker.config.advertised_host

    @property
    def address(self) -> str:
        """``host:port`` clients connect to."""
        return _bind_address(self.advertised_host, self._port)

    async def start(self) -> None:
        """Load the pop state, bind and start the server. Broker's loop."""
        if self._started:
            return
        broker = self.broker
        clock = broker.clock
        path = (
            Path(self._pop_state_path)
            if self._pop_state_path is not None
            else Path(broker.store_config.store_path_root_dir) / "config" / POP_STATE_FILE
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        cfg = self.config
        self.pop = await asyncio.to_thread(
            PopState, path, clock=clock, dead_letter_retry_ms=cfg.dead_letter_retry_ms
        )
        clients = ClientRegistry(broker, cfg, clock)
        self.room = ByteRoom(cfg.max_buffered_bytes)
        pops = PopService(broker, cfg, clock, self.pop, self.room)
        self._transactions = TransactionFront(broker, clients)
        self._routes = ClusterRoutes(broker)
        self.service = MessagingService(
            broker,
            cfg,
            clients,
            SendService(broker, cfg, clock),
            pops,
            PullService(broker, cfg),
            lambda: (self.advertised_host, self._port),
            self._transactions,
            self._routes,
        )
        limit = broker.store_config.max_message_size + _MESSAGE_OVERHEAD
        self.max_connections = PROCESS_CONNECTIONS.reserve(self, cfg.max_connections)
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.server_handshake_timeout_ms", cfg.handshake_timeout_ms),
            ("grpc.max_connection_idle_ms", cfg.idle_timeout_ms),
            ("grpc.max_concurrent_streams", cfg.max_streams_per_connection),
            # a stream's window stays small until its handler reads (see _gate)
            ("grpc.http2.bdp_probe", 0),
            *cfg.extra_options,
        ]
        server = grpc.aio.server(options=options, maximum_concurrent_rpcs=cfg.max_concurrent_calls)
        self.gate = Gate(
            self.service,
            self._acl_servicer(),
            self.room,
            max_request=limit,
            send_wait_s=cfg.send_wait_ms / 1000.0,
        )
        self.gate.add_to(server)
        bind = _bind_address(cfg.host, cfg.port)
        if _held(cfg.host, cfg.port):  # before gRPC's C core, which logs its own lines
            raise OSError(errno.EADDRINUSE, f"gRPC front end: cannot bind {bind}: address in use")
        try:
            if cfg.tls_cert is not None and cfg.tls_key is not None:
                key = await asyncio.to_thread(Path(cfg.tls_key).read_bytes)
                cert = await asyncio.to_thread(Path(cfg.tls_cert).read_bytes)
                credentials = grpc.ssl_server_credentials([(key, cert)])
                port = server.add_secure_port(bind, credentials)
            else:
                port = server.add_insecure_port(bind)
        except RuntimeError as exc:  # grpc's "failed to bind"
            PROCESS_CONNECTIONS.release(self)
            raise OSError(f"gRPC front end: cannot bind {bind}: {exc}") from None
        if not port:
            PROCESS_CONNECTIONS.release(self)
            raise OSError(f"gRPC front end: cannot bind {bind}")
        self._port = int(port)
        await server.start()
        self._server = server
        self._housekeeping = asyncio.create_task(self._housekeep(), name="grpc-housekeeping")
        broker.transactions.checkers.append(self._transactions.check)
        broker.grpc_endpoint = self.address
        broker.pop_state = self.pop
        self._started = True
        log.info(
            "gRPC front end of broker %s listening on %s%s%s",
            broker.config.broker_name,
            self.address,
            " (TLS)" if cfg.tls_enabled else "",
            " (ACL)" if cfg.acl_enabled or broker.acl is not None else "",
        )

    def _acl_servicer(self) -> AclServicer | None:
        """The service behind the broker's ACL when it has one (else the config's keys, which
        then guard the broker's remoting port too); None without an ACL."""
        from ..acl import StaticAcl, admin_accounts
        from ._acl import AclChecker, AclServicer

        source = self.broker.acl
        if source is None and self.config.credentials is not None:
            source = StaticAcl(admin_accounts(self.config.credentials))
            self.broker.enable_acl(source)  # the same keys on the remoting port
        if source is None:
            return None
        return AclServicer(self.service, AclChecker(source))

    async def close(self) -> None:
        """Answer waiting receives, stop the server, commit offsets, persist the pop state.
        Broker's loop; call before the broker's shutdown."""
        if not self._started:
            return
        self._started = False
        if self.broker.grpc_endpoint == self.address:
            self.broker.grpc_endpoint = None
        if self.broker.pop_state is self.pop:
            self.broker.pop_state = None
        self._routes.close()
        checkers = self.broker.transactions.checkers
        if self._transactions.check in checkers:
            checkers.remove(self._transactions.check)
        await self.service.pops.close()
        await self._server.stop(self.config.shutdown_grace_s)
        PROCESS_CONNECTIONS.release(self)
        task, self._housekeeping = self._housekeeping, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._commit_progress()
        try:
            await asyncio.to_thread(self.pop.persist)
        except Exception:
            log.exception("gRPC front end: persisting the pop state failed")
        log.info("gRPC front end of broker %s stopped", self.broker.config.broker_name)

    # ---- housekeeping ------------------------------------------------------------------------

    def _commit_progress(self) -> None:
        commit = self.broker.offsets.commit_offset
        for (group, topic, queue_id), offset in self.pop.progress_table().items():
            commit("grpc", group, topic, queue_id, offset)

    async def _housekeep(self) -> None:
        interval = self.config.pop_persist_interval_ms / 1000.0
        loop = asyncio.get_running_loop()
        next_expiry = loop.time() + CLIENT_EXPIRY_CHECK_S
        while True:
            await asyncio.sleep(interval)
            try:
                self._commit_progress()
                pops = self.service.pops
                pops.prune_deadlines()
                pops.renew_due()
                if loop.time() >= next_expiry:
                    next_expiry = loop.time() + CLIENT_EXPIRY_CHECK_S
                    streaming = self._transactions.stream_ids()
                    for client_id in self.service.clients.expire(streaming):
                        pops.release_client(client_id)
                await asyncio.to_thread(self.pop.persist)
                self._maybe_trim()
                _audit.flush()  # the counts of repeated refusals whose interval is over
            except Exception:
                log.exception("gRPC front end: housekeeping failed")

    def _maybe_trim(self) -> None:
        """Hand memory back to the system once the front end let go of enough of it (the
        remoting servers' rule, ``Trimmer``): what its budget gave back, and some for each
        Telemetry stream closed."""
        room = self.room
        closed = self.service.telemetry_closed
        self._trimmer.released += room.given_back - self._given_back
        self._trimmer.released += (closed - self._closed_streams) * STREAM_COST
        self._given_back, self._closed_streams = room.given_back, closed
        self._trimmer.maybe_trim(room.taken > 0)


def attach_grpc(
    broker: FrontEndContext,
    host: str = "127.0.0.1",
    port: int = DEFAULT_GRPC_PORT,
    acl: Mapping[str, str] | None = None,
    *,
    tls: tuple[str, str] | None = None,
    config: GrpcConfig | None = None,
) -> GrpcFrontEnd:
    """A gRPC front end for ``broker`` on ``host:port`` (not started: ``await fe.start()``
    after the broker's start, ``await fe.close()`` before its shutdown). ``acl``: access key →
    secret key (None: no ACL). ``tls``: (certificate file, key file), PEM. ``config``: the other
    settings (host, port, acl and tls given here replace its own)."""
    base = config if config is not None else GrpcConfig()
    cert, key = tls if tls is not None else (base.tls_cert, base.tls_key)
    final = base.replace(
        host=host,
        port=port,
        credentials=acl if acl is not None else base.credentials,
        tls_cert=cert,
        tls_key=key,
    )
    return GrpcFrontEnd(broker, final)
