"""What a request names, decoded once: the topic and groups of its ext fields, and the
resources (and permissions) they stand for.

A request's topic and groups are read from its ext fields into a :class:`Names` (by the
fields its rule in ``_table`` names) the first time either the ACL or the handler asks for
them, and kept on the command (``cmd.header``): both decide on the same values. Sends decode
their own header (``remoting._send_header``) the same way.

A resource is a topic, or a group kept under its retry topic ``%RETRY%<group>`` as RocketMQ's
plain ACL keeps it. A topic that belongs to a group (``%RETRY%<group>``, ``%DLQ%<group>``) is
that group's, and needs SUB on the group whatever the request does with it.

Pure functions and immutable values; any thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..remoting import RemotingCommand
from ..remoting._command import str_value
from ._plain import SUB, retry_topic

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

Need = tuple[str, int]
"""A resource (a topic, or ``%RETRY%<group>``) and the permission a request needs on it."""


def topic_need(topic: str, perm: int) -> Need:
    """What acting on ``topic`` with ``perm`` needs: a group's retry or dead-letter topic is
    the group's, SUB on the group; any other topic ``perm`` on itself."""
    if topic.startswith(RETRY_PREFIX):
        return topic, SUB
    if topic.startswith(DLQ_PREFIX):
        return retry_topic(topic[len(DLQ_PREFIX) :]), SUB
    return topic, perm


def group_need(group: str) -> Need:
    """What acting on a group's state needs: SUB on the group."""
    return retry_topic(group), SUB


def topic_needs(topics: Iterable[str | None], perm: int) -> list[Need]:
    """The needs of the topics named (an empty name is none: handlers take it as absent)."""
    return [topic_need(t, perm) for t in topics if t]


def group_needs(groups: Iterable[str | None]) -> list[Need]:
    """The needs of the groups named (an empty name is none)."""
    return [group_need(g) for g in groups if g]


@dataclass(frozen=True, slots=True)
class Names:
    """The topic and groups a request names (as text; None when absent)."""

    topic: str | None = None
    group: str | None = None
    source_group: str | None = None  # CLONE_GROUP_OFFSET's group copied from


@dataclass(frozen=True, slots=True)
class NameFields:
    """Which ext fields of a request hold its topic and groups."""

    topic: str | None = None
    group: str | None = None
    source_group: str | None = None

    def decode(self, ext: dict[str, Any]) -> Names:
        # every request the ACL checks or a processor reads its names from (a pull, a send on
        # the general path) comes here: no nested function, no call for a field not named
        topic, group, source = self.topic, self.group, self.source_group
        return Names(
            None if topic is None else str_value(ext.get(topic)),
            None if group is None else str_value(ext.get(group)),
            None if source is None else str_value(ext.get(source)),
        )


def decoded_names(cmd: RemotingCommand, fields: NameFields) -> Names:
    """``cmd``'s names by ``fields``, decoded at the first call and kept on the command."""
    header = cmd.header
    if type(header) is Names:
        return header
    names = fields.decode(cmd.ext_fields)
    cmd.header = names
    return names
