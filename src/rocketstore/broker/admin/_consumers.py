"""Administration requests the broker answers by asking a consumer client over the client's own
connection, and the offsets copy between groups (RocketMQ 4.9.8's AdminBrokerProcessor and
Broker2Client).

=====  =====================================  ================================================
code   request                                ext fields → answer
=====  =====================================  ================================================
307    GET_CONSUMER_RUNNING_INFO              consumerGroup, clientId [, jstackEnable] → the
                                              request (same fields and body) sent to that
                                              client and its answer relayed as it is
                                              (ConsumerRunningInfo). Not connected here:
                                              SYSTEM_ERROR "The Consumer <G> <C> not online";
                                              a client older than V3_1_8_SNAPSHOT:
                                              SYSTEM_ERROR "... too low to finish ..."; no
                                              answer in 10 s: CONSUME_MSG_TIMEOUT; a closed
                                              connection: SYSTEM_ERROR "invoke consumer ..."
223    INVOKE_BROKER_TO_GET_CONSUMER_STATUS   topic, group [, clientAddr (a client id)] →
                                              GET_CONSUMER_STATUS_FROM_CLIENT (221) sent to
                                              each client of the group (or the one named),
                                              the answers gathered: GetConsumerStatusBody
                                              with consumerTable {clientId: {queue: offset}}
                                              (a client that fails or does not answer in 5 s
                                              is left out). No client online: SYSTEM_ERROR
                                              "No Any Consumer online in the consumer group:
                                              [G]"; a client older than V3_0_7_SNAPSHOT:
                                              SYSTEM_ERROR "the client does not support this
                                              feature. version=..."
314    CLONE_GROUP_OFFSET                     srcGroup, destGroup, topic [, offline] → the
                                              source group's offsets on that topic (on each
                                              topic it has offsets on when topic is empty)
                                              copied to the destination group. Topics the
                                              broker has no config for are skipped; unless
                                              offline, so are topics an online source group
                                              does not subscribe. Always SUCCESS.
=====  =====================================  ================================================

With an empty topic RocketMQ 4.9.8 looks the source group's topics up and then copies the
offsets of the empty topic name (nothing); here each of those topics is copied.

Loop thread (the calls to clients are awaited on it).
"""

from __future__ import annotations

import asyncio
import logging

from ...acl._table import request_names
from ...protocol._admin_bodies import BodyFormatError, MessageQueue
from ...protocol._consumer_bodies import ConsumerStatusBody
from ...remoting import Connection, RemotingCommand, RemotingError, ResponseCode, ext_bool, ext_str
from ._admin import (
    AdminContext,
    Handler,
    RequestError,
    _guarded,
    _ok,
    _required_name,
    _required_str,
)

log = logging.getLogger(__name__)
RC = ResponseCode

GET_CONSUMER_STATUS_FROM_CLIENT = 221
INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
GET_CONSUMER_RUNNING_INFO = 307
CLONE_GROUP_OFFSET = 314
V3_0_7_SNAPSHOT = 28  # MQVersion ordinals
V3_1_8_SNAPSHOT = 77
# how long the broker waits for a client's answer (RocketMQ: 10 s for a relayed call, 5 s
# for each client's status)
CALL_CLIENT_TIMEOUT_S = 10.0
CONSUMER_STATUS_TIMEOUT_S = 5.0


def version_desc(version: int) -> str:
    """MQVersion.getVersionDesc for the ordinals this module names (else the number)."""
    return {V3_0_7_SNAPSHOT: "V3_0_7_SNAPSHOT", V3_1_8_SNAPSHOT: "V3_1_8_SNAPSHOT"}.get(
        version, f"version {version}"
    )


async def call_client(
    conn: Connection, request: RemotingCommand, timeout: float
) -> RemotingCommand:
    """``request`` sent to a client over its connection and its answer; TimeoutError when it
    gives none within ``timeout``, RemotingError when the connection is closed."""
    return await asyncio.wait_for(conn.invoke(request, timeout + 1.0), timeout)


class ConsumerAdminProcessor:
    """Serves 223, 307 and 314 for one BrokerController (loop thread)."""

    def __init__(self, broker: AdminContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        table: dict[int, Handler] = {
            GET_CONSUMER_RUNNING_INFO: self.consumer_running_info,
            INVOKE_BROKER_TO_GET_CONSUMER_STATUS: self.consumer_status,
            CLONE_GROUP_OFFSET: self.clone_group_offset,
        }
        return {code: _guarded(fn) for code, fn in table.items()}

    async def consumer_running_info(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        ext = cmd.ext_fields
        group = _required_name(request_names(cmd).group, "consumerGroup")
        client_id = _required_str(ext, "clientId")
        info = self.broker.consumers.group_info(group)
        client = None
        if info is not None:
            client = next((c for c in info.clients if c.client_id == client_id), None)
        if client is None or not isinstance(client.channel, Connection):
            raise RequestError(f"The Consumer <{group}> <{client_id}> not online")
        if client.version < V3_1_8_SNAPSHOT:
            raise RequestError(
                f"The Consumer <{client_id}> Version <{version_desc(client.version)}> too low "
                "to finish, please upgrade it to V3_1_8_SNAPSHOT"
            )
        request = RemotingCommand.request(GET_CONSUMER_RUNNING_INFO, dict(ext), bytes(cmd.body))
        try:
            return await call_client(client.channel, request, CALL_CLIENT_TIMEOUT_S)
        except TimeoutError:
            return RemotingCommand.response(
                RC.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> Timeout: no answer from "
                f"{client.channel.peer} in {CALL_CLIENT_TIMEOUT_S:g} s",
            )
        except RemotingError as exc:
            raise RequestError(
                f"invoke consumer <{group}> <{client_id}> Exception: {exc}"
            ) from None

    async def consumer_status(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        names = request_names(cmd)  # as the ACL read them
        topic = _required_name(names.topic, "topic")
        group = _required_name(names.group, "group")
        only = (ext_str(ext, "clientAddr") or "").strip()
        log.info(
            "[get-consumer-status] get consumer status by %s. topic=%s, group=%s",
            conn.peer,
            topic,
            group,
        )
        info = self.broker.consumers.group_info(group)
        if info is None or not info.clients:
            raise RequestError(f"No Any Consumer online in the consumer group: [{group}]")
        for client in info.clients:
            if client.version < V3_0_7_SNAPSHOT:
                raise RequestError(
                    "the client does not support this feature. "
                    f"version={version_desc(client.version)}"
                )
        # one client when named (the first of that id), else every one
        targets = [c for c in info.clients if not only or c.client_id == only]
        if only:
            targets = targets[:1]
        header = {"topic": topic, "group": group}
        answers = await asyncio.gather(
            *(self._client_status(c.channel, c.client_id, header) for c in targets)
        )
        table = {cid: offsets for cid, offsets in answers if offsets is not None}
        return _ok(ConsumerStatusBody(consumers=table).encode())

    async def _client_status(
        self, channel: object, client_id: str, header: dict[str, str]
    ) -> tuple[str, dict[MessageQueue, int] | None]:
        if not isinstance(channel, Connection):
            return client_id, None
        request = RemotingCommand.request(GET_CONSUMER_STATUS_FROM_CLIENT, dict(header))
        try:
            r = await call_client(channel, request, CONSUMER_STATUS_TIMEOUT_S)
        except (TimeoutError, RemotingError) as exc:
            log.error(
                "[get-consumer-status] get consumer status exception. topic=%s, group=%s, error=%s",
                header["topic"],
                header["group"],
                exc or "timeout",
            )
            return client_id, None
        if r.code != RC.SUCCESS or not r.body:
            return client_id, None
        try:
            return client_id, ConsumerStatusBody.decode(r.body).message_queues
        except BodyFormatError as exc:
            log.warning("[get-consumer-status] %s answered a bad body: %s", client_id, exc)
            return client_id, None

    def clone_group_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        names = request_names(cmd)  # as the ACL read them
        src = _required_name(names.source_group, "srcGroup")
        dest = _required_name(names.group, "destGroup")
        topic = names.topic or ""
        offline = ext_bool(ext, "offline")
        broker = self.broker
        topics = {topic} if topic else broker.offsets.topics_by_group(src)
        online = broker.consumers.group_info(src)
        cloned: list[str] = []
        for name in sorted(topics):
            if broker.topics.select(name) is None:
                log.warning("[cloneGroupOffset], topic config not exist, %s", name)
                continue
            if not offline and online is not None and online.subscriptions:
                if name not in online.subscriptions:
                    log.warning(
                        "[cloneGroupOffset], the consumer group[%s], topic[%s] not exist",
                        src,
                        name,
                    )
                    continue
            if broker.offsets.clone_offsets(src, dest, name):
                cloned.append(name)
        log.info(
            "clone offsets of %s to %s, called by %s: %s",
            src,
            dest,
            conn.peer,
            ", ".join(cloned) or "nothing",
        )
        return _ok()
