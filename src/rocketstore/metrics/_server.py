"""start_metrics: a process's brokers (and name server, and controller) served as Prometheus metrics with
health endpoints on one HTTP port (``--metrics-listen``; RocketMQ 5's exporter port, 5557, on
127.0.0.1 by default).

prometheus_client is imported here, at start: the broker runs without it; asking for metrics
without it raises ``MetricsUnavailableError`` with the install hint.
"""

from __future__ import annotations

import importlib.util
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._extras import METRICS_HINT
from ._auth import OPEN, AclAdminAuth, MetricsAuth, parse_metrics_auth
from ._collector import RocketMQCollector
from ._controller_collector import ControllerCollector, ControllerSource
from ._http import MetricsHttpServer
from ._source import MetricsSource, NamesrvSource

if TYPE_CHECKING:
    from ..acl import PlainAcl
    from ..controller import Controller
    from ..namesrv import NameServer
    from ._broker_source import BrokerContext

log = logging.getLogger(__name__)

DEFAULT_METRICS_LISTEN = "127.0.0.1:5557"
ROCKETMQ_BROKER_PORT = 10911
DERIVED_PORT_STEP = 2
"""Without --metrics-listen, a server listening on port P serves its metrics on P + 2 (a
broker's HA port is P + 1), except a broker on RocketMQ's default port, which keeps RocketMQ 5's
5557: several brokers and controllers on one host each get a port of their own."""


def default_metrics_listen(listen_port: int | None) -> str:
    """The metrics endpoint's address when --metrics-listen is not given, for a process whose
    first server (its broker, else its controller) listens on ``listen_port`` (None: neither)."""
    if listen_port is None or listen_port == ROCKETMQ_BROKER_PORT:
        return DEFAULT_METRICS_LISTEN
    if listen_port == 0:  # a server on a port of the system's choosing: so is this one
        return "127.0.0.1:0"
    port = listen_port + DERIVED_PORT_STEP
    return f"127.0.0.1:{port}" if port <= 65535 else DEFAULT_METRICS_LISTEN


class MetricsUnavailableError(RuntimeError):
    """prometheus_client is not installed."""


class MetricsListenError(ValueError):
    """A --metrics-listen value that is not HOST:PORT."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:5557`` for IPv6) → (host, port). MetricsListenError otherwise."""
    host, sep, port_text = listen.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise MetricsListenError(
            f"--metrics-listen {listen!r}: expected HOST:PORT, e.g. {DEFAULT_METRICS_LISTEN}"
        )
    return host, int(port_text)


class MetricsServer:
    """The collector, its registry and the HTTP server. ``address`` once started."""

    def __init__(
        self,
        brokers: Sequence[MetricsSource],
        host: str,
        port: int,
        *,
        namesrv: NamesrvSource | None = None,
        controller: ControllerSource | None = None,
        auth: MetricsAuth = OPEN,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        try:
            from prometheus_client import CollectorRegistry, generate_latest
        except ImportError as exc:
            raise MetricsUnavailableError(
                f"metrics need prometheus_client: {METRICS_HINT}"
            ) from exc
        self.sources = list(brokers)
        self.namesrv = namesrv
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RocketMQCollector(self.sources, namesrv))  # type: ignore[arg-type]
        if controller is not None:
            self.registry.register(ControllerCollector(controller))  # type: ignore[arg-type]
        self._generate = generate_latest
        self.http = MetricsHttpServer(self.render, self.not_ready, host, port, auth=auth, tls=tls)

    @property
    def address(self) -> str:
        return self.http.address

    def render(self) -> bytes:
        return self._generate(self.registry)

    def not_ready(self) -> list[str]:
        reasons = [r for s in self.sources for r in s.not_ready()]
        if self.namesrv is not None:
            reasons += self.namesrv.not_ready()
        return reasons

    async def start(self) -> None:
        await self.http.start()

    async def close(self) -> None:
        await self.http.close()


def metrics_auth(
    auth: str | None,
    brokers: Sequence[BrokerContext],
    acl: Callable[[], PlainAcl] | None = None,
) -> MetricsAuth:
    """Who may read /metrics: ``auth`` (a ``--metrics-auth`` value) when given; else an
    admin account of the ACL when a broker checks one (or ``acl``, the ACL of a server
    beside them: a controller's); else anyone. MetricsAuthError for a value that cannot be
    used."""
    if auth is not None:
        return parse_metrics_auth(auth)
    for broker in brokers:
        if broker.acl is not None:
            return AclAdminAuth(broker.acl.current)
    if acl is not None:
        return AclAdminAuth(acl)
    return OPEN


async def start_metrics(
    brokers: BrokerContext | Sequence[BrokerContext],
    listen: str,
    *,
    namesrv: NameServer | None = None,
    controller: Controller | None = None,
    auth: str | None = None,
    acl: Callable[[], PlainAcl] | None = None,
    tls: ssl.SSLContext | None = None,
) -> MetricsServer:
    """Serve the brokers' (and the name server's, and the controller's) metrics on ``listen``
    (HOST:PORT) and time their remoting requests from now on; ``auth`` and ``acl`` as
    ``metrics_auth``.
    Loop thread; after the brokers started. MetricsUnavailableError without
    prometheus_client, MetricsListenError for a bad ``listen``, MetricsAuthError for a bad
    ``auth``, OSError when the port cannot be bound."""
    from ._broker_source import BrokerSource, NamesrvCount, instrument

    host, port = parse_listen(listen)
    if not isinstance(brokers, Sequence):
        brokers = [brokers]
    server = MetricsServer(
        [BrokerSource(b) for b in brokers],
        host,
        port,
        namesrv=NamesrvCount(namesrv) if namesrv is not None else None,
        controller=controller,
        auth=metrics_auth(auth, brokers, acl),
        tls=tls,
    )
    await server.start()
    for broker in brokers:
        instrument(broker)
    return server


async def maybe_start_metrics(
    brokers: Sequence[BrokerContext],
    listen: str | None,
    *,
    namesrv: NameServer | None = None,
    controller: Controller | None = None,
    auth: str | None = None,
    acl: Callable[[], PlainAcl] | None = None,
    default: str = DEFAULT_METRICS_LISTEN,
    tls: ssl.SSLContext | None = None,
) -> MetricsServer | None:
    """What ``--metrics-listen`` asks for: '' no metrics; None ``default`` (see
    ``default_metrics_listen``), skipped
    when prometheus_client is missing (a line in the log) or the port is taken (a warning:
    another broker on the host has it); any other value required (its errors raised).
    ``auth``, ``acl``: see ``metrics_auth``."""
    if listen == "":
        return None
    if listen is not None:
        return await start_metrics(
            brokers,
            listen,
            namesrv=namesrv,
            controller=controller,
            auth=auth,
            acl=acl,
            tls=tls,
        )
    try:
        return await start_metrics(
            brokers,
            default,
            namesrv=namesrv,
            controller=controller,
            auth=auth,
            acl=acl,
            tls=tls,
        )
    except MetricsUnavailableError as exc:  # not asked for: no noise
        log.info("no metrics: %s", exc)
    except OSError as exc:
        log.warning("no metrics on %s: %s", default, exc)
    return None


def check_listen_option(_ctx: object, _param: object, value: str | None) -> str | None:
    """click callback of ``--metrics-listen``: HOST:PORT, '' or unset (the default, optional);
    a usage error for a bad address, or an explicit one without prometheus_client."""
    import click

    if not value:
        return value
    try:
        parse_listen(value)
    except MetricsListenError as exc:
        raise click.BadParameter(str(exc)) from None
    if importlib.util.find_spec("prometheus_client") is None:
        raise click.BadParameter(
            f"metrics need prometheus_client: {METRICS_HINT} (or --metrics-listen '' for none)"
        )
    return value


LISTEN_HELP = (
    "Prometheus /metrics, /healthz and /readyz on HOST:PORT (default: 127.0.0.1 and the "
    f"listen port + {DERIVED_PORT_STEP}, {DEFAULT_METRICS_LISTEN} beside a broker on "
    f"{ROCKETMQ_BROKER_PORT}; skipped when taken; '' for none)"
)
