"""Offset-based consumption for pull-style v2 clients: PullMessage, UpdateOffset, GetOffset and
QueryOffset, over the same consume queues and consumer offsets as the remoting front end's
PULL_MESSAGE and offset requests.

PullMessage answers a stream: a status, the messages found (no receipt handles: the client owns
its offsets), then the offset to pull next. With nothing at the offset it waits up to the
request's long-polling timeout (bounded by the client's deadline) for a message to arrive.
Statuses: OK with messages, MESSAGE_NOT_FOUND after an empty poll, ILLEGAL_OFFSET for an offset
below the queue's minimum or past its end (``next_offset`` then says where to go on).

Loop thread only.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from ..broker._services import (
    HasConfig,
    HasGroups,
    HasHolds,
    HasOffsets,
    HasStore,
    HasTopics,
    TopicCreation,
)
from ..broker.state._topic_config import PERM_READ
from ..store.log._message import GetMessageResult, GetMessageStatus
from ..store.queue._filter import TagFilter
from ._checks import check_group, check_topic, topic_config
from ._config import GrpcConfig
from ._convert import Code, GrpcError
from ._pb import definition_pb2 as pb
from ._pb import service_pb2 as spb
from ._receive import tag_filter_of

S = GetMessageStatus
_WAIT = (S.OFFSET_OVERFLOW_ONE, S.NO_MESSAGE_IN_QUEUE, S.NO_MATCHED_LOGIC_QUEUE)
_MOVED = (S.OFFSET_TOO_SMALL, S.OFFSET_OVERFLOW_BADLY)


class PullContext(
    HasConfig, HasGroups, HasHolds, HasOffsets, HasStore, HasTopics, TopicCreation, Protocol
):
    """What gRPC pulls use of the broker."""


class PullService:
    def __init__(self, broker: PullContext, config: GrpcConfig) -> None:
        self.broker = broker
        self.config = config

    def _queue(self, queue: pb.MessageQueue, *, readable: bool = True) -> tuple[str, int]:
        topic = check_topic(queue.topic, self.broker.topics)
        config = topic_config(self.broker, topic, create=False)
        if readable and not config.perm & PERM_READ:
            raise GrpcError(Code.FORBIDDEN, f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue.id < config.read_queue_nums:
            raise GrpcError(
                Code.BAD_REQUEST,
                f"queue id {queue.id} is out of range, topic {topic} has "
                f"{config.read_queue_nums} read queues",
            )
        return topic, queue.id

    async def pull(
        self, request: spb.PullMessageRequest, remaining_s: float | None
    ) -> tuple[int, str, GetMessageResult | None, int]:
        """(status code, status message, the result with the messages or None, next offset)."""
        group = check_group(request.group)
        topic, queue_id = self._queue(request.message_queue)
        if self.broker.groups.find_or_create(group) is None:
            raise GrpcError(
                Code.CONSUMER_GROUP_NOT_FOUND, f"subscription group [{group}] does not exist"
            )
        if request.offset < 0:
            raise GrpcError(Code.ILLEGAL_OFFSET, f"offset must not be negative: {request.offset}")
        batch = request.batch_size
        if batch <= 0:
            raise GrpcError(Code.BAD_REQUEST, f"batch size must be positive, not {batch}")
        batch = min(batch, self.config.max_batch_size)
        tag_filter: TagFilter | None = tag_filter_of(request.filter_expression)
        if tag_filter is not None and tag_filter.matches_all:
            tag_filter = None
        poll_ms = max(0, request.long_polling_timeout.ToMilliseconds())
        poll_ms = min(poll_ms, self.config.max_long_polling_ms)
        if remaining_s is not None:
            poll_ms = min(poll_ms, int(remaining_s * 1000) - self.config.long_polling_reserve_ms)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(0, poll_ms) / 1000.0
        store = self.broker.store
        offset = request.offset
        while True:
            r = store.get_message(group, topic, queue_id, offset, batch, tag_filter)
            if r.messages:
                return Code.OK, "OK", r, r.next_begin_offset
            if r.status in _MOVED:
                return (
                    Code.ILLEGAL_OFFSET,
                    f"offset {offset} is out of range [{r.min_offset}, {r.max_offset}]",
                    None,
                    r.min_offset if offset < r.min_offset else r.max_offset,
                )
            left = give_up - loop.time()
            if r.status not in _WAIT:
                # filtered out or being removed: go on from where the read stopped
                moved = max(offset, r.next_begin_offset)
                if moved == offset and left > 0:
                    await asyncio.sleep(min(left, 0.05))
                offset = moved
                if left > 0:
                    continue
            if left <= 0:
                return Code.MESSAGE_NOT_FOUND, "no new message", None, offset
            if r.status in _WAIT:
                event = asyncio.Event()
                hold = self.broker.holds.hold(topic, queue_id, offset, left, event.set)
                try:
                    await asyncio.wait_for(event.wait(), left)
                except TimeoutError:
                    pass
                finally:
                    hold.cancel()

    def update_offset(self, request: spb.UpdateOffsetRequest, client_id: str) -> None:
        group = check_group(request.group)
        topic, queue_id = self._queue(request.message_queue, readable=False)
        if request.offset < 0:
            raise GrpcError(Code.ILLEGAL_OFFSET, f"offset must not be negative: {request.offset}")
        self.broker.offsets.commit_offset(client_id, group, topic, queue_id, request.offset)

    def get_offset(self, request: spb.GetOffsetRequest) -> int:
        group = check_group(request.group)
        topic, queue_id = self._queue(request.message_queue, readable=False)
        offset = self.broker.offsets.query_offset(group, topic, queue_id)
        if offset < 0:
            raise GrpcError(
                Code.OFFSET_NOT_FOUND, f"group {group} has no offset in {topic}:{queue_id}"
            )
        return offset

    def query_offset(self, request: spb.QueryOffsetRequest) -> int:
        topic, queue_id = self._queue(request.message_queue, readable=False)
        store = self.broker.store
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            return max(0, store.get_min_offset_in_queue(topic, queue_id))
        if policy == pb.END:
            return store.get_max_offset_in_queue(topic, queue_id)
        if policy == pb.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise GrpcError(Code.BAD_REQUEST, "a TIMESTAMP query needs a timestamp")
            return store.get_offset_in_queue_by_time(
                topic, queue_id, request.timestamp.ToMilliseconds()
            )
        raise GrpcError(Code.BAD_REQUEST, f"unknown query offset policy {policy}")
