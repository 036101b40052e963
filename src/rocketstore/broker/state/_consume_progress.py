"""A consumer group's progress on each queue, reckoned once for everything that reports it:
GET_CONSUME_STATS (``consumer progress``, the console's group views) and the metrics'
``rocketmq_consumer_ready_messages``.

The reckoning is RocketMQ 4.9.8's AdminBrokerProcessor.getConsumeStats::

    topics   the one asked for, else every topic the group has committed offsets on
             (whichTopicByConsumer); a topic the broker has no config for is left out, and so
             is one an online group does not subscribe to (it subscribes to others)
    queues   every read queue of the topic, 0 .. readQueueNums - 1
    broker offset     the queue's max offset (0 for a queue without messages)
    consumer offset   the group's committed offset, 0 where it has none yet: a queue the group
                      never committed on is behind by all its messages
    last timestamp    the store time of the message before the consumer offset (0 at offset 0)

so a group's total lag is the sum of broker offset - consumer offset over those queues.

Any thread: the offset and topic tables lock themselves, the store's reads are thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ._consumer_manager import ConsumerManager
from ._consumer_offset import ConsumerOffsetManager
from ._topic_config import TopicConfigManager


class QueueReads(Protocol):
    """What the reckoning reads of the store."""

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int: ...


@dataclass(frozen=True, slots=True)
class QueueProgress:
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        return self.broker_offset - self.consumer_offset


def consume_progress(
    store: QueueReads,
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    consumers: ConsumerManager[Any],
    group: str,
    topic: str | None = None,
    *,
    skipped: list[str] | None = None,
) -> Iterator[QueueProgress]:
    """The group's progress on every read queue of ``topic`` (or of each topic it has
    committed offsets on), topics in name order. The names of topics left out because the
    broker does not have them are appended to ``skipped`` when given."""
    names = {topic} if topic else offsets.topics_by_group(group)
    info = consumers.group_info(group)
    subscribed = set(info.subscriptions) if info is not None else set()
    for name in sorted(names):
        config = topics.select(name)
        if config is None:
            if skipped is not None:
                skipped.append(name)
            continue
        if subscribed and name not in subscribed:
            continue  # online, but not subscribing to this topic any more
        for qid in range(config.read_queue_nums):
            broker_offset = max(0, store.get_max_offset_in_queue(name, qid))
            consumer_offset = max(0, offsets.query_offset(group, name, qid))
            last = 0
            if consumer_offset > 0:
                ts = store.get_message_store_timestamp(name, qid, consumer_offset - 1)
                last = ts if ts > 0 else 0
            yield QueueProgress(name, qid, broker_offset, consumer_offset, last)
