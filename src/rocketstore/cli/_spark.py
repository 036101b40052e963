"""The Spark jobs of ``rocketstore``: export and import (need the spark extra; Spark runs
locally, local[2])."""

from __future__ import annotations

import json
from typing import Any

import click

from .._extras import install_hint


def _spark_jobs() -> Any:
    """The Spark jobs module, once pyspark and pyarrow import (the spark extra)."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401

        from ..spark import _jobs
    except ImportError as exc:
        missing = exc.name or str(exc)
        raise click.ClickException(
            f"this command runs Spark, which needs {missing}: {install_hint('spark')}"
        ) from None
    return _jobs


def _store_or_namesrv(store: str | None, namesrv: str | None) -> None:
    if bool(store) == bool(namesrv):
        raise click.UsageError("give either --store DIR or --namesrv HOST:PORT[;HOST:PORT]")


@click.command("export")
@click.option(
    "--store", "store", default=None, help="store directory (read-only, ours or RocketMQ's)"
)
@click.option(
    "--namesrv",
    "-n",
    default=None,
    help="name server(s) host:port[;host:port]: read through brokers",
)
@click.option(
    "--topic",
    "-t",
    "topics",
    multiple=True,
    help="topic to export (repeatable; default: all of a store; required with --namesrv)",
)
@click.option("--to", "to", required=True, help="output path (a Parquet or JSON-lines directory)")
@click.option(
    "--format", "fmt", type=click.Choice(["parquet", "json"]), default="parquet", show_default=True
)
@click.option(
    "--starting-offsets", default=None, help='"earliest" or JSON {topic: {queue: offset}}'
)
@click.option("--ending-offsets", default=None, help='"latest" or JSON {topic: {queue: offset}}')
@click.option("--overwrite", is_flag=True, help="replace a previous export at --to (nothing else)")
def export_cmd(
    store: str | None,
    namesrv: str | None,
    topics: tuple[str, ...],
    to: str,
    fmt: str,
    starting_offsets: str | None,
    ending_offsets: str | None,
    overwrite: bool,
) -> None:
    """Export topics of a store (or of running brokers) to Parquet or JSON lines with Spark.
    --to must be a new or empty directory, or with --overwrite a previous export."""
    _store_or_namesrv(store, namesrv)
    if namesrv and not topics:
        raise click.UsageError("--namesrv needs --topic")
    jobs = _spark_jobs()
    try:
        n = jobs.export_topic(
            store or "",
            list(topics),
            to,
            fmt,
            starting_offsets,
            ending_offsets,
            namesrv=namesrv,
            overwrite=overwrite,
        )
    except Exception as exc:
        raise click.ClickException(f"export failed: {jobs.failure_line(exc)}") from None
    click.echo(json.dumps({"exported": n, "to": to}))


@click.command("import")
@click.option(
    "--store", "store", default=None, help="store directory to write into (must not be owned)"
)
@click.option(
    "--namesrv",
    "-n",
    default=None,
    help="name server(s) host:port[;host:port]: send through brokers",
)
@click.option("--from", "source", required=True, help="Parquet or JSON-lines file or directory")
@click.option(
    "--topic", "-t", default=None, help="topic for every row (else the rows' topic column)"
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "parquet", "json"]),
    default="auto",
    show_default=True,
)
@click.option(
    "--commit-log-file-size",
    type=int,
    default=None,
    help="commit-log file size in bytes for a new store (default RocketMQ's 1 GiB)",
)
def import_cmd(
    store: str | None,
    namesrv: str | None,
    source: str,
    topic: str | None,
    fmt: str,
    commit_log_file_size: int | None,
) -> None:
    """Import rows (body, optional topic/tags/keys/properties/queue_id) into a store, or send
    them through running brokers, with Spark."""
    _store_or_namesrv(store, namesrv)
    jobs = _spark_jobs()
    try:
        n = jobs.import_file(store or "", source, topic, fmt, commit_log_file_size, namesrv=namesrv)
    except Exception as exc:
        raise click.ClickException(f"import failed: {jobs.failure_line(exc)}") from None
    out: dict[str, Any] = {"imported": n}
    out.update({"namesrv": namesrv} if namesrv else {"store": store})
    click.echo(json.dumps(out))


COMMANDS = [export_cmd, import_cmd]
