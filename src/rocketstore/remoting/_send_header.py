"""The header of a send, decoded once: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and
SEND_BATCH_MESSAGE (320).

RocketMQ names the thirteen fields of a send twice: SEND_MESSAGE spells them out
(SendMessageRequestHeader), SEND_MESSAGE_V2 and the batches of today's clients use one letter
each (SendMessageRequestHeaderV2)::

    a producerGroup     e queueId        i properties       m batch
    b topic             f sysFlag        j reconsumeTimes
    c defaultTopic      g bornTimestamp  k unitMode
    d defaultTopicQueueNums  h flag      l maxReconsumeTimes

Each field may come under either name (older clients send batches with the long names), but
under one only: a header that spells a field twice (``b`` and ``topic``) is a bad request
(RequestError, answered SYSTEM_ERROR as RocketMQ answers a header it cannot decode), since
one reader could take one spelling and another reader the other.

:func:`send_header` decodes a command's header into a :class:`SendHeader` and keeps it on the
command (``cmd.header``): the ACL decides on that object and the send processor stores from
it, so both see the same topic. The topic and the producer group are text (a JSON number
becomes its decimal text, as the Java side reads every field as a string); the other fields
stay as sent (``str``, a JSON number, or None when absent) for the processor to parse.

Pure functions; any thread (a command belongs to the loop thread that serves it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._command import RemotingCommand, str_value
from ._limits import RequestError

# (long name, short name), in the order of SendHeader's raw fields
FIELD_NAMES: tuple[tuple[str, str], ...] = (
    ("producerGroup", "a"),
    ("topic", "b"),
    ("defaultTopic", "c"),
    ("defaultTopicQueueNums", "d"),
    ("queueId", "e"),
    ("sysFlag", "f"),
    ("bornTimestamp", "g"),
    ("flag", "h"),
    ("properties", "i"),
    ("reconsumeTimes", "j"),
    ("unitMode", "k"),
    ("maxReconsumeTimes", "l"),
    ("batch", "m"),
)
LONG_NAMES = frozenset(long for long, _ in FIELD_NAMES)
SHORT_NAMES = frozenset(short for _, short in FIELD_NAMES)


@dataclass(slots=True, init=False)
class SendHeader:
    """One send's header fields; ``topic`` and ``producer_group`` as text, the others as sent."""

    producer_group: str | None
    topic: str | None
    default_topic: Any
    default_topic_queue_nums: Any
    queue_id: Any
    sys_flag: Any
    born_timestamp: Any
    flag: Any
    properties: Any
    reconsume_times: Any
    unit_mode: Any
    max_reconsume_times: Any
    batch: Any

    # written out (not the dataclass's generated one) so that a compiled build compiles it
    def __init__(
        self,
        producer_group: Any,
        topic: Any,
        default_topic: Any,
        default_topic_queue_nums: Any,
        queue_id: Any,
        sys_flag: Any,
        born_timestamp: Any,
        flag: Any,
        properties: Any,
        reconsume_times: Any,
        unit_mode: Any,
        max_reconsume_times: Any,
        batch: Any,
    ) -> None:
        self.producer_group = str_value(producer_group)
        self.topic = str_value(topic)
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.flag = flag
        self.properties = properties
        self.reconsume_times = reconsume_times
        self.unit_mode = unit_mode
        self.max_reconsume_times = max_reconsume_times
        self.batch = batch

    def is_batch(self) -> bool:
        """Does the header say its body is a batch? Java clients write ``true``; the C++
        client (the ``rocketmq`` Python package) writes ``1``, which RocketMQ's own broker
        reads as false, storing the encoded batch as one message. Both count here."""
        value = self.batch
        if value is None or value is False or value == "false" or value == "0":
            return False
        if value is True:
            return True
        return str(value).strip().lower() in ("true", "1")


def decode_send_header(ext: dict[str, Any]) -> SendHeader:
    """The send header of ``ext``; RequestError when a field is spelled twice."""
    get = ext.get
    if LONG_NAMES.isdisjoint(ext):  # SEND_MESSAGE_V2 and today's batches
        return SendHeader(
            get("a"),
            get("b"),
            get("c"),
            get("d"),
            get("e"),
            get("f"),
            get("g"),
            get("h"),
            get("i"),
            get("j"),
            get("k"),
            get("l"),
            get("m"),
        )
    if SHORT_NAMES.isdisjoint(ext):  # SEND_MESSAGE
        return SendHeader(
            get("producerGroup"),
            get("topic"),
            get("defaultTopic"),
            get("defaultTopicQueueNums"),
            get("queueId"),
            get("sysFlag"),
            get("bornTimestamp"),
            get("flag"),
            get("properties"),
            get("reconsumeTimes"),
            get("unitMode"),
            get("maxReconsumeTimes"),
            get("batch"),
        )
    values: list[Any] = []
    for long, short in FIELD_NAMES:
        if long in ext and short in ext:
            raise RequestError(
                f"the send header names the field <{long}> twice (as '{short}' and as "
                f"'{long}'): send each field under one name"
            )
        values.append(ext[long] if long in ext else get(short))
    return SendHeader(*values)


def send_header(cmd: RemotingCommand) -> SendHeader:
    """The decoded send header of ``cmd``, decoded at the first call and kept on the command;
    RequestError when a field is spelled twice."""
    header = cmd.header
    if type(header) is SendHeader:
        return header
    decoded = decode_send_header(cmd.ext_fields)
    cmd.header = decoded
    return decoded
