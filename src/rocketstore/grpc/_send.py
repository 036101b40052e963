"""SendMessage: v2 messages into the store, through the same topic table as the remoting
front end's sends.

Each message of a request is checked as RocketMQ's proxy checks it (topic, body size, tag, keys,
message id, user properties, message group, delivery time), turned into a store ``Message``
(the client's message id kept as UNIQ_KEY, so the message can be found by id and key), put
through the store's non-blocking put and answered when the put's flush and replication waits
are over. A queue is picked per message: by the hash of its message group, else in turn.

A delivery timestamp is kept as TIMER_DELIVER_MS (a consumer sees it as the message's delivery
timestamp) and the message waits in the longest delay level not longer than its delay; the
store's schedule moves it on through shorter levels until its time (see ``store/services/_schedule.py``),
so it is delivered at that time, never early.

A TRANSACTION message is stored as a half message (see ``_transaction.py``); its result carries
the transaction id EndTransaction takes.

Loop thread only.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Protocol

from ..broker._services import (
    HasClock,
    HasConfig,
    HasStore,
    HasStoreConfig,
    HasTopics,
    TopicCreation,
)
from ..broker.messaging._transaction import (
    MAX_IMMUNITY_S,
    PROPERTY_CHECK_IMMUNITY_S,
    HasTransactions,
)
from ..broker.state._topic_config import (
    PERM_WRITE,
    TRANS_HALF_TOPIC,
    TopicConfig,
    is_not_allowed_send_topic,
)
from ..store._clock import Clock
from ..store._java_hash import java_string_hash
from ..store.log._message import Message, PutMessageResult, PutMessageStatus
from ..store.log._record import PROPERTY_DELAY, PROPERTY_TRANSACTION_PREPARED, PROPERTY_UNIQ_KEY
from ..store.services._schedule import PROPERTY_TIMER_DELIVER_MS, timer_level
from ._checks import check_topic, topic_config
from ._config import GrpcConfig
from ._convert import (
    PROPERTY_BORN_HOST,
    PROPERTY_CLUSTER,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TRACE_CONTEXT,
    SYSTEM_PROPERTIES,
    Code,
    GrpcError,
    born_host_of,
    decoded_body,
    has_control_character,
    status,
)
from ._pb import definition_pb2 as pb
from ._pb import service_pb2 as spb
from ._recall import recall_handle
from ._transaction import transaction_id

P = PutMessageStatus
_PUT_CODES: dict[PutMessageStatus, int] = {
    P.PUT_OK: Code.OK,
    P.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    P.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    P.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    P.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    P.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    P.OS_PAGECACHE_BUSY: Code.TOO_MANY_REQUESTS,
}


class SendContext(
    HasClock,
    HasConfig,
    HasStore,
    HasStoreConfig,
    HasTopics,
    HasTransactions,
    TopicCreation,
    Protocol,
):
    """What gRPC sends use of the broker."""


class SendService:
    def __init__(self, broker: SendContext, config: GrpcConfig, clock: Clock) -> None:
        self.broker = broker
        self.config = config
        self.clock = clock
        self._turn = itertools.count()
        self._levels_ms = broker.store_config.delay_levels_ms()

    async def send(
        self, request: spb.SendMessageRequest, peer: str | None
    ) -> spb.SendMessageResponse:
        """Store every message of ``request``; GrpcError when the request as a whole is
        refused (nothing stored), else one entry per message."""
        messages = request.messages
        if not messages:
            raise GrpcError(Code.MESSAGE_CORRUPTED, "no message to send")
        broker = self.broker
        topic = check_topic(messages[0].topic, broker.topics)
        if any(m.topic.name != topic for m in messages):
            raise GrpcError(Code.MESSAGE_CORRUPTED, "the messages of one request name other topics")
        if is_not_allowed_send_topic(topic):
            raise GrpcError(Code.ILLEGAL_TOPIC, f"sending to topic {topic} is forbidden")
        if not broker.store.is_master or not (broker.config.broker_permission & PERM_WRITE):
            raise GrpcError(
                Code.FORBIDDEN,
                f"the broker[{broker.config.broker_name}] sending message is forbidden",
            )
        config = topic_config(broker, topic, create=True)
        if not config.writeable or config.write_queue_nums <= 0:
            raise GrpcError(Code.FORBIDDEN, f"the topic[{topic}] sending message is forbidden")
        stored = [self._to_store(m, topic, config, peer) for m in messages]
        futures = [broker.store.put_message_async(msg) for msg in stored]
        results: list[PutMessageResult] = []
        for fut in futures:
            results.append(fut.result() if fut.done() else await asyncio.wrap_future(fut))
        return self._answer(stored, results)

    def _to_store(
        self, m: pb.Message, topic: str, config: TopicConfig, peer: str | None
    ) -> Message:
        cfg = self.config
        sp = m.system_properties
        max_size = self.broker.store_config.max_message_size
        body = decoded_body(m, max_size)
        if not body:
            raise GrpcError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
        if len(body) > max_size:
            raise GrpcError(Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed {max_size}")
        transactional = sp.message_type == pb.TRANSACTION
        if transactional and self.broker.config.reject_transaction_message:
            raise GrpcError(Code.FORBIDDEN, "this broker takes no transactional message")
        if transactional and sp.HasField("delivery_timestamp"):
            raise GrpcError(
                Code.ILLEGAL_DELIVERY_TIME, "a transactional message cannot have a delivery time"
            )
        if len(m.user_properties) > cfg.max_user_properties:
            raise GrpcError(
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
                f"too many user properties, max is {cfg.max_user_properties}",
            )
        props: dict[str, str] = {}
        size = 0
        for name, value in m.user_properties.items():
            if name in SYSTEM_PROPERTIES:
                raise GrpcError(
                    Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {name}"
                )
            if not name or has_control_character(name) or has_control_character(value):
                raise GrpcError(
                    Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                    "a property's key or value is empty or has a control character",
                )
            props[name] = value
            size += len(name.encode()) + len(value.encode())
        tag = sp.tag if sp.HasField("tag") else ""
        if tag:
            if not tag.strip():
                raise GrpcError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be whitespace only")
            if "|" in tag:
                raise GrpcError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
            if has_control_character(tag):
                raise GrpcError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain a control character")
            size += len(tag.encode())
        keys = list(sp.keys)
        for key in keys:
            if not key.strip():
                raise GrpcError(Code.ILLEGAL_MESSAGE_KEY, "key cannot be empty or whitespace only")
            if has_control_character(key):
                raise GrpcError(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain a control character")
            size += len(key.encode())
        if size > cfg.max_user_property_size:
            raise GrpcError(
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
                f"the user properties take {size} bytes, max is {cfg.max_user_property_size}",
            )
        message_id = sp.message_id
        if not message_id.strip():
            raise GrpcError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
        if has_control_character(message_id):
            raise GrpcError(
                Code.ILLEGAL_MESSAGE_ID, "message id cannot contain a control character"
            )
        props[PROPERTY_UNIQ_KEY] = message_id
        if sp.HasField("delivery_timestamp"):
            deliver_ms = sp.delivery_timestamp.ToMilliseconds()
            delay = deliver_ms - self.clock.now_ms()
            if delay > cfg.max_delay_ms:
                raise GrpcError(
                    Code.ILLEGAL_DELIVERY_TIME,
                    f"the delivery time is too far ahead, max delay is {cfg.max_delay_ms} ms",
                )
            level = timer_level(delay, self._levels_ms)
            if level > 0:
                props[PROPERTY_DELAY] = str(level)
            props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
        group = sp.message_group if sp.HasField("message_group") else ""
        if group:
            if not group.strip() or has_control_character(group):
                raise GrpcError(
                    Code.ILLEGAL_MESSAGE_GROUP, "message group is blank or has a control character"
                )
            if len(group.encode()) >= cfg.max_message_group_size:
                raise GrpcError(
                    Code.ILLEGAL_MESSAGE_GROUP,
                    f"message group exceeds the max size {cfg.max_message_group_size}",
                )
            props[PROPERTY_SHARDING_KEY] = group
        if sp.HasField("trace_context") and sp.trace_context:
            props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
        if sp.born_host:
            props[PROPERTY_BORN_HOST] = sp.born_host
        props[PROPERTY_CLUSTER] = self.broker.config.cluster_name
        if transactional:
            props[PROPERTY_TRANSACTION_PREPARED] = "true"
            if sp.HasField("orphaned_transaction_recovery_duration"):
                seconds = sp.orphaned_transaction_recovery_duration.ToSeconds()
                props[PROPERTY_CHECK_IMMUNITY_S] = str(min(max(0, seconds), MAX_IMMUNITY_S))
        born_ms = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else 0
        nums = config.write_queue_nums
        if group:
            queue_id = (java_string_hash(group) & 0x7FFFFFFF) % nums
        else:
            queue_id = next(self._turn) % nums
        msg = Message(
            topic,
            body,
            queue_id,
            tags=tag or None,
            keys=keys or None,
            properties=props,
            born_timestamp=born_ms if born_ms > 0 else 0,
            born_host=born_host_of(sp.born_host, peer),
        )
        if transactional:
            # the producer group of a 5.x client's transaction is its topic (as RocketMQ's
            # proxy): checks go to a client publishing the topic
            self.broker.transactions.to_half(msg, topic)
        return msg

    @staticmethod
    def _answer(
        stored: Sequence[Message], results: Sequence[PutMessageResult]
    ) -> spb.SendMessageResponse:
        response = spb.SendMessageResponse()
        codes: set[int] = set()
        for msg, r in zip(stored, results, strict=True):
            entry = response.entries.add()
            code = _PUT_CODES.get(r.status, Code.INTERNAL_SERVER_ERROR)
            codes.add(code)
            if code == Code.OK:
                entry.status.CopyFrom(status(Code.OK))
                entry.message_id = msg.properties[PROPERTY_UNIQ_KEY]
                entry.offset = r.queue_offset
                if msg.topic == TRANS_HALF_TOPIC:
                    entry.transaction_id = transaction_id(r.wrote_offset, r.queue_offset)
                deliver = msg.properties.get(PROPERTY_TIMER_DELIVER_MS)
                if deliver is not None and PROPERTY_DELAY in msg.properties:
                    entry.recall_handle = recall_handle(
                        msg.topic, msg.properties[PROPERTY_UNIQ_KEY], int(deliver)
                    )
            else:
                entry.status.CopyFrom(
                    status(code, f"send message failed, status {r.status.name}: {r.error or ''}")
                )
        if len(codes) == 1:
            (code,) = codes
            response.status.CopyFrom(status(code))
        else:
            response.status.CopyFrom(status(Code.MULTIPLE_RESULTS))
        return response
