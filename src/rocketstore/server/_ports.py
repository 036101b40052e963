"""The ports one process of servers asks for, each with its owner, checked against each other
before anything binds.

A broker listens on more than its own port: its HA port (slaves replicate from it; the broker's
port + 1 unless set, as RocketMQ does), its gRPC front end, and beside it the name server, the
metrics endpoint and the console of ``rocketstore serve``. Two of them on one port would end in
whichever binds second failing with a bare "address in use" (gRPC's C core says less), so
``check_ports`` refuses the pair first, naming both owners. Port 0 (any free port) never
clashes; hosts clash when they are equal or either is a wildcard address. The metrics endpoint
and the console at their default addresses are not claimed: they step aside when their port is
taken.

A port another process holds is found only when a server fails to bind it:
``port_in_use_error`` then tries the ports of that server (``taken``) and names the one that
is held, with the option that moves it.

Pure functions but ``taken`` (which binds and closes a probe socket); any thread.
"""

from __future__ import annotations

import dataclasses
import errno
import re
import socket
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..store._errors import StoreConfigError

if TYPE_CHECKING:
    from ..namesrv import NameServer
    from ._broker import BrokerServer

WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})


class PortClashError(StoreConfigError):
    """Two of the servers of one process ask for the same port."""


class PortInUseError(StoreConfigError):
    """A server's port is held by another process."""


@dataclasses.dataclass(frozen=True)
class PortClaim:
    """``owner`` (a phrase: "the name server") listens on ``host:port`` (0: any free port);
    ``option`` is the command-line option that sets it ("" when none does)."""

    owner: str
    host: str
    port: int
    option: str = ""

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _host(host: str) -> str:
    return "127.0.0.1" if host == "localhost" else host


def overlaps(a: PortClaim, b: PortClaim) -> bool:
    """Whether ``a`` and ``b`` cannot both bind."""
    if not a.port or a.port != b.port:
        return False
    ha, hb = _host(a.host), _host(b.host)
    return ha == hb or ha in WILDCARDS or hb in WILDCARDS


def check_ports(claims: Iterable[PortClaim]) -> None:
    """Raise PortClashError for the first two claims that cannot both bind."""
    seen: list[PortClaim] = []
    for claim in claims:
        for other in seen:
            if overlaps(claim, other):
                raise PortClashError(
                    f"port {claim.port} is asked for twice: by {other.owner}, at "
                    f"{other.address}, and by {claim.owner}, at {claim.address}; give one of "
                    "them another port"
                )
        seen.append(claim)


def taken(claim: PortClaim) -> bool:
    """Whether another socket holds ``claim``'s address now (a probe bound and closed, with
    SO_REUSEADDR as the servers bind)."""
    if not claim.port:
        return False
    host = _host(claim.host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    host = host if host not in WILDCARDS else ("::" if family == socket.AF_INET6 else "0.0.0.0")
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, claim.port))
    except OSError as exc:
        return exc.errno == errno.EADDRINUSE
    return False


def port_in_use_error(claims: Iterable[PortClaim], exc: OSError) -> OSError | PortInUseError:
    """The error to report for ``exc``, raised while servers with ``claims`` started: a
    PortInUseError naming the claim another process holds, with what to do, or ``exc`` itself
    when none of them is held (another cause). The ports ``exc`` names are tried first: a
    server that failed may still be closing the sockets it bound before."""
    text = str(exc)
    claims = sorted(claims, key=lambda c: not re.search(rf"(:|, ){c.port}\b", text))
    for claim in claims:
        if taken(claim):
            move = f" ({claim.option} HOST:PORT)" if claim.option else ""
            return PortInUseError(
                f"port {claim.port} is in use by another process: {claim.owner} cannot listen "
                f"on {claim.address}; stop that process, or give it another port{move}"
            )
    return exc


def broker_claims(server: BrokerServer) -> list[PortClaim]:
    """The ports a broker not started yet will listen on: its own, its HA port (a master's),
    its gRPC front end's. In controller mode every broker listens on its HA port."""
    store, config = server.store_config, server.config
    name = config.broker_name
    claims = [PortClaim(f"broker {name}", config.listen_host, config.listen_port, "--listen")]
    listens = store.broker_role != "SLAVE" or store.enable_controller_mode
    if listens and config.listen_port:  # masters listen (ha_enable), any broker in controller mode
        claims.append(
            PortClaim(
                f"the HA port of broker {name} (slaves replicate from it; 127.0.0.1 and the "
                "broker's port + 1 unless --ha-listen sets them)",
                store.ha_listen_host,
                store.ha_listen_port,
                "--ha-listen",
            )
        )
    grpc = server.grpc_config
    if grpc is not None:
        claims.append(
            PortClaim(f"the gRPC front end of broker {name}", grpc.host, grpc.port, "--grpc-listen")
        )
    return claims


def server_claims(
    namesrv: NameServer | None,
    brokers: Sequence[BrokerServer],
    extra: Iterable[PortClaim] = (),
) -> list[PortClaim]:
    """Every port of a name server and brokers not started yet, then ``extra``. A name server
    beside brokers is ``serve``'s (``--namesrv-listen``), else ``namesrv``'s (``--listen``)."""
    claims: list[PortClaim] = []
    if namesrv is not None:
        option = "--namesrv-listen" if brokers else "--listen"
        ns = namesrv.server
        claims.append(PortClaim("the name server", ns.host, ns.port, option))
    for server in brokers:
        claims.extend(broker_claims(server))
    claims.extend(extra)
    return claims


__all__ = [
    "PortClaim",
    "PortClashError",
    "PortInUseError",
    "broker_claims",
    "check_ports",
    "overlaps",
    "port_in_use_error",
    "server_claims",
    "taken",
]
