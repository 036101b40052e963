"""Topic routes as the name server gives them (GET_ROUTEINFO_BY_TOPIC), and message queues."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol._admin_bodies import MessageQueue as MessageQueue
from ..remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingError,
    RequestCode,
    ResponseCode,
    _fastjson,
)

MASTER_ID = 0
PERM_WRITE = 2
PERM_READ = 4


class ClientError(Exception):
    """A request the broker or name server refused (``code`` is the response code)."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"code {code}: {remark or ''}".rstrip(": "))
        self.code = code
        self.remark = remark


class TopicNotFoundError(ClientError):
    """The name servers have no route for the topic (TOPIC_NOT_EXIST), or no broker would create
    it on a send."""

    def __init__(self, topic: str, remark: str | None = None) -> None:
        super().__init__(ResponseCode.TOPIC_NOT_EXIST, remark or f"topic {topic} does not exist")
        self.topic = topic


class NotANameServerError(ClientError):
    """The peer given as a name server does not serve name-server requests; ``is_broker`` when
    it answered as a broker does."""

    def __init__(self, address: str, is_broker: bool) -> None:
        what = "a broker" if is_broker else "not answering as a name server"
        super().__init__(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"{address} is {what}")
        self.address = address
        self.is_broker = is_broker


class NameServerUnreachableError(RemotingError):
    """None of the name servers answered (refused, timed out, closed the connection)."""

    def __init__(self, addresses: list[str], cause: Exception | None) -> None:
        super().__init__(f"no name server answered at {';'.join(addresses)}: {cause}")
        self.addresses = addresses
        self.cause = cause


def not_a_name_server(client: RemotingClient, address: str) -> NotANameServerError:
    """The error for a peer that refused a name-server request as not supported: asks it for a
    broker's runtime information to tell a broker from anything else."""
    try:
        r = client.invoke(address, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
    except RemotingError:
        return NotANameServerError(address, False)
    return NotANameServerError(address, r.code == ResponseCode.SUCCESS)


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    brokers: dict[str, dict[int, str]]  # broker name → {broker id: address}
    queue_data: list[dict[str, Any]]

    def master(self, broker_name: str) -> str | None:
        return self.brokers.get(broker_name, {}).get(MASTER_ID)

    def address(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        addrs = self.brokers.get(broker_name, {})
        return addrs.get(broker_id) or addrs.get(MASTER_ID) or next(iter(addrs.values()), None)

    def queues(self, *, write: bool) -> list[MessageQueue]:
        """Write queues (brokers with a master) or read queues, ordered by broker and id."""
        out: list[MessageQueue] = []
        for qd in sorted(self.queue_data, key=lambda q: q["brokerName"]):
            name = qd["brokerName"]
            perm = int(qd.get("perm", 6))
            if write and (not perm & PERM_WRITE or self.master(name) is None):
                continue
            if not write and not perm & PERM_READ:
                continue
            n = int(qd["writeQueueNums"] if write else qd["readQueueNums"])
            out.extend(MessageQueue(self.topic, name, i) for i in range(n))
        return out


def parse_route(topic: str, body: bytes | bytearray | memoryview) -> TopicRoute:
    doc = _fastjson.loads(bytes(body))
    brokers: dict[str, dict[int, str]] = {}
    for bd in doc.get("brokerDatas") or []:
        brokers[bd["brokerName"]] = {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
    return TopicRoute(topic, brokers, list(doc.get("queueDatas") or []))


class RouteCache:
    """Routes by topic from the name servers (tried in turn), cached for ``ttl_s``."""

    def __init__(
        self, client: RemotingClient, namesrv_addrs: list[str], ttl_s: float = 30.0
    ) -> None:
        if not namesrv_addrs:
            raise ValueError("no name server address")
        self.client = client
        self.namesrv_addrs = namesrv_addrs
        self.ttl_s = ttl_s
        self._routes: dict[str, tuple[float, TopicRoute]] = {}

    def get(
        self, topic: str, *, refresh: bool = False, allow_missing: bool = False
    ) -> TopicRoute | None:
        import time

        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and not refresh and now - cached[0] < self.ttl_s:
            return cached[1]
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                r = self.client.invoke(addr, RemotingCommand.request(105, {"topic": topic}))
            except RemotingError as exc:
                last = exc
                continue
            if r.code == ResponseCode.TOPIC_NOT_EXIST:
                if allow_missing:
                    return None
                raise TopicNotFoundError(topic)
            if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise not_a_name_server(self.client, addr)
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(r.code, r.remark)
            route = parse_route(topic, r.body)
            self._routes[topic] = (now, route)
            return route
        raise NameServerUnreachableError(self.namesrv_addrs, last)
