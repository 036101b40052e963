"""Bodies a consumer client answers the broker with, relayed to the admin (RocketMQ 4.9.8's
ConsumerRunningInfo, ProcessQueueInfo, ConsumeStatus, GetConsumerStatusBody), written as
fastjson writes them (bean fields sorted by name, queues as object keys)::

    ConsumerRunningInfo   {["jstack":"..",]"mqTable":{{"brokerName":..,"queueId":0,"topic":..}:
                              ProcessQueueInfo},"properties":{"k":"v"},
                           "statusTable":{topic:ConsumeStatus},"subscriptionSet":[
                              SubscriptionData...]}
    ProcessQueueInfo      {"cachedMsgCount":0,"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,
                           "cachedMsgSizeInMiB":0,"commitOffset":12,"droped":false,
                           "lastConsumeTimestamp":..,"lastLockTimestamp":..,
                           "lastPullTimestamp":..,"locked":false,"transactionMsgCount":0,
                           "transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,
                           "tryUnlockTimes":0}
    ConsumeStatus         {"consumeFailedMsgs":0,"consumeFailedTPS":0.0,"consumeOKTPS":0.0,
                           "consumeRT":0.0,"pullRT":0.0,"pullTPS":0.0}
    GetConsumerStatusBody {"consumerTable":{clientId:{queue:offset}},
                           "messageQueueTable":{queue:offset}}

The property names RocketMQ's clients add (``PROP_*``) are constants here. Pure values; any
thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._admin_bodies import (
    BodyFormatError,
    MessageQueue,
    _object,
    dumps,
    parse_queue_key,
    queue_key,
)

PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# ProcessQueueInfo's snake_case fields whose Java names are not their camelCase
_PQ_NAMES = {"cached_msg_size_in_mib": "cachedMsgSizeInMiB", "dropped": "droped"}
_STATUS_NAMES = {"consume_failed_tps": "consumeFailedTPS", "consume_ok_tps": "consumeOKTPS"}
_STATUS_NAMES.update({"consume_rt": "consumeRT", "pull_rt": "pullRT", "pull_tps": "pullTPS"})


def _to_json(obj: Any, names: Mapping[str, str]) -> dict[str, Any]:
    doc = {
        names.get(f.name) or _camel(f.name): getattr(obj, f.name) for f in dataclasses.fields(obj)
    }
    return dict(sorted(doc.items()))


def _from_json(cls: Any, doc: Any, names: Mapping[str, str], what: str) -> Any:
    if not isinstance(doc, Mapping):
        raise BodyFormatError(f"not a {what} object: {doc!r:.80}")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = names.get(f.name) or _camel(f.name)
        if key not in doc or doc[key] is None:
            continue
        value = doc[key]
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        try:
            if kind == "bool":
                if not isinstance(value, bool):
                    raise ValueError(f"{value!r} is not a boolean")
            elif kind == "int":
                if isinstance(value, bool):
                    raise ValueError(f"{value!r} is not a number")
                value = int(value)
            elif kind == "float":
                if isinstance(value, bool):
                    raise ValueError(f"{value!r} is not a number")
                value = float(value)
        except (TypeError, ValueError) as exc:
            raise BodyFormatError(f"{what}.{key}: {exc}") from None
        values[f.name] = value
    return cls(**values)


@dataclass(frozen=True, slots=True)
class ProcessQueueInfo:
    """One queue a consumer holds: its committed offset and what it has cached."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    dropped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        return _to_json(self, _PQ_NAMES)

    @classmethod
    def from_json(cls, doc: Any) -> ProcessQueueInfo:
        result: ProcessQueueInfo = _from_json(cls, doc, _PQ_NAMES, "ProcessQueueInfo")
        return result


@dataclass(frozen=True, slots=True)
class ConsumeStatus:
    """A consumer's rates on one topic (pulls and consumption over the last minute)."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0

    def to_json(self) -> dict[str, Any]:
        return _to_json(self, _STATUS_NAMES)

    @classmethod
    def from_json(cls, doc: Any) -> ConsumeStatus:
        result: ConsumeStatus = _from_json(cls, doc, _STATUS_NAMES, "ConsumeStatus")
        return result


@dataclass(slots=True)
class ConsumerRunningInfo:
    """What a consumer client tells of itself (GET_CONSUMER_RUNNING_INFO): its settings as
    text, its subscriptions (SubscriptionData JSON objects), the queues it holds and its rates
    by topic."""

    properties: dict[str, str] = field(default_factory=dict)
    subscriptions: list[dict[str, Any]] = field(default_factory=list)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, ConsumeStatus] = field(default_factory=dict)
    jstack: str | None = None

    def to_json(self) -> dict[Any, Any]:
        doc: dict[Any, Any] = {}
        if self.jstack is not None:
            doc["jstack"] = self.jstack
        doc["mqTable"] = {
            queue_key(mq): self.mq_table[mq].to_json() for mq in sorted(self.mq_table)
        }
        doc["properties"] = dict(self.properties)
        doc["statusTable"] = {t: self.status_table[t].to_json() for t in sorted(self.status_table)}
        doc["subscriptionSet"] = sorted(
            (dict(sorted(s.items())) for s in self.subscriptions),
            key=lambda s: f"{s.get('topic', '')}@{s.get('subString', '')}",
        )
        return doc

    def encode(self) -> bytes:
        return dumps(self.to_json()).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> ConsumerRunningInfo:
        doc = _object(data, "ConsumerRunningInfo")
        props = _get(doc, "properties", {})
        subs = _get(doc, "subscriptionSet", [])
        mqs = _get(doc, "mqTable", {})
        status = _get(doc, "statusTable", {})
        jstack = doc.get("jstack")
        if not isinstance(props, Mapping) or not isinstance(mqs, Mapping):
            raise BodyFormatError("ConsumerRunningInfo: properties and mqTable must be objects")
        if not isinstance(status, Mapping) or not isinstance(subs, list):
            raise BodyFormatError(
                "ConsumerRunningInfo: statusTable must be an object, subscriptionSet a list"
            )
        if not all(isinstance(s, Mapping) for s in subs):
            raise BodyFormatError("ConsumerRunningInfo: a subscription is not an object")
        return cls(
            {str(k): "" if v is None else str(v) for k, v in props.items()},
            [{str(k): v for k, v in s.items()} for s in subs],
            {parse_queue_key(k): ProcessQueueInfo.from_json(v) for k, v in mqs.items()},
            {str(k): ConsumeStatus.from_json(v) for k, v in status.items()},
            jstack if isinstance(jstack, str) else None,
        )


def _get(doc: Mapping[Any, Any], key: str, default: Any) -> Any:
    value = doc.get(key)
    return default if value is None else value


def _offsets(doc: Any, what: str) -> dict[MessageQueue, int]:
    if not isinstance(doc, Mapping):
        raise BodyFormatError(f"{what} is not an object")
    out: dict[MessageQueue, int] = {}
    for key, value in doc.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise BodyFormatError(f"{what}: offset {value!r} is not a number")
        out[parse_queue_key(key)] = value
    return out


@dataclass(slots=True)
class ConsumerStatusBody:
    """GetConsumerStatusBody: a client's offsets of a topic's queues (``message_queues``, its
    answer to GET_CONSUMER_STATUS_FROM_CLIENT), or every client's (``consumers``, the
    broker's answer to INVOKE_BROKER_TO_GET_CONSUMER_STATUS)."""

    message_queues: dict[MessageQueue, int] = field(default_factory=dict)
    consumers: dict[str, dict[MessageQueue, int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def table(offsets: Mapping[MessageQueue, int]) -> dict[Any, int]:
            return {queue_key(mq): offsets[mq] for mq in sorted(offsets)}

        doc = {
            "consumerTable": {c: table(self.consumers[c]) for c in sorted(self.consumers)},
            "messageQueueTable": table(self.message_queues),
        }
        return dumps(doc).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> ConsumerStatusBody:
        doc = _object(data, "GetConsumerStatusBody")
        consumers = _get(doc, "consumerTable", {})
        if not isinstance(consumers, Mapping):
            raise BodyFormatError("GetConsumerStatusBody.consumerTable is not an object")
        return cls(
            _offsets(_get(doc, "messageQueueTable", {}), "messageQueueTable"),
            {str(c): _offsets(t, f"consumerTable[{c}]") for c, t in consumers.items()},
        )
