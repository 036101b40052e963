"""Messages going in, and the results of puts and gets (statuses as RocketMQ puts them on the wire)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ._record import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    MessageExt,
    make_msg_id,
    string_to_properties,
)


class Message:
    """A message to put. ``tags`` and ``keys`` are stored as the TAGS and KEYS properties.

    ``born_host`` is ``"ip:port"``; ``born_timestamp`` 0 means "when stored".
    """

    __slots__ = (
        "body",
        "born_host",
        "born_timestamp",
        "flag",
        "prepared_transaction_offset",
        "properties",
        "queue_id",
        "reconsume_times",
        "sys_flag",
        "topic",
        "wait_store_msg_ok",
    )

    def __init__(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
        *,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str | None = None,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> None:
        """``wait_store_msg_ok=False`` skips the wait for the flush (SYNC_FLUSH) as the WAIT=false
        property does, without storing the property (RocketMQ's broker keeps WAIT out of the
        stored properties)."""
        self.topic = topic
        self.body = body
        self.queue_id = queue_id
        props = dict(properties) if properties else {}
        if tags:
            props[PROPERTY_TAGS] = tags
        if keys:
            props[PROPERTY_KEYS] = keys if isinstance(keys, str) else KEY_SEPARATOR.join(keys)
        self.properties: dict[str, str] = props
        self.flag = flag
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.wait_store_msg_ok = wait_store_msg_ok

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, queue_id={self.queue_id}, body={len(self.body)} bytes)"
        )


class BatchedMessage(Message):
    """A message of a sent batch whose stored properties text is given as RocketMQ's broker
    writes it: the message's own text as the batch carried it, then the batch's properties
    (the request's and CLUSTER), so a name can be there twice (WAIT, most often).
    ``properties`` is that text parsed (the later of a twice-given name wins, as a Java map
    built from it)."""

    __slots__ = ("properties_text",)

    def __init__(
        self,
        topic: str,
        body: bytes,
        queue_id: int,
        properties_text: str,
        *,
        flag: int = 0,
        born_timestamp: int = 0,
        born_host: str | None = None,
    ) -> None:
        super().__init__(
            topic,
            body,
            queue_id,
            properties=string_to_properties(properties_text),
            flag=flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
        )
        self.properties_text = properties_text


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    # RocketMQ 5 (controller mode): the SyncStateSet is smaller than minInSyncReplicas
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"

    @property
    def ok(self) -> bool:
        """The message is stored (timeouts included: RocketMQ stores before it waits)."""
        return self in _STORED


_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


class RedeliveredMessage(Message):
    """A due delayed message going back to its real topic (ScheduleMessageService): its
    properties keep DELAY, REAL_TOPIC and REAL_QID as RocketMQ 4.9.8 stores them, but DELAY
    does not send it to SCHEDULE_TOPIC_XXXX again."""

    __slots__ = ()


class PutMessageResult(NamedTuple):
    """Result of one put (immutable). For a batch, the offsets are those of the first message,
    ``offsets`` has one commit-log offset per message and ``msg_ids`` one id per message."""

    status: PutMessageStatus
    wrote_offset: int = -1
    wrote_bytes: int = 0
    queue_offset: int = -1
    store_timestamp: int = 0
    store_host: bytes = b""
    msg_count: int = 0
    error: str | None = None
    offsets: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        """The message is stored (flush and replication timeouts included)."""
        return self.status in _STORED

    @property
    def msg_id(self) -> str | None:
        """offsetMsgId of the (first) message, computed on demand."""
        if self.wrote_offset < 0 or not self.store_host:
            return None
        return make_msg_id(self.store_host, self.wrote_offset)

    @property
    def msg_ids(self) -> list[str]:
        """One offsetMsgId per message (a batch has several)."""
        if not self.store_host or self.wrote_offset < 0:
            return []
        return [make_msg_id(self.store_host, o) for o in (self.offsets or (self.wrote_offset,))]

    def __repr__(self) -> str:
        extra = f", error={self.error!r}" if self.error else ""
        return (
            f"PutMessageResult({self.status.name}, wrote_offset={self.wrote_offset}, "
            f"wrote_bytes={self.wrote_bytes}, queue_offset={self.queue_offset}{extra})"
        )


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    buffer_total_size: int = 0
    msg_count_for_filter: int = 0


@dataclass(slots=True)
class QueryMessageResult:
    """Messages found by key, ascending by commit-log offset, with the index's progress."""

    messages: list[MessageExt] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
    buffer_total_size: int = 0
