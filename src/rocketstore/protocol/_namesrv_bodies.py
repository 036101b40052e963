"""The name server's message bodies (RocketMQ 4.9.8's protocol classes), encoded and decoded.

Every body is fastjson text: bean fields in alphabetical order, ``null`` fields left out, maps in
the order given (the route table hands them over in Java's HashMap order) and Java ``Long`` map
keys bare (``{0:"127.0.0.1:10911"}``). ``TopicRouteData.encode(standard_json=True)`` is the form
RocketMQ sends to clients of version 4.9.4 and later (or that ask with
``acceptStandardJsonOnly``): every map sorted by key, integer keys quoted, and strings escaped
the way fastjson's BrowserCompatible feature does (``/``, control characters and everything
from U+007F on as escapes).

Shapes::

    TopicRouteData      {"brokerDatas":[BrokerData...],"filterServerTable":{addr:[addr...]},
                         "orderTopicConf":"...","queueDatas":[QueueData...]}
    BrokerData          {"brokerAddrs":{0:"host:port",1:"host:port"},"brokerName":..,"cluster":..}
    QueueData           {"brokerName":..,"perm":7,"readQueueNums":8,"topicSysFlag":0,
                         "writeQueueNums":8}
    DataVersion         {"counter":3,"timestamp":1700000000000}
    TopicConfig         {"order":false,"perm":6,"readQueueNums":16,"topicFilterType":"SINGLE_TAG",
                         "topicName":"T","topicSysFlag":0,"writeQueueNums":16}
    RegisterBrokerBody  {"filterServerList":[],"topicConfigSerializeWrapper":
                         {"dataVersion":DataVersion,"topicConfigTable":{topic:TopicConfig}}}
    ClusterInfo         {"brokerAddrTable":{name:BrokerData},"clusterAddrTable":{cluster:[name]}}
    TopicList           {"topicList":[topic...]}
    KVTable             {"table":{key:value}}

RegisterBrokerBody, compressed (the broker's ``compressedRegister``): zlib (deflate) of::

    int32 n + DataVersion JSON | int32 topic count
    | repeated (int32 n + "topic readQueueNums writeQueueNums perm topicFilterType")
    | int32 n + filter server list JSON

(the compressed form drops ``topicSysFlag`` and ``order``, as RocketMQ's does). It inflates to at
most ``max_size`` bytes (``MAX_REGISTER_BODY`` unless the name server is told otherwise): a
larger one is refused before it takes more memory than that.

Pure functions and immutable values; any thread.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._inflate import inflate
from ..remoting import _fastjson

MASTER_ID = 0
PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4

# TopicConfig's defaults in RocketMQ 4.9.8 (what a field left out of the JSON means)
DEFAULT_QUEUE_NUMS = 16
DEFAULT_PERM = PERM_READ | PERM_WRITE
DEFAULT_FILTER_TYPE = "SINGLE_TAG"

_INT32 = struct.Struct(">i")

MAX_REGISTER_BODY = 64 * 1024 * 1024
"""What a compressed RegisterBrokerBody may inflate to: some 800,000 topic lines, four times
the largest frame (16 MiB) a broker could send the same body in uncompressed."""


class BodyError(ValueError):
    """A body that cannot be decoded as the class it should hold."""


# ---- values ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataVersion:
    """A broker's topic-config version: changes whenever a topic is created or changed."""

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    def encode(self) -> bytes:
        return _fastjson.dumps(self.to_json()).encode()

    @classmethod
    def of(cls, value: Any) -> DataVersion:
        """A DataVersion from itself, its JSON object (``counter``, ``timestamp``) or any object
        with ``counter`` and ``timestamp`` attributes (the broker's own DataVersion)."""
        if isinstance(value, DataVersion):
            return value
        try:
            if not isinstance(value, Mapping):
                return cls(int(value.timestamp), int(value.counter))
            return cls(int(value.get("timestamp", 0)), int(value.get("counter", 0)))
        except (TypeError, ValueError, AttributeError) as exc:
            raise BodyError(f"not a DataVersion: {value!r}") from exc

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> DataVersion:
        return cls.of(_object(data, "DataVersion"))


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker group's queues of a topic, as the route lists them."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_topic_config(cls, broker_name: str, config: Mapping[str, Any]) -> QueueData:
        c = topic_config(config)
        return cls(
            broker_name, c["readQueueNums"], c["writeQueueNums"], c["perm"], c["topicSysFlag"]
        )


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker group: its cluster, its name and its addresses by broker id (0 = master)."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": dict(self.broker_addrs),
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BrokerData:
        addrs = obj.get("brokerAddrs") or {}
        return cls(
            str(obj.get("cluster")),
            str(obj.get("brokerName")),
            {int(k): str(v) for k, v in addrs.items()},
        )


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """A topic's route: the queue data of every broker group that has it, those groups'
    addresses and their filter servers."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    filter_server_table: Mapping[str, Sequence[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {k: list(v) for k, v in self.filter_server_table.items()},
        }
        if self.order_topic_conf is not None:
            obj["orderTopicConf"] = self.order_topic_conf
        obj["queueDatas"] = [q.to_json() for q in self.queue_datas]
        return obj

    def encode(self, *, standard_json: bool = False) -> bytes:
        """fastjson's default form (bare integer keys), or the standard form that RocketMQ
        sends clients of 4.9.4 and later."""
        if standard_json:
            return _fastjson.dumps_standard(self.to_json()).encode()
        return _fastjson.dumps(self.to_json()).encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> TopicRouteData:
        obj = _object(data, "TopicRouteData")
        try:
            return cls(
                tuple(
                    QueueData(
                        str(q["brokerName"]),
                        int(q.get("readQueueNums", 0)),
                        int(q.get("writeQueueNums", 0)),
                        int(q.get("perm", 0)),
                        int(q.get("topicSysFlag", 0)),
                    )
                    for q in obj.get("queueDatas") or ()
                ),
                tuple(BrokerData.from_json(b) for b in obj.get("brokerDatas") or ()),
                {str(k): list(v) for k, v in (obj.get("filterServerTable") or {}).items()},
                obj.get("orderTopicConf"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BodyError(f"not a TopicRouteData: {exc}") from exc


@dataclass(frozen=True, slots=True)
class TopicConfigWrapper:
    """A broker's topic configs as it registers them: ``topic_config_table`` maps a topic to its
    TopicConfig JSON object (see :func:`topic_config`)."""

    data_version: DataVersion = DataVersion()
    topic_config_table: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {
                name: topic_config(config, name) for name, config in self.topic_config_table.items()
            },
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TopicConfigWrapper:
        if not isinstance(obj, Mapping):
            raise BodyError("topicConfigSerializeWrapper is not an object")
        table = obj.get("topicConfigTable") or {}
        if not isinstance(table, Mapping):
            raise BodyError("topicConfigTable is not an object")
        configs: dict[str, Mapping[str, Any]] = {}
        for name, config in table.items():
            if not isinstance(config, Mapping):
                raise BodyError(f"topic config of {name!r} is not an object")
            configs[str(name)] = topic_config(config, str(name))
        return cls(DataVersion.of(obj.get("dataVersion") or {}), configs)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> TopicConfigWrapper:
        return cls.from_json(_object(data, "TopicConfigSerializeWrapper"))


def body_crc32(body: bytes | bytearray | memoryview) -> int:
    """RocketMQ's body checksum (REGISTER_BROKER's ``bodyCrc32``): CRC-32 with the sign bit
    cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class RegisterBrokerBody:
    """REGISTER_BROKER's body: the broker's topic configs and its filter servers."""

    topic_config_wrapper: TopicConfigWrapper = TopicConfigWrapper()
    filter_server_list: Sequence[str] = ()

    def encode(self, compressed: bool = False) -> bytes:
        if not compressed:
            obj = {
                "filterServerList": list(self.filter_server_list),
                "topicConfigSerializeWrapper": self.topic_config_wrapper.to_json(),
            }
            return _fastjson.dumps(obj).encode()
        out = bytearray()
        _put_chunk(out, self.topic_config_wrapper.data_version.encode())
        table = self.topic_config_wrapper.topic_config_table
        out += _INT32.pack(len(table))
        for name, config in table.items():
            c = topic_config(config, name)
            line = (
                f"{c['topicName']} {c['readQueueNums']} {c['writeQueueNums']} {c['perm']} "
                f"{c['topicFilterType']}"
            )
            _put_chunk(out, line.encode())
        _put_chunk(out, _fastjson.dumps(list(self.filter_server_list)).encode())
        return zlib.compress(bytes(out), 9)

    @classmethod
    def decode(
        cls,
        data: bytes | bytearray | memoryview,
        compressed: bool = False,
        max_size: int = MAX_REGISTER_BODY,
    ) -> RegisterBrokerBody:
        if not compressed:
            obj = _object(data, "RegisterBrokerBody")
            wrapper_obj = obj.get("topicConfigSerializeWrapper")
            wrapper = (
                TopicConfigWrapper.from_json(wrapper_obj)
                if wrapper_obj is not None
                else TopicConfigWrapper()
            )
            filters = obj.get("filterServerList")
            return cls(wrapper, [str(f) for f in filters] if filters is not None else [])
        try:
            raw = inflate(data, max_size, what="compressed RegisterBrokerBody")
        except ValueError as exc:
            raise BodyError(str(exc)) from None
        pos = 0
        chunk, pos = _take_chunk(raw, pos)
        version = DataVersion.decode(chunk)
        count, pos = _take_int(raw, pos)
        configs: dict[str, Mapping[str, Any]] = {}
        for _ in range(count):
            chunk, pos = _take_chunk(raw, pos)
            try:
                parts = chunk.decode("utf-8").split(" ")
            except UnicodeDecodeError as exc:
                raise BodyError(f"compressed topic config {chunk[:64]!r}: {exc}") from None
            if len(parts) != 5:
                continue  # RocketMQ's TopicConfig.decode skips such a line too
            try:
                config = {
                    "topicName": parts[0],
                    "readQueueNums": int(parts[1]),
                    "writeQueueNums": int(parts[2]),
                    "perm": int(parts[3]),
                    "topicFilterType": parts[4],
                }
            except ValueError as exc:
                raise BodyError(f"compressed topic config {chunk!r}: {exc}") from exc
            configs[parts[0]] = topic_config(config)
        chunk, pos = _take_chunk(raw, pos)
        try:
            filters = json.loads(chunk)
        except ValueError:
            filters = []  # RocketMQ logs and registers without filter servers
        return cls(TopicConfigWrapper(version, configs), [str(f) for f in filters or ()])


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What the name server answers a registration with: for a slave, its master's HA address
    and broker address; the name server's order-topic KV table when it has one."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    kv_table: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO's body: broker groups by name, broker names by cluster."""

    broker_addr_table: Mapping[str, BrokerData]
    cluster_addr_table: Mapping[str, Sequence[str]]

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {k: v.to_json() for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: list(v) for k, v in self.cluster_addr_table.items()},
        }

    def encode(self) -> bytes:
        return _fastjson.dumps(self.to_json()).encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> ClusterInfo:
        obj = _object(data, "ClusterInfo")
        try:
            brokers = {
                str(k): BrokerData.from_json(v)
                for k, v in (obj.get("brokerAddrTable") or {}).items()
            }
            clusters = {
                str(k): [str(n) for n in v] for k, v in (obj.get("clusterAddrTable") or {}).items()
            }
        except (TypeError, ValueError, AttributeError) as exc:
            raise BodyError(f"not a ClusterInfo: {exc}") from exc
        return cls(brokers, clusters)


def encode_topic_list(topics: Sequence[str], broker_addr: str | None = None) -> bytes:
    """TopicList's body (``brokerAddr`` left out when None)."""
    obj: dict[str, Any] = {}
    if broker_addr is not None:
        obj["brokerAddr"] = broker_addr
    obj["topicList"] = list(topics)
    return _fastjson.dumps(obj).encode()


def decode_topic_list(data: bytes | bytearray | memoryview) -> list[str]:
    topics = _object(data, "TopicList").get("topicList") or []
    return [str(t) for t in topics]


def decode_kv_table(data: bytes | bytearray | memoryview) -> dict[str, str]:
    table = _object(data, "KVTable").get("table") or {}
    return {str(k): str(v) for k, v in table.items()}


def topic_config(config: Mapping[str, Any], name: str | None = None) -> dict[str, Any]:
    """A TopicConfig JSON object with every field, in fastjson's order: the fields ``config``
    leaves out take RocketMQ's defaults; ``topicName`` defaults to ``name``."""
    try:
        return {
            "order": bool(config.get("order", False)),
            "perm": int(config.get("perm", DEFAULT_PERM)),
            "readQueueNums": int(config.get("readQueueNums", DEFAULT_QUEUE_NUMS)),
            "topicFilterType": str(config.get("topicFilterType", DEFAULT_FILTER_TYPE)),
            "topicName": str(config.get("topicName", name)),
            "topicSysFlag": int(config.get("topicSysFlag", 0)),
            "writeQueueNums": int(config.get("writeQueueNums", DEFAULT_QUEUE_NUMS)),
        }
    except (TypeError, ValueError) as exc:
        raise BodyError(f"bad topic config {config!r}: {exc}") from exc


# ---- helpers --------------------------------------------------------------------------------


def _object(data: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    try:
        obj = _fastjson.loads(bytes(data))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BodyError(f"{what}: not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise BodyError(f"{what}: not a JSON object")
    return obj


def _put_chunk(out: bytearray, data: bytes) -> None:
    out += _INT32.pack(len(data))
    out += data


def _take_int(raw: bytes, pos: int) -> tuple[int, int]:
    if pos + 4 > len(raw):
        raise BodyError("compressed RegisterBrokerBody ends early")
    return _INT32.unpack_from(raw, pos)[0], pos + 4


def _take_chunk(raw: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _take_int(raw, pos)
    if n < 0 or pos + n > len(raw):
        raise BodyError("compressed RegisterBrokerBody ends early")
    return raw[pos : pos + n], pos + n
