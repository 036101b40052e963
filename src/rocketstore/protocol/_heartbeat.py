"""What clients tell the broker in HEART_BEAT (34): their consumer groups with subscriptions and
their producer groups; and the subscription expressions themselves (``"TagA || TagB"``).

The body is JSON. The official C++ client (the ``rocketmq`` PyPI package) writes enums as their
Java ordinals and ``subVersion`` as a string, and sends ``codeSet`` as zeros::

    {"clientID":"24904-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,
     "consumeType":1,"groupName":"GID_cap_push","messageModel":1,"subscriptionDataSet":[
     {"subString":"*","subVersion":"1795532966879","topic":"%RETRY%GID_cap_push"},
     {"codeSet":[0,0],"subString":"TagA || TagB","subVersion":"1795532966879",
      "tagsSet":["TagA","TagB"],"topic":"CapTopic"}]}]}

The Java client (fastjson) writes enum names (``"CONSUME_PASSIVELY"``) and numbers; both are
accepted. For TAG subscriptions the tags and their codes are rebuilt from ``subString`` exactly as
the broker does for a pull's subscription (FilterAPI.build), so a client's wrong ``codeSet`` cannot
make the broker filter out messages the consumer asked for.

Threads: plain functions and immutable values; any thread.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..remoting._fastjson import dumps, loads_lenient
from ..store._java_hash import java_string_hash
from ._errors import InvalidHeartbeatError, InvalidSubscriptionError
from ._json_values import as_bool, as_int

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))  # String.trim() strips chars <= ' '


class _JavaEnum(enum.IntEnum):
    """A Java enum: value = ordinal, name = Java name; parsed from either."""

    @classmethod
    def parse(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.isdigit():
                return cls(int(value))
            return cls[value]
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        raise ValueError(f"{cls.__name__}: {value!r}")


class ConsumeType(_JavaEnum):
    CONSUME_ACTIVELY = 0  # pull consumer ("PULL")
    CONSUME_PASSIVELY = 1  # push consumer ("PUSH")


class MessageModel(_JavaEnum):
    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(_JavaEnum):
    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


def is_tag_type(expression_type: str | None) -> bool:
    """ExpressionType.isTagType: None, empty or "TAG"."""
    return not expression_type or expression_type == EXPRESSION_TAG


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One topic subscription of a consumer group (RocketMQ's SubscriptionData)."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG
    class_filter_mode: bool = False

    @property
    def matches_all(self) -> bool:
        """A TAG subscription to ``*``: every message matches."""
        return self.sub_string == SUB_ALL and is_tag_type(self.expression_type)

    def matches_tags_code(self, tags_code: int | None) -> bool:
        """The consume-queue check of ExpressionMessageFilter for TAG subscriptions: ``*``, a
        unit without a tags code, class-filter mode and non-TAG expressions match; else the code
        (as Java's int) must be one of the tags' hash codes."""
        if self.class_filter_mode or not is_tag_type(self.expression_type):
            return True
        if tags_code is None or self.sub_string == SUB_ALL:
            return True
        code = tags_code & 0xFFFFFFFF
        return (code - 0x100000000 if code & 0x80000000 else code) in self.code_set

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON object (fields sorted by name as fastjson writes them)."""
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags_set),
            "topic": self.topic,
        }


def build_subscription(
    topic: str,
    sub_string: str | None,
    expression_type: str | None = EXPRESSION_TAG,
    sub_version: int = 0,
) -> SubscriptionData:
    """A subscription from its expression, as RocketMQ's FilterAPI.build does it.

    TAG: None, ``""`` or ``"*"`` subscribe to everything; else the expression is split on
    ``||``, each piece trimmed, empty pieces skipped, and each tag's code is Java's
    String.hashCode. An expression with nothing but ``||`` separators raises
    InvalidSubscriptionError (RocketMQ's "subString split error"). Other types (SQL92) keep the
    expression as is and must not be empty.
    """
    if not is_tag_type(expression_type):
        if not sub_string:
            raise InvalidSubscriptionError(f"Expression can't be null! {expression_type}")
        return SubscriptionData(
            topic, sub_string, sub_version=sub_version, expression_type=str(expression_type)
        )
    if not sub_string or sub_string == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version)
    pieces = sub_string.split("||")
    while pieces and not pieces[-1]:  # Java's split drops trailing empty strings
        pieces.pop()
    if not pieces:
        raise InvalidSubscriptionError(f"subString split error: {sub_string!r}")
    tags = [t for t in (p.strip(_JAVA_TRIM) for p in pieces) if t]
    return SubscriptionData(
        topic,
        sub_string,
        frozenset(tags),
        frozenset(java_string_hash(t) for t in tags),
        sub_version,
    )


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group of a heartbeat."""

    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False


@dataclass(frozen=True, slots=True)
class ProducerData:
    """One producer group of a heartbeat."""

    group_name: str


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    """A decoded HEART_BEAT body."""

    client_id: str
    consumers: tuple[ConsumerData, ...] = field(default=())
    producers: tuple[ProducerData, ...] = field(default=())

    @property
    def producer_groups(self) -> list[str]:
        return [p.group_name for p in self.producers]


def _list(doc: Mapping[str, Any], name: str) -> list[Any]:
    value = doc.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{name} is not an array")
    return value


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} is not an object: {value!r}")
    return value


def _str(doc: Mapping[str, Any], name: str, default: str | None = None) -> str:
    value = doc.get(name, default)
    if not isinstance(value, str):
        raise ValueError(f"{name} is not a string: {value!r}")
    return value


def _subscription(doc: Mapping[str, Any]) -> SubscriptionData:
    topic = _str(doc, "topic")
    expression_type = doc.get("expressionType") or EXPRESSION_TAG
    if not isinstance(expression_type, str):
        raise ValueError(f"expressionType is not a string: {expression_type!r}")
    sub = build_subscription(
        topic,
        doc.get("subString") if isinstance(doc.get("subString"), str) else None,
        expression_type,
        as_int(doc.get("subVersion", 0), "subVersion"),
    )
    if as_bool(doc.get("classFilterMode", False), "classFilterMode"):
        return dataclasses.replace(sub, class_filter_mode=True)
    return sub


def _consumer(doc: Mapping[str, Any]) -> ConsumerData:
    group = _str(doc, "groupName")
    try:
        consume_type = ConsumeType.parse(doc.get("consumeType", 0))
        message_model = MessageModel.parse(doc.get("messageModel", MessageModel.CLUSTERING))
        where = ConsumeFromWhere.parse(doc.get("consumeFromWhere", 0))
    except KeyError as exc:
        raise ValueError(f"group {group}: unknown enum name {exc}") from None
    subs = tuple(_subscription(_obj(s, "subscription")) for s in _list(doc, "subscriptionDataSet"))
    return ConsumerData(
        group,
        consume_type,
        message_model,
        where,
        subs,
        as_bool(doc.get("unitMode", False), "unitMode"),
    )


def parse_heartbeat(body: bytes | bytearray | memoryview | str) -> HeartbeatData:
    """Decode a HEART_BEAT body; InvalidHeartbeatError (or InvalidSubscriptionError for a bad
    expression) says what is wrong with it."""
    try:
        text = body if isinstance(body, str) else bytes(body).decode("utf-8")
        doc = _obj(loads_lenient(text), "heartbeat")
        return HeartbeatData(
            client_id=_str(doc, "clientID", ""),
            consumers=tuple(
                _consumer(_obj(c, "consumer data")) for c in _list(doc, "consumerDataSet")
            ),
            producers=tuple(
                ProducerData(_str(_obj(p, "producer data"), "groupName"))
                for p in _list(doc, "producerDataSet")
            ),
        )
    except InvalidSubscriptionError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidHeartbeatError(f"bad heartbeat body: {exc}") from None


def encode_heartbeat(data: HeartbeatData) -> bytes:
    """A HEART_BEAT body as the Java client writes it (enum names, numbers), for tools and tests
    that act as a client."""

    def consumer(c: ConsumerData) -> dict[str, Any]:
        return {
            "consumeFromWhere": c.consume_from_where.name,
            "consumeType": c.consume_type.name,
            "groupName": c.group_name,
            "messageModel": c.message_model.name,
            "subscriptionDataSet": [s.to_json() for s in c.subscriptions],
            "unitMode": c.unit_mode,
        }

    doc = {
        "clientID": data.client_id,
        "consumerDataSet": [consumer(c) for c in data.consumers],
        "producerDataSet": [{"groupName": p.group_name} for p in data.producers],
    }
    return dumps(doc).encode("utf-8")
