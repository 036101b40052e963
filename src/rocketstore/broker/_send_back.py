"""Failed consumption: CONSUMER_SEND_MSG_BACK (36) puts a message a consumer could not handle
into ``%RETRY%<group>`` with a delay level (3 + reconsume times unless the client names one), or,
past the group's max reconsume times (16 by default) or with a negative delay level, into
``%DLQ%<group>``. A producer's send to a retry topic goes through the same rule.

Loop thread only.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from ..remoting import Connection, RemotingCommand, ResponseCode, ext_int, ext_str
from ..store._message import Message
from ..store._record import PROPERTY_DELAY, PROPERTY_WAIT
from ._topic_config import dlq_topic, retry_topic

if TYPE_CHECKING:
    from ._controller import BrokerController

RC = ResponseCode
PERM_WRITE = 2
PERM_READ = 4
DLQ_NUMS_PER_GROUP = 1
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RETRY_PREFIX = "%RETRY%"


def retry_or_dlq(
    broker: BrokerController, topic: str, reconsume_times: int, max_reconsume: int | None
) -> tuple[str, int] | RemotingCommand:
    """Where a producer's send to ``%RETRY%<group>`` goes: (topic, queue id) of the retry topic,
    or of the group's DLQ when it has been consumed too often."""
    group = topic[len(RETRY_PREFIX) :]
    group_config = broker.groups.find_or_create(group)
    if group_config is None:
        return RemotingCommand.response(
            RC.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
        )
    limit = max_reconsume if max_reconsume is not None else group_config.retry_max_times
    if reconsume_times < limit:
        config = broker.topics.select(topic)
        nums = config.write_queue_nums if config is not None else group_config.retry_queue_nums
        return topic, random.randrange(max(1, nums))
    dlq = dlq_topic(group)
    if broker.topics.create_in_send_back(dlq, DLQ_NUMS_PER_GROUP, PERM_WRITE, 0) is None:
        return RemotingCommand.response(RC.SYSTEM_ERROR, f"topic[{dlq}] not exist")
    return dlq, random.randrange(DLQ_NUMS_PER_GROUP)


class SendBackProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.store = broker.store

    def handlers(self) -> dict[int, Any]:
        return {36: self.send_back}

    def send_back(self, cmd: RemotingCommand, conn: Connection) -> Any:
        ext = cmd.ext_fields
        broker = self.broker
        group = ext_str(ext, "group") or ""
        phys = ext_int(ext, "offset")
        if phys is None:
            raise ValueError("offset is required")
        delay_level = ext_int(ext, "delayLevel", 0) or 0
        group_config = broker.groups.find_or_create(group)
        if group_config is None:
            return RemotingCommand.response(
                RC.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        if (
            broker.store_config.broker_role == "SLAVE"
            or not broker.config.broker_permission & PERM_WRITE
        ):
            return RemotingCommand.response(
                RC.NO_PERMISSION,
                f"the broker[{broker.config.broker_name}] sending message is forbidden",
            )
        if group_config.retry_queue_nums <= 0:
            return RemotingCommand.response(RC.SUCCESS)
        topic = retry_topic(group)
        queue_id = random.randrange(group_config.retry_queue_nums)
        config = broker.topics.create_in_send_back(
            topic, group_config.retry_queue_nums, PERM_WRITE | PERM_READ, 0
        )
        if config is None:
            return RemotingCommand.response(RC.SYSTEM_ERROR, f"topic[{topic}] not exist")
        msg = self.store.look_message_by_offset(phys)
        if msg is None:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, f"look message by offset failed, {phys}"
            )
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props[PROPERTY_WAIT] = "false"
        max_reconsume = ext_int(ext, "maxReconsumeTimes")
        if max_reconsume is None:
            max_reconsume = group_config.retry_max_times
        if msg.reconsume_times >= max_reconsume or delay_level < 0:
            topic = dlq_topic(group)
            queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            if broker.topics.create_in_send_back(topic, DLQ_NUMS_PER_GROUP, PERM_WRITE, 0) is None:
                return RemotingCommand.response(RC.SYSTEM_ERROR, f"topic[{topic}] not exist")
            props.pop(PROPERTY_DELAY, None)
        else:
            if delay_level == 0:
                delay_level = 3 + msg.reconsume_times
            props[PROPERTY_DELAY] = str(delay_level)
        origin = ext_str(ext, "originMsgId") or msg.msg_id
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
