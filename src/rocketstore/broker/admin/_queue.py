"""Administration requests about the store's consume queues (RocketMQ 4.9.8's
AdminBrokerProcessor).

=====  ============================  =========================================================
code   request                       ext fields → answer
=====  ============================  =========================================================
321    QUERY_CONSUME_QUEUE           topic, queueId, index, count [, consumerGroup] →
                                     QueryConsumeQueueResponseBody: the queue's min and max
                                     index and ``count`` units from ``index`` (commit-log
                                     offset, size, tags code); with a group its subscription,
                                     or filterData "G@T is not online!". A queue that does
                                     not exist: SYSTEM_ERROR "Q@T is not exist!"; an index
                                     outside it: SUCCESS, no body, remark "Index I of Q@T is
                                     not exist!"
306    CLEAN_EXPIRED_CONSUMEQUEUE    → SUCCESS: consume queues whose last message lies before
                                     the commit log's first byte are destroyed
316    CLEAN_UNUSED_TOPIC            → SUCCESS: consume queues of topics the broker has no
                                     config for are destroyed (not the schedule topic, the
                                     transaction op topic or LMQ topics)
=====  ============================  =========================================================

The cleaning runs in a worker thread, with the store's put lock held while a queue leaves the
commit log's topic-queue table (as the store's own ``delete_topic``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from ...acl._table import request_names
from ...protocol._admin_bodies import ConsumeQueueUnit, QueryConsumeQueueBody
from ...remoting import Connection, RemotingCommand, ResponseCode
from ...store.log._record import SCHEDULE_TOPIC
from ...store.queue._consume_queue import UNIT, UNIT_SIZE
from .._services import HasConsumers, HasStore, HasTopics
from ..state._topic_config import TRANS_OP_HALF_TOPIC
from ._admin import (
    Handler,
    RequestError,
    _guarded,
    _ok,
    _required_int,
    _required_name,
)

log = logging.getLogger(__name__)

CLEAN_EXPIRED_CONSUMEQUEUE = 306
CLEAN_UNUSED_TOPIC = 316
QUERY_CONSUME_QUEUE = 321
LMQ_PREFIX = "%LMQ%"
MAX_QUERY_COUNT = 10_000  # units one answer may carry


class QueueAdminContext(HasConsumers, HasStore, HasTopics, Protocol):
    """What the consume-queue administration uses of the broker."""


class QueueAdminProcessor:
    def __init__(self, broker: QueueAdminContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {
            QUERY_CONSUME_QUEUE: _guarded(self.query_consume_queue),
            CLEAN_EXPIRED_CONSUMEQUEUE: _guarded(self.clean_expired_consume_queue),
            CLEAN_UNUSED_TOPIC: _guarded(self.clean_unused_topic),
        }

    # ---- QUERY_CONSUME_QUEUE ----------------------------------------------------------------

    def query_consume_queue(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        names = request_names(cmd)  # as the ACL read them
        topic = _required_name(names.topic, "topic")
        queue_id = _required_int(ext, "queueId")
        index = _required_int(ext, "index")
        count = _required_int(ext, "count")
        group = names.group
        if not 0 <= count <= MAX_QUERY_COUNT:
            raise RequestError(f"count {count} is not within [0, {MAX_QUERY_COUNT}]")
        cq = self.broker.store.consume_queues.find(topic, queue_id)
        if cq is None:
            raise RequestError(f"{queue_id}@{topic} is not exist!")
        subscription = None
        filter_data = None
        if group is not None:
            sub = self.broker.consumers.find_subscription(group, topic)
            if sub is None:
                filter_data = f"{group}@{topic} is not online!"
            else:
                subscription = sub.to_json()
                filter_data = "null"  # TAG subscriptions have no ConsumerFilterData
        units: list[ConsumeQueueUnit] = []
        with cq.units_from(index) as found:
            if found is None or index >= cq.max_offset:
                return RemotingCommand.response(
                    ResponseCode.SUCCESS, f"Index {index} of {queue_id}@{topic} is not exist!"
                )
            view, n = found
            for i in range(min(n, count)):
                phys, size, tags = UNIT.unpack_from(view, i * UNIT_SIZE)
                units.append(ConsumeQueueUnit(phys, size, tags))
        body = QueryConsumeQueueBody(
            cq.min_offset, cq.max_offset, tuple(units), subscription, filter_data
        )
        return _ok(body.encode())

    # ---- cleaning ---------------------------------------------------------------------------

    async def clean_expired_consume_queue(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        log.warning("clean expired consume queues, called by %s", conn.peer)
        destroyed = await asyncio.to_thread(self.destroy_expired_queues)
        log.warning("clean expired consume queues: %d destroyed", destroyed)
        return _ok()

    async def clean_unused_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        log.warning("clean unused topics, called by %s", conn.peer)
        keep = set(self.broker.topics.all())
        destroyed = await asyncio.to_thread(self.destroy_unused_topics, keep)
        log.warning("clean unused topics: %d consume queues destroyed", destroyed)
        return _ok()

    def destroy_expired_queues(self) -> int:
        """Destroy every consume queue (but the schedule topic's) whose last message ends
        before the commit log's minimum offset (worker thread); how many were."""
        store = self.broker.store
        min_phys = store.min_phy_offset
        destroyed = 0
        for topic, by_id in list(store.consume_queues.queues.items()):
            if topic == SCHEDULE_TOPIC:
                continue
            for queue_id, cq in list(by_id.items()):
                last = cq.last_unit()
                if last is None or last[0] + last[1] >= min_phys:
                    continue
                with store.commit_log.put_lock:
                    store.commit_log.topic_queue_table.pop((topic, queue_id), None)
                    by_id.pop(queue_id, None)
                    if not by_id:
                        store.consume_queues.queues.pop(topic, None)
                cq.destroy()
                destroyed += 1
                log.info(
                    "consume queue %s/%d destroyed: its last message ends before %d",
                    topic,
                    queue_id,
                    min_phys,
                )
        return destroyed

    def destroy_unused_topics(self, keep: set[str]) -> int:
        """Destroy the consume queues of topics not in ``keep`` (worker thread)."""
        store = self.broker.store
        destroyed = 0
        for topic in list(store.consume_queues.queues):
            if (
                topic in keep
                or topic in (SCHEDULE_TOPIC, TRANS_OP_HALF_TOPIC)
                or topic.startswith(LMQ_PREFIX)
            ):
                continue
            destroyed += store.delete_topic(topic)
            log.info("unused topic %s: consume queues destroyed", topic)
        return destroyed
