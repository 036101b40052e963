"""Bodies of the broker's administration answers (RocketMQ 4.9.8's ConsumeStats, OffsetWrapper,
TopicStatsTable, KVTable), written as fastjson writes them, and a reader for fastjson's text.

fastjson writes a map whose keys are beans (``HashMap<MessageQueue, OffsetWrapper>``) with each
key as a JSON object, bean fields sorted by name; strict JSON parsers reject it::

    ConsumeStats     {"consumeTps":0.0,"offsetTable":{
                         {"brokerName":"broker-a","queueId":0,"topic":"T"}:
                             {"brokerOffset":3,"consumerOffset":1,"lastTimestamp":1700000000000},
                         ...}}
    TopicStatsTable  {"offsetTable":{{"brokerName":..,"queueId":0,"topic":..}:
                         {"lastUpdateTimestamp":..,"maxOffset":..,"minOffset":..}}}
    KVTable          {"table":{"key":"value",...}}
    GroupList        {"groupList":["G1","G2"]}

:func:`loads` reads that form as well as strict JSON and fastjson's bare integer keys. A key
that is an object comes back as a tuple of its (name, value) pairs, in the text's order, so it
can be a dict key; :func:`dumps` writes such a tuple back as an object (both are
``remoting._fastjson``'s, with Java's floats and this module's error). ``ConsumeStats.decode``
also accepts keys written as text, the JSON text of a queue or Java's
``MessageQueue [topic=T, brokerName=b, queueId=0]`` (what Jackson-based tools write).

Pure functions and values; any thread.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..remoting import _fastjson
from ..store.services._stats import java_double
from ._java_order import java_order

_MQ_TEXT = re.compile(
    r"MessageQueue \[topic=(?P<topic>.*), brokerName=(?P<broker>.*), queueId=(?P<qid>-?\d+)\]"
)


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on a broker (RocketMQ's MessageQueue): a key of the admin bodies'
    tables, and what the clients send to and pull from (``rocketstore.client`` exports it)."""

    topic: str
    broker_name: str
    queue_id: int


class BodyFormatError(ValueError):
    """A body that is not the fastjson text of the class it should hold."""


# ---- reading --------------------------------------------------------------------------------


def loads(text: str | bytes | bytearray | memoryview) -> Any:
    """Parse fastjson's text: strict JSON plus map keys that are numbers or objects. Object
    keys become tuples of (name, value) pairs; number keys become numbers. BodyFormatError when
    the text does not parse."""
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyFormatError(f"not UTF-8: {exc}") from None
    try:
        return _fastjson.loads_object_keys(text)
    except (ValueError, RecursionError) as exc:
        raise BodyFormatError(f"not fastjson text: {exc}") from None


def dumps(obj: Any) -> str:
    """Compact fastjson text: dicts in their order, ``int`` keys bare, tuple-of-pairs keys as
    objects, floats as Java's ``Double.toString``."""
    return _fastjson.dumps(obj, floats=java_double)


# ---- message queues as keys -----------------------------------------------------------------


def queue_key(mq: MessageQueue) -> tuple[tuple[str, Any], ...]:
    """A MessageQueue as fastjson writes it (fields sorted by name), as a dict key."""
    return (("brokerName", mq.broker_name), ("queueId", mq.queue_id), ("topic", mq.topic))


def parse_queue_key(key: Any) -> MessageQueue:
    """A MessageQueue from a map key: an object (tuple of pairs), its JSON text, or Java's
    ``toString`` form. BodyFormatError otherwise."""
    if isinstance(key, str):
        m = _MQ_TEXT.fullmatch(key.strip())
        if m is not None:
            return MessageQueue(m["topic"], m["broker"], int(m["qid"]))
        try:
            key = loads(key)
        except BodyFormatError:
            raise BodyFormatError(f"not a message queue: {key!r}") from None
    if isinstance(key, tuple):
        key = dict(key)
    if not isinstance(key, Mapping):
        raise BodyFormatError(f"not a message queue: {key!r}")
    try:
        return MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise BodyFormatError(f"not a message queue: {key!r} ({exc})") from None


def _object(data: bytes | bytearray | memoryview | str, what: str) -> Mapping[Any, Any]:
    doc = loads(data)
    if not isinstance(doc, Mapping):
        raise BodyFormatError(f"not a {what}: {type(doc).__name__}")
    return doc


def _long(doc: Mapping[Any, Any], name: str) -> int:
    value = doc.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BodyFormatError(f"{name} is not a number: {value!r}")
    return int(value)


# ---- ConsumeStats ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    """A queue's progress for a group: the queue's max offset, the group's committed offset,
    and the store time of the last consumed message (0 when unknown)."""

    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        return self.broker_offset - self.consumer_offset

    def to_json(self) -> dict[str, int]:
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lastTimestamp": self.last_timestamp,
        }


@dataclass(slots=True)
class ConsumeStats:
    """GET_CONSUME_STATS's body: a group's progress on every queue of its topics."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def total_lag(self) -> int:
        """RocketMQ's computeTotalDiff: the sum of broker offset - consumer offset."""
        return sum(w.lag for w in self.offset_table.values())

    def merge(self, other: ConsumeStats) -> None:
        """Add another broker's answer (examineConsumeStats)."""
        self.offset_table.update(other.offset_table)
        self.consume_tps += other.consume_tps

    def encode(self) -> bytes:
        table = {queue_key(mq): self.offset_table[mq].to_json() for mq in sorted(self.offset_table)}
        return dumps({"consumeTps": float(self.consume_tps), "offsetTable": table}).encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> ConsumeStats:
        doc = _object(data, "ConsumeStats")
        table_doc = doc.get("offsetTable") or {}
        if not isinstance(table_doc, Mapping):
            raise BodyFormatError("offsetTable is not an object")
        table: dict[MessageQueue, OffsetWrapper] = {}
        for key, value in table_doc.items():
            if not isinstance(value, Mapping):
                raise BodyFormatError(f"offset of {key!r} is not an object")
            table[parse_queue_key(key)] = OffsetWrapper(
                _long(value, "brokerOffset"),
                _long(value, "consumerOffset"),
                _long(value, "lastTimestamp"),
            )
        tps = doc.get("consumeTps", 0.0)
        if isinstance(tps, bool) or not isinstance(tps, int | float):
            raise BodyFormatError(f"consumeTps is not a number: {tps!r}")
        return cls(table, float(tps))


# ---- TopicStatsTable ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """A queue's min and max offsets and the store time of its last message."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "lastUpdateTimestamp": self.last_update_timestamp,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
        }


def encode_topic_stats(table: Mapping[MessageQueue, TopicOffset]) -> bytes:
    """GET_TOPIC_STATS_INFO's body (TopicStatsTable)."""
    doc = {queue_key(mq): table[mq].to_json() for mq in sorted(table)}
    return dumps({"offsetTable": doc}).encode()


def decode_topic_stats(
    data: bytes | bytearray | memoryview | str,
) -> dict[MessageQueue, TopicOffset]:
    table_doc = _object(data, "TopicStatsTable").get("offsetTable") or {}
    if not isinstance(table_doc, Mapping):
        raise BodyFormatError("offsetTable is not an object")
    out: dict[MessageQueue, TopicOffset] = {}
    for key, value in table_doc.items():
        if not isinstance(value, Mapping):
            raise BodyFormatError(f"offset of {key!r} is not an object")
        out[parse_queue_key(key)] = TopicOffset(
            _long(value, "minOffset"),
            _long(value, "maxOffset"),
            _long(value, "lastUpdateTimestamp"),
        )
    return out


# ---- KVTable, GroupList ---------------------------------------------------------------------


def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """KVTable's body: ``{"table":{...}}`` (values as text)."""
    return dumps({"table": {str(k): str(v) for k, v in table.items()}}).encode()


def decode_kv_table(data: bytes | bytearray | memoryview | str) -> dict[str, str]:
    table = _object(data, "KVTable").get("table") or {}
    if not isinstance(table, Mapping):
        raise BodyFormatError("table is not an object")
    return {str(k): str(v) for k, v in table.items()}


def encode_group_list(groups: Sequence[str]) -> bytes:
    return dumps({"groupList": list(groups)}).encode()


def decode_group_list(data: bytes | bytearray | memoryview | str) -> list[str]:
    groups = _object(data, "GroupList").get("groupList") or []
    if not isinstance(groups, list):
        raise BodyFormatError("groupList is not an array")
    return [str(g) for g in groups]


# ---- ConsumerConnection, ProducerConnection -------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """One client of a group as the admin bodies carry it (RocketMQ's Connection)."""

    client_id: str
    client_addr: str
    language: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {
            "clientAddr": self.client_addr,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, doc: Any) -> ClientConnection:
        if not isinstance(doc, Mapping):
            raise BodyFormatError(f"not a Connection: {doc!r:.80}")
        return cls(
            str(doc.get("clientId") or ""),
            str(doc.get("clientAddr") or ""),
            str(doc.get("language") or ""),
            _long(doc, "version"),
        )


def _connections(doc: Mapping[Any, Any]) -> list[ClientConnection]:
    items = doc.get("connectionSet") or []
    if not isinstance(items, list):
        raise BodyFormatError("connectionSet is not an array")
    return [ClientConnection.from_json(item) for item in items]


@dataclass(frozen=True, slots=True)
class ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST's body: a group's online clients, how it consumes and
    its subscriptions (topic → SubscriptionData's JSON object)."""

    connections: tuple[ClientConnection, ...]
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: Mapping[str, Mapping[str, Any]]

    def encode(self) -> bytes:
        table = {t: dict(self.subscriptions[t]) for t in java_order(self.subscriptions)}
        return dumps(
            {
                "connectionSet": [c.to_json() for c in self.connections],
                "consumeFromWhere": self.consume_from_where,
                "consumeType": self.consume_type,
                "messageModel": self.message_model,
                "subscriptionTable": table,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> ConsumerConnection:
        doc = _object(data, "ConsumerConnection")
        table = doc.get("subscriptionTable") or {}
        if not isinstance(table, Mapping) or not all(
            isinstance(v, Mapping) for v in table.values()
        ):
            raise BodyFormatError("subscriptionTable is not an object of objects")
        return cls(
            tuple(_connections(doc)),
            str(doc.get("consumeType") or ""),
            str(doc.get("messageModel") or ""),
            str(doc.get("consumeFromWhere") or ""),
            {str(k): dict(v) for k, v in table.items()},
        )


def encode_producer_connection(connections: Sequence[ClientConnection]) -> bytes:
    """GET_PRODUCER_CONNECTION_LIST's body (ProducerConnection)."""
    return dumps({"connectionSet": [c.to_json() for c in connections]}).encode()


def decode_producer_connection(
    data: bytes | bytearray | memoryview | str,
) -> list[ClientConnection]:
    return _connections(_object(data, "ProducerConnection"))


# ---- ConsumeStatsList -----------------------------------------------------------------------


@dataclass(slots=True)
class ConsumeStatsList:
    """GET_BROKER_CONSUME_STATS's body: per group, the ConsumeStats of each topic it has
    offsets on; the broker's address and the sum of every lag."""

    broker_addr: str
    groups: list[tuple[str, list[ConsumeStats]]] = field(default_factory=list)
    total_diff: int = 0

    def encode(self) -> bytes:
        def stats(s: ConsumeStats) -> dict[Any, Any]:
            table = {queue_key(mq): s.offset_table[mq].to_json() for mq in sorted(s.offset_table)}
            return {"consumeTps": float(s.consume_tps), "offsetTable": table}

        doc = {
            "brokerAddr": self.broker_addr,
            "consumeStatsList": [{g: [stats(s) for s in lst]} for g, lst in self.groups],
            "totalDiff": self.total_diff,
        }
        return dumps(doc).encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> ConsumeStatsList:
        doc = _object(data, "ConsumeStatsList")
        items = doc.get("consumeStatsList") or []
        if not isinstance(items, list):
            raise BodyFormatError("consumeStatsList is not an array")
        groups: list[tuple[str, list[ConsumeStats]]] = []
        for item in items:
            if not isinstance(item, Mapping):
                raise BodyFormatError("a consumeStatsList entry is not an object")
            for group, lst in item.items():
                if not isinstance(lst, list):
                    raise BodyFormatError(f"the stats of {group!r} are not an array")
                groups.append((str(group), [ConsumeStats.decode(dumps(s)) for s in lst]))
        return cls(str(doc.get("brokerAddr") or ""), groups, _long(doc, "totalDiff"))


# ---- BrokerStatsData ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerStatsItem:
    """The sum, TPS and average per addition of one stats item over one window."""

    sum: int
    tps: float
    avgpt: float

    def to_json(self) -> dict[str, Any]:
        return {"avgpt": float(self.avgpt), "sum": self.sum, "tps": float(self.tps)}

    @classmethod
    def from_json(cls, doc: Any) -> BrokerStatsItem:
        if not isinstance(doc, Mapping):
            raise BodyFormatError(f"not a BrokerStatsItem: {doc!r:.80}")
        values = [doc.get(k, 0) for k in ("sum", "tps", "avgpt")]
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
            raise BodyFormatError(f"not a BrokerStatsItem: {doc!r:.80}")
        return cls(int(values[0]), float(values[1]), float(values[2]))


@dataclass(frozen=True, slots=True)
class BrokerStatsData:
    """VIEW_BROKER_STATS_DATA's body: one stats item over the last minute, hour and day."""

    minute: BrokerStatsItem
    hour: BrokerStatsItem
    day: BrokerStatsItem

    def encode(self) -> bytes:
        return dumps(
            {
                "statsDay": self.day.to_json(),
                "statsHour": self.hour.to_json(),
                "statsMinute": self.minute.to_json(),
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> BrokerStatsData:
        doc = _object(data, "BrokerStatsData")
        return cls(
            BrokerStatsItem.from_json(doc.get("statsMinute")),
            BrokerStatsItem.from_json(doc.get("statsHour")),
            BrokerStatsItem.from_json(doc.get("statsDay")),
        )


# ---- QueryConsumeQueueResponseBody ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumeQueueUnit:
    """One consume-queue unit as QUERY_CONSUME_QUEUE answers it (RocketMQ's
    ConsumeQueueData; this store keeps no extended units, so no bitMap / extendDataJson)."""

    phys_offset: int
    size: int
    tags_code: int
    eval: bool = False
    msg: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"eval": self.eval}
        if self.msg is not None:
            doc["msg"] = self.msg
        doc.update(physicOffset=self.phys_offset, physicSize=self.size, tagsCode=self.tags_code)
        return doc


@dataclass(frozen=True, slots=True)
class QueryConsumeQueueBody:
    """QUERY_CONSUME_QUEUE's body: the queue's bounds, the units asked for and, when a group
    was given, its subscription (or why there is none)."""

    min_queue_index: int
    max_queue_index: int
    units: tuple[ConsumeQueueUnit, ...] = ()
    subscription: Mapping[str, Any] | None = None
    filter_data: str | None = None

    def encode(self) -> bytes:
        doc: dict[str, Any] = {}
        if self.filter_data is not None:
            doc["filterData"] = self.filter_data
        doc["maxQueueIndex"] = self.max_queue_index
        doc["minQueueIndex"] = self.min_queue_index
        doc["queueData"] = [u.to_json() for u in self.units]
        if self.subscription is not None:
            doc["subscriptionData"] = dict(self.subscription)
        return dumps(doc).encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> QueryConsumeQueueBody:
        doc = _object(data, "QueryConsumeQueueResponseBody")
        items = doc.get("queueData") or []
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            raise BodyFormatError("queueData is not an array of objects")
        units = tuple(
            ConsumeQueueUnit(
                _long(i, "physicOffset"),
                _long(i, "physicSize"),
                _long(i, "tagsCode"),
                bool(i.get("eval", False)),
                None if i.get("msg") is None else str(i["msg"]),
            )
            for i in items
        )
        sub = doc.get("subscriptionData")
        if sub is not None and not isinstance(sub, Mapping):
            raise BodyFormatError("subscriptionData is not an object")
        filter_data = doc.get("filterData")
        return cls(
            _long(doc, "minQueueIndex"),
            _long(doc, "maxQueueIndex"),
            units,
            None if sub is None else dict(sub),
            None if filter_data is None else str(filter_data),
        )


# ---- ResetOffsetBody ------------------------------------------------------------------------


def encode_reset_offset(table: Mapping[MessageQueue, int], *, for_cpp: bool = False) -> bytes:
    """RESET_CONSUMER_OFFSET's answer and RESET_CONSUMER_CLIENT_OFFSET's body: ResetOffsetBody
    (queue → offset), or ResetOffsetBodyForC (a list) for C++ clients."""
    if for_cpp:
        items = [
            {
                "brokerName": mq.broker_name,
                "offset": table[mq],
                "queueId": mq.queue_id,
                "topic": mq.topic,
            }
            for mq in sorted(table)
        ]
        return dumps({"offsetTable": items}).encode()
    return dumps({"offsetTable": {queue_key(mq): table[mq] for mq in sorted(table)}}).encode()


def decode_reset_offset(data: bytes | bytearray | memoryview | str) -> dict[MessageQueue, int]:
    """A ResetOffsetBody, or a ResetOffsetBodyForC."""
    table = _object(data, "ResetOffsetBody").get("offsetTable") or {}
    out: dict[MessageQueue, int] = {}
    if isinstance(table, list):
        for item in table:
            if not isinstance(item, Mapping):
                raise BodyFormatError("an offsetTable entry is not an object")
            out[parse_queue_key(item)] = _long(item, "offset")
        return out
    if not isinstance(table, Mapping):
        raise BodyFormatError("offsetTable is not an object")
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise BodyFormatError(f"offset of {key!r} is not an integer")
        out[parse_queue_key(key)] = value
    return out
