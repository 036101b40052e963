"""Options of the ``rocketstore`` data source, parsed and checked once (no pyspark needed).

Spark hands options over as strings, with case-insensitive names; they are validated here so a
bad value fails at planning with a message naming the option.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..store._errors import StoreError

if TYPE_CHECKING:
    from ._remote import RemoteOptions


class SourceOptionError(StoreError, ValueError):
    """An option of the rocketstore data source is missing or has a bad value."""


Offsets = dict[str, dict[str, int]]
"""{topic: {queue id as a string: offset}}; -2 = earliest, -1 = latest (Kafka's convention)."""

EARLIEST = -2
LATEST = -1


def _get(options: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return None if value is None else str(value)
    return None


def _int(
    options: Mapping[str, str], name: str, default: int | None, minimum: int = 0
) -> int | None:
    raw = _get(options, name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SourceOptionError(f"option {name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise SourceOptionError(f"option {name} must be at least {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None or raw == "":
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise SourceOptionError(f"option {name}: {raw!r} is not true or false")


def parse_offsets(name: str, raw: str | None, default: int) -> int | Offsets:
    """ "earliest" / "latest" or a JSON object {topic: {queue: offset}} (-2 earliest, -1 latest)."""
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if text.lower() == "earliest":
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(
            f'option {name}: not "earliest", "latest" or JSON {{topic: {{queue: offset}}}}: {exc}'
        ) from None
    if not isinstance(value, dict):
        raise SourceOptionError(
            f"option {name}: JSON must be an object {{topic: {{queue: offset}}}}"
        )
    out: Offsets = {}
    for topic, queues in value.items():
        if not isinstance(queues, dict):
            raise SourceOptionError(f"option {name}: {topic!r} must map to {{queue: offset}}")
        per: dict[str, int] = {}
        for qid, off in queues.items():
            if not str(qid).isdigit():
                raise SourceOptionError(
                    f"option {name}: queue id {qid!r} of {topic!r} is not a number"
                )
            if isinstance(off, bool) or not isinstance(off, int) or off < -2:
                raise SourceOptionError(
                    f"option {name}: offset {off!r} of {topic}/{qid} must be an integer >= -2"
                )
            per[str(int(qid))] = off
        out[str(topic)] = per
    return out


@dataclass(frozen=True, slots=True)
class SourceOptions:
    path: str
    topics: tuple[str, ...] | None
    starting: int | Offsets
    ending: int | Offsets
    starting_timestamp: int | None
    ending_timestamp: int | None
    max_rows_per_partition: int
    batch_rows: int
    fail_on_data_loss: bool
    check_crc: bool
    max_offsets_per_trigger: int | None
    commit_log_file_size: int | None
    consume_queue_file_size: int | None
    push_filters: str
    columns: tuple[str, ...] | None = None  # option columns: the read's columns, in order
    remote: RemoteOptions | None = None  # broker mode (namesrv / broker instead of path)

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, streaming: bool = False) -> SourceOptions:
        from ._remote import RemoteOptions

        path = _get(options, "path")
        remote = RemoteOptions.parse(options)
        if remote is None and not path:
            raise SourceOptionError(
                "option path (the store directory) or namesrv / broker (host:port) is required"
            )
        raw_topics = _get(options, "topics") or _get(options, "topic")
        topics = None
        if raw_topics:
            topics = tuple(t.strip() for t in raw_topics.split(",") if t.strip())
        if remote is not None and not topics:
            raise SourceOptionError("option topics is required when reading through brokers")
        raw_start, raw_end = _get(options, "startingOffsets"), _get(options, "endingOffsets")
        if remote is not None:  # JSON offsets are nested by broker (RemoteOptions has them)
            raw_start = None if isinstance(remote.starting, dict) else raw_start
            raw_end = None if isinstance(remote.ending, dict) else raw_end
        starting = parse_offsets("startingOffsets", raw_start, LATEST if streaming else EARLIEST)
        ending = parse_offsets("endingOffsets", raw_end, LATEST)
        if streaming and _get(options, "endingOffsets"):
            raise SourceOptionError("option endingOffsets applies to batch reads only")
        if ending == EARLIEST:
            raise SourceOptionError('option endingOffsets cannot be "earliest"')
        if isinstance(ending, dict) and any(
            v == EARLIEST for q in ending.values() for v in q.values()
        ):
            raise SourceOptionError("option endingOffsets: -2 (earliest) is not an end")
        push = (_get(options, "pushFilters") or "auto").strip().lower()
        if push not in ("auto", "true", "false"):
            raise SourceOptionError(f"option pushFilters: {push!r} is not auto, true or false")
        raw_columns = _get(options, "columns")
        columns = None
        if raw_columns is not None and raw_columns.strip():
            from ._arrow import parse_columns

            columns = parse_columns(raw_columns)
        return cls(
            path=path or "",
            topics=topics,
            starting=starting,
            ending=ending,
            starting_timestamp=_int(options, "startingTimestamp", None),
            ending_timestamp=_int(options, "endingTimestamp", None),
            max_rows_per_partition=_int(options, "maxRowsPerPartition", 500_000, 1) or 500_000,
            batch_rows=_int(options, "batchRows", 10_000, 1) or 10_000,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            check_crc=_bool(options, "checkCrc", True),
            max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1),
            commit_log_file_size=_int(options, "commitLogFileSize", None, 1),
            consume_queue_file_size=_int(options, "consumeQueueFileSize", None, 20),
            push_filters=push,
            columns=columns,
            remote=remote,
        )


def canonical(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Offsets with topics sorted by name and queues by number (so equal offsets serialise equal)."""
    return {
        t: {q: int(offsets[t][q]) for q in sorted(offsets[t], key=int)} for t in sorted(offsets)
    }
