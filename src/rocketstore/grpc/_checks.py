"""Checks of names and durations in v2 requests, each raising GrpcError with the status code the
protocol gives for it (ILLEGAL_TOPIC, ILLEGAL_CONSUMER_GROUP, ILLEGAL_INVISIBLE_TIME, ...).

Any thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..broker._errors import InvalidTopicError
from ..broker._services import HasConfig, HasTopics, TopicCreation
from ..broker.state._subscription_group import is_system_group
from ..broker.state._topic_config import validate_topic
from ._convert import Code, GrpcError

if TYPE_CHECKING:
    from ..broker.state._topic_config import TopicConfig, TopicConfigManager
    from ._pb import definition_pb2 as pb

GROUP_MAX_LENGTH = 255
_GROUP_CHARS = frozenset("%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class CheckContext(HasConfig, HasTopics, TopicCreation, Protocol):
    """What the gRPC checks use of the broker."""


def check_topic(resource: pb.Resource, topics: TopicConfigManager) -> str:
    """The topic named by ``resource``; ILLEGAL_TOPIC for a bad name or a system topic."""
    name = resource.name
    try:
        validate_topic(name)
    except InvalidTopicError as exc:
        raise GrpcError(Code.ILLEGAL_TOPIC, str(exc)) from None
    if topics.is_system_topic(name):
        raise GrpcError(Code.ILLEGAL_TOPIC, f"cannot access system topic {name}")
    return name


def topic_config(broker: CheckContext, topic: str, *, create: bool) -> TopicConfig:
    """The broker's config of ``topic``, created from the default topic when ``create`` and
    auto-creation allow (as a 4.x send does); TOPIC_NOT_FOUND when there is none,
    ILLEGAL_TOPIC for a name that may not be created."""
    config = broker.topics.select(topic)
    if config is None and create and broker.config.auto_create_topic_enable:
        try:
            # RocketMQ 5's proxy sends with defaultTopicQueueNums 4: the new topic gets
            # min(4, the default topic's write queues)
            config = broker.create_topic_for_send(topic, {"defaultTopicQueueNums": "4"})
        except InvalidTopicError as exc:
            raise GrpcError(Code.ILLEGAL_TOPIC, str(exc)) from None
    if config is None:
        raise GrpcError(Code.TOPIC_NOT_FOUND, f"topic[{topic}] not exist, apply first please!")
    return config


def check_group(resource: pb.Resource) -> str:
    """The consumer group named by ``resource``; ILLEGAL_CONSUMER_GROUP for a blank, too long
    or badly spelled name, or a system group."""
    name = resource.name
    if not name or not name.strip():
        raise GrpcError(Code.ILLEGAL_CONSUMER_GROUP, "the consumer group is blank")
    if len(name) > GROUP_MAX_LENGTH:
        raise GrpcError(
            Code.ILLEGAL_CONSUMER_GROUP, f"the consumer group is longer than {GROUP_MAX_LENGTH}"
        )
    if not _GROUP_CHARS.issuperset(name):
        raise GrpcError(
            Code.ILLEGAL_CONSUMER_GROUP,
            f"the consumer group {name!r} contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$",
        )
    if is_system_group(name):
        raise GrpcError(Code.ILLEGAL_CONSUMER_GROUP, f"cannot use system consumer group {name}")
    return name


def check_invisible(ms: int, low: int, high: int) -> int:
    """``ms`` when within [low, high], else ILLEGAL_INVISIBLE_TIME."""
    if ms < low:
        raise GrpcError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisible time is too small, min {low}")
    if ms > high:
        raise GrpcError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisible time is too large, max {high}")
    return ms


def settings_topics(settings: pb.Settings) -> int:
    """How many topics a client's settings name (published, or subscribed to)."""
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        return len(settings.publishing.topics)
    if kind == "subscription":
        return len(settings.subscription.subscriptions)
    return 0
