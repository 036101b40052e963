"""Administration requests (RocketMQ 4.9.8's AdminBrokerProcessor, the parts mqadmin's topic,
cluster, consumer and subscription-group commands use).

=====  ============================  =========================================================
code   request                       ext fields → answer
=====  ============================  =========================================================
17     UPDATE_AND_CREATE_TOPIC       topic, defaultTopic, readQueueNums, writeQueueNums, perm,
                                     topicFilterType, topicSysFlag, order → SUCCESS; the
                                     broker registers with the name servers at once
21     GET_ALL_TOPIC_CONFIG          → TopicConfigSerializeWrapper (compact fastjson)
26     GET_BROKER_CONFIG             → ``key=value`` lines (RocketMQ's key names); ext
                                     version (DataVersion JSON): served by ``admin/_config``
28     GET_BROKER_RUNTIME_INFO       → KVTable: the store's runtime info and the broker's keys
200    UPDATE_AND_CREATE_            body: SubscriptionGroupConfig JSON (camelCase; fields
       SUBSCRIPTIONGROUP             not given take the defaults, unknown ones are ignored)
                                     → SUCCESS; the table is persisted at once
202    GET_TOPIC_STATS_INFO          topic → TopicStatsTable, or TOPIC_NOT_EXIST
207    DELETE_SUBSCRIPTIONGROUP      groupName [, cleanOffset (RocketMQ 5) / removeOffset
                                     (4.9.8)] → SUCCESS (also for a group that is absent;
                                     built-in groups too, as RocketMQ does); with the flag the
                                     group's consumer offsets go too
208    GET_CONSUME_STATS             consumerGroup [, topic] → ConsumeStats
215    DELETE_TOPIC_IN_BROKER        topic → SUCCESS: config and consumer offsets removed,
                                     the store's consume queues destroyed (when it can)
300    QUERY_TOPIC_CONSUME_BY_WHO    topic → GroupList (online groups and groups with offsets)
=====  ============================  =========================================================

A missing or malformed header field or body, a bad topic or group name, a system topic, a
change requested of a slave: SYSTEM_ERROR with RocketMQ's remark (or one saying what is
wrong where RocketMQ has none). Handlers run on the broker's event loop; the ones
that read many queues or touch files run their work in a worker thread.

A group's consume TPS is the messages a second pulled by it over the last minute.
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) is served by the slave-sync processor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import shutil
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ...acl._table import request_names
from ...protocol._admin_bodies import (
    ConsumeStats,
    MessageQueue,
    OffsetWrapper,
    TopicOffset,
    encode_group_list,
    encode_kv_table,
    encode_topic_stats,
    loads,
)
from ...protocol._subscription_group import SubscriptionGroupConfig
from ...remoting import (
    Connection,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    ext_bool,
    ext_int,
    ext_str,
)
from ...remoting._limits import LogLimiter
from ...store.log._record import SCHEDULE_TOPIC
from .._errors import InvalidTopicError
from .._services import (
    HasClock,
    HasConfig,
    HasConsumers,
    HasEndpoints,
    HasGroups,
    HasOffsets,
    HasStats,
    HasStore,
    HasStoreConfig,
    HasTopics,
    TopicCreation,
)
from ..state._config_table import IF_DATA_VERSION_NOT
from ..state._consume_progress import consume_progress
from ..state._stats import GROUP_GET_NUMS
from ..state._topic_config import TOPIC_FILTER_TYPES, TopicConfig, validate_topic

log = logging.getLogger(__name__)
_refusals_log = LogLimiter(log)  # a few lines a minute, however many requests are refused

RC = ResponseCode
GET_BROKER_CONFIG = 26
# the configuration key of where the broker's gRPC front end listens ("host:port")
GRPC_ENDPOINT_KEY = "grpcEndpoint"
GET_TOPIC_STATS_INFO = 202
QUERY_TOPIC_CONSUME_BY_WHO = 300

BROKER_VERSION = 409  # MQVersion.Version.V4_9_8.ordinal()
BROKER_VERSION_DESC = "V4_9_8"
SLAVE_REMARK = (
    "Can't modify topic or subscription group from slave broker, "
    "please execute it from master broker."
)

MAX_PERM = 0xF  # PRIORITY | READ | WRITE | INHERIT
GROUP_MAX_LENGTH = 120  # RocketMQ 5's TopicValidator.validateGroup
_GROUP_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")

Handler = Callable[[RemotingCommand, Connection], RemotingCommand | Awaitable[RemotingCommand]]


class AdminContext(
    HasClock,
    HasConfig,
    HasConsumers,
    HasEndpoints,
    HasGroups,
    HasOffsets,
    HasStats,
    HasStore,
    HasStoreConfig,
    HasTopics,
    TopicCreation,
    Protocol,
):
    """What the administration codes use of the broker."""


class RequestError(ValueError):
    """A request the broker refuses: answered with ``code`` and the message as the remark.
    ``absent``: the answer only says that what was asked about does not exist (yet), as a
    console or mqadmin asking after every topic and group hears often: logged at DEBUG, not as
    a warning."""

    def __init__(self, message: str, code: int = RC.SYSTEM_ERROR, *, absent: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.absent = absent


def _required_str(ext: dict[str, Any], name: str) -> str:
    value = ext_str(ext, name)
    if value is None:
        raise RequestError(f"the custom field <{name}> is null")
    return value


def _required_name(value: str | None, name: str) -> str:
    """A topic or group name the request must carry (read through ``request_names``)."""
    if value is None:
        raise RequestError(f"the custom field <{name}> is null")
    return value


def _required_int(ext: dict[str, Any], name: str) -> int:
    try:
        value = ext_int(ext, name)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    if value is None:
        raise RequestError(f"the custom field <{name}> is null")
    return value


def _optional_int(ext: dict[str, Any], name: str, default: int) -> int:
    try:
        value = ext_int(ext, name, default)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    return default if value is None else value


def _ok(body: bytes = b"", **ext: str) -> RemotingCommand:
    return RemotingCommand.response(RC.SUCCESS, None, dict(ext) if ext else None, body)


def human_bytes(n: int) -> str:
    """RocketMQ's MixAll.humanReadableByteCount(bytes, si=false): ``"1.5 GiB"``."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class AdminProcessor:
    """Serves the administration codes for one BrokerController (loop thread)."""

    def __init__(self, broker: AdminContext) -> None:
        self.broker = broker
        self.store = broker.store
        self.broker_name = broker.config.broker_name
        self.started_ms = broker.clock.now_ms()

    def handlers(self) -> dict[int, Handler]:
        table: dict[int, Handler] = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
        }
        return {int(code): _guarded(fn) for code, fn in table.items()}

    # ---- topics -----------------------------------------------------------------------------

    def _check_topic(self, topic: str) -> None:
        try:
            validate_topic(topic)
        except InvalidTopicError as exc:
            raise RequestError(str(exc)) from None
        if self.broker.topics.is_system_topic(topic):
            raise RequestError(f"The topic[{topic}] is conflict with system topic.")

    async def update_and_create_topic(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        if not self.store.is_master:
            raise RequestError(SLAVE_REMARK)
        ext = cmd.ext_fields
        topic = _required_str(ext, "topic")
        _required_str(ext, "defaultTopic")
        read = _required_int(ext, "readQueueNums")
        write = _required_int(ext, "writeQueueNums")
        perm = _required_int(ext, "perm")
        filter_type = _required_str(ext, "topicFilterType")
        sys_flag = _optional_int(ext, "topicSysFlag", 0)
        order = ext_bool(ext, "order")
        if filter_type not in TOPIC_FILTER_TYPES:
            raise RequestError(f"topicFilterType = [{filter_type}] value invalid")
        self._check_topic(topic)
        if read < 0 or write < 0:
            raise RequestError(
                f"readQueueNums ({read}) and writeQueueNums ({write}) must not be negative"
            )
        if not 0 <= perm <= MAX_PERM:
            raise RequestError(f"perm {perm} is not a permission (2: W, 4: R, 6: RW)")
        config = TopicConfig(topic, read, write, perm, filter_type, sys_flag, order)
        log.info("update or create topic %s, called by %s", config, conn.peer)
        if self.broker.topics.select(topic) == config:
            return _ok()  # no change: no new data version, no registration
        await asyncio.to_thread(self.broker.topics.update, config)  # durable: an fsync
        self.broker.topic_changed(config)  # an incremental registration
        return _ok()

    def get_all_topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The whole topic table; rocketstore's slaves name the data version they hold
        (``ifDataVersionNot``, ``counter:timestamp``) and are answered ``unchanged`` with no
        body while the table is at that version (a check every second costs one small frame)."""
        held = cmd.ext_fields.get(IF_DATA_VERSION_NOT)
        if held is not None:
            if str(held) == self.broker.topics.data_version.text:
                return RemotingCommand.response(ResponseCode.SUCCESS, None, {"unchanged": "true"})
        text = self.broker.topics.encode(pretty=False)
        return _ok(text.encode("utf-8"))

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if not self.store.is_master:
            raise RequestError(SLAVE_REMARK)
        topic = _required_str(cmd.ext_fields, "topic")
        self._check_topic(topic)
        log.info("delete topic %s, called by %s", topic, conn.peer)
        broker = self.broker
        removed = await asyncio.to_thread(broker.topics.delete, topic)
        gone = broker.offsets.remove_topic(topic)
        queues = await asyncio.to_thread(self._delete_consume_queues, topic)
        log.info(
            "deleted topic %s: config %s, offsets of %d groups, %s consume queues",
            topic,
            "removed" if removed else "absent",
            len(gone),
            "store cannot delete" if queues is None else queues,
        )
        if removed:
            broker.topic_changed()
        return _ok()

    def _delete_consume_queues(self, topic: str) -> int | None:
        """Destroy the topic's consume queues through the store's ``delete_topic`` (worker
        thread); None when the store offers no way."""
        if topic == SCHEDULE_TOPIC:
            return 0
        delete = getattr(self.store, "delete_topic", None)
        if delete is None:
            return None
        result = delete(topic)
        return int(result) if isinstance(result, int) else 0

    def get_topic_stats_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = _required_name(request_names(cmd).topic, "topic")
        config = self.broker.topics.select(topic)
        if config is None:
            return RemotingCommand.response(RC.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.store
        table: dict[MessageQueue, TopicOffset] = {}
        for qid in range(config.write_queue_nums):
            lo = max(0, store.get_min_offset_in_queue(topic, qid))
            hi = max(0, store.get_max_offset_in_queue(topic, qid))
            ts = store.get_message_store_timestamp(topic, qid, hi - 1) if hi > 0 else 0
            table[MessageQueue(topic, self.broker_name, qid)] = TopicOffset(lo, hi, ts)
        return _ok(encode_topic_stats(table))

    def query_topic_consume_by_who(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = _required_name(request_names(cmd).topic, "topic")
        groups = self.broker.consumers.groups_by_topic(topic)
        groups |= self.broker.offsets.groups_by_topic(topic)
        return _ok(encode_group_list(sorted(groups)))

    # ---- subscription groups ----------------------------------------------------------------

    async def update_and_create_group(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: create or replace a group's settings with the
        body's (loop thread; the file is written in a worker thread)."""
        if not self.store.is_master:
            raise RequestError(SLAVE_REMARK)
        config = parse_group_body(cmd.body)
        groups = self.broker.groups
        log.info("update or create subscription group %s, called by %s", config, conn.peer)
        if groups.get(config.group_name) == config:
            return _ok()  # no change: no new data version, no write
        await asyncio.to_thread(groups.update, config)  # persists: fsyncs
        return _ok()

    async def delete_group(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """DELETE_SUBSCRIPTIONGROUP: forget a group's settings and, when asked, its consumer
        offsets (loop thread; the files are written in a worker thread)."""
        if not self.store.is_master:
            raise RequestError(SLAVE_REMARK)
        ext = cmd.ext_fields
        group = _required_str(ext, "groupName").strip()
        if not group:
            raise RequestError("The specified group is blank.")
        clean = ext_bool(ext, "cleanOffset") or ext_bool(ext, "removeOffset")
        broker = self.broker
        removed = await asyncio.to_thread(broker.groups.delete, group)  # persists when removed
        gone: list[str] = []
        if clean:
            gone = broker.offsets.remove_group(group)
            if gone:
                await asyncio.to_thread(broker.offsets.persist)
        log.info(
            "delete subscription group %s, called by %s: config %s, offsets %s",
            group,
            conn.peer,
            "removed" if removed else "absent",
            f"of {len(gone)} topics removed" if clean else "kept",
        )
        return _ok()

    # ---- consumer progress ------------------------------------------------------------------

    async def get_consume_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        names = request_names(cmd)  # as the ACL read them
        group = _required_name(names.group, "consumerGroup")
        stats = await asyncio.to_thread(self.consume_stats, group, names.topic or None)
        stats.consume_tps = self.consume_tps(group, {mq.topic for mq in stats.offset_table})
        return _ok(stats.encode())

    def consume_tps(self, group: str, topics: set[str]) -> float:
        """Messages a second handed to ``group`` from ``topics`` over the last minute (loop
        thread: the pull counters are the loop's)."""
        rolling = self.broker.stats.rolling
        return sum(rolling.tps(GROUP_GET_NUMS, f"{t}@{group}") for t in topics)

    def consume_stats(self, group: str, topic: str | None) -> ConsumeStats:
        """The group's progress on ``topic``, or on every topic it has offsets on (any
        thread; the reckoning is ``state._consume_progress``'s, which the metrics share)."""
        broker = self.broker
        skipped: list[str] = []
        stats = ConsumeStats()
        for q in consume_progress(
            self.store,
            broker.topics,
            broker.offsets,
            broker.consumers,
            group,
            topic,
            skipped=skipped,
        ):
            stats.offset_table[MessageQueue(q.topic, self.broker_name, q.queue_id)] = OffsetWrapper(
                q.broker_offset, q.consumer_offset, q.last_timestamp
            )
        for name in skipped:
            log.warning("consume stats of %s: topic %s does not exist", group, name)
        return stats

    # ---- broker information -----------------------------------------------------------------

    async def get_broker_runtime_info(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        info = await asyncio.to_thread(self.runtime_info)
        return _ok(encode_kv_table(info))

    def runtime_info(self) -> dict[str, str]:
        """The store's runtime info plus the broker's own keys (any thread)."""
        store = self.store
        info = dict(store.runtime_info())
        stats = store.statistics()
        info.update(
            {
                "brokerVersionDesc": BROKER_VERSION_DESC,
                "brokerVersion": str(BROKER_VERSION),
                # RocketMQ 5's: whether this broker runs a master's services (mqadmin
                # clusterList's #Activated), and its spelling of the pull rate
                "brokerActive": "true" if store.is_master else "false",
                **self.broker.stats.daily.totals(
                    stats.put_message_times_total, stats.get_transferred_total
                ),
                # no request queues: requests are served as they arrive; the capacities are
                # RocketMQ's defaults, as tools read them
                "sendThreadPoolQueueSize": "0",
                "sendThreadPoolQueueCapacity": "10000",
                "pullThreadPoolQueueSize": "0",
                "pullThreadPoolQueueCapacity": "100000",
                "queryThreadPoolQueueSize": "0",
                "queryThreadPoolQueueCapacity": "20000",
                "EndTransactionQueueSize": "0",
                "EndTransactionThreadPoolQueueCapacity": "100000",
                "sendThreadPoolQueueHeadWaitTimeMills": "0",
                "pullThreadPoolQueueHeadWaitTimeMills": "0",
                "queryThreadPoolQueueHeadWaitTimeMills": "0",
                "pageCacheLockTimeMills": "0",
                "dispatchBehindBytes": str(store.dispatch_behind_bytes()),
                "earliestMessageTimeStamp": str(store.get_earliest_message_time()),
                "startAcceptSendRequestTimeStamp": "0",
                "remainHowManyDataToFlush": human_bytes(
                    max(0, store.max_phy_offset - store.flushed_phy_offset())
                ),
            }
        )
        root = os.fspath(self.broker.store_config.store_path_root_dir)
        try:
            usage = shutil.disk_usage(root)
        except OSError:
            pass
        else:
            info["commitLogDirCapacity"] = (
                f"Total : {human_bytes(usage.total)}, Free : {human_bytes(usage.free)}."
            )
        return info


# the store's settings whose RocketMQ names are not the camelCase of rocketstore's
STORE_KEY_NAMES = {
    "warm_mapped_file_enable": "warmMapedFileEnable",
    "flush_least_pages_when_warm_mapped_file": "flushLeastPagesWhenWarmMapedFile",
    "destroy_mapped_file_interval_forcibly": "destroyMapedFileIntervalForcibly",
    "check_crc_on_recover": "checkCRCOnRecover",
    "os_page_cache_busy_timeout_mills": "osPageCacheBusyTimeOutMills",
}


SECRET_KEYS = frozenset({"innerClientAuthenticationCredentials", "initAuthenticationUser"})
"""Settings never shown (GET_BROKER_CONFIG): they hold a secret key."""


def config_texts(config: Any, store_config: Any) -> dict[str, str]:
    """Broker and store settings by RocketMQ's names (BrokerConfig's, MessageStoreConfig's
    spelling, "Maped" included), values as text; broker.conf's other keys as given. Secrets
    (``SECRET_KEYS``) are left out."""
    from .._config import _CONF_KEYS

    out: dict[str, str] = {}
    broker_names = {v: k for k, v in _CONF_KEYS.items()}
    for f in dataclasses.fields(config):
        if f.name == "config_file" or broker_names.get(f.name) in SECRET_KEYS:
            continue
        out[broker_names.get(f.name) or _camel(f.name)] = _text(getattr(config, f.name))
    for f in dataclasses.fields(store_config):
        if f.name in ("extra", "store_host", "store_port"):
            continue
        key = STORE_KEY_NAMES.get(f.name) or _camel(f.name)
        out.setdefault(key, _text(getattr(store_config, f.name)))
    for key, value in store_config.extra:
        if key not in SECRET_KEYS:
            out.setdefault(key, value)
    return out


def validate_group(group: str) -> None:
    """RequestError unless ``group`` is a name RocketMQ 5 accepts: not blank, only
    ``[%|a-zA-Z0-9_-]``, at most 120 characters."""
    if not group.strip():
        raise RequestError("The specified group is blank.")
    if not _GROUP_NAME.fullmatch(group):
        raise RequestError(
            f"The specified group: {group}, contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    if len(group) > GROUP_MAX_LENGTH:
        raise RequestError(
            f"The specified group: {group}, is longer than group max length: {GROUP_MAX_LENGTH}"
        )


def parse_group_body(body: bytes | bytearray | memoryview | None) -> SubscriptionGroupConfig:
    """The SubscriptionGroupConfig of an UPDATE_AND_CREATE_SUBSCRIPTIONGROUP body (the JSON
    object RocketMQ's admin writes); RequestError saying what is wrong with it."""
    if not body:
        raise RequestError("the request body is empty: a SubscriptionGroupConfig JSON was expected")
    try:
        doc = loads(body)
    except ValueError as exc:
        raise RequestError(f"the body is not a SubscriptionGroupConfig JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RequestError(f"the body is not a SubscriptionGroupConfig JSON object: {doc!r:.80}")
    if not isinstance(doc.get("groupName"), str):
        raise RequestError("the SubscriptionGroupConfig has no groupName")
    validate_group(doc["groupName"])
    try:
        config = SubscriptionGroupConfig.from_json(doc)
    except ValueError as exc:
        raise RequestError(f"bad SubscriptionGroupConfig: {exc}") from None
    for name, value in (
        ("retryQueueNums", config.retry_queue_nums),
        ("retryMaxTimes", config.retry_max_times),
    ):
        if value < 0:
            raise RequestError(f"bad SubscriptionGroupConfig: {name} {value} is negative")
    return config


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _guarded(fn: Callable[[RemotingCommand, Connection], Any]) -> Handler:
    """A handler that answers a refused request with its code and remark, not a stack trace."""

    def refuse(cmd: RemotingCommand, conn: Connection, exc: RequestError) -> RemotingCommand:
        if exc.absent:  # an answer, not a fault: not counted against the warnings' share
            log.debug("request code %s from %s answered: %s", cmd.code, conn.peer, exc)
        else:
            _refusals_log.log(
                logging.WARNING, "request code %s from %s refused: %s", cmd.code, conn.peer, exc
            )
        return RemotingCommand.response(exc.code, str(exc))

    async def finish(cmd: RemotingCommand, conn: Connection, pending: Any) -> RemotingCommand:
        try:
            result: RemotingCommand = await pending
        except RequestError as exc:
            return refuse(cmd, conn, exc)
        return result

    def handle(cmd: RemotingCommand, conn: Connection) -> Any:
        try:
            result = fn(cmd, conn)
        except RequestError as exc:
            return refuse(cmd, conn, exc)
        if isinstance(result, RemotingCommand):
            return result
        return finish(cmd, conn, result)

    return handle
