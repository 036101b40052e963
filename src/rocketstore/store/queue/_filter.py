"""Message filters for get_message: first on the consume-queue unit's tags code, then on the
decoded message (hash codes collide, so the tag string is checked too)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from .._java_hash import java_string_hash
from ..log._record import MessageExt


class MessageFilter(Protocol):
    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        """Cheap check on the unit, before the message is read."""

    def is_matched_by_commit_log(self, msg: MessageExt) -> bool:
        """Check on the decoded message."""


class TagFilter:
    """RocketMQ's tag subscription: ``"*"`` (or empty) matches everything, else
    ``"TagA || TagB"`` or an iterable of tags."""

    __slots__ = ("codes", "tags")

    def __init__(self, expression: str | Iterable[str] = "*") -> None:
        if isinstance(expression, str):
            tokens = [t.strip() for t in expression.split("||")]
        else:
            tokens = [str(t).strip() for t in expression]
        tokens = [t for t in tokens if t]
        if not tokens or "*" in tokens:
            self.tags: frozenset[str] | None = None
            self.codes: frozenset[int] = frozenset()
        else:
            self.tags = frozenset(tokens)
            self.codes = frozenset(java_string_hash(t) for t in tokens)

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.tags is None or tags_code in self.codes

    def is_matched_by_commit_log(self, msg: MessageExt) -> bool:
        return self.tags is None or msg.tags in self.tags

    def __repr__(self) -> str:
        return f"TagFilter({' || '.join(sorted(self.tags)) if self.tags else '*'})"
