"""``rocketstore tier``: the sealed commit-log files of a store no broker runs, into a tiered
directory (Parquet per topic, with manifests)."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from .._extras import install_hint
from ._store import TIER_PACKAGES, _is_store, _owned_message, _store_errors


@click.command()
@click.option("--store", required=True, help="store directory (no broker may run on it)")
@click.option("--tiered-dir", required=True, help="the tiered directory (made when missing)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def tier(store: str, tiered_dir: str, as_json: bool) -> None:
    """Write every message of the store's sealed commit-log files (all but the last one
    written to) into TIERED_DIR as Parquet, one file per topic and commit-log file, as the
    rocketstore Spark source reads them. Files already tiered are skipped."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise click.ClickException(
            f"tiering writes Parquet, which needs pyarrow: {install_hint('spark', TIER_PACKAGES)}"
        ) from None
    from ..store._lock import StoreLock, lock_owner
    from ..tier._manifest import TierError
    from ..tier._service import tier_store

    if not os.path.isdir(store) or not _is_store(store):
        raise click.ClickException(
            f"no store at {store} (no commitlog/ or consumequeue/): check --store"
        )
    if os.path.realpath(tiered_dir).startswith(os.path.realpath(store) + os.sep):
        raise click.ClickException("--tiered-dir must not be inside the store: give another one")
    if os.path.exists(tiered_dir) and not os.path.isdir(tiered_dir):
        raise click.ClickException(f"{tiered_dir} is not a directory: check --tiered-dir")
    pid = lock_owner(store)
    if pid is not None:
        raise click.ClickException(_owned_message(store, pid))
    lock = StoreLock(store)
    with _store_errors(store):
        lock.acquire()
        try:
            try:
                results = tier_store(os.path.join(store, "commitlog"), tiered_dir)
            except TierError as exc:
                raise click.ClickException(f"{exc} (check --tiered-dir)") from None
        finally:
            lock.release()
    ranges = [r for r in results if r.end > r.start]
    source = sum(r.source_bytes for r in ranges)
    written = sum(r.parquet_bytes for r in ranges)
    report: dict[str, Any] = {
        "store": store,
        "tiered_dir": tiered_dir,
        "commitlog_files": len(ranges),
        "commitlog_bytes": source,
        "parquet_files": sum(r.files for r in results),
        "rows": sum(r.rows for r in results),
        "parquet_bytes": written,
        "ratio": round(written / source, 4) if source else None,
        "skipped_topics": sum(len(r.skipped_topics) for r in results),
        "damaged_records": [
            {"path": d.path, "position": d.position, "why": d.why}
            for r in results
            for d in r.damaged
        ],
        "covered": max((r.end for r in results), default=None),
        "complete": all(r.complete for r in results),
    }
    if as_json:
        click.echo(json.dumps(report))
    elif not ranges:
        click.echo(
            f"nothing to tier in {store}: no sealed commit-log file above the covered offset"
        )
    else:
        ratio = f"{written / source:.3f}" if source else "-"
        click.echo(
            f"tiered {len(ranges)} commit-log file(s), {source:,} bytes: "
            f"{report['parquet_files']} Parquet file(s), {report['rows']:,} rows, "
            f"{written:,} bytes (ratio {ratio}) into {tiered_dir}; covered {report['covered']}"
        )
    for d in report["damaged_records"]:
        click.echo(
            f"damaged record not tiered: {d['path']} position {d['position']}: {d['why']}", err=True
        )
    if not report["complete"]:
        raise click.ClickException(
            "tiering stopped at a damaged record (above); `rocketstore inspect "
            f"{store}` shows the damage"
        )


COMMANDS = [tier]
