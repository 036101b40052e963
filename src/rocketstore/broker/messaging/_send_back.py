"""Failed consumption: CONSUMER_SEND_MSG_BACK (36) puts a message a consumer could not handle
into ``%RETRY%<group>`` with a delay level (3 + reconsume times unless the client names one), or,
past the group's max reconsume times (16 by default) or with a negative delay level, into
``%DLQ%<group>``. A producer's send to a retry topic goes through the same rule.

Loop thread only.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Protocol

from ...acl._remoting import check_then
from ...acl._table import request_names
from ...remoting import (
    Connection,
    RemotingCommand,
    RequestError,
    ResponseCode,
    ext_int,
    ext_int32,
    ext_str,
)
from ...store.log._message import Message
from ...store.log._record import PROPERTY_DELAY, PROPERTY_REAL_TOPIC, PROPERTY_WAIT
from .._services import HasConfig, HasGroups, HasStore, HasStoreConfig, TopicCreation
from ..state._topic_config import (
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    dlq_topic,
    owning_topic,
    retry_topic,
)

RC = ResponseCode
DLQ_NUMS_PER_GROUP = 1
DLQ_PERM = PERM_WRITE | PERM_READ  # readable, as in RocketMQ 4.9: tools and consumers can drain it
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"


class SendBackContext(HasConfig, HasGroups, HasStore, HasStoreConfig, TopicCreation, Protocol):
    """What CONSUMER_SEND_MSG_BACK uses of the broker."""


def retry_or_dlq(
    broker: SendBackContext,
    topic: str,
    queue_id: int,
    reconsume_times: int,
    max_reconsume: int | None,
    properties: dict[str, str],
) -> tuple[str, int] | RemotingCommand:
    """Where a producer's send to ``%RETRY%<group>`` goes: its own (topic, queue id), or the
    group's DLQ when the message has been consumed too often (``properties`` then lose DELAY: a
    dead letter is not delayed)."""
    group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
    group_config = broker.groups.find_or_create(group)
    if group_config is None:
        return RemotingCommand.response(
            RC.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
        )
    limit = max_reconsume if max_reconsume is not None else group_config.retry_max_times
    if reconsume_times < limit:
        return topic, queue_id
    dlq = dlq_topic(group)
    broker.create_topic_for_send_back(dlq, DLQ_NUMS_PER_GROUP, DLQ_PERM, 0)
    properties.pop(PROPERTY_DELAY, None)
    return dlq, random.randrange(DLQ_NUMS_PER_GROUP)


class SendBackProcessor:
    def __init__(self, broker: SendBackContext) -> None:
        self.broker = broker
        self.store = broker.store

    def handlers(self) -> dict[int, Any]:
        return {36: self.send_back}

    def send_back(self, cmd: RemotingCommand, conn: Connection) -> Any:
        ext = cmd.ext_fields
        broker = self.broker
        group = request_names(cmd).group or ""  # as the ACL read it
        if not group:
            raise RequestError("the custom field <group> is null")
        phys = ext_int(ext, "offset")
        if phys is None:
            raise RequestError("the custom field <offset> is null")
        delay_level = ext_int32(ext, "delayLevel", 0) or 0
        group_config = broker.groups.find_or_create(group)
        if group_config is None:
            return RemotingCommand.response(
                RC.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        if not broker.store.is_master or not broker.config.broker_permission & PERM_WRITE:
            return RemotingCommand.response(
                RC.NO_PERMISSION,
                f"the broker[{broker.config.broker_name}] sending message is forbidden",
            )
        if group_config.retry_queue_nums <= 0:
            return RemotingCommand.response(RC.SUCCESS)
        msg = self.store.look_message_by_offset(phys)
        if msg is None:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, f"look message by offset failed, {phys}"
            )
        # the message is copied into the group's retry topic: the account must read its topic
        refused = check_then(cmd, owning_topic(msg.topic, msg.properties.get(PROPERTY_REAL_TOPIC)))
        if refused is not None:
            return refused
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props[PROPERTY_WAIT] = "false"
        max_reconsume = ext_int32(ext, "maxReconsumeTimes")
        if max_reconsume is None:
            max_reconsume = group_config.retry_max_times
        if msg.reconsume_times >= max_reconsume or delay_level < 0:
            topic = dlq_topic(group)
            queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            broker.create_topic_for_send_back(topic, DLQ_NUMS_PER_GROUP, DLQ_PERM, 0)
            props.pop(PROPERTY_DELAY, None)
        else:
            topic = retry_topic(group)
            queue_id = random.randrange(group_config.retry_queue_nums)
            broker.create_topic_for_send_back(
                topic, group_config.retry_queue_nums, PERM_WRITE | PERM_READ, 0
            )
            if delay_level == 0:
                delay_level = 3 + msg.reconsume_times
            props[PROPERTY_DELAY] = str(delay_level)
        # the first delivery's id stays the origin through every retry
        origin = props.get(PROPERTY_ORIGIN_MESSAGE_ID) or ext_str(ext, "originMsgId") or msg.msg_id
        props[PROPERTY_ORIGIN_MESSAGE_ID] = origin
        retry = Message(
            topic,
            msg.body,
            queue_id,
            properties=props,
            flag=msg.flag,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host_str,
            reconsume_times=msg.reconsume_times + 1,
        )
        fut = self.store.put_message_async(retry)
        if fut.done():
            return self._answer(fut.result())
        return self._later(fut)

    async def _later(self, fut: Any) -> RemotingCommand:
        return self._answer(await asyncio.wrap_future(fut))

    @staticmethod
    def _answer(r: Any) -> RemotingCommand:
        if r.ok:
            return RemotingCommand.response(RC.SUCCESS)
        return RemotingCommand.response(RC.SYSTEM_ERROR, r.status.name)
