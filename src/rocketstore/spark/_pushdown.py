"""Filter pushdown shared by the path and broker batch readers: Spark's filters become
:class:`Constraints` that the planners (``_path_plan``, ``_broker_plan``) narrow a read by.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from ._path_plan import Constraints

_NOT_NULL = frozenset(
    {
        "topic",
        "queue_id",
        "queue_offset",
        "commitlog_offset",
        "msg_id",
        "body",
        "keys",
        "properties",
        "born_timestamp",
        "store_timestamp",
        "born_host",
        "store_host",
        "reconsume_times",
        "sys_flag",
    }
)


class FilterPushdown:
    """Turns the filters of a batch read into a smaller plan.

    Exact (Spark does not re-check them): topic and queue_id (=, IN, ranges), queue_offset
    (=, IN, ranges), IS NOT NULL of columns that are never null. Used to prune, and re-checked
    by Spark: store_timestamp ranges (→ offsets by a binary search over store times) and
    ``keys = array(...)`` (→ the index, when the store has one).

    A mixin listed before the reader class (so its ``pushFilters`` wins over Spark's default);
    the reader sets ``constraints`` in its ``__init__``.
    """

    constraints: Constraints

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        c = self.constraints
        for f in filters:
            attribute: tuple[str, ...] = getattr(f, "attribute", ())
            col = attribute[0] if len(attribute) == 1 else None
            if isinstance(f, IsNotNull) and col in _NOT_NULL:
                continue
            if col == "topic" and isinstance(f, EqualTo | In):
                values = {f.value} if isinstance(f, EqualTo) else set(f.value)
                c.topics = values if c.topics is None else c.topics & values
                continue
            if col in ("queue_id", "queue_offset") and _push_int(c, col, f):
                continue
            if col == "store_timestamp":
                _push_time(c, f)
            elif col == "keys" and isinstance(f, EqualTo) and isinstance(f.value, list | tuple):
                keys = [k for k in f.value if isinstance(k, str)]
                if not keys:
                    c.empty = True
                c.keys = keys
            yield f


def _ms(value: Any) -> int | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    return None


def _push_int(c: Constraints, col: str, f: Filter) -> bool:
    if isinstance(f, EqualTo | In):
        raw = [f.value] if isinstance(f, EqualTo) else list(f.value)
        values = {v for v in raw if isinstance(v, int)}
        if col == "queue_id":
            c.queue_ids = values if c.queue_ids is None else c.queue_ids & values
        else:
            c.offsets_in = values if c.offsets_in is None else c.offsets_in & values
        if not values:
            c.empty = True
        return True
    if not isinstance(f.value, int) or isinstance(f.value, bool):  # type: ignore[attr-defined]
        return False
    v: int = f.value  # type: ignore[attr-defined]
    lo, hi = (None, None)
    if isinstance(f, GreaterThan):
        lo = v + 1
    elif isinstance(f, GreaterThanOrEqual):
        lo = v
    elif isinstance(f, LessThan):
        hi = v
    elif isinstance(f, LessThanOrEqual):
        hi = v + 1
    else:
        return False
    if col == "queue_id":
        if lo is not None:
            c.queue_lo = max(c.queue_lo, lo)
        if hi is not None:
            c.queue_hi = min(c.queue_hi, hi)
    else:
        if lo is not None:
            c.offset_lo = max(c.offset_lo, lo)
        if hi is not None:
            c.offset_hi = min(c.offset_hi, hi)
    return True


def _push_time(c: Constraints, f: Filter) -> None:
    v = _ms(getattr(f, "value", None))
    if v is None:
        return
    # store times are whole milliseconds; Spark's are microseconds, hence the rounding
    if isinstance(f, GreaterThan | GreaterThanOrEqual):
        c.time_lo = v if c.time_lo is None else max(c.time_lo, v)
    elif isinstance(f, LessThan | LessThanOrEqual):
        c.time_hi = v + 1 if c.time_hi is None else min(c.time_hi, v + 1)
    elif isinstance(f, EqualTo):
        c.time_lo = v if c.time_lo is None else max(c.time_lo, v)
        c.time_hi = v + 1 if c.time_hi is None else min(c.time_hi, v + 1)
