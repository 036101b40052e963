"""An asyncio producer over the remoting protocol: routes from the name server, queues taken in
turn (or named), SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE to the queue's master, RocketMQ's
client-side message id in UNIQ_KEY, as the blocking :class:`~rocketstore.client.Producer` does.

Each producer has its own connections (one per address): sixty-four producers are sixty-four
connections to the broker, as sixty-four client processes would be. Many sends may be in
flight on one producer at once; they share its connection.

A plain message (no keys, no user properties, no queue named) to a topic whose route is cached
takes the short way: its frame is a :class:`SendTemplate` (the header encoded once per topic,
queue, tags and delay level) with its opaque, born time and UNIQ_KEY put in, written in one
piece on the open connection. The bytes are those of the general way (``send_request``), which
everything else takes, and which such a send continues in when its first attempt fails.

Loop thread only (the loop the producer was first used on).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence

from ..remoting import (
    AsyncRemotingClient,
    RemotingCommand,
    RemotingError,
    RequestCode,
    ResponseCode,
)
from ..remoting._command import next_opaque
from ._producer import (
    _RETRYABLE,
    DEFAULT_TOPIC,
    UNIQ_IDS,
    SendResult,
    SendTemplate,
    batch_body,
    choose_queue,
    message_properties,
    plain_properties,
    send_request,
    send_result,
)
from ._route import (
    ClientError,
    MessageQueue,
    NameServerUnreachableError,
    NotANameServerError,
    TopicNotFoundError,
    TopicRoute,
    parse_route,
)

GET_ROUTEINFO_BY_TOPIC = 105
SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)


class AsyncProducer:
    """Sends through the brokers the name servers (``namesrv``: ``host:port[;host:port]``)
    name for each topic. Routes are cached for ``route_ttl_s``; a refused send with a
    retryable code, or a failed connection, is tried again ``retries`` times."""

    def __init__(
        self,
        namesrv: str,
        group: str = "rocketstore-producer",
        *,
        timeout: float = 3.0,
        retries: int = 2,
        route_ttl_s: float = 30.0,
    ) -> None:
        self.group = group
        self.timeout = timeout
        self.retries = retries
        self.route_ttl_s = route_ttl_s
        self.namesrv_addrs = [a for a in namesrv.split(";") if a]
        if not self.namesrv_addrs:
            raise ValueError("no name server address")
        self.client = AsyncRemotingClient()
        # topic → (fetched at, route, its write queues: the topic's, or the default topic's
        # for a topic no broker has yet, with the via-default mark)
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._writes: dict[str, tuple[float, TopicRoute, list[MessageQueue], bool]] = {}
        self._turn = itertools.count()
        # (topic, tags, delay level) → the write route entry they were made for and, per write
        # queue, the queue, its master's address and the header template of plain sends
        self._plain: dict[
            tuple[str, str | None, int],
            tuple[object, list[tuple[MessageQueue, str, SendTemplate]]],
        ] = {}

    # ---- routes -----------------------------------------------------------------------------

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRoute | None:
        """The topic's route from the name servers (cached); None when no broker has it."""
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and not refresh and now - cached[0] < self.route_ttl_s:
            return cached[1]
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            cmd = RemotingCommand.request(GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            try:
                r = await self.client.invoke(addr, cmd, self.timeout)
            except RemotingError as exc:
                last = exc
                continue
            if r.code == ResponseCode.TOPIC_NOT_EXIST:
                self._writes.pop(topic, None)
                return None
            if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise NotANameServerError(addr, False)
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(r.code, r.remark)
            route = parse_route(topic, r.body)
            self._routes[topic] = (now, route)
            self._writes.pop(topic, None)  # the write queues follow the new route
            return route
        raise NameServerUnreachableError(self.namesrv_addrs, last)

    async def _write_route(self, topic: str) -> tuple[TopicRoute, list[MessageQueue], bool]:
        """The topic's route and write queues, or the default topic's for a topic not created
        yet (the broker creates it at the first send), cached as long as the route is."""
        cached = self._writes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < self.route_ttl_s:
            return cached[1], cached[2], cached[3]
        now = time.monotonic()
        route = await self.route(topic)
        queues = route.queues(write=True) if route is not None else []
        via_default = not queues
        if via_default:
            default = await self.route(DEFAULT_TOPIC)
            if default is None:
                raise TopicNotFoundError(topic, f"no route for {topic}")
            route = TopicRoute(topic, default.brokers, default.queue_data)
            queues = route.queues(write=True)
        assert route is not None
        self._writes[topic] = (now, route, queues, via_default)
        return route, queues, via_default

    # ---- sending ----------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer (stored, and flushed when the
        broker flushes synchronously); ClientError when the broker refuses it."""
        if (
            keys is None
            and properties is None
            and queue is None
            and (tags is None or type(tags) is str)
            and type(delay_level) is int
        ):
            # a plain message to a topic with a known route, on an open connection: its
            # header from the template, its answer read here; anything else (a refusal, a
            # failed connection) continues as the second attempt of the reference way
            w = self._writes.get(topic)
            if (
                w is not None
                and not w[3]
                and time.monotonic() - w[0] < self.route_ttl_s
                and self.client.signer is None
            ):
                plain = self._plain.get((topic, tags, delay_level))
                if plain is None or plain[0] is not w:
                    plain = self._plain_targets(topic, tags, delay_level, w)
                targets = plain[1]
                if targets:
                    mq, addr, template = targets[next(self._turn) % len(targets)]
                    born = int(time.time() * 1000)
                    uniq = UNIQ_IDS.at(born)
                    try:
                        conn = self.client.connected(addr)
                        if conn is None:
                            conn = await self.client.connection(addr)
                        opaque = next_opaque()
                        head = template.head(opaque, born, uniq, len(body))
                        r = await conn.invoke_encoded(head, body, opaque, SEND_V2, self.timeout)
                    except RemotingError as exc:
                        props = plain_properties(tags, delay_level, uniq)
                        return await self._send(
                            topic, body, props, None, uniq, batch=False, first=1, last=exc
                        )
                    result = send_result(r, topic, mq, uniq)
                    if result is not None:
                        return result
                    last = ClientError(r.code, r.remark)
                    if r.code not in _RETRYABLE or self.retries < 1:
                        raise last
                    await self.route(topic, refresh=True)
                    props = plain_properties(tags, delay_level, uniq)
                    return await self._send(
                        topic, body, props, None, uniq, batch=False, first=1, last=last
                    )
        props = message_properties(tags, keys, properties, delay_level)
        return await self._send(topic, body, props, queue, props["UNIQ_KEY"], batch=False)

    def _plain_targets(
        self,
        topic: str,
        tags: str | None,
        delay_level: int,
        w: tuple[float, TopicRoute, list[MessageQueue], bool],
    ) -> tuple[object, list[tuple[MessageQueue, str, SendTemplate]]]:
        """The write queues of ``w`` (the topic's cached write route) with their masters and
        templates; none when a queue has no master or no template (such sends go the
        reference way, which reports the error)."""
        route, queues = w[1], w[2]
        targets: list[tuple[MessageQueue, str, SendTemplate]] = []
        for mq in queues:
            addr = route.master(mq.broker_name)
            template = SendTemplate.make(self.group, topic, mq.queue_id, tags, delay_level)
            if addr is None or template is None:
                targets = []
                break
            targets.append((mq, addr, template))
        if len(self._plain) >= 1024:  # tags and delay levels are few; many topics: start over
            self._plain.clear()
        entry: tuple[object, list[tuple[MessageQueue, str, SendTemplate]]] = (w, targets)
        self._plain[(topic, tags, delay_level)] = entry
        return entry

    async def send_batch(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        tags: str | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Send messages of one topic and queue in one request (SEND_BATCH_MESSAGE)."""
        body, uniq = batch_body(bodies, tags)
        return await self._send(topic, body, {}, queue, uniq, batch=True)

    async def _send(
        self,
        topic: str,
        body: bytes,
        props: dict[str, str],
        queue: MessageQueue | None,
        uniq: str,
        *,
        batch: bool,
        first: int = 0,
        last: Exception | None = None,
    ) -> SendResult:
        """Send, attempts ``first`` to ``retries`` (``last``: the error of the one before)."""
        for attempt in range(first, self.retries + 1):
            route, queues, via_default = await self._write_route(topic)
            mq, addr = choose_queue(route, queues, self._turn, queue)
            cmd = send_request(self.group, topic, mq, props, body, batch=batch)
            try:
                r = await self.client.invoke(addr, cmd, self.timeout)
            except RemotingError as exc:
                last = exc
                continue
            result = send_result(r, topic, mq, uniq)
            if result is None:
                last = ClientError(r.code, r.remark)
                if r.code in _RETRYABLE and attempt < self.retries:
                    await self.route(topic, refresh=True)
                    continue
                raise last
            if via_default:
                await self.route(topic, refresh=True)
            return result
        assert last is not None
        raise last

    def close(self) -> None:
        """Close the connections; sends in flight fail with RemotingError."""
        self.client.close()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
