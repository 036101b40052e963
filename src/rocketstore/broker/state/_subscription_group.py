"""Subscription groups: per consumer group settings (retry queues, max retries, whether consumers
are told of membership changes), persisted in ``config/subscriptionGroup.json``.

The file is what RocketMQ 4.9.8 writes (fastjson pretty format, bean fields sorted by name)::

    {
    \t"dataVersion":{
    \t\t"counter":1,
    \t\t"timestamp":1700000000000
    \t},
    \t"subscriptionGroupTable":{
    \t\t"G1":{
    \t\t\t"brokerId":0,
    \t\t\t"consumeBroadcastEnable":true,
    \t\t\t"consumeEnable":true,
    \t\t\t"consumeFromMinEnable":true,
    \t\t\t"groupName":"G1",
    \t\t\t"notifyConsumerIdsChangedEnable":true,
    \t\t\t"retryMaxTimes":16,
    \t\t\t"retryQueueNums":1,
    \t\t\t"whichBrokerWhenConsumeSlowly":1
    \t\t}
    \t}
    }

A group is created with the defaults the first time a client uses it (``find_or_create``) while
autoCreateSubscriptionGroup is on, and always for system groups (``CID_RMQ_SYS_*``). RocketMQ's
built-in groups (TOOLS_CONSUMER, FILTERSRV_CONSUMER, SELF_TEST_C_GROUP, CID_ONS-HTTP-PROXY,
CID_ONSAPI_PULL, CID_ONSAPI_PERMISSION, CID_ONSAPI_OWNER) are present from the start. Every change
bumps the data version and is durable before the call returns (a line in
``subscriptionGroup.json.changes.<n>``, the file rewritten now and then: see ``_config_table``).

Threads: every method may be called from any thread (one lock guards the table).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...store._clock import SYSTEM_CLOCK, Clock
from ._config_table import VersionedConfigTable
from ._json_file import as_bool, as_int

log = logging.getLogger(__name__)

SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP = "FILTERSRV_CONSUMER"
SELF_TEST_CONSUMER_GROUP = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PULL_GROUP = "CID_ONSAPI_PULL"
CID_ONSAPI_PERMISSION_GROUP = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP = "CID_ONSAPI_OWNER"


def is_system_group(group: str) -> bool:
    """``CID_RMQ_SYS_*``: created on first use even when auto-creation is off."""
    return group.startswith(SYSTEM_GROUP_PREFIX)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One consumer group's settings (RocketMQ's SubscriptionGroupConfig and its defaults)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # RocketMQ 5's FIFO flag: pop consumers (gRPC receives) get a queue's messages in order, the
    # next only after the previous is acked or dead-lettered; written to the file only when set,
    # so a 4.x broker's file stays as 4.9.8 writes it
    consume_message_orderly: bool = False

    def replace(self, **changes: Any) -> SubscriptionGroupConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON object (camelCase, fields sorted by name as fastjson writes them)."""
        doc: dict[str, Any] = {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
        }
        if self.consume_message_orderly:
            doc["consumeMessageOrderly"] = True
        doc.update(
            groupName=self.group_name,
            notifyConsumerIdsChangedEnable=self.notify_consumer_ids_changed_enable,
            retryMaxTimes=self.retry_max_times,
            retryQueueNums=self.retry_queue_nums,
            whichBrokerWhenConsumeSlowly=self.which_broker_when_consume_slowly,
        )
        return doc

    @classmethod
    def from_json(cls, doc: Any, group_name: str | None = None) -> SubscriptionGroupConfig:
        """Parse RocketMQ's JSON object; missing fields take the defaults. ValueError if
        malformed."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"subscription group is not an object: {doc!r}")
        name = doc.get("groupName", group_name)
        if not isinstance(name, str) or not name:
            raise ValueError(f"subscription group without a name: {doc!r}")
        d = cls(name)
        return cls(
            group_name=name,
            consume_enable=as_bool(doc.get("consumeEnable", d.consume_enable), "consumeEnable"),
            consume_from_min_enable=as_bool(
                doc.get("consumeFromMinEnable", d.consume_from_min_enable), "consumeFromMinEnable"
            ),
            consume_broadcast_enable=as_bool(
                doc.get("consumeBroadcastEnable", d.consume_broadcast_enable),
                "consumeBroadcastEnable",
            ),
            retry_queue_nums=as_int(
                doc.get("retryQueueNums", d.retry_queue_nums), "retryQueueNums"
            ),
            retry_max_times=as_int(doc.get("retryMaxTimes", d.retry_max_times), "retryMaxTimes"),
            broker_id=as_int(doc.get("brokerId", d.broker_id), "brokerId"),
            which_broker_when_consume_slowly=as_int(
                doc.get("whichBrokerWhenConsumeSlowly", d.which_broker_when_consume_slowly),
                "whichBrokerWhenConsumeSlowly",
            ),
            notify_consumer_ids_changed_enable=as_bool(
                doc.get("notifyConsumerIdsChangedEnable", d.notify_consumer_ids_changed_enable),
                "notifyConsumerIdsChangedEnable",
            ),
            consume_message_orderly=as_bool(
                doc.get("consumeMessageOrderly", d.consume_message_orderly),
                "consumeMessageOrderly",
            ),
        )


class SubscriptionGroupManager(VersionedConfigTable[SubscriptionGroupConfig]):
    """The broker's subscription group table, loaded at construction.

    Raises ConfigFileError when ``subscriptionGroup.json`` and its backup are both damaged.
    """

    def __init__(
        self,
        config_dir: str | os.PathLike[str],
        *,
        auto_create_subscription_group: bool = True,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.auto_create_subscription_group = auto_create_subscription_group
        super().__init__(
            Path(config_dir) / SUBSCRIPTION_GROUP_FILE,
            "subscriptionGroupTable",
            SubscriptionGroupConfig.from_json,
            "subscription group",
            log,
            clock,
        )
        for group in (TOOLS_CONSUMER_GROUP, FILTERSRV_CONSUMER_GROUP, SELF_TEST_CONSUMER_GROUP):
            self._table[group] = SubscriptionGroupConfig(group)
        for group in (
            ONS_HTTP_PROXY_GROUP,
            CID_ONSAPI_PULL_GROUP,
            CID_ONSAPI_PERMISSION_GROUP,
            CID_ONSAPI_OWNER_GROUP,
        ):
            self._table[group] = SubscriptionGroupConfig(group, consume_broadcast_enable=True)
        self._load()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's settings, None when it has none (never creates)."""
        return self._table.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's settings, created with the defaults on first use when auto-creation is on
        or the group is a system group (findSubscriptionGroupConfig); else None."""
        config = self._table.get(group)
        if config is not None:
            return config
        if not (self.auto_create_subscription_group or is_system_group(group)):
            return None
        with self._lock:
            config = self._table.get(group)
            if config is not None:
                return config
            config = SubscriptionGroupConfig(group)
            ticket = self._set(group, config)
            log.info("auto-created subscription group %s", group)
        self._commit(ticket)
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group's settings."""
        self._put(config.group_name, config)

    def disable_consume(self, group: str) -> bool:
        """Stop a group from consuming (consumeEnable = false); False when the group is unknown.
        Like RocketMQ, this bumps the version but is persisted only with the next change or
        ``persist``."""
        with self._lock:
            config = self._table.get(group)
            if config is None:
                return False
            self._table[group] = config.replace(consume_enable=False)
            self._bump()
            return True
