"""A slave's copy of its master's broker state (RocketMQ's SlaveSynchronize): topic configs,
consumer offsets and subscription groups, fetched from the master every 10 s (3 s after the
slave learns its master). Messages come through replication; this is the state beside them, so
that the slave can serve reads of the master's topics and knows where consumers are.

The master answers GET_ALL_CONSUMER_OFFSET (43) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)
here; GET_ALL_TOPIC_CONFIG (21) is the admin processor's. Loop thread only; the state files are
written in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from ...remoting import (
    AsyncRemotingClient,
    Connection,
    RemotingCommand,
    RemotingError,
    ResponseCode,
)
from ...remoting._fastjson import loads_lenient
from .._services import HasGroups, HasInnerClient, HasOffsets, HasTopics
from ..state._subscription_group import SubscriptionGroupConfig
from ..state._topic_config import TopicConfig

log = logging.getLogger(__name__)

GET_ALL_TOPIC_CONFIG = 21
GET_ALL_CONSUMER_OFFSET = 43
GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
FIRST_SYNC_S = 3.0
SYNC_INTERVAL_S = 10.0


class SyncContext(HasGroups, HasInnerClient, HasOffsets, HasTopics, Protocol):
    """What a slave's copy of its master's state (and the master's answers) use of the broker."""


class SlaveSyncProcessor:
    """The master's side: the whole consumer-offset and subscription-group tables."""

    def __init__(self, broker: SyncContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            GET_ALL_CONSUMER_OFFSET: self.all_consumer_offsets,
            GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_subscription_groups,
        }

    def all_consumer_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        body = self.broker.offsets.encode(pretty=False).encode("utf-8")
        return RemotingCommand.response(ResponseCode.SUCCESS, None, {}, body)

    def all_subscription_groups(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        body = self.broker.groups.encode(pretty=False).encode("utf-8")
        return RemotingCommand.response(ResponseCode.SUCCESS, None, {}, body)


class SlaveSynchronizer:
    """The slave's side: ``master_addr`` is set when the name server names the master."""

    def __init__(self, broker: SyncContext, *, timeout_s: float = 3.0) -> None:
        self.broker = broker
        self.timeout_s = timeout_s
        self.master_addr: str | None = None
        self.client = AsyncRemotingClient(signer=broker.inner_signer)
        self.syncs = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def set_master(self, addr: str | None) -> None:
        if addr and addr != self.master_addr:
            self.master_addr = addr
            self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        self.client.close()

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(SYNC_INTERVAL_S):  # not wait_for: see _outer_api
                    await self._wake.wait()
                self._wake.clear()
                await asyncio.sleep(FIRST_SYNC_S)
            except TimeoutError:
                pass
            try:
                await self.sync_all()
            except (RemotingError, ValueError) as exc:
                log.warning("slave sync from %s failed: %s", self.master_addr, exc)

    async def _fetch(self, code: int) -> Any:
        assert self.master_addr is not None
        r = await self.client.invoke(
            self.master_addr, RemotingCommand.request(code), self.timeout_s
        )
        if r.code != ResponseCode.SUCCESS:
            raise ValueError(f"code {code}: the master answered {r.code} {r.remark or ''}")
        return loads_lenient(bytes(r.body).decode("utf-8"))

    async def sync_all(self) -> bool:
        """One round: topic configs, consumer offsets, subscription groups. False when no
        master is known yet."""
        if not self.master_addr:
            return False
        topics = await self._fetch(GET_ALL_TOPIC_CONFIG)
        offsets = await self._fetch(GET_ALL_CONSUMER_OFFSET)
        groups = await self._fetch(GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        await asyncio.to_thread(self._apply, topics, offsets, groups)
        self.syncs += 1
        return True

    def _apply(self, topics: Any, offsets: Any, groups: Any) -> None:
        broker = self.broker
        changed_topics = []
        for name, doc in (topics.get("topicConfigTable") or {}).items():
            config = TopicConfig.from_json(doc, name)
            if broker.topics.select(name) != config:
                changed_topics.append(config)
        broker.topics.update_all(changed_topics)
        for key, table in (offsets.get("offsetTable") or {}).items():
            topic, sep, group = str(key).rpartition("@")
            if not sep:
                continue
            for queue_id, offset in table.items():
                broker.offsets.commit_offset("master", group, topic, int(queue_id), int(offset))
        changed_groups = []
        for name, doc in (groups.get("subscriptionGroupTable") or {}).items():
            sub = SubscriptionGroupConfig.from_json(doc, name)
            if broker.groups.get(name) != sub:
                changed_groups.append(sub)
        broker.groups.put_all(changed_groups, lambda g: g.group_name)
        if broker.offsets.dirty:
            broker.offsets.persist()
