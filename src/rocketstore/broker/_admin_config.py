"""UPDATE_BROKER_CONFIG (25): change broker settings while the broker serves (RocketMQ 4.9.8's
AdminBrokerProcessor.updateBrokerConfig).

The body is properties text (``key=value`` lines, RocketMQ's key names). The answer:

- a key of RocketMQ's black list (``brokerConfigPath``, ``rocketmqHome``,
  ``configBlackList``): NO_PERMISSION "Can not update config in black list.";
- a key this broker reads on every use (:data:`RUNTIME_KEYS`) with a valid value: SUCCESS,
  applied at once, in memory only: the remark says so (RocketMQ rewrites its broker config
  file; put the key in broker.conf to keep it after a restart); ``brokerPermission`` is
  registered with the name servers at once with a new data version, as RocketMQ does: a
  permission that is not read-write replaces each topic's in the registered table;
- a known setting that rocketstore fixes at start (the store's, the ports, ...), an unknown
  key, a value that does not parse or a body that is not properties text: SYSTEM_ERROR
  saying which, and nothing is applied.

An empty body changes nothing and is answered SUCCESS, as RocketMQ does. Loop thread.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..namesrv._properties import (
    BLACK_LIST_REMARK,
    BROKER_BLACK_LIST,
    PropertiesError,
    parse_properties,
)
from ..remoting import Connection, RemotingCommand, ResponseCode
from ._admin import Handler, RequestError, _guarded, config_texts
from ._config import BrokerConfig
from ._services import HasGroups, HasStoreConfig, HasTopics

log = logging.getLogger(__name__)

UPDATE_BROKER_CONFIG = 25
APPLIED_REMARK = (
    "applied in memory, not persisted: set {keys} in broker.conf to keep it after a restart"
)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return low == "true"


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise ValueError(f"{value} is not within [{lo}, {hi}]")
        return value

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


class ConfigUpdateContext(HasGroups, HasStoreConfig, HasTopics, Protocol):
    """What a configuration update changes of the broker: its settings (replaced whole), the
    topic and group tables' auto-creation switches, the name-server registration."""

    config: BrokerConfig

    def topic_changed(self) -> None: ...


class ConfigAdminProcessor:
    def __init__(self, broker: ConfigUpdateContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {UPDATE_BROKER_CONFIG: _guarded(self.update_broker_config)}

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

    def update_broker_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if not cmd.body:
            return RemotingCommand.response(ResponseCode.SUCCESS)
        try:
            keys = parse_properties(cmd.body).keys()
        except PropertiesError as exc:
            raise RequestError(f"string2Properties error: {exc}") from None
        if BROKER_BLACK_LIST & keys:
            return RemotingCommand.response(ResponseCode.NO_PERMISSION, BLACK_LIST_REMARK)
        changes = self.parse_update(cmd.body)
        broker = self.broker
        old = broker.config
        try:
            broker.config = dataclasses.replace(old, **changes)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        broker.topics.auto_create_topic_enable = broker.config.auto_create_topic_enable
        broker.groups.auto_create_subscription_group = broker.config.auto_create_subscription_group
        log.info("broker config updated by %s: %s", conn.peer, changes)
        if "brokerPermission" in keys:
            # the name servers take the next registration's table, with the new permission
            broker.topics.next_version()
            broker.topic_changed()
        remark = APPLIED_REMARK.format(keys=", ".join(sorted(keys)))
        return RemotingCommand.response(ResponseCode.SUCCESS, remark)
