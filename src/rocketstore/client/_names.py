"""Topic and group names as RocketMQ's client checks them before sending anything: not blank,
only ``[%|a-zA-Z0-9_-]``, a topic at most 127 characters and a group at most 255."""

from __future__ import annotations

import re

from ..remoting import ResponseCode
from ._route import ClientError

VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255


class InvalidNameError(ClientError, ValueError):
    """A topic or group name the brokers would refuse (refused here, before anything is sent,
    with the broker's code); ``kind`` is "topic" or "group"."""

    def __init__(self, kind: str, name: str, reason: str) -> None:
        super().__init__(ResponseCode.SYSTEM_ERROR, f"the {kind} name {name!r} {reason}")
        self.kind = kind
        self.name = name


def _check(kind: str, name: str, max_length: int) -> str:
    if not name or not name.strip():
        raise InvalidNameError(kind, name, "is blank")
    if len(name) > max_length:
        raise InvalidNameError(kind, name, f"is longer than {max_length} characters ({len(name)})")
    if not VALID_NAME.match(name):
        raise InvalidNameError(
            kind, name, f"contains illegal characters, allowing only {VALID_NAME.pattern}"
        )
    return name


def check_topic(topic: str) -> str:
    """``topic``; InvalidNameError when a broker would refuse it."""
    return _check("topic", topic, TOPIC_MAX_LENGTH)


def check_group(group: str) -> str:
    """``group``; InvalidNameError when a broker would refuse it."""
    return _check("group", group, GROUP_MAX_LENGTH)
