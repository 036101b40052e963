"""``rocketstore stats``: a store's runtime info, saying where each figure comes from.

A reader of a store directory sees what the files hold (the commit log's extent, how far
dispatch lags it, the delay levels' progress) but none of a broker's counters: puts, gets,
rates and uptime live in the broker's memory. So:

- no process owns the store: the figures the files give, and only those;
- a running broker owns it (``lock``): its runtime info through its port
  (GET_BROKER_RUNTIME_INFO), from ``--broker HOST:PORT`` or the address its newest message
  was stored at, once GET_BROKER_CONFIG's ``storePathRootDir`` shows it is this store's
  broker; one it cannot reach: the files' figures, and a line saying so.

The topics' totals and delay levels always come from the files. Main thread only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import click

from ._common import conf_option
from ._store import _delay_levels, _open_read_only, _report_damage, _store_errors, store_option

FILE_KEYS = frozenset(
    {
        "commitLogMinOffset",
        "commitLogMaxOffset",
        "commitLogDiskRatio",
        "consumeQueueDiskRatio",
        "dispatchBehindBytes",
        "runningFlags",
    }
)
FILE_KEY_PREFIXES = ("commitLogDiskRatio_", "scheduleMessageOffset_")
"""The runtime-info keys a store's files give; the others (bootTimestamp, runtime, put*, get*,
the rates and latencies) are a running broker's counters."""


@dataclass(frozen=True)
class Source:
    """Where the runtime info came from: ``kind`` "broker" (``address``) or "files"."""

    kind: str
    address: str | None
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "address": self.address, "note": self.note}


def file_figures(info: dict[str, str]) -> dict[str, str]:
    """The keys of ``info`` a store's files give."""
    return {k: v for k, v in info.items() if k in FILE_KEYS or k.startswith(FILE_KEY_PREFIXES)}


def _newest_store_address(rs: Any) -> str | None:
    """The address (HOST:PORT) the newest message of the store was stored at: its broker's."""
    newest: tuple[int, str] | None = None
    for topic, queue_id in rs.queues():
        last = rs.max_offset(topic, queue_id) - 1
        if last < rs.min_offset(topic, queue_id):
            continue
        for m in rs.get_message(topic, queue_id, last, 1).messages:
            if newest is None or m.commitlog_offset > newest[0]:
                newest = (m.commitlog_offset, m.store_host_str)
    return newest[1] if newest else None


def _broker_info(address: str, store: str) -> dict[str, str] | str:
    """The runtime info of the broker at ``address`` when it serves ``store``; else why not."""
    from ..client import ClientError
    from ..client._admin import AdminClient
    from ..remoting import RemotingError

    try:
        with AdminClient(timeout=3.0) as admin:
            root = admin.broker_config(address).get("storePathRootDir", "")
            if not root or os.path.realpath(os.path.expanduser(root)) != os.path.realpath(store):
                return f"the broker at {address} serves another store ({root or 'unknown'})"
            return admin.runtime_info(address)
    except (ClientError, RemotingError, OSError) as exc:
        return f"no broker answered at {address} ({exc})"


def runtime_source(
    rs: Any, store: str, levels_ms: tuple[int, ...], broker: str | None
) -> tuple[dict[str, str], Source]:
    """The runtime info to show and where it came from (see the module)."""
    from ..store._lock import lock_owner

    owner = lock_owner(store)
    if owner is None and broker is None:
        note = (
            "from the store's files (no broker runs on it): a broker's counters (puts, gets, "
            "rates, uptime) are not in them"
        )
        return file_figures(rs.runtime_info(levels_ms)), Source("files", None, note)
    address = broker or _newest_store_address(rs)
    why = "no address to ask: give --broker HOST:PORT"
    if address is not None:
        answer = _broker_info(address, store)
        if isinstance(answer, dict):
            who = f" (process {owner} owns the store)" if owner and owner > 0 else ""
            note = f"of the running broker at {address}{who}, through its port"
            return answer, Source("broker", address, note)
        why = answer
    owned = f"process {owner}, a running broker," if owner and owner > 0 else "a running broker"
    note = (
        f"from the store's files: {owned} owns the store but {why}; its counters (puts, "
        "gets, rates, uptime) are not in the files"
    )
    return file_figures(rs.runtime_info(levels_ms)), Source("files", address, note)


@click.command()
@store_option
@conf_option
@click.option(
    "--broker",
    "-b",
    default=None,
    help="the running broker that owns the store, HOST:PORT (default: the address its "
    "newest message was stored at)",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def stats(store: str, conf: str | None, broker: str | None, as_json: bool) -> None:
    """Print a store's runtime info (RocketMQ's keys), what each topic holds and the progress
    of every delay level. Read-only: the store is not changed. The runtime info is a running
    broker's, read through its port, when one owns the store; else what the files give (the
    first line says which)."""
    with _store_errors(store), _open_read_only(store, conf) as rs:
        levels_ms = _delay_levels(conf)
        info, source = runtime_source(rs, store, levels_ms, broker)
        topics = rs.topic_totals()
        levels = [p._asdict() for p in rs.delay_progress(levels_ms)]
        warnings = list(rs.warnings)
    if as_json:
        doc = {
            "source": source.as_dict(),
            "runtime_info": dict(sorted(info.items())),
            "topics": {t: {"messages": s.messages, "bytes": s.bytes} for t, s in topics.items()},
            "delay_levels": levels,
        }
        click.echo(json.dumps(doc, ensure_ascii=False))
        _report_damage(warnings)
        return
    click.echo(f"runtime info {source.note}")
    width = max(map(len, info), default=0)
    for key in sorted(info):
        click.echo(f"{key:<{width}}  {info[key]}")
    click.echo(f"\n{'topic (from the files)':<40} {'messages':>12} {'bytes':>16}")
    for topic, t in topics.items():
        click.echo(f"{topic:<40} {t.messages:>12} {t.bytes:>16}")
    if levels:
        click.echo(
            f"\n{'delay level':<12} {'delay ms':>10} {'next offset':>12} {'max offset':>12} "
            f"{'pending':>8}"
        )
        for lv in levels:
            delay = "?" if lv["delay_ms"] is None else str(lv["delay_ms"])
            click.echo(
                f"{lv['level']:<12} {delay:>10} {lv['offset']:>12} {lv['max_offset']:>12} "
                f"{max(0, lv['max_offset'] - lv['offset']):>8}"
            )
    _report_damage(warnings)


COMMANDS = [stats]
