"""RecallMessage: cancel a delayed (timer) message before its delivery time.

A send with a delivery time gets a recall handle in its result: base64url of
``v1 <topic> <delivery time ms> <message id>``. Like RocketMQ's, it is not signed: whoever
knows a message's topic, id and time may recall it. RecallMessage hands it to the store's
schedule (``MessageStore.recall_timer_message``): the message is dropped when its time comes.
After its delivery time the recall is refused (NOT_FOUND): it is delivered, or about to
be.

Loop thread only.
"""

from __future__ import annotations

import base64
import binascii
from typing import Protocol

from ..broker._services import HasConfig, HasStore, HasStoreConfig, HasTopics, TopicCreation
from ._checks import check_topic
from ._convert import Code, GrpcError, status
from ._pb import service_pb2 as spb

_VERSION = "v1"


class RecallContext(HasConfig, HasStore, HasStoreConfig, HasTopics, TopicCreation, Protocol):
    """What RecallMessage uses of the broker."""


def recall_handle(topic: str, message_id: str, deliver_ms: int) -> str:
    text = f"{_VERSION} {topic} {deliver_ms} {message_id}"
    return base64.urlsafe_b64encode(text.encode("utf-8")).rstrip(b"=").decode("ascii")


def parse_recall_handle(handle: str) -> tuple[str, int, str]:
    """(topic, delivery time ms, message id); GrpcError BAD_REQUEST for anything else."""
    try:
        raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode("utf-8")
        version, topic, deliver, message_id = raw.split(" ")
        if version != _VERSION or not topic or not message_id or not deliver.isdigit():
            raise ValueError(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise GrpcError(Code.BAD_REQUEST, "not a recall handle") from None
    return topic, int(deliver), message_id


def recall(broker: RecallContext, request: spb.RecallMessageRequest) -> spb.RecallMessageResponse:
    topic = check_topic(request.topic, broker.topics)
    handle_topic, deliver_ms, message_id = parse_recall_handle(request.recall_handle)
    if handle_topic != topic:
        raise GrpcError(
            Code.BAD_REQUEST, f"the recall handle is of topic {handle_topic}, not {topic}"
        )
    if not broker.store.is_master:
        raise GrpcError(Code.FORBIDDEN, "the broker is a slave: it recalls nothing")
    try:
        broker.store.recall_timer_message(topic, message_id, deliver_ms)
    except ValueError as exc:
        raise GrpcError(Code.NOT_FOUND, str(exc)) from None
    except OSError as exc:
        raise GrpcError(Code.INTERNAL_SERVER_ERROR, f"recording the recall failed: {exc}") from None
    return spb.RecallMessageResponse(status=status(Code.OK), message_id=message_id)
