"""Topic configuration: the broker's topic table, persisted in ``config/topics.json``.

The file is what RocketMQ 4.9.8 writes (fastjson pretty format, bean fields sorted by name)::

    {
    \t"dataVersion":{
    \t\t"counter":3,
    \t\t"timestamp":1700000000000
    \t},
    \t"topicConfigTable":{
    \t\t"TopicA":{
    \t\t\t"order":false,
    \t\t\t"perm":6,
    \t\t\t"readQueueNums":4,
    \t\t\t"topicFilterType":"SINGLE_TAG",
    \t\t\t"topicName":"TopicA",
    \t\t\t"topicSysFlag":0,
    \t\t\t"writeQueueNums":4
    \t\t}
    \t}
    }

At start the manager holds RocketMQ's system topics (SELF_TEST_TOPIC, TBW102 when auto-creation
is on, BenchmarkTest, the cluster-name and broker-name topics, OFFSET_MOVED_EVENT,
SCHEDULE_TOPIC_XXXX with 18 queues, RMQ_SYS_TRACE_TOPIC when trace topics are on,
``<cluster>_REPLY_TOPIC``); the file's entries then replace or add to them. Every change bumps the
data version (counter + 1, timestamp = now) and is durable before the call returns, as in
RocketMQ: one line appended to ``topics.json.changes.<n>`` and one fsync, the whole file
rewritten now and then in the background and at shutdown (see ``_config_table``), so creating a
topic costs the same with ten topics or a hundred thousand.

Threads: every method may be called from any thread (one lock guards the table).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...protocol._json_values import as_bool, as_int
from ...store._clock import SYSTEM_CLOCK, Clock
from .._errors import InvalidTopicError
from ._config_table import VersionedConfigTable

log = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"

# permission bits (PermName)
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1

# topic sys flag bits (TopicSysFlag)
TOPIC_SYS_FLAG_UNIT = 0x1
TOPIC_SYS_FLAG_UNIT_SUB = 0x2

DEFAULT_TOPIC = "TBW102"  # AUTO_CREATE_TOPIC_KEY_TOPIC: the template of auto-created topics
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC = "BenchmarkTest"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
SCHEDULE_TOPIC_QUEUE_NUMS = 18
TOPIC_MAX_LENGTH = 127

TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")

_SYSTEM_TOPICS = frozenset(
    {
        DEFAULT_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
_NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
_VALID_CHARS = frozenset("%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def owning_topic(topic: str, real_topic: str | None) -> str:
    """The topic a stored message belongs to, for access checks: a delayed message
    (SCHEDULE_TOPIC_XXXX) and a half message (RMQ_SYS_TRANS_HALF_TOPIC) belong to the topic
    they wait for (their REAL_TOPIC property), any other message to the topic it is stored
    in."""
    if real_topic and topic in (SCHEDULE_TOPIC, TRANS_HALF_TOPIC):
        return real_topic
    return topic


def validate_topic(topic: str, *, allow_default: bool = True) -> None:
    """Raise InvalidTopicError unless ``topic`` matches ``^[%|a-zA-Z0-9_-]+$`` and has at most 127
    characters; with ``allow_default=False`` the default topic TBW102 is refused too (a client may
    not create it)."""
    if not topic or not topic.strip():
        raise InvalidTopicError("The specified topic is blank.")
    if not _VALID_CHARS.issuperset(topic):
        raise InvalidTopicError(
            f"The specified topic[{topic}] contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidTopicError(
            f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}."
        )
    if not allow_default and topic == DEFAULT_TOPIC:
        raise InvalidTopicError(f"The topic[{topic}] is conflict with AUTO_CREATE_TOPIC_KEY_TOPIC.")


def is_not_allowed_send_topic(topic: str) -> bool:
    """A topic clients may not send to (schedule, transaction and self-test topics)."""
    return topic in _NOT_ALLOWED_SEND_TOPICS


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a group's failed deliveries wait for their next attempt."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after their last attempt."""
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic's configuration (RocketMQ's TopicConfig; defaults are its defaults)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def inherited(self) -> bool:
        return bool(self.perm & PERM_INHERIT)

    def replace(self, **changes: Any) -> TopicConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON object (camelCase, fields sorted by name as fastjson writes them)."""
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, doc: Any, topic_name: str | None = None) -> TopicConfig:
        """Parse RocketMQ's JSON object; missing fields take the defaults. ``topic_name`` (the
        table key) is used when the object has no ``topicName``. ValueError if malformed."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"topic config is not an object: {doc!r}")
        name = doc.get("topicName", topic_name)
        if not isinstance(name, str) or not name:
            raise ValueError(f"topic config without a topic name: {doc!r}")
        filter_type = doc.get("topicFilterType", "SINGLE_TAG")
        if filter_type not in TOPIC_FILTER_TYPES:
            raise ValueError(f"topic {name}: unknown topicFilterType {filter_type!r}")
        return cls(
            topic_name=name,
            read_queue_nums=as_int(doc.get("readQueueNums", 16), "readQueueNums"),
            write_queue_nums=as_int(doc.get("writeQueueNums", 16), "writeQueueNums"),
            perm=as_int(doc.get("perm", PERM_READ | PERM_WRITE), "perm"),
            topic_filter_type=filter_type,
            topic_sys_flag=as_int(doc.get("topicSysFlag", 0), "topicSysFlag"),
            order=as_bool(doc.get("order", False), "order"),
        )


class TopicConfigManager(VersionedConfigTable[TopicConfig]):
    """The broker's topic table (RocketMQ's TopicConfigManager), loaded at construction.

    Raises ConfigFileError when ``topics.json`` and its backup are both damaged.
    """

    def __init__(
        self,
        config_dir: str | os.PathLike[str],
        broker_name: str,
        cluster_name: str = "DefaultCluster",
        *,
        auto_create_topic_enable: bool = True,
        default_topic_queue_nums: int = 8,
        cluster_topic_enable: bool = True,
        broker_topic_enable: bool = True,
        trace_topic_enable: bool = False,
        msg_trace_topic_name: str = TRACE_TOPIC,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.broker_name = broker_name
        self.cluster_name = cluster_name
        self.auto_create_topic_enable = auto_create_topic_enable
        super().__init__(
            Path(config_dir) / TOPICS_FILE,
            "topicConfigTable",
            TopicConfig.from_json,
            "topic",
            log,
            clock,
        )
        self._system_topics: set[str] = set(_SYSTEM_TOPICS)

        def add(topic: str, queue_nums: int = 16, perm: int = PERM_READ | PERM_WRITE) -> None:
            self._system_topics.add(topic)
            self._table[topic] = TopicConfig(topic, queue_nums, queue_nums, perm)

        add(SELF_TEST_TOPIC, 1)
        if auto_create_topic_enable:
            add(DEFAULT_TOPIC, default_topic_queue_nums, PERM_INHERIT | PERM_READ | PERM_WRITE)
        add(BENCHMARK_TOPIC, 1024)
        rw = PERM_READ | PERM_WRITE
        add(cluster_name, 16, PERM_INHERIT | (rw if cluster_topic_enable else 0))
        add(broker_name, 1, PERM_INHERIT | (rw if broker_topic_enable else 0))
        add(OFFSET_MOVED_EVENT, 1)
        add(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUMS)
        if trace_topic_enable:
            add(msg_trace_topic_name, 1)
        add(f"{cluster_name}_{REPLY_TOPIC_POSTFIX}", 1)

        self._load()

    # -- reads -------------------------------------------------------------------------------

    def select(self, topic: str) -> TopicConfig | None:
        """The topic's configuration, None when the broker does not have it."""
        return self._table.get(topic)

    def is_system_topic(self, topic: str) -> bool:
        """RocketMQ's system topics, this broker's cluster- and broker-name topics, and every
        ``rmq_sys_`` topic: the admin API may not create or change them."""
        return topic in self._system_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def is_order_topic(self, topic: str) -> bool:
        config = self._table.get(topic)
        return config is not None and config.order

    # -- changes -----------------------------------------------------------------------------

    def create_in_send(
        self,
        topic: str,
        default_topic: str,
        default_queue_nums: int,
        sys_flag: int = 0,
    ) -> TopicConfig | None:
        """A producer sends to a topic the broker lacks (createTopicInSendMessageMethod).

        Returns the existing config if the topic is there; else creates it from
        ``default_topic`` when that exists with PERM_INHERIT: min(``default_queue_nums``, the
        default topic's write queues) queues, the default's perm without PERM_INHERIT, its filter
        type, ``sys_flag``. Returns None when the default topic is missing or not inheritable
        (TBW102 never is while auto-creation is off). Raises InvalidTopicError for a bad name or
        for TBW102 itself.
        """
        tickets: list[int] = []
        with self._lock:
            existing = self._table.get(topic)
            if existing is not None:
                return existing
            validate_topic(topic, allow_default=False)
            default = self._table.get(default_topic)
            if default is None:
                log.warning(
                    "cannot create topic %s: default topic %s not found", topic, default_topic
                )
                return None
            if default_topic == DEFAULT_TOPIC and not self.auto_create_topic_enable:
                default = default.replace(perm=PERM_READ | PERM_WRITE)
                tickets.append(self._set(default_topic, default))
            if not default.inherited:
                log.warning(
                    "cannot create topic %s: default topic %s has perm %d (no inherit)",
                    topic,
                    default_topic,
                    default.perm,
                )
                config = None
            else:
                queue_nums = max(0, min(default_queue_nums, default.write_queue_nums))
                config = TopicConfig(
                    topic,
                    queue_nums,
                    queue_nums,
                    default.perm & ~PERM_INHERIT,
                    default.topic_filter_type,
                    sys_flag,
                )
                tickets.append(self._set(topic, config))
                log.info("created topic %s from default topic %s", config, default_topic)
        if tickets:
            self._commit(tickets[-1])
        return config

    def create_in_send_back(
        self, topic: str, queue_nums: int, perm: int, sys_flag: int = 0
    ) -> TopicConfig:
        """The retry or DLQ topic of a group, created when first needed
        (createTopicInSendMessageBackMethod); the existing config when it is there."""
        with self._lock:
            existing = self._table.get(topic)
            if existing is not None:
                return existing
            validate_topic(topic)
            config = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=sys_flag)
            ticket = self._set(topic, config)
            log.info("created topic %s", config)
        self._commit(ticket)
        return config

    def update(self, config: TopicConfig) -> None:
        """Create or replace a topic (updateTopicConfig). InvalidTopicError for a bad name."""
        validate_topic(config.topic_name)
        if config.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise ValueError(f"unknown topic filter type {config.topic_filter_type!r}")
        self._put(config.topic_name, config)

    def update_all(self, configs: list[TopicConfig]) -> None:
        """Create or replace many topics with one fsync (a slave copying its master's table).
        InvalidTopicError for a bad name (nothing changed)."""
        for config in configs:
            validate_topic(config.topic_name)
        self.put_all(configs, lambda c: c.topic_name)

    def update_order_topics(self, order_topics: set[str]) -> bool:
        """Mark exactly ``order_topics`` (of those present) as ordered (the name server's
        ORDER_TOPIC_CONFIG table); True when something changed."""
        ticket = 0
        with self._lock:
            for name, config in list(self._table.items()):
                want = name in order_topics
                if config.order != want:
                    ticket = self._set(name, config.replace(order=want))
        if ticket:
            self._commit(ticket)
        return bool(ticket)
