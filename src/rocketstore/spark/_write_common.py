"""What the path and broker writers share: the columns a write takes (checked against the
DataFrame's schema at planning), the task's index, and the system keys left out of
``properties`` (``_system_props``).

pyspark is imported only by ``check_schema`` (a Spark write's planning): the writes without
Spark use the rest.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..columns._arrow import COLUMNS
from ._options import SourceOptionError
from ._system_props import strip_system_properties

WRITTEN_COLUMNS = ("topic", "body", "tags", "keys", "properties", "queue_id")
READ_ONLY_COLUMNS = frozenset(c for c in COLUMNS if c not in WRITTEN_COLUMNS)
"""Columns of a read that a write cannot set (offsets, ids, times, hosts, flags): a frame read
from rocketstore is written as it is, and these are ignored."""


def _of_strings(t: Any) -> bool:
    """Whether a map or array column holds strings (any other column: True)."""
    from pyspark.sql.types import ArrayType, MapType, StringType

    if isinstance(t, MapType):
        return isinstance(t.keyType, StringType) and isinstance(t.valueType, StringType)
    if isinstance(t, ArrayType):
        return isinstance(t.elementType, StringType)
    return True


def check_schema(schema: Any) -> tuple[str, ...]:
    """The columns a write takes (in the frame's order), after checking them; the read-only
    columns of a rocketstore read are left out, any other column is refused. ``schema`` is
    the DataFrame's StructType."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        ShortType,
        StringType,
    )

    allowed: dict[str, tuple[type, ...]] = {
        "topic": (StringType,),
        "body": (BinaryType, StringType),
        "tags": (StringType,),
        "keys": (ArrayType, StringType),
        "properties": (MapType,),
        "queue_id": (IntegerType, LongType, ShortType),
    }
    names = tuple(f.name for f in schema.fields)
    for required in ("topic", "body"):
        if required not in names:
            raise SourceOptionError(
                f"writing to rocketstore needs a {required!r} column; the DataFrame has "
                f"{', '.join(names) or 'no columns'}"
            )
    written = []
    for f in schema.fields:
        if f.name in READ_ONLY_COLUMNS:
            continue
        kinds = allowed.get(f.name)
        if kinds is None:
            raise SourceOptionError(
                f"column {f.name!r} cannot be written to rocketstore (columns: "
                f"{', '.join(WRITTEN_COLUMNS)}; the other columns of a rocketstore read are "
                "ignored); drop or rename it"
            )
        if not isinstance(f.dataType, kinds) or not _of_strings(f.dataType):
            raise SourceOptionError(f"column {f.name!r} has type {f.dataType.simpleString()}")
        written.append(f.name)
    return tuple(written)


def task_index() -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return ctx.partitionId() if ctx is not None else 0
    except Exception:  # outside a Spark task
        return 0


def without_system_properties(batch: pa.RecordBatch, keep: bool) -> pa.RecordBatch:
    """``batch`` with its properties column stripped of system keys (``_system_props``)."""
    idx = batch.schema.get_field_index("properties")
    if idx < 0:
        return batch
    columns = list(batch.columns)
    columns[idx] = strip_system_properties(columns[idx], keep)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
