"""A pull consumer's membership of its group on the brokers (what RocketMQ's MQClientInstance
does for a consumer): a heartbeat (HEART_BEAT) to each broker of the subscribed topics' routes
every period, over connections that also serve the brokers' requests about the client:

=====  ================================  ===================================================
code   request from the broker           answer
=====  ================================  ===================================================
307    GET_CONSUMER_RUNNING_INFO         ConsumerRunningInfo: the consumer's settings
                                         (properties), subscriptions, each queue it pulled
                                         or committed (commit offset, last pull time) and
                                         its pull rate and time by topic over the last minute
221    GET_CONSUMER_STATUS_FROM_CLIENT   GetConsumerStatusBody: the offsets it committed on
                                         the topic's queues
220    RESET_CONSUMER_CLIENT_OFFSET      one way: ignored, as RocketMQ's pull consumers do
                                         (the application chooses its offsets)
40     NOTIFY_CONSUMER_IDS_CHANGED       one way: ignored (no rebalancing here)
=====  ================================  ===================================================

:class:`QueueTracker` keeps what the answers tell (the PullConsumer records its pulls and
commits in it; any thread, a lock). :class:`GroupMembership` runs an event loop in a thread of
its own; ``close`` unregisters the client from the brokers (UNREGISTER_CLIENT) and stops it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol._admin_bodies import MessageQueue
from ..protocol._consumer_bodies import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_NAMESERVER_ADDR,
    ConsumerRunningInfo,
    ConsumerStatusBody,
    ConsumeStatus,
    ProcessQueueInfo,
)
from ..protocol._heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    SubscriptionData,
    build_subscription,
    encode_heartbeat,
)
from ..remoting import (
    AsyncRemotingClient,
    Connection,
    RemotingCommand,
    RemotingError,
    RequestCode,
    ResponseCode,
)

log = logging.getLogger(__name__)

GET_CONSUMER_RUNNING_INFO = 307
GET_CONSUMER_STATUS_FROM_CLIENT = 221
RESET_CONSUMER_CLIENT_OFFSET = 220
CLIENT_VERSION_DESC = "V4_9_8"
HEARTBEAT_INTERVAL_S = 30.0
RATE_WINDOW_S = 60.0
_instances = itertools.count()


def make_client_id() -> str:
    """``host@pid#n``: unique among the clients of this process (RocketMQ: ip@instanceName)."""
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
    return f"{host}@{os.getpid()}#{next(_instances)}"


@dataclass(slots=True)
class _QueueState:
    commit_offset: int = -1
    last_pull_ms: int = 0


@dataclass(slots=True)
class QueueTracker:
    """The queues a consumer used: committed offsets, last pull times, and the pulls of the
    last minute by topic (time, round trip ms). Any thread."""

    queues: dict[MessageQueue, _QueueState] = field(default_factory=dict)
    pulls: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pulled(self, mq: MessageQueue, rt_ms: float) -> None:
        now = self.clock()
        with self._lock:
            self.queues.setdefault(mq, _QueueState()).last_pull_ms = int(now * 1000)
            window = self.pulls.setdefault(mq.topic, deque())
            window.append((now, rt_ms))
            while window and window[0][0] < now - RATE_WINDOW_S:
                window.popleft()

    def committed(self, mq: MessageQueue, offset: int) -> None:
        with self._lock:
            self.queues.setdefault(mq, _QueueState()).commit_offset = offset

    def offsets(self, topic: str) -> dict[MessageQueue, int]:
        with self._lock:
            return {
                mq: s.commit_offset
                for mq, s in self.queues.items()
                if mq.topic == topic and s.commit_offset >= 0
            }

    def process_queues(self) -> dict[MessageQueue, ProcessQueueInfo]:
        with self._lock:
            return {
                mq: ProcessQueueInfo(
                    commit_offset=s.commit_offset, last_pull_timestamp=s.last_pull_ms
                )
                for mq, s in self.queues.items()
            }

    def status(self, topic: str) -> ConsumeStatus:
        now = self.clock()
        with self._lock:
            window = [rt for t, rt in self.pulls.get(topic, ()) if t >= now - RATE_WINDOW_S]
        if not window:
            return ConsumeStatus()
        return ConsumeStatus(
            pull_rt=sum(window) / len(window), pull_tps=len(window) / RATE_WINDOW_S
        )


class GroupMembership:
    """Heartbeats of one consumer group's client to the brokers of its topics, and the answers
    to their requests. ``brokers`` gives the addresses to heartbeat to (called in a worker
    thread: it may block on the name server)."""

    def __init__(
        self,
        group: str,
        subscriptions: Mapping[str, str],
        tracker: QueueTracker,
        brokers: Callable[[], list[str]],
        *,
        namesrv: str = "",
        client_id: str | None = None,
        interval_s: float = HEARTBEAT_INTERVAL_S,
    ) -> None:
        self.group = group
        self.subscriptions: tuple[SubscriptionData, ...] = tuple(
            build_subscription(topic, expr) for topic, expr in subscriptions.items()
        )
        self.tracker = tracker
        self.brokers = brokers
        self.namesrv = namesrv
        self.client_id = client_id or make_client_id()
        self.interval_s = interval_s
        self.started_ms = int(time.time() * 1000)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"member-{group}", daemon=True
        )
        self._client: AsyncRemotingClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._registered: set[str] = set()
        self.first_heartbeat = threading.Event()

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread and the heartbeats (the first at once)."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> None:
        handlers: dict[int, Any] = {
            GET_CONSUMER_RUNNING_INFO: self._running_info,
            GET_CONSUMER_STATUS_FROM_CLIENT: self._consumer_status,
            RESET_CONSUMER_CLIENT_OFFSET: self._ignored,
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._ignored,
        }
        self._client = AsyncRemotingClient(handlers)
        self._task = asyncio.create_task(self._heartbeats())

    def close(self) -> None:
        """Unregister from the brokers, stop the heartbeats and the thread."""
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        except Exception:
            log.warning("%s: leaving the group %s failed", self.client_id, self.group)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    async def _close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        client = self._client
        if client is None:
            return
        ext = {"clientID": self.client_id, "consumerGroup": self.group}
        for addr in sorted(self._registered):
            try:
                await client.invoke(
                    addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, ext)
                )
            except RemotingError as exc:
                log.info("%s: unregistering from %s failed: %s", self.client_id, addr, exc)
        client.close()
        await asyncio.sleep(0)

    # ---- heartbeats -------------------------------------------------------------------------

    def heartbeat_body(self) -> bytes:
        data = HeartbeatData(
            self.client_id,
            consumers=(
                ConsumerData(
                    self.group,
                    ConsumeType.CONSUME_ACTIVELY,
                    MessageModel.CLUSTERING,
                    ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                    self.subscriptions,
                ),
            ),
        )
        return encode_heartbeat(data)

    async def _heartbeats(self) -> None:
        while True:
            await self.heartbeat_once()
            self.first_heartbeat.set()
            await asyncio.sleep(self.interval_s)

    async def heartbeat_once(self) -> None:
        """One heartbeat to each broker (failures logged; the next period tries again)."""
        assert self._client is not None
        try:
            addrs = await asyncio.to_thread(self.brokers)
        except Exception as exc:
            log.warning("%s: no brokers for the heartbeat: %s", self.client_id, exc)
            return
        body = self.heartbeat_body()
        for addr in addrs:
            try:
                r = await self._client.invoke(
                    addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
                )
            except RemotingError as exc:
                log.warning("%s: heartbeat to %s failed: %s", self.client_id, addr, exc)
                continue
            if r.code == ResponseCode.SUCCESS:
                self._registered.add(addr)
            else:
                log.warning("%s: %s refused the heartbeat: %s", self.client_id, addr, r.remark)

    # ---- the brokers' requests --------------------------------------------------------------

    def running_info(self) -> ConsumerRunningInfo:
        properties = {
            "consumerGroup": self.group,
            "messageModel": MessageModel.CLUSTERING.name,
            "clientId": self.client_id,
            PROP_CONSUME_ORDERLY: "false",
            PROP_CONSUME_TYPE: ConsumeType.CONSUME_ACTIVELY.name,
            PROP_CLIENT_VERSION: CLIENT_VERSION_DESC,
            PROP_CONSUMER_START_TIMESTAMP: str(self.started_ms),
        }
        if self.namesrv:
            properties[PROP_NAMESERVER_ADDR] = self.namesrv
        return ConsumerRunningInfo(
            properties,
            [s.to_json() for s in self.subscriptions],
            self.tracker.process_queues(),
            {s.topic: self.tracker.status(s.topic) for s in self.subscriptions},
        )

    def _running_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return RemotingCommand.response(
            ResponseCode.SUCCESS, None, None, self.running_info().encode()
        )

    def _consumer_status(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = str(cmd.ext_fields.get("topic") or "")
        body = ConsumerStatusBody(self.tracker.offsets(topic)).encode()
        return RemotingCommand.response(ResponseCode.SUCCESS, None, None, body)

    def _ignored(self, cmd: RemotingCommand, conn: Connection) -> None:
        log.info(
            "%s: request %d from %s ignored (a pull consumer)", self.client_id, cmd.code, conn.peer
        )
