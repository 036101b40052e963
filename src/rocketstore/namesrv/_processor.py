"""The name server's request handlers (RocketMQ 4.9.8's DefaultRequestProcessor).

=====  ==================================  ===================================================
code   request                             ext fields → answer
=====  ==================================  ===================================================
103    REGISTER_BROKER                     brokerName, brokerAddr, clusterName, haServerAddr,
                                           brokerId, compressed, bodyCrc32; body
                                           RegisterBrokerBody → ext haServerAddr, masterAddr
104    UNREGISTER_BROKER                   brokerName, brokerAddr, clusterName, brokerId
105    GET_ROUTEINFO_BY_TOPIC              topic [, acceptStandardJsonOnly] → TopicRouteData,
                                           or 17 TOPIC_NOT_EXIST
106    GET_BROKER_CLUSTER_INFO             → ClusterInfo
206    GET_ALL_TOPIC_LIST_FROM_NAMESERVER  → TopicList
216    DELETE_TOPIC_IN_NAMESRV             topic [, clusterName]
318    UPDATE_NAMESRV_CONFIG               body: properties text → SUCCESS (applied in
                                           memory; not written to a file); a key of the black
                                           list: NO_PERMISSION; a typed key with a bad value or
                                           listenPort: SYSTEM_ERROR, nothing applied
319    GET_NAMESRV_CONFIG                  → ``key=value`` lines (NamesrvConfig's and the
                                           server's keys, plus keys set by 318)
322    QUERY_DATA_VERSION                  brokerName, brokerAddr, clusterName, brokerId; body
                                           DataVersion → ext changed; body the name server's
                                           DataVersion of that broker
100    PUT_KV_CONFIG                       namespace, key, value → SUCCESS (persisted)
101    GET_KV_CONFIG                       namespace, key → ext value, or QUERY_NOT_FOUND "No
                                           config item, Namespace: N Key: K"
102    DELETE_KV_CONFIG                    namespace, key → SUCCESS (also when absent)
219    GET_KVLIST_BY_NAMESPACE             namespace → KVTable, or QUERY_NOT_FOUND "No config
                                           item, Namespace: N"
205    WIPE_WRITE_PERM_OF_BROKER           brokerName → ext wipeTopicCount: the write bit of
                                           the group's queue data cleared on its topics
327    ADD_WRITE_PERM_OF_BROKER            brokerName → ext addTopicCount: its queue data read
                                           and write again
=====  ==================================  ===================================================

A route goes out in fastjson's own form (bare integer keys) to clients older than 4.9.4, such as
the C++ client (version 63), and in the standard form to 4.9.4 and later (version >= 401) or
when the request asks for it. A required header field that is missing, a bad number or a body
that does not decode (or inflates past ``max_register_body``) is answered with SYSTEM_ERROR and
the reason (the handlers raise ValueErrors; the connection answers them and logs one line, at
most a few a minute). REGISTER_BROKER's answer carries the ORDER_TOPIC_CONFIG namespace of the
KV config (see ``_kv``) as a KVTable, when it exists; with ``orderMessageEnable`` on, a route
carries the topic's order configuration from it (``orderTopicConf``).

Handlers run on the name server's event loop thread and never block, but for the KV config's
changes: each rewrites the small kvConfig.json (two fsyncs), as RocketMQ writes it at once.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from ..protocol._namesrv_bodies import (
    MAX_REGISTER_BODY,
    DataVersion,
    RegisterBrokerBody,
    TopicConfigWrapper,
    body_crc32,
    encode_topic_list,
)
from ..protocol._properties import (
    BLACK_LIST_REMARK,
    NAMESRV_BLACK_LIST,
    PropertiesError,
    format_properties,
    java_bool,
    java_int,
    parse_properties,
)
from ..remoting import (
    Connection,
    Handler,
    RemotingCommand,
    RequestCode,
    RequestError,
    ResponseCode,
    ext_bool,
    ext_int,
    ext_str,
)
from ._kv import ORDER_TOPIC_CONFIG, KVConfigManager
from ._route_table import RouteInfoManager

log = logging.getLogger(__name__)

V3_0_11 = 37  # MQVersion ordinals: brokers from here on send a RegisterBrokerBody
V4_9_4 = 401  # clients from here on get routes in standard JSON

TOPIC_NOT_EXIST_REMARK = "No topic route info in name server for the topic: {topic}{faq}"
APPLY_TOPIC_FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class HeaderFieldError(RequestError):
    """A request header field that is required and missing, or not a number."""


def _required_str(cmd: RemotingCommand, name: str) -> str:
    value = ext_str(cmd.ext_fields, name)
    if value is None:
        raise HeaderFieldError(f"the custom field <{name}> is null")
    return value


def _required_int(cmd: RemotingCommand, name: str) -> int:
    try:
        value = ext_int(cmd.ext_fields, name)
    except ValueError as exc:
        raise HeaderFieldError(str(exc)) from None
    if value is None:
        raise HeaderFieldError(f"the custom field <{name}> is null")
    return value


def _success(ext_fields: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.response(ResponseCode.SUCCESS, None, ext_fields, body)


UPDATE_NAMESRV_CONFIG = 318
GET_NAMESRV_CONFIG = 319
PUT_KV_CONFIG = 100
GET_KV_CONFIG = 101
DELETE_KV_CONFIG = 102
GET_KVLIST_BY_NAMESPACE = 219
WIPE_WRITE_PERM_OF_BROKER = 205
ADD_WRITE_PERM_OF_BROKER = 327
# NamesrvConfig's keys that mean something here (their RocketMQ defaults) and the server's
NAMESRV_DEFAULTS = {
    # RocketMQ 4.9.8's NamesrvConfig (rocketmqHome from ROCKETMQ_HOME, added when set)
    "kvConfigPath": os.path.join(os.path.expanduser("~"), "namesrv", "kvConfig.json"),
    "configStorePath": os.path.join(os.path.expanduser("~"), "namesrv", "namesrv.properties"),
    "productEnvName": "center",
    "clusterTest": "false",
    "orderMessageEnable": "false",
    "configBlackList": "configBlackList;configStorePath;kvConfigPath",
    # its NettyServerConfig: the name server listens on 9876; the Netty settings have no
    # counterpart here and are listed with RocketMQ's defaults, as tools read them
    "listenPort": "9876",
    "serverWorkerThreads": "8",
    "serverCallbackExecutorThreads": "0",
    "serverSelectorThreads": "3",
    "serverOnewaySemaphoreValue": "256",
    "serverAsyncSemaphoreValue": "64",
    "serverChannelMaxIdleTimeSeconds": "120",
    "serverSocketSndBufSize": "0",
    "serverSocketRcvBufSize": "0",
    "writeBufferHighWaterMark": "0",
    "writeBufferLowWaterMark": "0",
    "serverSocketBacklog": "1024",
    "serverPooledByteBufAllocatorEnable": "true",
    "useEpollNativeSelector": "false",
}
_BOOL_KEYS = frozenset({"clusterTest", "orderMessageEnable"})
_INT_KEYS = frozenset({"serverChannelMaxIdleTimeSeconds"})
_FIXED_KEYS = frozenset({"listenPort"})  # bound at start; cannot change while serving


def check_namesrv_update(values: dict[str, str]) -> None:
    """RequestError (SYSTEM_ERROR) for a key that cannot take the value; NO_PERMISSION is the
    caller's, for the black list."""
    for key, value in values.items():
        if key in _FIXED_KEYS:
            raise RequestError(f"{key} cannot change at run time: set it at start and restart")
        try:
            if key in _BOOL_KEYS:
                java_bool(value)
            if key in _INT_KEYS:
                java_int(value)
        except ValueError as exc:
            raise RequestError(f"{key}: {exc}") from None


class NamesrvProcessor:
    """Serves the name server's request codes from a :class:`RouteInfoManager`.
    ``max_register_body``: what a compressed REGISTER_BROKER body may inflate to."""

    def __init__(
        self,
        routes: RouteInfoManager,
        *,
        max_register_body: int = MAX_REGISTER_BODY,
        kv: KVConfigManager | None = None,
    ) -> None:
        self.routes = routes
        self.max_register_body = max_register_body
        # GET_ALL_TOPIC_LIST's body, and the route table's topics generation it was made at
        self._topic_list_body: tuple[int, bytes] | None = None
        # the KV config (PUT_KV_CONFIG, ...; the order-topic namespace)
        self.kv = kv if kv is not None else KVConfigManager()
        # the name server's settings by RocketMQ's names (GET_NAMESRV_CONFIG), as text
        self.config: dict[str, str] = dict(NAMESRV_DEFAULTS)
        home = os.environ.get("ROCKETMQ_HOME")
        if home:
            self.config["rocketmqHome"] = home

    def handlers(self) -> dict[int, Handler]:
        """Request code → handler, for a RemotingServer."""
        table: dict[int, Callable[[RemotingCommand, Connection], RemotingCommand]] = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            UPDATE_NAMESRV_CONFIG: self.update_config,
            GET_NAMESRV_CONFIG: self.get_config,
            PUT_KV_CONFIG: self.put_kv_config,
            GET_KV_CONFIG: self.get_kv_config,
            DELETE_KV_CONFIG: self.delete_kv_config,
            GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
        }
        return {int(code): fn for code, fn in table.items()}

    def update_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """UPDATE_NAMESRV_CONFIG: merge the body's properties into the settings (all or
        none; not persisted: RocketMQ writes them to its configStorePath)."""
        if not cmd.body:
            return _success()
        try:
            values = parse_properties(cmd.body)
        except PropertiesError as exc:
            raise RequestError(f"string2Properties error: {exc}") from None
        if NAMESRV_BLACK_LIST & values.keys():
            return RemotingCommand.response(ResponseCode.NO_PERMISSION, BLACK_LIST_REMARK)
        check_namesrv_update(values)
        for key, value in values.items():
            self.config[key] = value.lower() if key in _BOOL_KEYS else value
        log.info("name server config updated by %s: %s", conn.peer, values)
        return _success()

    def get_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_NAMESRV_CONFIG: the settings as ``key=value`` lines."""
        return _success(None, format_properties(self.config).encode("utf-8"))

    # ---- KV config --------------------------------------------------------------------------

    def _persisted(self, change: Callable[[], None], what: str) -> RemotingCommand:
        try:
            change()
        except OSError as exc:
            raise RequestError(
                f"{what} applied in memory but not written to {self.kv.path}: {exc}"
            ) from None
        return _success()

    def put_kv_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        namespace = _required_str(cmd, "namespace")
        key = _required_str(cmd, "key")
        value = _required_str(cmd, "value")
        return self._persisted(lambda: self.kv.put(namespace, key, value), "PUT_KV_CONFIG")

    def get_kv_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        namespace = _required_str(cmd, "namespace")
        key = _required_str(cmd, "key")
        value = self.kv.get(namespace, key)
        if value is None:
            return RemotingCommand.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}"
            )
        return _success({"value": value})

    def delete_kv_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        namespace = _required_str(cmd, "namespace")
        key = _required_str(cmd, "key")
        return self._persisted(lambda: self.kv.delete(namespace, key), "DELETE_KV_CONFIG")

    def get_kv_list_by_namespace(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        namespace = _required_str(cmd, "namespace")
        body = self.kv.encode_namespace(namespace)
        if body is None:
            return RemotingCommand.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}"
            )
        return _success(body=body)

    # ---- broker write permission ------------------------------------------------------------

    def wipe_write_perm(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        broker_name = _required_str(cmd, "brokerName")
        count = self.routes.set_write_perm(broker_name, writable=False)
        log.info("wipe write perm of broker[%s], client: %s, %d", broker_name, conn.peer, count)
        return _success({"wipeTopicCount": str(count)})

    def add_write_perm(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        broker_name = _required_str(cmd, "brokerName")
        count = self.routes.set_write_perm(broker_name, writable=True)
        log.info("add write perm of broker[%s], client: %s, %d", broker_name, conn.peer, count)
        return _success({"addTopicCount": str(count)})

    def register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        broker_name = _required_str(cmd, "brokerName")
        broker_addr = _required_str(cmd, "brokerAddr")
        cluster = _required_str(cmd, "clusterName")
        ha_server_addr = _required_str(cmd, "haServerAddr")
        broker_id = _required_int(cmd, "brokerId")
        compressed = ext_bool(cmd.ext_fields, "compressed")
        try:
            crc = ext_int(cmd.ext_fields, "bodyCrc32", 0) or 0
        except ValueError as exc:
            raise HeaderFieldError(str(exc)) from None
        body = bytes(cmd.body)
        if crc != 0 and body_crc32(body) != crc:
            raise RequestError("crc32 not match")

        filter_servers: list[str] | None
        if cmd.version >= V3_0_11:
            parsed = (
                RegisterBrokerBody.decode(body, compressed, self.max_register_body)
                if body
                else RegisterBrokerBody()
            )
            wrapper = parsed.topic_config_wrapper
            filter_servers = list(parsed.filter_server_list)
        else:
            wrapper = TopicConfigWrapper.decode(body) if body else TopicConfigWrapper()
            filter_servers = None

        result = self.routes.register_broker(
            cluster,
            broker_addr,
            broker_name,
            broker_id,
            ha_server_addr,
            wrapper,
            filter_servers,
            conn,
        )
        return _success(
            {"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr},
            self.kv.encode_namespace(ORDER_TOPIC_CONFIG) or b"",
        )

    def unregister_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        broker_name = _required_str(cmd, "brokerName")
        broker_addr = _required_str(cmd, "brokerAddr")
        cluster = _required_str(cmd, "clusterName")
        broker_id = _required_int(cmd, "brokerId")
        self.routes.unregister_broker(cluster, broker_addr, broker_name, broker_id)
        return _success()

    def get_route_info_by_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = _required_str(cmd, "topic")
        route = self.routes.route(topic)
        if route is None:
            return RemotingCommand.response(
                ResponseCode.TOPIC_NOT_EXIST,
                TOPIC_NOT_EXIST_REMARK.format(topic=topic, faq=APPLY_TOPIC_FAQ),
            )
        if self.config.get("orderMessageEnable") == "true":
            order_conf = self.kv.get(ORDER_TOPIC_CONFIG, topic)
            route = dataclasses.replace(route, order_topic_conf=order_conf)
        standard = cmd.version >= V4_9_4 or ext_bool(cmd.ext_fields, "acceptStandardJsonOnly")
        return _success(body=route.encode(standard_json=standard))

    def get_broker_cluster_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return _success(body=self.routes.cluster_info().encode())

    def get_all_topic_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        generation = self.routes.topics_generation
        cached = self._topic_list_body
        if cached is None or cached[0] != generation:
            cached = self._topic_list_body = (
                generation,
                encode_topic_list(self.routes.all_topics()),
            )
        return _success(body=cached[1])

    def delete_topic_in_namesrv(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = _required_str(cmd, "topic")
        self.routes.delete_topic(topic, ext_str(cmd.ext_fields, "clusterName"))
        return _success()

    def query_data_version(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        for name in ("brokerName", "clusterName"):
            _required_str(cmd, name)
        _required_int(cmd, "brokerId")
        broker_addr = _required_str(cmd, "brokerAddr")
        version = DataVersion.decode(cmd.body)
        changed = self.routes.is_topic_config_changed(broker_addr, version)
        if not changed:
            self.routes.touch(broker_addr)
        known = self.routes.data_version(broker_addr)
        return _success(
            {"changed": "true" if changed else "false"},
            known.encode() if known is not None else b"",
        )
