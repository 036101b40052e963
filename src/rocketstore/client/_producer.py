"""A blocking producer over the remoting protocol: routes from the name server, queues taken in
turn (or named), SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE to the queue's master, RocketMQ's
client-side message id in UNIQ_KEY. Any thread (calls are serialised)."""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..remoting._client import FROM_ENV, Signer
from ..store.log._record import body_crc
from ._names import check_group, check_topic
from ._route import ClientError, MessageQueue, RouteCache, TopicNotFoundError, TopicRoute

DEFAULT_TOPIC = "TBW102"
_RETRYABLE: set[int] = {
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.NO_PERMISSION,
}
_SEND_STATUS: dict[int, str] = {
    ResponseCode.SUCCESS: "SEND_OK",
    ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
    ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE",
}


@dataclass(frozen=True, slots=True)
class SendResult:
    status: str  # SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE
    msg_id: str  # the client's id (UNIQ_KEY); comma-separated for a batch
    offset_msg_id: str  # store host + commit-log offset
    queue: MessageQueue
    queue_offset: int


class _UniqIds:
    """RocketMQ-style client message ids: host, pid, a per-process random part, time, counter."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = b"\x7f\x00\x00\x01"
        self._prefix = (ip + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)).hex().upper()
        self._counter = itertools.count()
        self._start = int(time.time() * 1000)
        self._stem: tuple[int, str] = (-1, "")

    def next(self) -> str:
        return self.at(int(time.time() * 1000))

    def at(self, now_ms: int) -> str:
        """The next id, for a message born at ``now_ms`` (milliseconds since the epoch)."""
        n = next(self._counter) & 0xFFFF
        stem = self._stem  # (ms, the id up to the counter): one tuple, consistent in any thread
        if stem[0] != now_ms:
            stem = (now_ms, f"{self._prefix}{(now_ms - self._start) & 0xFFFFFFFF:08X}")
            self._stem = stem
        return f"{stem[1]}{n:04X}"


UNIQ_IDS = _UniqIds()


def properties_text(properties: Mapping[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items())


def message_properties(
    tags: str | None,
    keys: str | Iterable[str] | None,
    properties: Mapping[str, str] | None,
    delay_level: int = 0,
) -> dict[str, str]:
    props = dict(properties or {})
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys if isinstance(keys, str) else " ".join(keys)
    if delay_level:
        props["DELAY"] = str(delay_level)
    props.setdefault("UNIQ_KEY", UNIQ_IDS.next())
    props.setdefault("WAIT", "true")
    return props


def plain_properties(tags: str | None, delay_level: int, uniq: str) -> dict[str, str]:
    """What :func:`message_properties` gives a message without keys or user properties, with
    ``uniq`` as its UNIQ_KEY."""
    props: dict[str, str] = {}
    if tags:
        props["TAGS"] = tags
    if delay_level:
        props["DELAY"] = str(delay_level)
    props["UNIQ_KEY"] = uniq
    props["WAIT"] = "true"
    return props


def encode_batch(items: Sequence[tuple[bytes, Mapping[str, str]]]) -> bytes:
    """SEND_BATCH_MESSAGE's body: per message total size, magic, body CRC, flag, body,
    properties."""
    out = bytearray()
    for body, props in items:
        text = properties_text(props).encode("utf-8")
        total = 20 + len(body) + 2 + len(text)
        out += struct.pack(">iiiii", total, 0, body_crc(body), 0, len(body))
        out += body
        out += struct.pack(">h", len(text)) + text
    return bytes(out)


def send_header(
    group: str, topic: str, queue_id: int, props: Mapping[str, str], *, batch: bool = False
) -> dict[str, str]:
    """SEND_MESSAGE_V2's ext fields (one-letter names) for a message of ``topic`` to
    ``queue_id`` with ``props``, born now."""
    return {
        "a": group,
        "b": topic,
        "c": DEFAULT_TOPIC,
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": properties_text(props),
        "j": "0",
        "k": "false",
        "m": "true" if batch else "false",
    }


def choose_queue(
    route: TopicRoute,
    queues: Sequence[MessageQueue] | None,
    turn: Iterator[int],
    queue: MessageQueue | None,
) -> tuple[MessageQueue, str]:
    """The queue to send to (``queue``, else the next of ``queues`` in turn: by default the
    route's write queues) and its master's address. ClientError when there is none."""
    if queue is None:
        if queues is None:
            queues = route.queues(write=True)
        if not queues:
            raise TopicNotFoundError(route.topic, f"no route for {route.topic}")
        queue = queues[next(turn) % len(queues)]
    addr = route.master(queue.broker_name)
    if addr is None:
        raise ClientError(ResponseCode.SYSTEM_ERROR, f"no master for {queue.broker_name}")
    return queue, addr


def send_request(
    group: str,
    topic: str,
    mq: MessageQueue,
    props: Mapping[str, str],
    body: bytes,
    *,
    batch: bool,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 of one message of ``topic`` with ``props``, or SEND_BATCH_MESSAGE of an
    encoded batch (``props`` empty: each message carries its own), to ``mq``'s queue id."""
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    header = send_header(group, topic, mq.queue_id, props, batch=batch)
    return RemotingCommand.request(code, header, body)


def send_result(r: RemotingCommand, topic: str, mq: MessageQueue, uniq: str) -> SendResult | None:
    """The broker's answer to a send of ``topic``'s messages with ids ``uniq`` to ``mq``; None
    when it refused them (``r.code``, ``r.remark`` say why)."""
    status = _SEND_STATUS.get(r.code)
    if status is None:
        return None
    ext = r.ext_fields
    queue_id = int(ext.get("queueId", mq.queue_id))
    if queue_id != mq.queue_id or mq.topic != topic:
        mq = MessageQueue(topic, mq.broker_name, queue_id)
    return SendResult(status, uniq, str(ext.get("msgId", "")), mq, int(ext.get("queueOffset", -1)))


# marks the template's header is encoded with, where a message's own values go: digits and
# capital hex letters, which JSON writes as they are
_OPAQUE_MARK = 1975308642
_BORN_MARK = 8642097531975
_UNIQ_MARK = "0F1E2D3C4B5A69788796A5B4C3D2E1F0"
_PREFIX = struct.Struct(">ii")  # frame length, serialize type (JSON: 0) << 24 | header length


class SendTemplate:
    """SEND_MESSAGE_V2's header for the plain messages (no keys, no user properties) of one
    group, topic, queue, tags and delay level, encoded once by the reference encoder
    (``send_request`` → ``RemotingCommand.encode_header``) with marks where the opaque, the
    born time and the UNIQ_KEY go: :meth:`head` puts a message's values in their place, the
    same bytes as the reference gives for them. Immutable; any thread."""

    __slots__ = ("_after_born", "_after_opaque", "_after_uniq", "_before_opaque")

    def __init__(self, pieces: list[bytes]) -> None:
        self._before_opaque, self._after_opaque, self._after_born, self._after_uniq = pieces

    @classmethod
    def make(
        cls, group: str, topic: str, queue_id: int, tags: str | None, delay_level: int
    ) -> SendTemplate | None:
        """The template; None when a mark would not be found alone in the header (a name
        holding one of them), for such sends go the reference way."""
        props = plain_properties(tags, delay_level, _UNIQ_MARK)
        cmd = send_request(group, topic, MessageQueue(topic, "", queue_id), props, b"", batch=False)
        cmd.opaque = _OPAQUE_MARK
        cmd.ext_fields["g"] = str(_BORN_MARK)
        try:
            header = cmd.encode_header()
        except (TypeError, ValueError):  # what the reference cannot write: its error, later
            return None
        pieces: list[bytes] = []
        rest = header
        for mark in (b"%d" % _OPAQUE_MARK, b"%d" % _BORN_MARK, _UNIQ_MARK.encode()):
            if header.count(mark) != 1:
                return None
            before, found, rest = rest.partition(mark)
            if not found:
                return None
            pieces.append(before)
        pieces.append(rest)
        return cls(pieces)

    def head(self, opaque: int, born_ms: int, uniq: str, body_size: int) -> bytes:
        """The frame's length prefix and header for the message with ``uniq`` (ASCII), born
        at ``born_ms``, of ``body_size`` bytes, sent with ``opaque``."""
        header = b"%b%d%b%d%b%b%b" % (
            self._before_opaque,
            opaque,
            self._after_opaque,
            born_ms,
            self._after_born,
            uniq.encode("ascii"),
            self._after_uniq,
        )
        size = len(header)
        return _PREFIX.pack(4 + size + body_size, size) + header


def batch_body(bodies: Sequence[bytes], tags: str | None) -> tuple[bytes, str]:
    """SEND_BATCH_MESSAGE's body for ``bodies`` (each its own UNIQ_KEY) and the result's
    msg_id: the messages' ids, comma-separated. ValueError for an empty batch."""
    if not bodies:
        raise ValueError("an empty batch")
    items = [(b, message_properties(tags, None, None)) for b in bodies]
    return encode_batch(items), ",".join(p["UNIQ_KEY"] for _, p in items)


class Producer:
    def __init__(
        self,
        namesrv: str,
        group: str = "rocketstore-producer",
        *,
        timeout: float = 3.0,
        retries: int = 2,
        signer: Signer | None = FROM_ENV,
    ) -> None:
        """``signer`` signs each request for an ACL broker (default: the account in
        ROCKETSTORE_ACCESS_KEY / ROCKETSTORE_SECRET_KEY, if set; None: unsigned)."""
        self.group = check_group(group)
        self.client = RemotingClient(timeout=timeout, signer=signer)
        self.routes = RouteCache(self.client, [a for a in namesrv.split(";") if a])
        self.retries = retries
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def _route(self, topic: str) -> tuple[TopicRoute, bool]:
        """The topic's route, or the default topic's for a topic not created yet (the brokers
        create it on the first send when they allow it); TopicNotFoundError when none does."""
        check_topic(topic)
        route = self.routes.get(topic, allow_missing=True)
        if route is not None and route.queues(write=True):
            return route, False
        # a cached route with no master (the name servers answered while a failover was under
        # way): ask again, as RocketMQ's producer does for a route that is not usable
        route = self.routes.get(topic, refresh=True, allow_missing=True)
        if route is not None and route.queues(write=True):
            return route, False
        default = self.routes.get(DEFAULT_TOPIC, allow_missing=True)
        if default is None or not default.queues(write=True):
            raise TopicNotFoundError(
                topic,
                f"topic {topic} does not exist and no broker creates topics on a send "
                "(autoCreateTopicEnable=false)",
            )
        return TopicRoute(topic, default.brokers, default.queue_data), True

    def send(
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
        props = message_properties(tags, keys, properties, delay_level)
        return self._send(topic, body, props, queue, props["UNIQ_KEY"], batch=False)

    def send_batch(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        tags: str | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        body, uniq = batch_body(bodies, tags)
        return self._send(topic, body, {}, queue, uniq, batch=True)

    def _send(
        self,
        topic: str,
        body: bytes,
        props: dict[str, str],
        queue: MessageQueue | None,
        uniq: str,
        *,
        batch: bool,
    ) -> SendResult:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            route, via_default = self._route(topic)
            mq, addr = choose_queue(route, None, self._turn, queue)
            try:
                cmd = send_request(self.group, topic, mq, props, body, batch=batch)
                r = self.client.invoke(addr, cmd)
            except RemotingError as exc:
                last = exc
                if attempt < self.retries:
                    # the broker is gone or unreachable: the group may have a new master (a
                    # failover), which the name servers name by now
                    self._refresh_quietly(topic)
                continue
            result = send_result(r, topic, mq, uniq)
            if result is None:
                last = (
                    TopicNotFoundError(topic, r.remark)
                    if r.code == ResponseCode.TOPIC_NOT_EXIST
                    else ClientError(r.code, r.remark)
                )
                if r.code in _RETRYABLE and attempt < self.retries:
                    self.routes.get(topic, refresh=True, allow_missing=True)
                    continue
                raise last
            if via_default:
                self.routes.get(topic, refresh=True, allow_missing=True)
            return result
        assert last is not None
        raise last

    def _refresh_quietly(self, topic: str) -> None:
        try:
            self.routes.get(topic, refresh=True, allow_missing=True)
        except (RemotingError, ClientError):
            pass  # the next attempt goes by the route cached

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
