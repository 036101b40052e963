"""Options of the ``rocketstore`` data source, parsed and checked once (no pyspark needed):
reads (SourceOptions, with RemoteOptions in broker mode and the columns option), writes into a
store directory (WriteOptions) and writes through brokers (RemoteOptions, SendOptions).

Spark hands options over as strings, with case-insensitive names; they are validated here so a
bad value fails at planning with a message naming the option. This module imports nothing else
of spark/: every other module of it may import this one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..columns._schema import parse_columns
from ..store._errors import StoreError


class SourceOptionError(StoreError, ValueError):
    """An option of the rocketstore data source is missing or has a bad value."""


Offsets = dict[str, dict[str, int]]
"""{topic: {queue id as a string: offset}}; -2 = earliest, -1 = latest (Kafka's convention)."""

EARLIEST = -2
LATEST = -1

NestedOffsets = dict[str, dict[str, dict[str, int]]]
"""{topic: {broker name: {queue id: offset}}}; -2 = earliest, -1 = latest."""

DEFAULT_GROUP = "rocketstore-spark"
PULL_RETRIES = 4


def _get(options: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return None if value is None else str(value)
    return None


def _account(options: Mapping[str, str], name: str) -> str:
    return (_get(options, name) or "").strip()


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


# ---- columns -------------------------------------------------------------------------------


# ---- broker mode -----------------------------------------------------------------------------


def parse_nested(name: str, raw: str | None) -> int | NestedOffsets | None:
    """``earliest`` / ``latest`` (→ -2 / -1), JSON ``{topic: {broker: {queue: offset}}}``, or
    None when not given."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return EARLIEST if text.lower() == "earliest" else LATEST
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(f"option {name}: not earliest, latest or JSON: {exc}") from None
    shape = '{"topic": {"broker name": {"queue id": offset}}}'
    if not isinstance(doc, dict):
        raise SourceOptionError(f"option {name}: with brokers the JSON is {shape}")
    out: NestedOffsets = {}
    for topic, brokers in doc.items():
        if not isinstance(brokers, dict):
            raise SourceOptionError(f"option {name}: {topic!r} must map to {shape}")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise SourceOptionError(
                    f"option {name}: {topic}/{broker} must map queue ids to offsets ({shape})"
                )
            for qid, off in queues.items():
                if not str(qid).isdigit():
                    raise SourceOptionError(f"option {name}: queue id {qid!r} is not a number")
                if isinstance(off, bool) or not isinstance(off, int) or off < -2:
                    raise SourceOptionError(
                        f"option {name}: offset {off!r} of {topic}/{broker}/{qid} must be an "
                        "integer >= -2"
                    )
                out.setdefault(str(topic), {}).setdefault(str(broker), {})[str(int(qid))] = off
    return out


@dataclass(frozen=True, slots=True)
class RemoteOptions:
    """The broker-mode options: where the cluster is and how to pull from it."""

    namesrv: tuple[str, ...]
    broker: str | None
    consumer_group: str
    commit_offsets: bool
    pull_batch_size: int
    pull_timeout_ms: int
    pull_retries: int
    starting: int | NestedOffsets | None
    ending: int | NestedOffsets | None
    # the ACL account the requests are signed with (accessKey / secretKey; Spark redacts
    # both from its plans and UI); "": ROCKETSTORE_ACCESS_KEY / ROCKETSTORE_SECRET_KEY's
    access_key: str = ""
    secret_key: str = field(default="", repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> RemoteOptions | None:
        """The broker-mode options, or None when neither ``namesrv`` nor ``broker`` is given."""
        namesrv = _get(options, "namesrv") or ""
        broker = (_get(options, "broker") or "").strip() or None
        addrs = tuple(a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip())
        if not addrs and broker is None:
            return None
        if _get(options, "path"):
            raise SourceOptionError(
                "give either path (a store directory) or namesrv / broker (running brokers)"
            )
        for addr in (*addrs, *([broker] if broker else [])):
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit():
                raise SourceOptionError(f"{addr!r} is not host:port")
        return cls(
            namesrv=addrs,
            broker=broker if not addrs else None,
            consumer_group=(_get(options, "consumerGroup") or DEFAULT_GROUP).strip(),
            commit_offsets=_bool(options, "commitOffsets", False),
            pull_batch_size=_int(options, "pullBatchSize", 1024, 1) or 1024,
            pull_timeout_ms=_int(options, "pullTimeoutMs", 10_000, 1) or 10_000,
            pull_retries=_int(options, "pullRetries", PULL_RETRIES, 0) or 0,
            starting=parse_nested("startingOffsets", _get(options, "startingOffsets")),
            ending=parse_nested("endingOffsets", _get(options, "endingOffsets")),
            access_key=_account(options, "accessKey"),
            secret_key=_account(options, "secretKey"),
        )

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise SourceOptionError("give both accessKey and secretKey, or neither")

    def signer(self) -> Any:
        """What the requests are signed with: the options' account, else the environment's."""
        from ..remoting._client import FROM_ENV
        from ..remoting._signing import RequestSigner

        if self.access_key:
            return RequestSigner(self.access_key, self.secret_key)
        return FROM_ENV

    @property
    def where(self) -> str:
        return ";".join(self.namesrv) if self.namesrv else f"broker {self.broker}"


def canonical_nested(offsets: Mapping[str, Mapping[str, Mapping[str, int]]]) -> NestedOffsets:
    """Topics and brokers sorted by name, queues by number (equal offsets serialise equal)."""
    return {
        t: {
            b: {q: int(offsets[t][b][q]) for q in sorted(offsets[t][b], key=int)}
            for b in sorted(offsets[t])
        }
        for t in sorted(offsets)
    }


# ---- the read ----------------------------------------------------------------------------------


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


# ---- writes ----------------------------------------------------------------------------------

DEFAULT_QUEUES = 4
WRITE_BUFFERS = 2  # option writeBuffers: write buffers of a commit-log file each; 0: none


def is_remote(options: Mapping[str, str]) -> bool:
    """Whether a write goes through brokers (option namesrv or broker) rather than into path."""
    return bool(_get(options, "namesrv") or _get(options, "broker"))


def write_path(options: Mapping[str, str]) -> str:
    """Option path of a write (the store directory); SourceOptionError when missing."""
    path = _get(options, "path")
    if not path:
        raise SourceOptionError("option path (the store directory to write into) is required")
    return path


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The options of a write into a store directory. A size not given here is read off the
    store's files by the writer."""

    path: str
    consume_queue_file_size: int | None
    commit_log_file_size: int | None
    default_queues: int
    lock_timeout_ms: int
    flush_disk_type: str
    write_buffers: int
    keep_system_properties: bool

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        return cls(
            path=write_path(options),
            consume_queue_file_size=_int(options, "consumeQueueFileSize", None, 20),
            commit_log_file_size=_int(options, "commitLogFileSize", None, 4096),
            default_queues=_int(options, "defaultQueueNums", DEFAULT_QUEUES, 1) or DEFAULT_QUEUES,
            lock_timeout_ms=_int(options, "lockTimeoutMs", 600_000, 0) or 0,
            flush_disk_type=(_get(options, "flushDiskType") or "ASYNC_FLUSH").upper(),
            write_buffers=_int(options, "writeBuffers", WRITE_BUFFERS, 0) or 0,
            keep_system_properties=_bool(options, "keepSystemProperties", False),
        )


@dataclass(frozen=True, slots=True)
class SendOptions:
    """The options of a write through brokers, besides where they are (RemoteOptions)."""

    batch_rows: int
    batch_bytes: int
    retries: int
    timeout_s: float
    keep_system_properties: bool

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SendOptions:
        return cls(
            batch_rows=_int(options, "sendBatchRows", 1024, 1) or 1024,
            batch_bytes=_int(options, "sendBatchBytes", 1 << 20, 1024) or 1 << 20,
            retries=_int(options, "sendRetries", 3, 0) or 0,
            timeout_s=(_int(options, "sendTimeoutMs", 10_000, 1) or 10_000) / 1000.0,
            keep_system_properties=_bool(options, "keepSystemProperties", False),
        )
