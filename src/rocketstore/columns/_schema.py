"""The columns of a message as a table row: the schema every read of the ``rocketstore`` data
source gives (Spark's DDL), the same for the tiered Parquet files, and the checks of a list of
column names."""

from __future__ import annotations

from collections.abc import Sequence

from ..store._errors import StoreError

SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset long, commitlog_offset long, msg_id string, "
    "body binary, tags string, keys array<string>, properties map<string,string>, "
    "born_timestamp timestamp, store_timestamp timestamp, born_host string, store_host string, "
    "reconsume_times int, sys_flag int"
)

COLUMN_TYPES = dict(part.strip().split(" ", 1) for part in SCHEMA_DDL.split(", "))


class ColumnError(StoreError, ValueError):
    """A read asked for a column the data source does not have, or with another type."""


def schema_ddl(columns: Sequence[str]) -> str:
    """The DDL of ``columns`` (names of ``COLUMNS``) in that order."""
    return ", ".join(f"{c} {COLUMN_TYPES[c]}" for c in columns)


def parse_columns(raw: str) -> tuple[str, ...]:
    """The ``columns`` option ("body,queue_id") → names, checked."""
    names = tuple(c.strip() for c in raw.split(",") if c.strip())
    if not names:
        raise ColumnError("option columns is empty; give names like 'body,queue_id'")
    check_names(names)
    return names


def check_names(names: Sequence[str]) -> None:
    unknown = [c for c in names if c not in COLUMN_TYPES]
    if unknown:
        raise ColumnError(
            f"unknown column(s) {', '.join(unknown)}; rocketstore has: {', '.join(COLUMN_TYPES)}"
        )
    seen: set[str] = set()
    for c in names:
        if c in seen:
            raise ColumnError(f"column {c} is asked for twice")
        seen.add(c)
