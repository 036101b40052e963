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

import logging
import os
from pathlib import Path

from ...protocol._subscription_group import SubscriptionGroupConfig
from ...store._clock import SYSTEM_CLOCK, Clock
from ._config_table import VersionedConfigTable

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
