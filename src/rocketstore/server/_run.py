"""Running servers in one process: a name server and / or brokers on one event loop until
SIGTERM or SIGINT, then a clean shutdown (held pulls answered, offsets and topics persisted,
stores flushed, abort files removed)."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import importlib.util
import logging
import signal
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._extras import METRICS_HINT
from ..console._embed import DEFAULT_LISTEN as CONSOLE_DEFAULT
from ..metrics import default_metrics_listen
from ..remoting._allowance import raise_open_files_limit
from ..store._disk import why_not_writeable
from ._ports import PortClaim, broker_claims, check_ports, port_in_use_error, server_claims

if TYPE_CHECKING:
    from ..acl import PlainAcl
    from ..namesrv import NameServer
    from ._broker import BrokerServer
    from ._controller import ControllerServer

log = logging.getLogger(__name__)


def _settle_garbage_collector() -> None:
    """Everything allocated at start-up (configs, tables, modules) is moved out of the
    collector's view, and young collections run less often: a server allocates a few short-lived
    objects per request, and full scans of a large, static heap cost the event loop (measured:
    +15 % sends with 64 SYNC_FLUSH producers)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
LARGE_ALLOCATION = 512 * 1024


def _settle_allocator() -> bool:
    """Allocations of LARGE_ALLOCATION bytes or more (large answers, the write buffers of
    connections that hold them) get pages of their own, handed back to the system when they
    are freed. glibc otherwise raises that threshold to the size of the largest block freed
    (up to 32 MiB), after which such buffers come from its heaps, which keep freed memory: a
    burst of 1 MiB answers then left the process hundreds of MiB above its budget. True when
    set (glibc only; elsewhere nothing happens)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_ALLOCATION))


async def _log_stats(servers: list[BrokerServer], interval: float) -> None:
    """One line a broker every ``interval`` seconds: puts, gets, their rates, the disk."""
    from .._logs import STATS_LOGGER, StatsLine

    out = logging.getLogger(STATS_LOGGER)
    lines = [
        (s.broker.config.broker_name, StatsLine(s.broker.store.statistics, time.monotonic))
        for s in servers
    ]
    for _name, line in lines:
        line.line()  # the start: rates are over the intervals from here
    while True:
        await asyncio.sleep(interval)
        for name, line in lines:
            try:
                text = await asyncio.to_thread(line.line)
            except Exception as exc:  # a store shutting down: the next interval tries again
                out.warning("broker %s: no statistics: %s", name, exc)
                continue
            out.info("broker %s: %s", name, text)


def _split(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 in brackets) → (host, port); a port that is not a number: 0 (the
    server's own check reports it)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0


def _optional_claims(metrics_listen: str | None, console_listen: str | None) -> list[PortClaim]:
    """The metrics endpoint's and the console's ports when given (their defaults step aside
    when taken)."""
    claims = []
    if metrics_listen:
        claims.append(
            PortClaim("the metrics endpoint", *_split(metrics_listen), "--metrics-listen")
        )
    if console_listen:
        claims.append(PortClaim("the console", *_split(console_listen), "--console-listen"))
    return claims


def _no_default_metrics(address: str) -> str:
    """Why the metrics endpoint did not start at its default ``address``."""
    try:
        installed = importlib.util.find_spec("prometheus_client") is not None
    except ImportError:
        installed = False
    if not installed:
        return f"prometheus_client is not installed: {METRICS_HINT}"
    return f"{address} is taken (--metrics-listen HOST:PORT)"


def announce_ha(server: BrokerServer, announce: Callable[[str], None]) -> None:
    """The HA port a started master's slaves replicate from, or the master a slave copies."""
    store_config = server.store_config
    name = server.config.broker_name
    if store_config.enable_controller_mode:
        port = server.store.ha.listen_port
        host = store_config.ha_listen_host
        announce(f"HA port of broker {name} (controller mode) listening on {host}:{port}")
    elif store_config.broker_role == "SLAVE":
        master = store_config.ha_master_address or "the master the name server names"
        announce(f"broker {name} replicates from {master} (HA)")
    elif store_config.ha_listens:
        host = store_config.ha_listen_host
        port = server.store.ha.listen_port
        note = ""
        if host != server.config.listen_host and host in ("127.0.0.1", "::1", "localhost"):
            note = (
                " (this host only: slaves elsewhere need --ha-listen HOST:PORT; it takes no "
                "credentials and serves the whole commit log)"
            )
        announce(
            f"HA port of broker {name} (slaves replicate from it) listening on {host}:{port}{note}"
        )


def _server_acl(
    namesrv: NameServer | None, controller: ControllerServer | None
) -> Callable[[], PlainAcl] | None:
    """The ACL of the servers beside the brokers (a controller's, else a name server's): with
    no broker, /metrics asks an admin account of it."""
    if controller is not None and controller.acl_rules is not None:
        return controller.acl_rules
    acl = namesrv.acl if namesrv is not None else None
    return acl.current if acl is not None else None


async def run_servers(
    namesrv: NameServer | None,
    brokers: list[BrokerServer],
    *,
    announce: Callable[[str], None] = print,
    stop: asyncio.Event | None = None,
    metrics_listen: str | None = "",
    metrics_namesrv: NameServer | None = None,
    metrics_auth: str | None = None,
    console_listen: str | None = "",
    console_namesrv: str | None = None,
    stats_interval: float = 60.0,
    controller: ControllerServer | None = None,
    https: ssl.SSLContext | None = None,
) -> None:
    """Start the name server, the controller (``controller``: RocketMQ 5's, on its own port)
    and the brokers (none started yet), then the metrics endpoint (``metrics_listen``: None for
    the default port when it is free, "" for none; ``metrics_auth``: who may read /metrics,
    ``--metrics-auth``); run until SIGTERM or SIGINT (or ``stop``),
    then stop everything in reverse order. ``console_listen`` likewise starts the web console
    over ``console_namesrv`` (visitors sign in when a broker checks ACL). Every port is
    announced as it opens (the name server's, the controller's, each broker's, its HA and gRPC
    ports, the metrics endpoint's, the console's), and two of them asking for one port are
    refused before anything binds (PortClashError, naming both); ``https``: the metrics
    endpoint and the console serve HTTPS with it (``--https-cert``); a port another process holds
    ends the start with PortInUseError naming it. Every ``stats_interval``
    seconds each broker's one-line summary goes to ``stats.log`` (the ``rocketstore.stats``
    logger)."""
    extra = _optional_claims(metrics_listen, console_listen)
    controller_claims = []
    if controller is not None:
        cfg = controller.config
        option = "--controller-listen" if namesrv is not None else "--listen"
        controller_claims.append(
            PortClaim("the controller", cfg.listen_host, cfg.listen_port, option)
        )
    check_ports(server_claims(namesrv, brokers, controller_claims + extra))
    raise_open_files_limit()
    starting: list[PortClaim] = []  # the ports of the server being started
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    _settle_allocator()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    started: list[BrokerServer] = []
    controller_started = False
    metrics = None
    console = None
    stats: asyncio.Task[None] | None = None
    try:
        if namesrv is not None:
            starting = server_claims(namesrv, brokers)[:1]
            await namesrv.start()
            announce(f"name server listening on {namesrv.address}")
        if controller is not None:
            starting = controller_claims
            await controller.start()
            controller_started = True
            cfg = controller.config
            announce(
                f"controller {cfg.self_id} of {cfg.group} listening on {controller.address} "
                f"({cfg.backend} backend"
                + (f", {cfg.store_dir}" if cfg.backend == "file" else "")
                + (f", ACL {controller.acl_file}" if controller.acl_file else "")
                + ")"
            )
        for server in brokers:
            starting = broker_claims(server)
            await server.start()
            started.append(server)
            broker = server.broker
            role = (
                f"controller mode, controllers {broker.config.controller_addr}"
                if broker.config.enable_controller_mode
                else f"id {broker.config.broker_id}, {broker.store_config.broker_role}"
            )
            announce(
                f"broker {broker.config.broker_name} (cluster {broker.config.cluster_name}, "
                f"{role}) listening on "
                f"{broker.config.listen_host}:{broker.config.listen_port}, store "
                f"{broker.store_config.store_path_root_dir}"
            )
            announce_ha(server, announce)
            read_only = why_not_writeable(broker.store.running_flags.bits)
            if read_only:
                text = (
                    f"store {broker.store_config.store_path_root_dir} is read-only: {read_only};"
                    " sends are refused (SERVICE_NOT_AVAILABLE), reads are served, writes "
                    "resume once there is space"
                )
                log.warning("%s", text)
                announce(text)
            if server.grpc is not None:
                announce(f"gRPC front end listening on {server.grpc.address}")
            if broker.config.auth_enabled:  # ACL 2.0: the users and ACLs of auth.json
                users = broker.config_dir / "auth.json"
                announce(f"ACL 2.0 on every port of {broker.config.broker_name}: {users}")
            elif broker.acl is not None:
                where = broker.config.acl_path or "the gRPC front end's keys"
                announce(f"ACL on every port of {broker.config.broker_name}: {where}")
            if broker.store_config.broker_role == "SYNC_MASTER":
                log.warning(
                    "broker %s is a SYNC_MASTER: until a slave connects, every send is stored "
                    "and answered SLAVE_NOT_AVAILABLE (clients may send it again)",
                    broker.config.broker_name,
                )
        from ..metrics import maybe_start_metrics

        starting = [c for c in extra if c.owner == "the metrics endpoint"]
        first_port = (
            brokers[0].config.listen_port
            if brokers
            else controller.config.listen_port
            if controller is not None
            else None
        )
        default_metrics = default_metrics_listen(first_port)
        metrics = await maybe_start_metrics(
            [s.broker for s in started],
            metrics_listen,
            namesrv=metrics_namesrv or namesrv,
            controller=controller.controller if controller_started and controller else None,
            auth=metrics_auth,
            acl=_server_acl(namesrv, controller),
            default=default_metrics,
            tls=https,
        )
        scheme = "https" if https is not None else "http"
        if metrics is not None:
            announce(
                f"metrics on {scheme}://{metrics.address}/metrics ({metrics.http.auth.describe()};"
                " /healthz, /readyz open)"
            )
        elif metrics_listen is None and started:
            announce(f"no metrics endpoint: {_no_default_metrics(default_metrics)}")
        from ..console._embed import maybe_start_console

        starting = [c for c in extra if c.owner == "the console"]
        console = await maybe_start_console(
            console_listen,
            console_namesrv,
            login=any(s.broker.acl is not None for s in started),
            tls=https,
        )
        if console is not None:
            announce(f"console on {scheme}://{console.address}/")
        elif console_listen is None and console_namesrv:
            announce(f"no console: {CONSOLE_DEFAULT} is taken (--console-listen HOST:PORT)")
        if started and stats_interval > 0:
            stats = asyncio.create_task(_log_stats(started, stats_interval), name="stats-log")
        starting = []
        _settle_garbage_collector()
        await stop.wait()
        announce("shutting down")
    except OSError as exc:
        raise port_in_use_error(starting, exc) from None
    finally:
        if stats is not None:
            stats.cancel()
        if console is not None:
            try:
                await console.close()
            except Exception:
                log.exception("closing the console failed")
        if metrics is not None:
            await metrics.close()
        for server in reversed(started):
            try:
                await server.shutdown()
            except Exception:
                log.exception("broker shutdown failed")
        if controller is not None and controller_started:
            try:
                await controller.shutdown()
            except Exception:
                log.exception("controller shutdown failed")
        if namesrv is not None:
            await namesrv.close()
        announce("stopped")
