"""Consumer offsets and queue offsets: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32).

A request without its topic, queue id or group, or with a number that does not parse, is
answered with SYSTEM_ERROR and the reason (RequestError).

Loop thread only (the store calls made here are short and non-blocking).
"""

from __future__ import annotations

from typing import Any, Protocol

from ...acl._table import request_names
from ...remoting import (
    Connection,
    RemotingCommand,
    RequestError,
    ResponseCode,
    ext_int,
    ext_int32,
)
from ...tier._manifest import TierError
from .._services import HasOffsets, HasStore, HasTier

RC = ResponseCode


class OffsetContext(HasOffsets, HasStore, HasTier, Protocol):
    """What the consumer offset codes use of the broker."""


def _ok(**ext: Any) -> RemotingCommand:
    return RemotingCommand.response(RC.SUCCESS, None, {k: str(v) for k, v in ext.items()})


def _group(cmd: RemotingCommand) -> str:
    group = request_names(cmd).group
    if not group:
        raise RequestError("the custom field <consumerGroup> is null")
    return group


class OffsetProcessor:
    def __init__(self, broker: OffsetContext) -> None:
        self.broker = broker
        self.store = broker.store

    def handlers(self) -> dict[int, Any]:
        return {
            14: self.query_consumer_offset,
            15: self.update_consumer_offset,
            29: self.search_offset_by_timestamp,
            30: self.get_max_offset,
            31: self.get_min_offset,
            32: self.get_earliest_msg_store_time,
        }

    @staticmethod
    def _queue(cmd: RemotingCommand) -> tuple[str, int]:
        """The request's topic (as the ACL read it) and queue id."""
        topic = request_names(cmd).topic or ""
        queue_id = ext_int32(cmd.ext_fields, "queueId")
        if not topic or queue_id is None:
            raise RequestError("topic and queueId are required")
        if queue_id < 0:
            raise RequestError(f"queueId[{queue_id}] is illegal")
        return topic, queue_id

    def query_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        group = _group(cmd)
        offset = self.broker.offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return _ok(offset=offset)
        # a group that never committed: start at 0 when the queue still holds its beginning
        # in memory (RocketMQ's rule), else let the client decide (consumeFromWhere)
        min_offset = self.store.get_min_offset_in_queue(topic, queue_id)
        if min_offset <= 0 and not self._on_disk(topic, queue_id, 0):
            return _ok(offset=0)
        return RemotingCommand.response(
            RC.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )

    def _on_disk(self, topic: str, queue_id: int, offset: int) -> bool:
        """Is the message at ``offset`` beyond the in-memory share of the commit log?"""
        phys = self.store.get_commit_log_offset_in_queue(topic, queue_id, offset)
        if phys < 0:
            return False
        return self.store.max_phy_offset - phys > self.store.reader.memory

    def update_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        group = _group(cmd)
        offset = ext_int(cmd.ext_fields, "commitOffset")
        if offset is None:
            raise RequestError("commitOffset is required")
        self.broker.offsets.commit_offset(conn.peer, group, topic, queue_id, offset)
        return RemotingCommand.response(RC.SUCCESS)

    def search_offset_by_timestamp(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        timestamp = ext_int(cmd.ext_fields, "timestamp")
        if timestamp is None:
            raise RequestError("timestamp is required")
        return _ok(offset=self.store.get_offset_in_queue_by_time(topic, queue_id, timestamp))

    def get_max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        return _ok(offset=self.store.get_max_offset_in_queue(topic, queue_id))

    def get_min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The queue's first offset a pull can read: with a tiered store that holds the
        offsets right below the consume queue's minimum, the tier's first (as RocketMQ 5's
        tiered store answers), since pulls below the minimum are served from it."""
        topic, queue_id = self._queue(cmd)
        low = self.store.get_min_offset_in_queue(topic, queue_id)
        tier = self.broker.tier_reader() if low > 0 else None
        if tier is not None:
            try:
                held = tier.queue_range(topic, queue_id)
            except TierError:
                held = None  # a manifest that cannot be read: the commit log's answer
            if held is not None and held[0] < low <= held[1]:
                low = held[0]
        return _ok(offset=low)

    def get_earliest_msg_store_time(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        topic, queue_id = self._queue(cmd)
        return _ok(timestamp=self.store.get_earliest_message_time(topic, queue_id))
