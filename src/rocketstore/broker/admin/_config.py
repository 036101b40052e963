"""The broker's settings at run time (RocketMQ 4.9.8's AdminBrokerProcessor.updateBrokerConfig
and getBrokerConfig): UPDATE_BROKER_CONFIG (25) and GET_BROKER_CONFIG (26).

GET_BROKER_CONFIG answers every setting as RocketMQ's broker prints them (see
``admin/_config_keys``: RocketMQ's key names, its defaults for the keys rocketstore does not
use, in its order) with ext ``version``, the settings' DataVersion JSON (its counter moves at
each applied update).

UPDATE_BROKER_CONFIG's body is properties text (``key=value`` lines, RocketMQ's key names).
The answer:

- a key of RocketMQ's black list (``brokerConfigPath``, ``rocketmqHome``,
  ``configBlackList``): NO_PERMISSION "Can not update config in black list.";
- a key this broker reads on every use (:data:`RUNTIME_KEYS`) with a valid value: SUCCESS,
  applied at once. With a broker.conf (``config_file``) the keys are first written to it
  (their lines replaced, or added at its end; the rest of the file kept; the new file written
  beside it, fsynced and renamed over it), as RocketMQ rewrites its config file, so they hold
  after a restart; a file that cannot be written: SYSTEM_ERROR and nothing applied. Without
  one the change is in memory only and the remark says so. ``brokerPermission`` is
  registered with the name servers at once with a new data version, as RocketMQ does: a
  permission that is not read-write replaces each topic's in the registered table;
- a known setting that rocketstore fixes at start (the store's, the ports, ...), an unknown
  key, a value that does not parse or a body that is not properties text: SYSTEM_ERROR
  saying which, and nothing is applied.

An empty body changes nothing and is answered SUCCESS, as RocketMQ does. Loop thread; the
file is written in a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ...protocol._properties import (
    BLACK_LIST_REMARK,
    BROKER_BLACK_LIST,
    PropertiesError,
    java_bool,
    java_int,
    parse_properties,
)
from ...remoting import Connection, RemotingCommand, ResponseCode
from ...store._durable import fsync_dir, replace_synced
from .._config import BrokerConfig
from .._services import HasClock, HasGroups, HasStoreConfig, HasTopics
from ._admin import (
    GET_BROKER_CONFIG,
    GRPC_ENDPOINT_KEY,
    Handler,
    RequestError,
    _guarded,
    _ok,
    config_texts,
)
from ._config_keys import ROCKETMQ_KEYS, rocketmq_config_lines

log = logging.getLogger(__name__)

UPDATE_BROKER_CONFIG = 25
APPLIED_REMARK = (
    "applied in memory, not persisted: set {keys} in broker.conf to keep it after a restart"
)
PERSISTED_REMARK = "applied and written to {path}"


_bool = java_bool


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An int setting as RocketMQ's Integer.parseInt reads it (``java_int``), within
    [lo, hi]."""

    def parse(text: str) -> int:
        return java_int(text, lo, hi)

    return parse


# RocketMQ's key → (BrokerConfig field, parser): what the broker reads on every use
RUNTIME_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "brokerPermission": ("broker_permission", _int_in(0, 7)),
    "autoCreateTopicEnable": ("auto_create_topic_enable", _bool),
    "autoCreateSubscriptionGroup": ("auto_create_subscription_group", _bool),
    "defaultTopicQueueNums": ("default_topic_queue_nums", _int_in(1, 1024)),
    "longPollingEnable": ("long_polling_enable", _bool),
    "shortPollingTimeMills": ("short_polling_time_mills", _int_in(0, 2**31 - 1)),
    "slaveReadEnable": ("slave_read_enable", _bool),
    "rejectTransactionMessage": ("reject_transaction_message", _bool),
    "flushConsumerOffsetInterval": ("flush_consumer_offset_interval", _int_in(1, 2**31 - 1)),
}


class ConfigUpdateContext(HasClock, HasGroups, HasStoreConfig, HasTopics, Protocol):
    """What a configuration update changes of the broker: its settings (replaced whole), the
    topic and group tables' auto-creation switches, the name-server registration; and where
    its gRPC front end listens (GET_BROKER_CONFIG's ``grpcEndpoint``)."""

    config: BrokerConfig
    grpc_endpoint: str | None

    @property
    def address(self) -> str: ...

    def topic_changed(self) -> None: ...


def rewrite_conf_text(text: str, values: dict[str, str]) -> str:
    """A broker.conf's text with ``values`` set: the line of each key replaced by
    ``key=value`` (every such line, when the key is there more than once), keys not there
    added at the end; comments, blank lines and the other keys kept."""
    out: list[str] = []
    done: set[str] = set()
    for line in text.splitlines():
        stripped = line.strip()
        key = None
        if stripped and stripped[0] not in "#!":
            seps = [i for i in (stripped.find("="), stripped.find(":")) if i >= 0]
            if seps:
                key = stripped[: min(seps)].strip()
        if key in values:
            out.append(f"{key}={values[key]}")
            done.add(key)
        else:
            out.append(line)
    out.extend(f"{k}={v}" for k, v in values.items() if k not in done)
    return "\n".join(out) + "\n"


def write_conf(path: str | os.PathLike[str], values: dict[str, str]) -> None:
    """Set ``values`` in the broker.conf at ``path`` (:func:`rewrite_conf_text`): the new text
    written to ``path.tmp``, fsynced, renamed over it, the directory fsynced. OSError (or
    UnicodeDecodeError) when it cannot be read or written; the file is then unchanged."""
    conf = Path(path)
    text = conf.read_text(encoding="utf-8")
    replace_synced(conf, rewrite_conf_text(text, values).encode("utf-8"))
    fsync_dir(conf.parent if str(conf.parent) else Path("."))


class ConfigAdminProcessor:
    def __init__(self, broker: ConfigUpdateContext) -> None:
        self.broker = broker
        # the settings' DataVersion (GET_BROKER_CONFIG's ext version)
        self.version_counter = 0
        self.version_timestamp = broker.clock.now_ms()

    def handlers(self) -> dict[int, Handler]:
        return {
            UPDATE_BROKER_CONFIG: _guarded(self.update_broker_config),
            GET_BROKER_CONFIG: _guarded(self.get_broker_config),
        }

    def config_values(self) -> tuple[dict[str, str], list[str]]:
        """The broker's and the store's settings by RocketMQ's names, as text, and the order
        of those that are not RocketMQ's."""
        broker = self.broker
        values = config_texts(broker.config, broker.store_config)
        host = broker.address.rpartition(":")[0]
        values["brokerIP1"] = broker.config.broker_ip or host
        values.setdefault("brokerIP2", values["brokerIP1"])
        if broker.grpc_endpoint:
            # where this broker's gRPC front end listens (other brokers route 5.x clients here)
            values[GRPC_ENDPOINT_KEY] = broker.grpc_endpoint
        return values, list(values)

    def get_broker_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        values, order = self.config_values()
        lines = rocketmq_config_lines(values, order)
        body = "".join(f"{k}={v}\n" for k, v in lines).encode("utf-8")
        version = f'{{"counter":{self.version_counter},"timestamp":{self.version_timestamp}}}'
        return _ok(body, version=version)

    def parse_update(self, body: bytes | bytearray | memoryview) -> dict[str, Any]:
        """BrokerConfig field → new value of an update body; RequestError for anything that
        cannot be applied (nothing is, then)."""
        try:
            values = parse_properties(body)
        except PropertiesError as exc:
            raise RequestError(f"string2Properties error: {exc}") from None
        known = config_texts(self.broker.config, self.broker.store_config)
        fixed = sorted(k for k in values if k not in RUNTIME_KEYS and k in known)
        if fixed:
            raise RequestError(
                f"{', '.join(fixed)} cannot change while the broker runs: set "
                f"{'them' if len(fixed) > 1 else 'it'} in broker.conf and restart (at run time: "
                f"{', '.join(sorted(RUNTIME_KEYS))})"
            )
        unused = sorted(k for k in values if k not in RUNTIME_KEYS and k in ROCKETMQ_KEYS)
        if unused:
            raise RequestError(
                f"{', '.join(unused)}: RocketMQ's setting{'s' if len(unused) > 1 else ''}, not "
                "used by this broker (GET_BROKER_CONFIG shows RocketMQ's default)"
            )
        unknown = sorted(k for k in values if k not in RUNTIME_KEYS)
        if unknown:
            raise RequestError(f"unknown broker setting: {', '.join(unknown)}")
        changes: dict[str, Any] = {}
        for key, text in values.items():
            name, parse = RUNTIME_KEYS[key]
            try:
                changes[name] = parse(text)
            except ValueError as exc:
                raise RequestError(f"{key}: {exc}") from None
        return changes

    async def update_broker_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if not cmd.body:
            return RemotingCommand.response(ResponseCode.SUCCESS)
        try:
            texts = parse_properties(cmd.body)
        except PropertiesError as exc:
            raise RequestError(f"string2Properties error: {exc}") from None
        keys = texts.keys()
        if BROKER_BLACK_LIST & keys:
            return RemotingCommand.response(ResponseCode.NO_PERMISSION, BLACK_LIST_REMARK)
        changes = self.parse_update(cmd.body)
        broker = self.broker
        old = broker.config
        try:
            new = dataclasses.replace(old, **changes)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        path = old.config_file
        if path:
            try:
                await asyncio.to_thread(write_conf, path, {k: texts[k].strip() for k in texts})
            except (OSError, UnicodeDecodeError) as exc:
                raise RequestError(
                    f"cannot write the broker config file {path}: {exc}; nothing changed"
                ) from None
        broker.config = new
        self.version_counter += 1
        self.version_timestamp = broker.clock.now_ms()
        broker.topics.auto_create_topic_enable = broker.config.auto_create_topic_enable
        broker.groups.auto_create_subscription_group = broker.config.auto_create_subscription_group
        log.info("broker config updated by %s: %s", conn.peer, changes)
        if "brokerPermission" in keys:
            # the name servers take the next registration's table, with the new permission
            broker.topics.next_version()
            broker.topic_changed()
        if path:
            remark = PERSISTED_REMARK.format(path=path)
        else:
            remark = APPLIED_REMARK.format(keys=", ".join(sorted(keys)))
        return RemotingCommand.response(ResponseCode.SUCCESS, remark)
