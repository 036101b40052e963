"""Administration requests about a broker's clients and counters (RocketMQ 4.9.8's
AdminBrokerProcessor): who is connected, every group's progress, the rolling stats.

=====  ============================  =========================================================
code   request                       ext fields → answer
=====  ============================  =========================================================
203    GET_CONSUMER_CONNECTION_LIST  consumerGroup → ConsumerConnection, or
                                     CONSUMER_NOT_ONLINE "the consumer group[G] not online"
204    GET_PRODUCER_CONNECTION_LIST  producerGroup → ProducerConnection, or SYSTEM_ERROR
                                     "the producer group[G] not exist"
315    VIEW_BROKER_STATS_DATA        statsName, statsKey → BrokerStatsData (the last minute,
                                     hour and day), or SYSTEM_ERROR "The stats <N> <K> not
                                     exist"
317    GET_BROKER_CONSUME_STATS      [isOrder] → ConsumeStatsList: every subscription group's
                                     progress on each topic it has offsets on
222    RESET_CONSUMER_OFFSET         topic, group, timestamp (-1: the end), isForce → the
                                     offset of each write queue at that time (only moved
                                     back unless isForce) sent to every client of the group
                                     as RESET_CONSUMER_CLIENT_OFFSET (220, one way; the
                                     clients move and commit); the answer: ResetOffsetBody.
                                     A queue without a committed offset takes the target;
                                     a group the broker does not know (no subscription
                                     group, no client, no offset on the topic): SYSTEM_ERROR
                                     "THe consumer group <G> not exist" (RocketMQ 4.9.8
                                     answers it for any queue without an offset); no client
                                     online: CONSUMER_NOT_ONLINE (the admin client then sets
                                     the offsets itself); no such topic: SYSTEM_ERROR
=====  ============================  =========================================================

Stats names: TOPIC_PUT_NUMS / TOPIC_PUT_SIZE by topic, GROUP_GET_NUMS / GROUP_GET_SIZE by
``topic@group``, BROKER_PUT_NUMS / BROKER_GET_NUMS by the broker's cluster name. The get
counters are counted where messages are pulled; the put counters catch up with the store's
per-topic totals when read.

Loop thread; the work that reads many queues runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from ...acl._table import request_names
from ...protocol._admin_bodies import (
    BrokerStatsData,
    BrokerStatsItem,
    ClientConnection,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    MessageQueue,
    encode_producer_connection,
    encode_reset_offset,
)
from ...remoting import Connection, RemotingCommand, ResponseCode, ext_bool, ext_str
from .._services import HasProducers
from ..state._consumer_manager import ClientChannelInfo, ConsumerGroupInfo
from ..state._stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
)
from ._admin import (
    AdminContext,
    AdminProcessor,
    Handler,
    RequestError,
    _guarded,
    _ok,
    _required_int,
    _required_name,
    _required_str,
)

log = logging.getLogger(__name__)
RC = ResponseCode
GET_CONSUMER_CONNECTION_LIST = 203
GET_PRODUCER_CONNECTION_LIST = 204
VIEW_BROKER_STATS_DATA = 315
GET_BROKER_CONSUME_STATS = 317
RESET_CONSUMER_OFFSET = 222
RESET_CONSUMER_CLIENT_OFFSET = 220
V3_0_7_SNAPSHOT = 28  # MQVersion ordinal: clients from here on take offset resets
STATS_NAMES = (
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    BROKER_PUT_NUMS,
    BROKER_GET_NUMS,
)


class ClientAdminContext(AdminContext, HasProducers, Protocol):
    """What the client and counter administration uses of the broker."""


def _connection(info: ClientChannelInfo[Connection]) -> ClientConnection:
    peer = getattr(info.channel, "peer", "") or ""
    return ClientConnection(info.client_id, peer, info.language, info.version)


def _known_group(
    broker: ClientAdminContext, group: str, clients: ConsumerGroupInfo[Connection] | None
) -> bool:
    """Whether the broker knows ``group`` apart from its offsets: a subscription group
    config, or clients online."""
    return broker.groups.get(group) is not None or bool(clients is not None and clients.clients)


class ClientAdminProcessor:
    """Serves 203, 204, 222, 315 and 317 for one BrokerController (loop thread)."""

    def __init__(self, broker: ClientAdminContext) -> None:
        self.broker = broker
        self.admin = AdminProcessor(broker)

    def handlers(self) -> dict[int, Handler]:
        table: dict[int, Handler] = {
            GET_CONSUMER_CONNECTION_LIST: self.consumer_connection,
            GET_PRODUCER_CONNECTION_LIST: self.producer_connection,
            VIEW_BROKER_STATS_DATA: self.view_stats,
            GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
            RESET_CONSUMER_OFFSET: self.reset_offset,
        }
        return {code: _guarded(fn) for code, fn in table.items()}

    def reset_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        names = request_names(cmd)  # as the ACL read them
        topic = _required_name(names.topic, "topic")
        group = _required_name(names.group, "group")
        timestamp = _required_int(ext, "timestamp")
        force = ext_bool(ext, "isForce")
        broker = self.broker
        log.info(
            "[reset-offset] started by %s: topic=%s group=%s timestamp=%d force=%s",
            conn.peer,
            topic,
            group,
            timestamp,
            force,
        )
        config = broker.topics.select(topic)
        if config is None:
            raise RequestError(
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
            )
        store = broker.store
        queue_ids = range(config.write_queue_nums)
        offsets = {qid: broker.offsets.query_offset(group, topic, qid) for qid in queue_ids}
        clients = broker.consumers.group_info(group)
        if all(o == -1 for o in offsets.values()) and not _known_group(broker, group, clients):
            raise RequestError(f"THe consumer group <{group}> not exist")
        table: dict[MessageQueue, int] = {}
        for qid in queue_ids:
            if timestamp == -1:
                target = store.get_max_offset_in_queue(topic, qid)
            else:
                target = store.get_offset_in_queue_by_time(topic, qid, timestamp)
            target = max(0, target)
            current = offsets[qid]  # -1: nothing committed yet, the target is taken
            table[MessageQueue(topic, broker.config.broker_name, qid)] = (
                target if force or current == -1 or target < current else current
            )
        if clients is None or not clients.clients:
            return RemotingCommand.response(
                RC.CONSUMER_NOT_ONLINE,
                "Consumer not online, so can not reset offset, "
                f"Group: {group} Topic: {topic} Timestamp: {timestamp}",
            )
        header = {"topic": topic, "group": group, "timestamp": str(timestamp)}
        for client in clients.clients:
            if client.version < V3_0_7_SNAPSHOT:
                raise RequestError(
                    f"the client does not support this feature. version={client.version}"
                )
        for client in clients.clients:
            channel = client.channel
            if not isinstance(channel, Connection) or channel.closed:
                continue
            request = RemotingCommand.request(
                RESET_CONSUMER_CLIENT_OFFSET,
                dict(header),
                encode_reset_offset(table, for_cpp=client.language == "CPP"),
                oneway=True,
            )
            if channel.send(request):
                log.info(
                    "[reset-offset] sent to %s: topic=%s group=%s", client.client_id, topic, group
                )
        return _ok(encode_reset_offset(table))

    def consumer_connection(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = _required_name(request_names(cmd).group, "consumerGroup")
        info = self.broker.consumers.group_info(group)
        if info is None:
            return RemotingCommand.response(
                RC.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        body = ConsumerConnection(
            tuple(_connection(c) for c in info.clients),
            info.consume_type.name,
            info.message_model.name,
            info.consume_from_where.name,
            {topic: sub.to_json() for topic, sub in info.subscriptions.items()},
        )
        return _ok(body.encode())

    def producer_connection(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = _required_str(cmd.ext_fields, "producerGroup")
        clients = self.broker.producers.producer_table().get(group)
        if clients is None:
            raise RequestError(f"the producer group[{group}] not exist", absent=True)
        return _ok(encode_producer_connection([_connection(c) for c in clients]))

    async def broker_consume_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        only_order = ext_bool(cmd.ext_fields, "isOrder")
        groups = sorted(self.broker.groups.all())
        table = await asyncio.to_thread(self._all_consume_stats, groups, only_order)
        result = ConsumeStatsList(self.broker.address)
        for group, per_topic in table:
            for topic, stats in per_topic:
                stats.consume_tps = self.admin.consume_tps(group, {topic})
                result.total_diff += stats.total_lag()
            result.groups.append((group, [stats for _, stats in per_topic]))
        return _ok(result.encode())

    def _all_consume_stats(
        self, groups: list[str], only_order: bool
    ) -> list[tuple[str, list[tuple[str, ConsumeStats]]]]:
        out: list[tuple[str, list[tuple[str, ConsumeStats]]]] = []
        topics = self.broker.topics
        for group in groups:
            per_topic: list[tuple[str, ConsumeStats]] = []
            for topic in sorted(self.broker.offsets.topics_by_group(group)):
                config = topics.select(topic)
                if config is None or (only_order and not config.order):
                    continue
                stats = self.admin.consume_stats(group, topic)
                if stats.offset_table:
                    per_topic.append((topic, stats))
            out.append((group, per_topic))
        return out

    async def view_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        name = _required_str(ext, "statsName")
        key = ext_str(ext, "statsKey") or ""
        rolling = self.broker.stats.rolling
        if name in (BROKER_PUT_NUMS, BROKER_GET_NUMS) and key == self.broker.config.cluster_name:
            lookup = ""
        else:
            lookup = key
        if name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, BROKER_PUT_NUMS):
            stats = await asyncio.to_thread(self.broker.store.statistics)
            for topic, put in stats.topics.items():
                rolling.set_total(TOPIC_PUT_NUMS, topic, put.messages, put.messages)
                rolling.set_total(TOPIC_PUT_SIZE, topic, put.bytes, put.messages)
            total = stats.put_message_times_total
            rolling.set_total(BROKER_PUT_NUMS, "", total, total)
        item = rolling.get(name, lookup) if name in STATS_NAMES else None
        if item is None:
            raise RequestError(f"The stats <{name}> <{key}> not exist", absent=True)
        now = rolling.now_ms()
        item.maybe_sample(now)
        windows = [BrokerStatsItem(*item.window(now, i)) for i in range(3)]
        return _ok(BrokerStatsData(*windows).encode())
