"""A consumer group's settings as the wire carries them (RocketMQ's SubscriptionGroupConfig):
the JSON object of UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's body, of GET_ALL_SUBSCRIPTIONGROUP_CONFIG's
table and of the broker's ``subscriptionGroup.json`` (camelCase, fields sorted by name)::

    {"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,
     "consumeFromMinEnable":true,"groupName":"G1","notifyConsumerIdsChangedEnable":true,
     "retryMaxTimes":16,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}

Immutable values, any thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._json_values import as_bool, as_int


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
