"""Client management: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
and the broker's NOTIFY_CONSUMER_IDS_CHANGED (40) to a group's clients when its membership
changes, so that they rebalance.

A client heartbeats every 30 s with the same body as long as its groups and subscriptions stay
the same; a connection keeps its last body and what it decoded to, and a heartbeat that repeats
it (while the connection is still in each of its groups, and their groups and retry topics
are still there) only records the time: no decoding, no registration. A group's consumer list
is encoded once per membership of the group.

Loop thread only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from ...acl._remoting import PRODUCER_GRANTS, check_then
from ...acl._table import request_names
from ...protocol._errors import InvalidHeartbeatError
from ...protocol._heartbeat import HeartbeatData, parse_heartbeat
from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from ...remoting._command import str_value
from .._services import HasConsumers, HasGroups, HasProducers, HasTopics, TopicCreation
from ..state._subscription_group import is_system_group
from ..state._topic_config import PERM_READ, PERM_WRITE, retry_topic

log = logging.getLogger(__name__)
RC = ResponseCode
LAST_HEARTBEAT = "last_heartbeat"  # a connection's attribute: (body, HeartbeatData)


class ClientContext(HasConsumers, HasGroups, HasProducers, HasTopics, TopicCreation, Protocol):
    """What heartbeats and client membership use of the broker."""


class ClientProcessor:
    def __init__(self, broker: ClientContext) -> None:
        self.broker = broker
        # group → (its consumer ids as the manager last gave them, the answer's body)
        self._consumer_lists: dict[str, tuple[tuple[str, ...], bytes]] = {}

    def handlers(self) -> dict[int, Any]:
        return {34: self.heartbeat, 35: self.unregister_client, 38: self.consumer_list}

    def heartbeat(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """Register the client's consumers and producers. A consumer group seen for the first
        time gets its retry topic, and the answer waits for the name servers to know it (as
        RocketMQ's broker registers before it answers), so the consumer finds the route at
        once."""
        body = bytes(cmd.body)
        last = conn.attributes.get(LAST_HEARTBEAT)
        if last is not None and last[0] == body:
            data: HeartbeatData = last[1]
            refused = check_then(cmd, data)  # its groups and topics, as decoded before
            if refused is not None:
                return refused
            if self._touch(data, conn):
                return RemotingCommand.response(RC.SUCCESS)
        else:
            try:
                data = parse_heartbeat(body)
            except InvalidHeartbeatError as exc:
                return RemotingCommand.response(RC.SYSTEM_ERROR, str(exc))
            refused = check_then(cmd, data)  # its groups and topics, as decoded here
            if refused is not None:
                return refused
        broker = self.broker
        conn.attributes["client_id"] = data.client_id
        new_topic = False
        for consumer in data.consumers:
            group = consumer.group_name
            group_config = broker.groups.find_or_create(group)
            if group_config is not None and group_config.retry_queue_nums > 0:
                topic = retry_topic(group)
                new_topic = new_topic or broker.topics.select(topic) is None
                broker.create_topic_for_send_back(
                    topic, group_config.retry_queue_nums, PERM_READ | PERM_WRITE, 0
                )
            changed = broker.consumers.register_consumer(
                group,
                conn,
                data.client_id,
                consumer.consume_type,
                consumer.message_model,
                consumer.consume_from_where,
                list(consumer.subscriptions),
                language=cmd.language,
                version=cmd.version,
            )
            if changed and (
                group_config is None or group_config.notify_consumer_ids_changed_enable
            ):
                self.notify_ids_changed(group)
        for group in data.producer_groups:
            if cmd.grant is not None:
                conn.attributes.setdefault(PRODUCER_GRANTS, {})[group] = cmd.grant
            broker.producers.register_producer(
                group, conn, data.client_id, language=cmd.language, version=cmd.version
            )
        conn.attributes[LAST_HEARTBEAT] = (body, data)
        answer = RemotingCommand.response(RC.SUCCESS)
        return self._registered_then(answer) if new_topic else answer

    def _touch(self, data: HeartbeatData, conn: Connection) -> bool:
        """A heartbeat that repeats the connection's last: record its time. False when
        something it registered is gone (the channel expired from a group, a group or its
        retry topic was deleted): then it is registered in full."""
        broker = self.broker
        for consumer in data.consumers:
            group = consumer.group_name
            config = broker.groups.get(group)
            if config is None:
                if broker.groups.auto_create_subscription_group or is_system_group(group):
                    return False  # the full path creates it
            elif config.retry_queue_nums > 0 and broker.topics.select(retry_topic(group)) is None:
                return False
            if not broker.consumers.touch_consumer(group, conn):
                return False
        return all(broker.producers.touch_producer(g, conn) for g in data.producer_groups)

    async def _registered_then(self, answer: RemotingCommand) -> RemotingCommand:
        await self.broker.register_topics_now()
        return answer

    def unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        producer_group = str_value(cmd.ext_fields.get("producerGroup"))
        consumer_group = request_names(cmd).group
        if producer_group:
            self.broker.producers.unregister_producer(producer_group, conn)
        if consumer_group:
            if self.broker.consumers.unregister_consumer(consumer_group, conn):
                self.notify_ids_changed(consumer_group)
        return RemotingCommand.response(RC.SUCCESS)

    def consumer_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = request_names(cmd).group or ""
        ids = self.broker.consumers.consumer_ids(group)
        if not ids:
            self._consumer_lists.pop(group, None)
            return RemotingCommand.response(RC.SYSTEM_ERROR, f"no consumer for this group, {group}")
        cached = self._consumer_lists.get(group)
        if cached is None or cached[0] is not ids:
            body = json.dumps({"consumerIdList": list(ids)}, separators=(",", ":")).encode()
            cached = self._consumer_lists[group] = (ids, body)
        return RemotingCommand.response(RC.SUCCESS, None, {}, cached[1])

    def notify_ids_changed(self, group: str) -> None:
        """Tell every client of ``group`` to rebalance (a one-way request on its connection)."""
        for channel in self.broker.consumers.channels(group):
            if isinstance(channel, Connection) and not channel.closed:
                channel.send(
                    RemotingCommand.request(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                        {"consumerGroup": group},
                        oneway=True,
                    )
                )

    def on_connection_closed(self, conn: Connection) -> None:
        for group in self.broker.consumers.on_channel_closed(conn):
            if not self.broker.consumers.consumer_ids(group):
                self._consumer_lists.pop(group, None)  # the group is gone
            self.notify_ids_changed(group)
        self.broker.producers.on_channel_closed(conn)
