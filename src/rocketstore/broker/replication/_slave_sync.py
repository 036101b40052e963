"""A slave's copy of its master's broker state (RocketMQ's SlaveSynchronize): topic configs,
consumer offsets and subscription groups. Messages come through replication; this is the state
beside them, so that the slave can serve reads of the master's topics, knows where consumers
are, and — promoted — serves every topic its log holds.

When::

    at once        when the slave learns its master (on connect): everything
    every 1 s      the master's topic table, when its data version moved since the last copy
                   (GET_ALL_TOPIC_CONFIG naming the version copied: a master that has not moved
                   answers ``unchanged``, no body; a RocketMQ master sends its table)
    every 10 s     everything

The master answers GET_ALL_CONSUMER_OFFSET (43) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)
here; GET_ALL_TOPIC_CONFIG (21) is the admin processor's. Loop thread only; the state files are
written in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from ...protocol._subscription_group import SubscriptionGroupConfig
from ...remoting import (
    AsyncRemotingClient,
    Connection,
    RemotingCommand,
    RemotingError,
    ResponseCode,
)
from ...remoting._fastjson import loads_lenient
from .._services import HasGroups, HasInnerClient, HasOffsets, HasTopics
from ..state._config_table import IF_DATA_VERSION_NOT
from ..state._topic_config import TopicConfig

log = logging.getLogger(__name__)

GET_ALL_TOPIC_CONFIG = 21
GET_ALL_CONSUMER_OFFSET = 43
GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
CHECK_S = 1.0  # the master's topic data version asked this often
SYNC_INTERVAL_S = 10.0  # everything copied this often


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
        self.topic_copies = 0  # topic tables copied (a full round's, or a moved version's)
        self._master_version: str | None = None  # the master's topic data version copied last
        self.checks = True  # False: the master sent its whole table at an unmoved version
        self._failing = False
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def set_master(self, addr: str | None) -> None:
        if addr and addr != self.master_addr:
            self.master_addr = addr
            self._master_version = None
            self.checks = True
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
        loop = asyncio.get_running_loop()
        last_full = -SYNC_INTERVAL_S
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CHECK_S):  # not wait_for: see _outer_api
                    await self._wake.wait()
            woke = self._wake.is_set()
            self._wake.clear()
            try:
                if woke or loop.time() - last_full >= SYNC_INTERVAL_S:
                    if await self.sync_all():
                        last_full = loop.time()
                else:
                    await self.sync_topics()
                if self._failing:
                    log.info("slave sync from %s works again", self.master_addr)
                self._failing = False
            except (RemotingError, ValueError) as exc:
                last_full = -SYNC_INTERVAL_S  # everything again at the next turn
                log.log(
                    logging.DEBUG if self._failing else logging.WARNING,
                    "slave sync from %s failed: %s",
                    self.master_addr,
                    exc,
                )
                self._failing = True

    async def _fetch(
        self, code: int, ext: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> Any:
        """The master's answer to ``code`` as JSON (None: ``unchanged``, no body)."""
        assert self.master_addr is not None
        r = await self.client.invoke(
            self.master_addr,
            RemotingCommand.request(code, dict(ext or {})),
            timeout_s or self.timeout_s,
        )
        if r.code != ResponseCode.SUCCESS:
            raise ValueError(f"code {code}: the master answered {r.code} {r.remark or ''}")
        if r.ext_fields.get("unchanged") == "true" and not r.body:
            return None
        return loads_lenient(bytes(r.body).decode("utf-8"))

    def _topics_ext(self) -> dict[str, str]:
        version = self._master_version
        return {} if version is None else {IF_DATA_VERSION_NOT: version}

    async def sync_topics(self, timeout_s: float | None = None) -> bool:
        """The master's topic table, when its data version moved since the last copy; True
        when something was copied. False when no master is known yet."""
        if not self.master_addr or not self.checks:
            return False
        held = self._master_version
        topics = await self._fetch(GET_ALL_TOPIC_CONFIG, self._topics_ext(), timeout_s)
        if topics is None:
            return False
        if held is not None and _version_text(topics) == held:
            # a master that does not know the field (RocketMQ's): its whole table each time;
            # this master's topics are copied with the ten-second rounds only
            log.info(
                "slave sync: %s answers its whole topic table at an unchanged version: its "
                "topics are copied every %g s",
                self.master_addr,
                SYNC_INTERVAL_S,
            )
            self.checks = False
        await asyncio.to_thread(self._apply, topics, {}, {})
        return True

    async def sync_all(self, timeout_s: float | None = None) -> bool:
        """One round: topic configs, consumer offsets, subscription groups (``timeout_s`` for
        each request: the object's own when None). False when no master is known yet."""
        if not self.master_addr:
            return False
        topics = await self._fetch(GET_ALL_TOPIC_CONFIG, self._topics_ext(), timeout_s)
        offsets = await self._fetch(GET_ALL_CONSUMER_OFFSET, None, timeout_s)
        groups = await self._fetch(GET_ALL_SUBSCRIPTIONGROUP_CONFIG, None, timeout_s)
        await asyncio.to_thread(self._apply, topics or {}, offsets or {}, groups or {})
        self.syncs += 1
        return True

    def _apply(self, topics: Any, offsets: Any, groups: Any) -> None:
        broker = self.broker
        if topics:
            version = _version_text(topics)
            if version is not None:
                self._master_version = version
            self.topic_copies += 1
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


def _version_text(topics: Any) -> str | None:
    """``counter:timestamp`` of a topic table's dataVersion (None: it has none)."""
    version = topics.get("dataVersion") if isinstance(topics, dict) else None
    if not isinstance(version, dict):
        return None
    return f"{version.get('counter', 0)}:{version.get('timestamp', 0)}"
