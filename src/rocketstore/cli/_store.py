"""The store commands of ``rocketstore``: put, get, query, stats, inspect (a store directory,
no broker)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click

from .. import Message, MessageStore, StoreConfig
from .._extras import install_hint
from ._common import conf_option, parse_properties, topic_option


def store_config(store: str, conf: str | None, **overrides: Any) -> StoreConfig:
    """A StoreConfig from a broker.conf (optional) with the store directory and overrides."""
    import dataclasses

    base = StoreConfig.from_broker_conf(conf) if conf else StoreConfig()
    return dataclasses.replace(base, store_path_root_dir=store, **overrides)


store_option = click.option(
    "--store", "store", default="store", show_default=True, help="store directory"
)


@click.command()
@store_option
@conf_option
@topic_option()
@click.option("--queue", "queue_id", default=0, show_default=True, type=int)
@click.option("--tags", default=None)
@click.option("--key", "-k", "keys", multiple=True, help="a message key (repeatable)")
@click.option("--property", "props", multiple=True, help="name=value (repeatable)")
@click.option(
    "--delay",
    default=0,
    type=int,
    help="delay level (0: none); the message reaches its topic only while a broker "
    "(rocketstore serve) runs on this store",
)
@click.option(
    "--create",
    is_flag=True,
    help="make a new store when --store does not exist or is an empty directory",
)
@click.argument("body", required=False)
def put(
    store: str,
    conf: str | None,
    topic: str,
    queue_id: int,
    tags: str | None,
    keys: tuple[str, ...],
    props: tuple[str, ...],
    delay: int,
    create: bool,
    body: str | None,
) -> None:
    """Put one message (BODY, or standard input when BODY is omitted) into the store at
    --store, which must exist unless --create is given. A store that a running broker owns is
    refused: send through the broker instead (rocketstore produce)."""
    properties = parse_properties(props)
    if delay:
        properties["DELAY"] = str(delay)
    _check_put_target(store, create)
    data = body.encode() if body is not None else sys.stdin.buffer.read()
    with _store_errors(store), MessageStore(store_config(store, conf)) as ms:
        r = ms.put_message(
            Message(
                topic, data, queue_id, tags=tags, keys=list(keys) or None, properties=properties
            )
        )
    out = {
        "status": r.status.name,
        "msg_id": r.msg_id,
        "wrote_offset": r.wrote_offset,
        "wrote_bytes": r.wrote_bytes,
        "queue_offset": r.queue_offset,
        "store_timestamp": r.store_timestamp,
    }
    if r.error:
        out["error"] = r.error
    click.echo(json.dumps(out))
    if not r.ok:
        sys.exit(1)


def _is_store(path: str) -> bool:
    import os

    return any(os.path.isdir(os.path.join(path, d)) for d in ("commitlog", "consumequeue"))


def _owned_message(store: str, pid: int) -> str:
    who = f"process {pid}" if pid > 0 else "another process"
    return (
        f"{store} is owned by {who} (a running broker): stop it, or send through it with "
        "`rocketstore produce --namesrv HOST:PORT --topic ...`"
    )


def _check_put_target(store: str, create: bool) -> None:
    """Refuse to write where no store is (unless --create may make one) or into a store that
    another process owns."""
    import os

    from ..store._lock import lock_owner

    if _is_store(store):
        pid = lock_owner(store)
        if pid is not None:
            raise click.ClickException(_owned_message(store, pid))
        return
    if not os.path.exists(store):
        if create:
            return
        raise click.ClickException(
            f"no store at {store}: check --store, or give --create to make a new store there"
        )
    if not os.path.isdir(store):
        raise click.ClickException(f"{store} is not a directory: check --store")
    if os.listdir(store):
        raise click.ClickException(
            f"{store} holds no store (no commitlog/ or consumequeue/) and is not empty: "
            "check --store (--create makes a store only in a new or empty directory)"
        )
    if not create:
        raise click.ClickException(
            f"no store at {store} (an empty directory): give --create to make a new store there"
        )


@contextlib.contextmanager
def _store_errors(store: str) -> Iterator[None]:
    """A store error as one line with a hint (exit status 1), never a traceback."""
    from ..store import _errors

    try:
        yield
    except _errors.StoreLockedError:
        from ..store._lock import lock_owner

        raise click.ClickException(_owned_message(store, lock_owner(store) or -1)) from None
    except (_errors.CorruptFileError, _errors.StoreIOError) as exc:
        raise click.ClickException(
            f"{exc} (`rocketstore inspect {store}` checks the whole store)"
        ) from None
    except _errors.StoreError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"{store}: {exc.strerror or exc}") from None


def _open_read_only(
    store: str, conf: str | None, slots: int | None = None, entries: int | None = None
) -> Any:
    """A ReadOnlyStore: nothing in the directory is changed, no lock is taken (a running
    broker's store can be read). Sizes from --conf, else from the files."""
    from ..store.recovery._read_only import ReadOnlyStore

    kw: dict[str, Any] = {"index_slots": slots, "index_entries": entries}
    if conf:
        cfg = StoreConfig.from_broker_conf(conf)
        kw.update(
            commit_log_file_size=cfg.mapped_file_size_commit_log,
            consume_queue_file_size=cfg.consume_queue_file_size,
            index_slots=slots or cfg.max_hash_slot_num,
            index_entries=entries or cfg.max_index_num,
        )
    return ReadOnlyStore(store, **kw)


tiered_option = click.option(
    "--tiered-dir",
    default=None,
    help="the tiered store (default: tieredDir of --conf): offsets below the consume "
    "queue's minimum are read from it",
)


TIER_PACKAGES = ("pyarrow", "numpy")
"""What reading and writing the tiered store's Parquet needs (of the spark extra)."""


def _tier(conf: str | None, tiered_dir: str | None) -> Any:
    """A TierReader of --tiered-dir, else of --conf's tieredDir; None when neither names one.
    The reader's packages are imported only when a tier is asked for: a base install reads
    stores without them."""
    if not tiered_dir and conf:
        tiered_dir = StoreConfig.from_broker_conf(conf).tiered_dir or None
    if not tiered_dir:
        return None
    import os

    if not os.path.isdir(tiered_dir):
        raise click.ClickException(f"no tiered store at {tiered_dir}: check --tiered-dir")
    try:
        from ..tier._read import TierReader
    except ImportError as exc:
        raise click.ClickException(
            f"reading the tiered store at {tiered_dir} needs {exc.name or exc}: "
            f"{install_hint('spark', TIER_PACKAGES)}"
        ) from None
    return TierReader(tiered_dir)


def _delay_levels(conf: str | None) -> tuple[int, ...]:
    cfg = StoreConfig.from_broker_conf(conf) if conf else StoreConfig()
    return cfg.delay_levels_ms()


def _report_damage(warnings: list[str]) -> None:
    """Print what was found damaged (stderr, one line each); exit status 1 when anything was."""
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if warnings:
        sys.exit(1)


def _message_dict(m: Any, body: str) -> dict[str, Any]:
    if body == "text":
        payload: Any = m.body.decode("utf-8", "replace")
    elif body == "hex":
        payload = m.body.hex()
    else:
        payload = len(m.body)
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commitlog_offset": m.commitlog_offset,
        "msg_id": m.msg_id,
        "store_size": m.store_size,
        "tags": m.tags,
        "keys": m.keys,
        "uniq_key": m.uniq_key,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "born_host": m.born_host_str,
        "store_host": m.store_host_str,
        "reconsume_times": m.reconsume_times,
        "sys_flag": m.sys_flag,
        "flag": m.flag,
        "body_crc": m.body_crc,
        "properties": m.properties,
        "body" if body != "size" else "body_size": payload,
    }


body_option = click.option(
    "--body",
    "body",
    type=click.Choice(["text", "hex", "size"]),
    default="text",
    show_default=True,
    help="how to print bodies",
)
slots_option = click.option(
    "--max-hash-slot-num",
    "slots",
    type=int,
    default=None,
    help="index slots per file (when the store's differ from the default)",
)
entries_option = click.option(
    "--max-index-num", "entries", type=int, default=None, help="index entries per file"
)


@click.command()
@store_option
@conf_option
@click.argument("topic")
@click.argument("queue_id", metavar="QUEUE", type=int)
@click.argument("offset", type=int)
@click.option(
    "--count",
    default=32,
    show_default=True,
    type=click.IntRange(min=1),
    help="messages to read (pages through the queue)",
)
@click.option("--tags", default=None, help='tag filter, e.g. "TagA || TagB"')
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@body_option
@tiered_option
def get(
    store: str,
    conf: str | None,
    topic: str,
    queue_id: int,
    offset: int,
    count: int,
    tags: str | None,
    as_json: bool,
    body: str,
    tiered_dir: str | None,
) -> None:
    """Read COUNT messages of TOPIC / QUEUE from logical OFFSET. Read-only: the store is not
    changed (a running broker's store can be read); damaged records are skipped and reported
    on standard error (exit status 1), the others are all printed. With a tiered store,
    offsets below the consume queue's minimum are read from it."""
    from ..store.queue._filter import TagFilter

    flt = TagFilter(tags) if tags else None
    with _store_errors(store), _open_read_only(store, conf) as rs:
        tier = _tier(conf, tiered_dir)
        got = 0
        status = None
        while got < count:
            r = _get_some(rs, tier, topic, queue_id, offset, min(32, count - got), flt)
            status = r.status
            for m in r.messages:
                if as_json:
                    click.echo(json.dumps(_message_dict(m, body), ensure_ascii=False))
                else:
                    click.echo(
                        f"{m.queue_offset}\t{m.msg_id}\t{m.tags or ''}\t"
                        f"{' '.join(m.keys)}\t{_message_dict(m, body).get('body', len(m.body))}"
                    )
            got += len(r.messages)
            if r.next_begin_offset == offset or status.name not in (
                "FOUND",
                "NO_MATCHED_MESSAGE",
                "MESSAGE_WAS_REMOVING",
            ):
                break
            offset = r.next_begin_offset
        summary = {
            "status": status.name if status else None,
            "messages": got,
            "next_offset": offset,
            "min_offset": rs.min_offset(topic, queue_id),
            "max_offset": rs.max_offset(topic, queue_id),
        }
        held = tier.queue_range(topic, queue_id) if tier is not None else None
        if held is not None:
            summary["tiered"] = list(held)
        warnings = list(rs.warnings)
    click.echo(json.dumps(summary), err=not as_json)
    _report_damage(warnings)
    if (
        got == 0
        and status is not None
        and status.name not in ("OFFSET_OVERFLOW_ONE", "NO_MESSAGE_IN_QUEUE")
    ):
        sys.exit(1)


def _get_some(rs: Any, tier: Any, topic: str, queue_id: int, offset: int, n: int, flt: Any) -> Any:
    """Up to ``n`` messages from ``offset``: from the tier when it holds ``offset`` and the
    store no longer does (``next_begin_offset`` right after them), else from the store."""
    if tier is not None and offset < rs.min_offset(topic, queue_id):
        held = tier.queue_range(topic, queue_id)
        if held is not None and held[0] <= offset < held[1]:
            from ..store.log._message import GetMessageResult, GetMessageStatus

            msgs = tier.messages(topic, queue_id, offset, n)
            nxt = msgs[-1].queue_offset + 1 if msgs else offset
            if flt is not None:
                msgs = [m for m in msgs if flt.is_matched_by_commit_log(m)]
            status = GetMessageStatus.FOUND if msgs else GetMessageStatus.NO_MATCHED_MESSAGE
            result = GetMessageResult(status, nxt, held[0], rs.max_offset(topic, queue_id))
            result.messages = msgs
            return result
    return rs.get_message(topic, queue_id, offset, n, flt)


@click.command()
@store_option
@conf_option
@topic_option(required=False, help="the topic (needed with --key)")
@click.option("--key", "-k", default=None, help="a KEYS token or the UNIQ_KEY")
@click.option(
    "--id",
    "msg_id",
    default=None,
    help="a message id: the one a client prints (UNIQ_KEY) or the offset message id "
    "(store address and commit-log offset)",
)
@click.option("--max", "max_num", default=32, show_default=True, type=click.IntRange(1, 64))
@click.option("--begin", default=0, show_default=True, type=int, help="store time from (ms)")
@click.option("--end", default=2**63 - 1, type=int, help="store time to (ms)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@body_option
@slots_option
@entries_option
@tiered_option
def query(
    store: str,
    conf: str | None,
    topic: str | None,
    key: str | None,
    msg_id: str | None,
    max_num: int,
    begin: int,
    end: int,
    as_json: bool,
    body: str,
    slots: int | None,
    entries: int | None,
    tiered_dir: str | None,
) -> None:
    """Find messages by key (the index; --topic and --key) or by message id (--id). Read-only:
    the store is not changed. With a tiered store, a key is looked up in it too."""
    if (key is None) == (msg_id is None):
        raise click.UsageError("give either --key (with --topic) or --id")
    if key is not None and topic is None:
        raise click.UsageError("--key needs --topic")
    with _store_errors(store), _open_read_only(store, conf, slots, entries) as rs:
        tier = _tier(conf, tiered_dir)
        if key is not None:
            assert topic is not None
            messages = rs.query_message(topic, key, max_num, begin, end).messages
            if tier is not None:
                found = {m.commitlog_offset: m for m in tier.query(topic, key, max_num, begin, end)}
                found.update((m.commitlog_offset, m) for m in messages)
                messages = [found[o] for o in sorted(found)][-max_num:]
        else:
            assert msg_id is not None
            messages = _by_id(rs, tier, topic, msg_id, max_num, begin, end)
        warnings = list(rs.warnings)
    for m in messages:
        if as_json:
            click.echo(json.dumps(_message_dict(m, body), ensure_ascii=False))
        else:
            click.echo(
                f"{m.commitlog_offset}\t{m.msg_id}\t{m.queue_id}\t{m.queue_offset}\t{' '.join(m.keys)}"
            )
    if not as_json:
        click.echo(f"{len(messages)} message(s)", err=True)
    _report_damage(warnings)
    if not messages:
        sys.exit(1)


def _by_id(
    rs: Any, tier: Any, topic: str | None, msg_id: str, max_num: int, begin: int, end: int
) -> Any:
    """Messages with UNIQ_KEY ``msg_id`` (through the index: of ``topic``, or of every topic),
    and the message an offset message id ``msg_id`` names (read at its commit-log offset); with
    a tiered store, also those the tier holds (the commit log may have been cleaned below
    them)."""
    from ..store.log._record import decode_msg_id

    found: dict[int, Any] = {}
    by_offset = rs.look_offset_msg_id(msg_id)
    if by_offset is None and tier is not None:
        try:
            _host, phys = decode_msg_id(msg_id)
        except ValueError:
            pass
        else:
            by_offset = tier.at_commitlog_offset(phys, topic)
            if by_offset is not None and by_offset.msg_id != msg_id.upper():
                by_offset = None  # an id of another kind that happens to decode
    if by_offset is not None and (topic is None or by_offset.topic == topic):
        found[by_offset.commitlog_offset] = by_offset
    topics = [topic] if topic else sorted({t for t, _q in rs.queues()})
    for t in topics:
        for m in rs.query_message(t, msg_id, max_num, begin, end).messages:
            if m.uniq_key == msg_id:
                found[m.commitlog_offset] = m
    if tier is not None:
        for t in [topic] if topic else tier.topics():
            for m in tier.query(t, msg_id, max_num, begin, end):
                if m.uniq_key == msg_id:
                    found.setdefault(m.commitlog_offset, m)
    return [found[o] for o in sorted(found)][-max_num:]


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@conf_option
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@slots_option
@entries_option
@click.option(
    "--progress/--no-progress",
    default=None,
    help="progress bar (default: on for stores over 256 MB on a terminal)",
)
def inspect(
    directory: str,
    conf: str | None,
    as_json: bool,
    slots: int | None,
    entries: int | None,
    progress: bool | None,
) -> None:
    """Verify a store directory (ours or RocketMQ's) record by record, read-only, and
    summarise it. Exit status 1 when something is corrupt."""
    from ..store.recovery._inspect import Inspector

    kw: dict[str, Any] = {"max_hash_slot_num": slots, "max_index_num": entries}
    with _store_errors(directory):
        if conf:
            cfg = StoreConfig.from_broker_conf(conf)
            kw.update(
                commit_log_file_size=cfg.mapped_file_size_commit_log,
                consume_queue_file_size=cfg.consume_queue_file_size,
            )
            kw["max_hash_slot_num"] = slots or cfg.max_hash_slot_num
            kw["max_index_num"] = entries or cfg.max_index_num
        report = _run_inspector(Inspector(directory, **kw), progress)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    elif not report.is_store:
        click.echo(report.errors[0], err=True)  # nothing to summarise
    else:
        _print_report(report)
    if not report.ok:
        sys.exit(1)


def _run_inspector(inspector: Any, progress: bool | None) -> Any:
    total = inspector.work()
    show = progress if progress is not None else (total >= 256 << 20 and sys.stderr.isatty())
    if show:
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            transient=True,
        ) as bar:
            task = bar.add_task("inspecting", total=total)
            report = inspector.run(lambda n: bar.advance(task, n))
    else:
        report = inspector.run()
    return report


def _print_report(report: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    d = report.as_dict()
    cl = d["commit_log"]
    console.print(f"[bold]{d['root']}[/bold]")
    console.print(
        f"commit log: {cl.get('files', 0)} files of {cl.get('file_size', 0):,} bytes, "
        f"offsets {cl.get('min_offset', 0):,}..{cl.get('max_offset', 0):,}, "
        f"{cl.get('records', 0):,} records ({cl.get('bytes', 0):,} bytes), "
        f"{cl.get('blank_records', 0)} BLANK"
    )
    if d["checkpoint"]:
        console.print(f"checkpoint: {d['checkpoint']}")
    console.print(
        f"abort file: {'present' if d['abort_file'] else 'absent'}; "
        f"index files: {len(d['index'].get('files', []))}"
    )
    table = Table("topic", "queue", "min", "max", "messages", "bytes")
    for topic, t in d["topics"].items():
        for q in t["queues"]:
            table.add_row(
                topic,
                str(q["queue_id"]),
                f"{q['min_offset']:,}",
                f"{q['max_offset']:,}",
                f"{q['commit_log_messages']:,}",
                f"{q['commit_log_bytes']:,}",
            )
    console.print(table)
    for w in d["warnings"]:
        console.print(f"[yellow]warning[/yellow]: {w}")
    for e in d["errors"]:
        console.print(f"[red]error[/red]: {e}")
    console.print("[green]OK[/green]" if report.ok else f"[red]{len(d['errors'])} error(s)[/red]")


COMMANDS = [put, get, query, inspect]
