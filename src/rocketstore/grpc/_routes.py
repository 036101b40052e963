"""Routes across the cluster for gRPC clients: every broker group's queues of a topic, each at
the gRPC front end of the broker that holds it, as RocketMQ 5's proxy in local mode answers
QueryRoute and QueryAssignment.

The topic's route comes from the name server (GET_ROUTEINFO_BY_TOPIC). Each other master's
gRPC endpoint comes from its own configuration (GET_BROKER_CONFIG's ``grpcEndpoint``, which a
rocketstore broker with a gRPC front end reports); a broker without one (no gRPC front end, or
another implementation) is left out of the answer. Routes are kept for ``ROUTE_TTL_S`` and
endpoints for ``ENDPOINT_TTL_S`` (a failed lookup for ``FAILURE_TTL_S``); when the name server
cannot be asked or does not know the topic yet, the answer is this broker's queues alone.

Loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from ..broker._services import HasConfig, HasEndpoints, HasInnerClient
from ..broker.admin._admin import GET_BROKER_CONFIG, GRPC_ENDPOINT_KEY
from ..client._route import MASTER_ID, TopicRoute, parse_route
from ..remoting import RemotingCommand, RemotingError, ResponseCode
from ..remoting._client import AsyncRemotingClient
from ..remoting._codes import RequestCode

log = logging.getLogger(__name__)

ROUTE_TTL_S = 5.0
ENDPOINT_TTL_S = 30.0
# a failed lookup is asked again after this long (not kept for a whole TTL)
FAILURE_TTL_S = 1.0
_ASK_TIMEOUT_S = 3.0


class RoutesContext(HasConfig, HasEndpoints, HasInnerClient, Protocol):
    """What the gRPC routes use of the broker."""


@dataclass(frozen=True, slots=True)
class BrokerQueues:
    """One broker group's queues of a topic and where its gRPC front end listens."""

    broker_name: str
    broker_id: int
    host: str
    port: int
    read_queue_nums: int
    write_queue_nums: int
    perm: int


class ClusterRoutes:
    def __init__(self, broker: RoutesContext) -> None:
        self.broker = broker
        self._client = AsyncRemotingClient(
            connect_timeout=_ASK_TIMEOUT_S, signer=broker.inner_signer
        )
        self._routes: dict[str, tuple[float, TopicRoute | None]] = {}
        self._endpoints: dict[str, tuple[float, tuple[str, int] | None]] = {}

    def close(self) -> None:
        self._client.close()

    async def others(self, topic: str) -> list[BrokerQueues]:
        """The other broker groups' queues of ``topic`` with a gRPC front end (empty when the
        name server has no route, cannot be asked, or names only this broker)."""
        route = await self._route(topic)
        if route is None:
            return []
        own = self.broker.config.broker_name
        out: list[BrokerQueues] = []
        for qd in route.queue_data:
            name = str(qd.get("brokerName", ""))
            if not name or name == own:
                continue
            addr = route.master(name)
            if addr is None:
                continue
            endpoint = await self._endpoint(addr)
            if endpoint is None:
                continue
            try:
                out.append(
                    BrokerQueues(
                        name,
                        MASTER_ID,
                        endpoint[0],
                        endpoint[1],
                        int(qd.get("readQueueNums", 0)),
                        int(qd.get("writeQueueNums", 0)),
                        int(qd.get("perm", 6)),
                    )
                )
            except (TypeError, ValueError):
                continue
        out.sort(key=lambda b: b.broker_name)
        return out

    async def _route(self, topic: str) -> TopicRoute | None:
        loop = asyncio.get_running_loop()
        cached = self._routes.get(topic)
        if cached is not None and loop.time() < cached[0]:
            return cached[1]
        route: TopicRoute | None = None
        asked = False  # a name server answered (the topic may be unknown to it)
        for addr in self.broker.config.namesrv_addrs:
            try:
                r = await self._client.invoke(
                    addr,
                    RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}),
                    _ASK_TIMEOUT_S,
                )
            except (RemotingError, OSError) as exc:
                log.debug("route of %s from %s: %s", topic, addr, exc)
                continue
            asked = True
            if r.code == ResponseCode.SUCCESS:
                try:
                    route = parse_route(topic, r.body)
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("route of %s from %s is malformed: %s", topic, addr, exc)
                    continue
            break
        if route is None and not asked and cached is not None:
            route = cached[1]  # no name server answered: the last route known stands a while
        self._routes[topic] = (loop.time() + (ROUTE_TTL_S if route else FAILURE_TTL_S), route)
        if len(self._routes) > 10_000:
            self._routes.clear()
        return route

    async def _endpoint(self, addr: str) -> tuple[str, int] | None:
        loop = asyncio.get_running_loop()
        cached = self._endpoints.get(addr)
        if cached is not None and loop.time() < cached[0]:
            return cached[1]
        endpoint: tuple[str, int] | None = None
        answered = False  # a broker that answered without an endpoint has no gRPC front end
        try:
            r = await self._client.invoke(
                addr, RemotingCommand.request(GET_BROKER_CONFIG, {}), _ASK_TIMEOUT_S
            )
            if r.code == ResponseCode.SUCCESS:
                answered = True
                endpoint = _endpoint_of(bytes(r.body).decode("utf-8", "replace"))
        except (RemotingError, OSError) as exc:
            log.debug("configuration of broker %s: %s", addr, exc)
        if not answered and cached is not None:
            endpoint = cached[1]  # the broker did not answer in time: the last endpoint stands
        known = endpoint is not None or answered
        self._endpoints[addr] = (
            loop.time() + (ENDPOINT_TTL_S if known else FAILURE_TTL_S),
            endpoint,
        )
        return endpoint


def _endpoint_of(config_text: str) -> tuple[str, int] | None:
    """``grpcEndpoint=host:port`` of a broker's configuration (``key=value`` lines)."""
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == GRPC_ENDPOINT_KEY:
            host, colon, port = value.strip().rpartition(":")
            if colon and host and port.isdigit():
                return host.strip("[]"), int(port)
    return None
