"""A blocking administration client (what RocketMQ's DefaultMQAdminExt does for mqadmin's topic,
cluster, consumer, subscription-group and message commands): name-server lookups, topic creation
and deletion on brokers, subscription groups' settings, consumer progress, broker runtime
information, messages by key and by id.

Any thread (calls are serialised by the underlying RemotingClient).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..protocol._admin_bodies import (
    BrokerStatsData,
    ClientConnection,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    QueryConsumeQueueBody,
    TopicOffset,
    decode_group_list,
    decode_kv_table,
    decode_producer_connection,
    decode_reset_offset,
    decode_topic_stats,
)
from ..protocol._admin_bodies import loads as loads_body
from ..protocol._consumer_bodies import ConsumerRunningInfo, ConsumerStatusBody
from ..protocol._namesrv_bodies import MASTER_ID, ClusterInfo, decode_topic_list
from ..protocol._properties import format_properties, parse_properties
from ..protocol._subscription_group import SubscriptionGroupConfig
from ..remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingError,
    RequestCode,
    ResponseCode,
    _fastjson,
)
from ..remoting._client import FROM_ENV, Signer
from ..store.log._record import MessageExt, decode_msg_id
from ..tier._answer import NO_TIER, TierBodyError, TierManifestBody
from ._consumer import FLAG_SUBSCRIPTION, decode_records, plain_body
from ._names import check_group, check_topic
from ._route import (
    ClientError,
    MessageQueue,
    NameServerUnreachableError,
    RouteCache,
    TopicNotFoundError,
    TopicRoute,
    not_a_name_server,
)

DEFAULT_TOPIC = "TBW102"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
MAX_TIMESTAMP = 2**63 - 1
GET_BROKER_CONFIG = 26
GET_TOPIC_STATS_INFO = 202
QUERY_TOPIC_CONSUME_BY_WHO = 300
GET_CONSUMER_LIST_BY_GROUP = 38
UPDATE_BROKER_CONFIG = 25
UPDATE_NAMESRV_CONFIG = 318
GET_NAMESRV_CONFIG = 319
PUT_KV_CONFIG = 100
GET_KV_CONFIG = 101
DELETE_KV_CONFIG = 102
GET_KVLIST_BY_NAMESPACE = 219
WIPE_WRITE_PERM_OF_BROKER = 205
ADD_WRITE_PERM_OF_BROKER = 327
GET_CONSUMER_CONNECTION_LIST = 203
GET_PRODUCER_CONNECTION_LIST = 204
VIEW_BROKER_STATS_DATA = 315
GET_BROKER_CONSUME_STATS = 317
CLEAN_EXPIRED_CONSUMEQUEUE = 306
CLEAN_UNUSED_TOPIC = 316
QUERY_CONSUME_QUEUE = 321
RESET_CONSUMER_OFFSET = 222
INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
GET_CONSUMER_RUNNING_INFO = 307
CLONE_GROUP_OFFSET = 314
PERM_READ_WRITE = 6
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # the group RocketMQ's tools pull with (no offsets kept)


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """One broker of the cluster info: its cluster, group name, id (0 = master) and address."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str


class AdminClient:
    """Administration over the remoting protocol. ``namesrv`` is ``host:port[;host:port]``;
    without one, only the calls to a named broker work (the others raise ValueError)."""

    def __init__(
        self, namesrv: str = "", *, timeout: float = 5.0, signer: Signer | None = FROM_ENV
    ) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
        self.timeout = timeout
        self.client = RemotingClient(timeout=timeout, signer=signer)
        self._routes = (
            RouteCache(self.client, self.namesrv_addrs, ttl_s=0.0) if self.namesrv_addrs else None
        )

    def with_signer(self, signer: Signer | None) -> AdminClient:
        """A new client to the same name servers whose requests ``signer`` signs (ACL: one
        account's keys); None sends them unsigned."""
        return AdminClient(";".join(self.namesrv_addrs), timeout=self.timeout, signer=signer)

    @property
    def routes(self) -> RouteCache:
        if self._routes is None:
            raise ValueError("no name server address")
        return self._routes

    # ---- calls ------------------------------------------------------------------------------

    def _namesrv(self, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
        """The first name server that answers (ClientError unless it answers SUCCESS)."""
        if not self.namesrv_addrs:
            raise ValueError("no name server address")
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                r = self.client.invoke(addr, RemotingCommand.request(code, ext or {}))
            except RemotingError as exc:
                last = exc
                continue
            if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise not_a_name_server(self.client, addr)
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(r.code, r.remark)
            return r
        raise NameServerUnreachableError(self.namesrv_addrs, last)

    def call(
        self, addr: str, code: int, ext: dict[str, str] | None = None, *, ok: Iterable[int] = ()
    ) -> RemotingCommand:
        """A request to a broker; ClientError unless it answers SUCCESS or a code in ``ok``."""
        r = self.client.invoke(addr, RemotingCommand.request(code, ext or {}))
        if r.code != ResponseCode.SUCCESS and r.code not in set(ok):
            raise ClientError(r.code, r.remark)
        return r

    # ---- name server ------------------------------------------------------------------------

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo.decode(self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO).body)

    def brokers(self, cluster: str | None = None) -> list[BrokerAddress]:
        """Every broker the name server knows (of ``cluster`` only, when given), ordered by
        cluster, name and id. ClientError when ``cluster`` is unknown."""
        info = self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise ClientError(ResponseCode.SYSTEM_ERROR, f"no cluster named {cluster!r}")
        out: list[BrokerAddress] = []
        for name_of_cluster in sorted(info.cluster_addr_table):
            if cluster is not None and name_of_cluster != cluster:
                continue
            for broker_name in sorted(set(info.cluster_addr_table[name_of_cluster])):
                data = info.broker_addr_table.get(broker_name)
                if data is None:
                    continue
                for broker_id in sorted(data.broker_addrs):
                    out.append(
                        BrokerAddress(
                            name_of_cluster, broker_name, broker_id, data.broker_addrs[broker_id]
                        )
                    )
        return out

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name → master address, of ``cluster`` or of every cluster."""
        return {b.broker_name: b.address for b in self.brokers(cluster) if b.broker_id == MASTER_ID}

    def topic_list(self) -> list[str]:
        body = self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body
        return decode_topic_list(body)

    def route(self, topic: str) -> TopicRoute | None:
        """The topic's route, or None when the name server has none."""
        return self.routes.get(topic, refresh=True, allow_missing=True)

    def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV on every name server (each must answer)."""
        if not self.namesrv_addrs:
            raise ValueError("no name server address")
        ext = {"topic": topic}
        if cluster:
            ext["clusterName"] = cluster
        for addr in self.namesrv_addrs:
            r = self.client.invoke(addr, RemotingCommand.request(216, ext))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(r.code, r.remark)

    # ---- topics on brokers ------------------------------------------------------------------

    def create_topic(
        self,
        addr: str,
        topic: str,
        *,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = PERM_READ_WRITE,
        order: bool = False,
        topic_sys_flag: int = 0,
        topic_filter_type: str = "SINGLE_TAG",
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC on the broker at ``addr``."""
        check_topic(topic)
        self.call(
            addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": DEFAULT_TOPIC,
                "readQueueNums": str(read_queue_nums),
                "writeQueueNums": str(write_queue_nums),
                "perm": str(perm),
                "topicFilterType": topic_filter_type,
                "topicSysFlag": str(topic_sys_flag),
                "order": "true" if order else "false",
            },
        )

    def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        self.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})

    def topic_configs(self, addr: str) -> dict[str, dict[str, object]]:
        """GET_ALL_TOPIC_CONFIG: topic → its TopicConfig JSON object."""
        doc = _fastjson.loads(bytes(self.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG).body))
        table = doc.get("topicConfigTable") or {}
        return {str(k): dict(v) for k, v in table.items()}

    def topic_stats(self, addr: str, topic: str) -> dict[MessageQueue, TopicOffset]:
        """GET_TOPIC_STATS_INFO: the min / max offsets of the topic's queues on that broker."""
        return decode_topic_stats(self.call(addr, GET_TOPIC_STATS_INFO, {"topic": topic}).body)

    def topic_consumer_groups(self, addr: str, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO: the groups that consume ``topic`` on that broker."""
        body = self.call(addr, QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}).body
        return decode_group_list(body)

    # ---- subscription groups on brokers -----------------------------------------------------

    def subscription_group_docs(self, addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group → its SubscriptionGroupConfig JSON object as
        the broker wrote it (a RocketMQ 5 broker's has fields rocketstore does not know)."""
        body = self.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body
        doc = loads_body(body)
        table = doc.get("subscriptionGroupTable") if isinstance(doc, dict) else None
        if not isinstance(table, dict):
            raise ClientError(ResponseCode.SYSTEM_ERROR, "no subscriptionGroupTable in the answer")
        return {str(k): dict(v) for k, v in table.items() if isinstance(v, dict)}

    def subscription_groups(self, addr: str) -> dict[str, SubscriptionGroupConfig]:
        """The broker's subscription groups by name. ValueError for an entry that does not
        parse."""
        return {
            name: SubscriptionGroupConfig.from_json(doc, name)
            for name, doc in self.subscription_group_docs(addr).items()
        }

    def update_subscription_group(
        self, addr: str, group: str | SubscriptionGroupConfig, **changes: Any
    ) -> SubscriptionGroupConfig:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on the broker at ``addr``; the settings sent.

        Given a config, it (with ``changes``: SubscriptionGroupConfig field names) replaces the
        broker's, as mqadmin updateSubGroup does. Given a group name, the broker's current
        settings are read first (defaults when it has none) and only ``changes`` differ; fields
        this client does not know (a RocketMQ 5 broker's) are sent back as they were."""
        kept: dict[str, Any] = {}
        check_group(group.group_name if isinstance(group, SubscriptionGroupConfig) else group)
        if isinstance(group, SubscriptionGroupConfig):
            config = group.replace(**changes) if changes else group
        else:
            current = self.subscription_group_docs(addr).get(group)
            if current is None:
                base = SubscriptionGroupConfig(group)
            else:
                kept = current
                base = SubscriptionGroupConfig.from_json(current, group)
            config = base.replace(**changes)
        doc = {**kept, **config.to_json()}
        # explicit, so that a broker that had it set learns that it is off
        doc["consumeMessageOrderly"] = config.consume_message_orderly
        body = _fastjson.dumps(doc).encode("utf-8")
        r = self.client.invoke(
            addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
        )
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(r.code, r.remark)
        return config

    def delete_subscription_group(
        self, addr: str, group: str, *, clean_offset: bool = False
    ) -> None:
        """DELETE_SUBSCRIPTIONGROUP on the broker at ``addr``; with ``clean_offset`` the group's
        consumer offsets there are removed too (sent as RocketMQ 5's cleanOffset and 4.9.8's
        removeOffset)."""
        flag = "true" if clean_offset else "false"
        self.call(
            addr,
            RequestCode.DELETE_SUBSCRIPTIONGROUP,
            {"groupName": group, "cleanOffset": flag, "removeOffset": flag},
        )

    # ---- brokers ----------------------------------------------------------------------------

    def runtime_info(self, addr: str) -> dict[str, str]:
        return decode_kv_table(self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO).body)

    def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings (``key=value`` lines)."""
        text = bytes(self.call(addr, GET_BROKER_CONFIG).body).decode("utf-8")
        out: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key] = value
        return out

    def update_broker_config(self, addr: str, values: dict[str, str]) -> str:
        """UPDATE_BROKER_CONFIG: change settings of the broker at ``addr`` while it runs; the
        broker's remark (what it did) or ''. ClientError when it refuses (nothing applied)."""
        body = format_properties(values).encode("utf-8")
        r = self.client.invoke(addr, RemotingCommand.request(UPDATE_BROKER_CONFIG, {}, body=body))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(r.code, r.remark)
        return r.remark or ""

    def namesrv_configs(self) -> dict[str, dict[str, str]]:
        """GET_NAMESRV_CONFIG of every name server: address → its settings."""
        if not self.namesrv_addrs:
            raise ValueError("no name server address")
        out: dict[str, dict[str, str]] = {}
        for addr in self.namesrv_addrs:
            r = self.client.invoke(addr, RemotingCommand.request(GET_NAMESRV_CONFIG, {}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(r.code, r.remark)
            out[addr] = parse_properties(bytes(r.body))
        return out

    def update_namesrv_config(self, values: dict[str, str]) -> None:
        """UPDATE_NAMESRV_CONFIG on every name server (each must accept)."""
        if not self.namesrv_addrs:
            raise ValueError("no name server address")
        body = format_properties(values).encode("utf-8")
        for addr in self.namesrv_addrs:
            r = self.client.invoke(
                addr, RemotingCommand.request(UPDATE_NAMESRV_CONFIG, {}, body=body)
            )
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(r.code, r.remark)

    # ---- name servers' KV config and write permission ---------------------------------------

    def _every_namesrv(self, code: int, ext: dict[str, str]) -> dict[str, RemotingCommand]:
        """``code`` sent to every name server: address → its SUCCESS answer (ClientError on
        any other, RemotingError when one is out of reach)."""
        if not self.namesrv_addrs:
            raise ValueError("no name server address")
        out: dict[str, RemotingCommand] = {}
        for addr in self.namesrv_addrs:
            r = self.client.invoke(addr, RemotingCommand.request(code, ext))
            if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise not_a_name_server(self.client, addr)
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(r.code, r.remark)
            out[addr] = r
        return out

    def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG on every name server (mqadmin updateKvConfig)."""
        self._every_namesrv(PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})

    def delete_kv_config(self, namespace: str, key: str) -> None:
        """DELETE_KV_CONFIG on every name server (mqadmin deleteKvConfig)."""
        self._every_namesrv(DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG of the first name server that answers; None when it has no such
        value (QUERY_NOT_FOUND)."""
        try:
            r = self._namesrv(GET_KV_CONFIG, {"namespace": namespace, "key": key})
        except ClientError as exc:
            if exc.code == ResponseCode.QUERY_NOT_FOUND:
                return None
            raise
        value = r.ext_fields.get("value")
        return None if value is None else str(value)

    def kv_list(self, namespace: str) -> dict[str, str] | None:
        """GET_KVLIST_BY_NAMESPACE of the first name server that answers; None when it has no
        such namespace."""
        try:
            r = self._namesrv(GET_KVLIST_BY_NAMESPACE, {"namespace": namespace})
        except ClientError as exc:
            if exc.code == ResponseCode.QUERY_NOT_FOUND:
                return None
            raise
        return decode_kv_table(r.body)

    def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """WIPE_WRITE_PERM_OF_BROKER on every name server (mqadmin wipeWritePerm): the
        broker group's routes lose their write permission, so producers send elsewhere.
        Name-server address → how many topics of the group it changed."""
        answers = self._every_namesrv(WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
        return {a: int(r.ext_fields.get("wipeTopicCount", 0)) for a, r in answers.items()}

    def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """ADD_WRITE_PERM_OF_BROKER on every name server (mqadmin addWritePerm): the broker
        group's routes read and write again. Name-server address → topics changed."""
        answers = self._every_namesrv(ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
        return {a: int(r.ext_fields.get("addTopicCount", 0)) for a, r in answers.items()}

    # ---- consumer progress ------------------------------------------------------------------

    def consume_stats(self, addr: str, group: str, topic: str | None = None) -> ConsumeStats:
        ext = {"consumerGroup": group}
        if topic:
            ext["topic"] = topic
        return ConsumeStats.decode(self.call(addr, RequestCode.GET_CONSUME_STATS, ext).body)

    def group_brokers(self, group: str, topic: str | None = None) -> dict[str, str]:
        """Broker name → address of the brokers that serve the group's retry topic (and
        ``topic``); every master when neither has a route."""
        out: dict[str, str] = {}
        for name in (RETRY_GROUP_TOPIC_PREFIX + group, topic):
            route = self.route(name) if name else None
            if route is None:
                continue
            for broker_name in route.brokers:
                addr = route.address(broker_name)
                if addr is not None:
                    out[broker_name] = addr
        return out or self.masters()

    def examine_consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """The group's progress from every broker of :meth:`group_brokers`, merged."""
        result = ConsumeStats()
        for addr in self.group_brokers(group, topic).values():
            result.merge(self.consume_stats(addr, group, topic))
        return result

    def broker_consume_stats(self, addr: str, *, only_order: bool = False) -> ConsumeStatsList:
        """GET_BROKER_CONSUME_STATS: every subscription group's progress on that broker."""
        ext = {"isOrder": "true" if only_order else "false"}
        return ConsumeStatsList.decode(self.call(addr, GET_BROKER_CONSUME_STATS, ext).body)

    # ---- clients ----------------------------------------------------------------------------

    def consumer_connection(self, addr: str, group: str) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST: the group's consumers connected to that broker
        (ClientError CONSUMER_NOT_ONLINE when none is)."""
        r = self.call(addr, GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        return ConsumerConnection.decode(r.body)

    def examine_consumer_connection(self, group: str) -> ConsumerConnection:
        """The group's consumers on every broker of :meth:`group_brokers`, their connections
        merged (ClientError CONSUMER_NOT_ONLINE when no broker has one)."""
        found: ConsumerConnection | None = None
        seen: dict[str, ClientConnection] = {}
        for addr in self.group_brokers(group).values():
            try:
                answer = self.consumer_connection(addr, group)
            except ClientError as exc:
                if exc.code == ResponseCode.CONSUMER_NOT_ONLINE:
                    continue
                raise
            found = found or answer
            for c in answer.connections:
                seen.setdefault(c.client_id, c)
        if found is None:
            raise ClientError(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        return dataclasses.replace(found, connections=tuple(seen.values()))

    def consumer_running_info(
        self, group: str, client_id: str, *, jstack: bool = False
    ) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO: what one client of the group tells of itself (its
        settings, subscriptions, queues with their offsets, rates), asked through the first
        broker of :meth:`group_brokers` the client is connected to. ClientError with the last
        broker's answer when none can ask it."""
        check_group(group)
        ext = {
            "consumerGroup": group,
            "clientId": client_id,
            "jstackEnable": "true" if jstack else "false",
        }
        last: ClientError | None = None
        for addr in self.group_brokers(group).values():
            r = self.client.invoke(addr, RemotingCommand.request(GET_CONSUMER_RUNNING_INFO, ext))
            if r.code == ResponseCode.SUCCESS:
                return ConsumerRunningInfo.decode(r.body)
            last = ClientError(r.code, r.remark)
            if r.code != ResponseCode.SYSTEM_ERROR or "not online" not in (r.remark or ""):
                raise last
        raise last or ClientError(
            ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
        )

    def consumer_status(
        self, group: str, topic: str, client_id: str | None = None
    ) -> dict[str, dict[MessageQueue, int]]:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS on every broker of ``topic``'s route: each
        online client's (or only ``client_id``'s) offsets of the topic's queues, as the
        clients hold them: client id → queue → offset, merged over the brokers."""
        check_group(group)
        route = self.route(topic)
        if route is None:
            raise TopicNotFoundError(topic, f"no route for topic {topic}")
        ext = {"topic": topic, "group": group}
        if client_id:
            ext["clientAddr"] = client_id
        out: dict[str, dict[MessageQueue, int]] = {}
        for broker_name in route.brokers:
            addr = route.address(broker_name)
            if addr is None:
                continue
            body = ConsumerStatusBody.decode(
                self.call(addr, INVOKE_BROKER_TO_GET_CONSUMER_STATUS, ext).body
            )
            for cid, offsets in body.consumers.items():
                out.setdefault(cid, {}).update(offsets)
        return out

    def clone_group_offset(
        self, src_group: str, dest_group: str, topic: str, *, offline: bool = False
    ) -> list[str]:
        """CLONE_GROUP_OFFSET on every master of ``topic``'s route (mqadmin
        cloneGroupOffset): ``dest_group`` gets ``src_group``'s offsets on the topic (unless
        ``offline``, not when the source group is online without subscribing it). Returns the
        brokers' addresses."""
        check_group(src_group)
        check_group(dest_group)
        route = self.route(topic)
        if route is None:
            raise TopicNotFoundError(topic, f"no route for topic {topic}")
        ext = {
            "srcGroup": src_group,
            "destGroup": dest_group,
            "topic": topic,
            "offline": "true" if offline else "false",
        }
        done: list[str] = []
        for broker_name in route.brokers:
            addr = route.address(broker_name)
            if addr is None:
                continue
            self.call(addr, CLONE_GROUP_OFFSET, ext)
            done.append(addr)
        return done

    def producer_connection(self, addr: str, group: str) -> list[ClientConnection]:
        """GET_PRODUCER_CONNECTION_LIST: the group's producers connected to that broker."""
        r = self.call(addr, GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
        return decode_producer_connection(r.body)

    def examine_producer_connection(
        self, group: str, topic: str | None = None
    ) -> list[ClientConnection]:
        """The group's producers on the brokers of ``topic``'s route (every master without
        one), merged by client id; [] when no broker knows the group."""
        route = self.route(topic) if topic else None
        if route is not None:
            addrs = [a for b in route.brokers if (a := route.address(b)) is not None]
        else:
            addrs = list(self.masters().values())
        seen: dict[str, ClientConnection] = {}
        for addr in addrs:
            r = self.call(
                addr,
                GET_PRODUCER_CONNECTION_LIST,
                {"producerGroup": group},
                ok=(ResponseCode.SYSTEM_ERROR,),
            )
            if r.code != ResponseCode.SUCCESS:
                if "not exist" in (r.remark or ""):
                    continue
                raise ClientError(r.code, r.remark)
            for c in decode_producer_connection(r.body):
                seen.setdefault(c.client_id, c)
        return list(seen.values())

    # ---- consume queues ---------------------------------------------------------------------

    def query_consume_queue(
        self,
        addr: str,
        topic: str,
        queue_id: int,
        index: int,
        count: int,
        group: str | None = None,
    ) -> QueryConsumeQueueBody | None:
        """QUERY_CONSUME_QUEUE: ``count`` units of a consume queue from ``index``; None when
        the index is outside the queue (the broker answers without a body)."""
        ext = {"topic": topic, "queueId": str(queue_id), "index": str(index), "count": str(count)}
        if group:
            ext["consumerGroup"] = group
        r = self.call(addr, QUERY_CONSUME_QUEUE, ext)
        return QueryConsumeQueueBody.decode(r.body) if len(r.body) else None

    def clean_expired_consume_queue(self, addr: str) -> None:
        """CLEAN_EXPIRED_CONSUMEQUEUE on the broker at ``addr``."""
        self.call(addr, CLEAN_EXPIRED_CONSUMEQUEUE)

    def clean_unused_topic(self, addr: str) -> None:
        """CLEAN_UNUSED_TOPIC on the broker at ``addr``."""
        self.call(addr, CLEAN_UNUSED_TOPIC)

    # ---- tiered store -----------------------------------------------------------------------

    def tier_manifest(self, broker_addr: str, topic: str) -> TierManifestBody | None:
        """GET_TIER_MANIFEST (rocketstore's own request): the broker's tiered directory and the
        files of ``topic`` below its covered offset, with each queue's first offset past them.
        None when the broker keeps no tier (or does not know the request: RocketMQ's brokers,
        older rocketstore ones); ClientError otherwise (TOPIC_NOT_EXIST, ACL, ...)."""
        ok = (ResponseCode.SYSTEM_ERROR, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        r = self.call(broker_addr, RequestCode.GET_TIER_MANIFEST, {"topic": topic}, ok=ok)
        if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return None
        if r.code != ResponseCode.SUCCESS:
            if r.ext_fields.get(NO_TIER) == "false":
                return None
            raise ClientError(r.code, r.remark)
        try:
            return TierManifestBody.decode(r.body)
        except TierBodyError as exc:
            raise ClientError(ResponseCode.SYSTEM_ERROR, str(exc)) from None

    # ---- broker counters --------------------------------------------------------------------

    def broker_stats(self, addr: str, stats_name: str, stats_key: str) -> BrokerStatsData:
        """VIEW_BROKER_STATS_DATA: one stats item (TOPIC_PUT_NUMS by topic, GROUP_GET_NUMS by
        ``topic@group``, BROKER_PUT_NUMS by cluster, ...) over the last minute, hour, day."""
        ext = {"statsName": stats_name, "statsKey": stats_key}
        return BrokerStatsData.decode(self.call(addr, VIEW_BROKER_STATS_DATA, ext).body)

    def consumer_ids(self, addr: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP: the client ids of the group's consumers connected to
        that broker ([] when none is: RocketMQ's brokers answer that with an error)."""
        r = self.call(
            addr,
            GET_CONSUMER_LIST_BY_GROUP,
            {"consumerGroup": group},
            ok=(ResponseCode.SYSTEM_ERROR,),
        )
        if r.code != ResponseCode.SUCCESS:
            if (r.remark or "").startswith("no consumer for this group"):
                return []
            raise ClientError(r.code, r.remark)
        doc = loads_body(r.body) if len(r.body) else {}
        ids = doc.get("consumerIdList") if isinstance(doc, dict) else None
        return [str(i) for i in ids] if isinstance(ids, list) else []

    def _queue_offset(
        self, addr: str, code: int, mq: MessageQueue, *, ok: Iterable[int] = (), **extra: str
    ) -> int:
        """The ``offset`` a queue-offset request answers; -1 when it answers a code in ``ok``."""
        ext = {"topic": mq.topic, "queueId": str(mq.queue_id), **extra}
        r = self.call(addr, code, ext, ok=ok)
        if r.code != ResponseCode.SUCCESS:
            return -1
        try:
            return int(r.ext_fields.get("offset", ""))
        except ValueError:
            raise ClientError(ResponseCode.SYSTEM_ERROR, "no offset in the answer") from None

    def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the queue's first offset stored at or after the time."""
        return self._queue_offset(
            addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp=str(timestamp_ms)
        )

    def update_consumer_offset(self, addr: str, group: str, mq: MessageQueue, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET: the group's offset of that queue on the broker at ``addr``
        (a consumer of the group that is online commits its own over it)."""
        self.call(
            addr,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {
                "consumerGroup": group,
                "topic": mq.topic,
                "queueId": str(mq.queue_id),
                "commitOffset": str(offset),
            },
        )

    def reset_offset_by_time(
        self, group: str, topic: str, timestamp_ms: int, *, brokers: set[str] | None = None
    ) -> dict[MessageQueue, tuple[int, int]]:
        """The group's offset of each read queue of ``topic`` (of ``brokers`` only, when
        given) set to the first message stored at or after ``timestamp_ms``, -1: the end of
        each queue (SEARCH_OFFSET_BY_TIMESTAMP or GET_MAX_OFFSET, then UPDATE_CONSUMER_OFFSET,
        as mqadmin's resetOffsetByTimeOld does): queue → (old offset, -1 for none; new
        offset). Consumers of the group that are online overwrite it with their own progress."""
        check_group(group)
        route = self.route(topic)
        if route is None:
            raise TopicNotFoundError(topic, f"no route for topic {topic}")
        out: dict[MessageQueue, tuple[int, int]] = {}
        for mq in route.queues(write=False):
            addr = route.address(mq.broker_name)
            if addr is None or (brokers is not None and mq.broker_name not in brokers):
                continue
            if timestamp_ms < 0:
                new = self._queue_offset(addr, RequestCode.GET_MAX_OFFSET, mq)
            else:
                new = self.search_offset(addr, mq, timestamp_ms)
            old = self._queue_offset(
                addr,
                RequestCode.QUERY_CONSUMER_OFFSET,
                mq,
                consumerGroup=group,
                ok=(ResponseCode.QUERY_NOT_FOUND,),
            )
            self.update_consumer_offset(addr, group, mq, new)
            out[mq] = (old, new)
        return out

    def reset_consumer_offset(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> tuple[bool, dict[MessageQueue, int]]:
        """RESET_CONSUMER_OFFSET on every broker of ``topic``'s route (mqadmin's
        resetOffsetByTime): the brokers tell the group's online clients to move to the offset
        at ``timestamp_ms`` (-1: the end; ``force`` False only moves back). Where the group has
        no client online (CONSUMER_NOT_ONLINE), or a broker does not know it while another one
        does, the offsets are set here instead (:meth:`reset_offset_by_time`). A group no
        broker knows (no subscription, no offsets) is RocketMQ's SYSTEM_ERROR "THe consumer
        group <G> not exist". Returns (whether clients were told, queue → new offset)."""
        check_group(group)
        route = self.route(topic)
        if route is None:
            raise TopicNotFoundError(topic, f"no route for topic {topic}")
        ext = {
            "topic": topic,
            "group": group,
            "timestamp": str(timestamp_ms),
            "isForce": "true" if force else "false",
        }
        table: dict[MessageQueue, int] = {}
        told = False
        offline: set[str] = set()
        unknown: dict[str, RemotingCommand] = {}
        for broker_name in route.brokers:
            addr = route.address(broker_name)
            if addr is None:
                continue
            r = self.call(
                addr,
                RESET_CONSUMER_OFFSET,
                ext,
                ok=(ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.SYSTEM_ERROR),
            )
            if r.code == ResponseCode.SUCCESS:
                table.update(decode_reset_offset(r.body))
                told = True
            elif r.code == ResponseCode.CONSUMER_NOT_ONLINE:
                offline.add(broker_name)
            elif (r.remark or "").endswith(f"<{group}> not exist"):
                unknown[broker_name] = r
            else:
                raise ClientError(r.code, r.remark)
        if unknown and not told and not offline:
            r = next(iter(unknown.values()))
            raise ClientError(r.code, r.remark)
        direct = offline | set(unknown)
        if direct:
            done = self.reset_offset_by_time(group, topic, timestamp_ms, brokers=direct)
            table.update((mq, new) for mq, (_, new) in done.items())
        return told, table

    def pull_messages(
        self, addr: str, mq: MessageQueue, offset: int, max_nums: int = 32
    ) -> tuple[list[MessageExt], int]:
        """PULL_MESSAGE of ``max_nums`` messages from ``offset`` of the queue on that broker,
        as RocketMQ's tools read (group TOOLS_CONSUMER, no offset committed, no wait): the
        messages (bodies inflated) and the next offset. None found: ([], offset)."""
        ext = {
            "consumerGroup": TOOLS_CONSUMER_GROUP,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(FLAG_SUBSCRIPTION),
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
        }
        r = self.call(
            addr,
            RequestCode.PULL_MESSAGE,
            ext,
            ok=(
                ResponseCode.PULL_NOT_FOUND,
                ResponseCode.PULL_OFFSET_MOVED,
                ResponseCode.PULL_RETRY_IMMEDIATELY,
            ),
        )
        if r.code != ResponseCode.SUCCESS:
            return [], offset
        next_offset = int(r.ext_fields.get("nextBeginOffset", offset))
        return [plain_body(m) for m in decode_records(r.body)], next_offset

    # ---- messages ---------------------------------------------------------------------------

    def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        begin: int = 0,
        end: int = MAX_TIMESTAMP,
        unique_key: bool = False,
        brokers: list[str] | None = None,
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS (or, with ``unique_key``, client message id) is
        ``key``, from every broker of the topic's route (by name) or from the ``brokers``
        given, ordered by store time."""
        if brokers is None:
            route = self.route(topic)
            if route is None:
                raise TopicNotFoundError(topic, f"no route for topic {topic}")
            named = [route.address(name) for name in sorted(route.brokers)]
            brokers = [a for a in named if a is not None]
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": str(max_num),
            "beginTimestamp": str(begin),
            "endTimestamp": str(end),
            UNIQUE_MSG_QUERY_FLAG: "true" if unique_key else "false",
        }
        found: list[MessageExt] = []
        for addr in brokers:
            r = self.call(addr, RequestCode.QUERY_MESSAGE, ext, ok=(ResponseCode.QUERY_NOT_FOUND,))
            if r.code != ResponseCode.SUCCESS:
                continue
            for msg in decode_records(r.body):
                if msg.topic != topic:
                    continue
                props = msg.properties
                if unique_key:
                    if props.get("UNIQ_KEY") == key:
                        found.append(msg)
                elif key in msg.keys:
                    found.append(msg)
        # stable: within one store time, brokers by name and each broker's own order
        return sorted(found, key=lambda m: m.store_timestamp)

    def broker_addresses(self) -> set[str]:
        """The address of every broker the name servers know (their cluster info)."""
        info = self.cluster_info()
        return {a for data in info.broker_addr_table.values() for a in data.broker_addrs.values()}

    def find_message(
        self, msg_id: str, *, topic: str | None = None, broker: str | None = None
    ) -> MessageExt:
        """The message with id ``msg_id``, as RocketMQ's clients look one up: an offset message
        id whose address is a known broker (``broker`` when given, else one the name servers
        know) is read there by offset; any other id is taken for the client's id (UNIQ_KEY) and
        looked up in ``topic``'s index on its brokers (on ``broker`` only, when given), the
        earliest stored copy. No connection is made to an address nobody named.

        ValueError when the id is neither an offset id of a known broker nor, without
        ``topic``, something that can be looked up; ClientError (QUERY_NOT_FOUND) when no broker
        has it."""
        try:
            host: str | None = decode_msg_id(msg_id)[0]
        except ValueError:
            host = None
        if host is not None and host in ({broker} if broker else self.broker_addresses()):
            try:
                return self.view_message(msg_id, broker)
            except ClientError:
                if topic is None:
                    raise
        if topic is None:
            what = (
                f"it names {host}, which no name server knows"
                if host
                else "not an address and an offset"
            )
            raise ValueError(
                f"{msg_id} is not a message id of a known broker ({what}); give the topic to "
                "look it up as the client's message id (UNIQ_KEY)"
            )
        found = self.query_message(
            topic, msg_id, unique_key=True, brokers=[broker] if broker else None
        )
        if not found:
            raise ClientError(
                ResponseCode.QUERY_NOT_FOUND, f"no message of topic {topic} with id {msg_id}"
            )
        return found[0]

    def view_message(self, offset_msg_id: str, addr: str | None = None) -> MessageExt:
        """The message with that offset message id, from ``addr`` or the store address the id
        names. ValueError for an id that does not decode."""
        host, phys_offset = decode_msg_id(offset_msg_id)
        r = self.call(addr or host, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys_offset)})
        msgs = decode_records(r.body)
        if len(msgs) != 1:
            raise ClientError(ResponseCode.SYSTEM_ERROR, f"{len(msgs)} records in the answer")
        return msgs[0]

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
