"""A blocking pull consumer over the remoting protocol: the queues of a topic from its route,
PULL_MESSAGE of exact offsets (optionally long-polling), consumer offsets kept on the broker.
``join_group`` makes it a member of its group on the brokers (heartbeats; it answers the
brokers' GET_CONSUMER_RUNNING_INFO and consumer status requests: see ``_membership``).
Any thread (calls are serialised)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from .._inflate import DEFAULT_MAX_BODY
from ..remoting import RemotingClient, RemotingCommand, ResponseCode
from ..store.log._record import INT32, MessageExt, decode_stored
from ._membership import GroupMembership, QueueTracker
from ._names import check_group, check_topic
from ._route import ClientError, MessageQueue, RouteCache

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
SYSFLAG_COMPRESSED = 0x1

FOUND = "FOUND"
NO_NEW_MSG = "NO_NEW_MSG"
NO_MATCHED_MSG = "NO_MATCHED_MSG"
OFFSET_ILLEGAL = "OFFSET_ILLEGAL"

_PULL_STATUS: dict[int, str] = {
    ResponseCode.SUCCESS: FOUND,
    ResponseCode.PULL_NOT_FOUND: NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    status: str  # FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL
    next_begin_offset: int
    min_offset: int
    max_offset: int
    raw: bytes = b""
    suggest_broker_id: int = 0
    messages: list[MessageExt] = field(default_factory=list)


def decode_records(data: bytes | bytearray | memoryview) -> list[MessageExt]:
    """The records of a pull response body (CRC-checked)."""
    out = []
    pos = 0
    end = len(data)
    while pos + 8 <= end:
        size = INT32.unpack_from(data, pos)[0]
        if size <= 0 or pos + size > end:
            raise ValueError(f"bad record length {size} at {pos} of a pull body")
        out.append(decode_stored(data, pos, size))  # type: ignore[arg-type]
        pos += size
    return out


def plain_body(msg: MessageExt, max_size: int = DEFAULT_MAX_BODY) -> MessageExt:
    """The message with its body as sent: a body the producer compressed (the C++ client
    deflates bodies over 4 KiB and sets the compressed system flag) is inflated and the flag
    cleared, as RocketMQ's consumers hand it to their applications. A body that would inflate
    past ``max_size`` bytes raises InflateLimitError (a ValueError)."""
    if not msg.sys_flag & SYSFLAG_COMPRESSED:
        return msg
    body = msg.decompressed_body(max_size)
    return msg._replace(
        body=body, body_length=len(body), sys_flag=msg.sys_flag & ~SYSFLAG_COMPRESSED
    )


class PullConsumer:
    def __init__(
        self, namesrv: str, group: str, *, timeout: float = 3.0, decode: bool = True
    ) -> None:
        self.group = check_group(group)
        self.decode = decode
        self.client = RemotingClient(timeout=timeout)
        self.namesrv = namesrv
        self.routes = RouteCache(self.client, [a for a in namesrv.split(";") if a])
        # the queues pulled and committed (what the brokers are told when asked)
        self.tracker = QueueTracker()
        self.membership: GroupMembership | None = None

    def join_group(
        self, subscriptions: Mapping[str, str], *, heartbeat_interval_s: float = 30.0
    ) -> str:
        """Become a member of the group on the brokers of ``subscriptions``' topics (topic →
        tag expression): a heartbeat now and every ``heartbeat_interval_s``, the brokers'
        requests about this client answered, until ``close``. Returns the client id."""
        if self.membership is not None:
            raise RuntimeError("the consumer is a member of its group already")
        topics = [check_topic(t) for t in subscriptions]

        def brokers() -> list[str]:
            addrs: set[str] = set()
            for topic in topics:
                route = self.routes.get(topic, refresh=True, allow_missing=True)
                if route is not None:
                    addrs.update(a for b in route.brokers if (a := route.address(b)) is not None)
            return sorted(addrs)

        self.membership = GroupMembership(
            self.group,
            subscriptions,
            self.tracker,
            brokers,
            namesrv=self.namesrv,
            interval_s=heartbeat_interval_s,
        )
        self.membership.start()
        self.membership.first_heartbeat.wait(10)
        return self.membership.client_id

    def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's read queues; TopicNotFoundError when the name servers have no route."""
        route = self.routes.get(check_topic(topic), refresh=True)
        assert route is not None
        return route.queues(write=False)

    def _addr(self, mq: MessageQueue, broker_id: int = 0) -> str:
        route = self.routes.get(mq.topic)
        assert route is not None
        addr = route.address(mq.broker_name, broker_id)
        if addr is None:
            raise ClientError(ResponseCode.SYSTEM_ERROR, f"no address for {mq.broker_name}")
        return addr

    def _call(
        self, mq: MessageQueue, code: int, ext: dict[str, str], timeout: float | None = None
    ) -> RemotingCommand:
        r = self.client.invoke(self._addr(mq), RemotingCommand.request(code, ext), timeout)
        return r

    def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        expression: str = "*",
        *,
        suspend_ms: int = 0,
        commit_offset: int | None = None,
    ) -> PullResult:
        flag = FLAG_SUBSCRIPTION
        if suspend_ms > 0:
            flag |= FLAG_SUSPEND
        if commit_offset is not None:
            flag |= FLAG_COMMIT_OFFSET
        ext = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(flag),
            "commitOffset": str(commit_offset or 0),
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": expression,
            "subVersion": "0",
        }
        timeout = None if suspend_ms <= 0 else self.client.timeout + suspend_ms / 1000.0
        began = time.monotonic()
        r = self._call(mq, 11, ext, timeout)
        self.tracker.pulled(mq, (time.monotonic() - began) * 1000.0)
        status = _PULL_STATUS.get(r.code)
        if status is None:
            raise ClientError(r.code, r.remark)
        e = r.ext_fields
        result = PullResult(
            status,
            int(e.get("nextBeginOffset", offset)),
            int(e.get("minOffset", 0)),
            int(e.get("maxOffset", 0)),
            bytes(r.body),
            int(e.get("suggestWhichBrokerId", 0)),
        )
        if status == FOUND and self.decode:
            msgs = [plain_body(m) for m in decode_records(result.raw)]
            if expression.strip() not in ("", "*"):
                tags = {t.strip() for t in expression.split("||")}
                msgs = [m for m in msgs if m.tags in tags]
            result.messages = msgs
        return result

    def fetch_consumer_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset of the queue, -1 when it has none."""
        r = self._call(
            mq, 14, {"consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id)}
        )
        if r.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(r.code, r.remark)
        return int(r.ext_fields.get("offset", -1))

    def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        ext = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "commitOffset": str(offset),
        }
        r = self._call(mq, 15, ext)
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(r.code, r.remark)
        self.tracker.committed(mq, offset)

    def _offset(self, mq: MessageQueue, code: int, **extra: str) -> int:
        r = self._call(mq, code, {"topic": mq.topic, "queueId": str(mq.queue_id), **extra})
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(r.code, r.remark)
        return int(r.ext_fields.get("offset", -1))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._offset(mq, 30)

    def min_offset(self, mq: MessageQueue) -> int:
        return self._offset(mq, 31)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._offset(mq, 29, timestamp=str(timestamp_ms))

    def close(self) -> None:
        if self.membership is not None:
            self.membership.close()
            self.membership = None
        self.client.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
