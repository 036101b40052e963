"""``rocketstore export`` and ``import``: Parquet / JSON lines from and into a store or running
brokers. They run in this process with pyarrow (numpy and pyarrow needed), or on Spark when
asked (``--spark``, ``--master``) or when the user's Spark settings name a cluster
(SPARK_MASTER, spark-defaults.conf: ``spark.master``); both write the same rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from .._extras import install_hint

_LOCAL_HINT = install_hint("spark", ("pyarrow", "numpy"))
_SPARK_HINT = install_hint("spark") + "; Spark also needs Java 17+"


def _missing(exc: ImportError, what: str, hint: str) -> click.ClickException:
    missing = exc.name or str(exc)
    return click.ClickException(f"{what} needs {missing}: {hint}")


def _jobs(spark: bool) -> Any:
    """The jobs module (the one-line failure reasons, the Spark jobs), once what the chosen
    way needs imports: pyarrow and numpy, and pyspark for Spark."""
    try:
        import numpy  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as exc:
        hint = _SPARK_HINT if spark else _LOCAL_HINT
        raise _missing(exc, "this command", hint) from None
    if spark:
        try:
            import pyspark  # noqa: F401
        except ImportError as exc:
            raise _missing(exc, "running it on Spark", _SPARK_HINT) from None
    from ..spark import _jobs

    return _jobs


def _choice(spark: bool, master: str | None) -> str | None:
    from ..spark._master import choose

    return choose(spark, master)


def _log_dir(log_dir: str | None, store: str | None) -> Path:
    from .._logs import default_directory

    if log_dir:
        return Path(log_dir)
    return default_directory(store) if store else Path("logs")


@contextmanager
def _rows_bar(what: str) -> Iterator[Callable[[int, int], None]]:
    """A callback drawing rows done of rows planned on a terminal's standard error (nothing
    when standard error is not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda done, total: None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} rows"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task(what, total=None)
        yield lambda done, total: progress.update(bar, completed=done, total=total or None)


def _store_or_namesrv(store: str | None, namesrv: str | None) -> None:
    if bool(store) == bool(namesrv):
        raise click.UsageError("give either --store DIR or --namesrv HOST:PORT[;HOST:PORT]")


def _spark_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--log-dir",
        default=None,
        help="where Spark's log goes (spark.log; default: logs/<store name>/ beside the store, or ./logs)",
    )(f)
    f = click.option(
        "--master",
        default=None,
        help="run on Spark with this master (local[4], spark://HOST:7077, ...); implies --spark",
    )(f)
    f = click.option(
        "--spark",
        "use_spark",
        is_flag=True,
        help="run the job on Spark (needs pyspark and Java 17+; local[2] unless SPARK_MASTER "
        "or spark-defaults.conf names a master); without it the job runs in this process",
    )(f)
    return f


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
@click.option(
    "--to",
    "to",
    required=True,
    help="output: a directory of Parquet or JSON-lines parts, or one file when named "
    "*.parquet, *.json or *.jsonl",
)
@click.option(
    "--format", "fmt", type=click.Choice(["parquet", "json"]), default="parquet", show_default=True
)
@click.option(
    "--starting-offsets", default=None, help='"earliest" or JSON {topic: {queue: offset}}'
)
@click.option("--ending-offsets", default=None, help='"latest" or JSON {topic: {queue: offset}}')
@click.option("--overwrite", is_flag=True, help="replace a previous export at --to (nothing else)")
@_spark_options
def export_cmd(
    store: str | None,
    namesrv: str | None,
    topics: tuple[str, ...],
    to: str,
    fmt: str,
    starting_offsets: str | None,
    ending_offsets: str | None,
    overwrite: bool,
    use_spark: bool,
    master: str | None,
    log_dir: str | None,
) -> None:
    """Export topics of a store (or of running brokers) to Parquet or JSON lines. --to must
    be a new or empty directory, or with --overwrite a previous export; a --to named
    *.parquet, *.json or *.jsonl is written as that one file."""
    _store_or_namesrv(store, namesrv)
    if namesrv and not topics:
        raise click.UsageError("--namesrv needs --topic")
    on = _choice(use_spark, master)
    from ..spark._export_target import single_file_format

    one_file = single_file_format(to)
    if one_file is not None:
        if on is not None:
            raise click.UsageError(
                "a Spark export writes a directory of part files: give --to without a file "
                "suffix (or leave out --spark / --master for one file)"
            )
        source = click.get_current_context().get_parameter_source("fmt")
        if source is click.core.ParameterSource.COMMANDLINE and fmt != one_file:
            raise click.UsageError(f"--to {to!r} names a {one_file} file, --format says {fmt}")
        fmt = one_file
    jobs = _jobs(on is not None)
    args = (store or "", list(topics), to, fmt, starting_offsets, ending_offsets)
    try:
        if one_file is not None:
            from ..spark._local_export import export_local_file

            with _rows_bar(f"export → {to}") as progress:
                n = export_local_file(
                    *args, namesrv=namesrv, overwrite=overwrite, progress=progress
                )
        elif on is None:
            from ..spark._local_export import export_local

            with _rows_bar(f"export → {to}") as progress:
                n = export_local(*args, namesrv=namesrv, overwrite=overwrite, progress=progress)
        else:
            n = jobs.export_topic(
                *args,
                namesrv=namesrv,
                overwrite=overwrite,
                master=on,
                log_dir=_log_dir(log_dir, store),
            )
    except Exception as exc:
        raise click.ClickException(f"export failed: {jobs.failure_line(exc)}") from None
    click.echo(json.dumps({"exported": n, "to": to, "spark": on}))


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
@_spark_options
def import_cmd(
    store: str | None,
    namesrv: str | None,
    source: str,
    topic: str | None,
    fmt: str,
    commit_log_file_size: int | None,
    use_spark: bool,
    master: str | None,
    log_dir: str | None,
) -> None:
    """Import rows (body, optional topic/tags/keys/properties/queue_id) into a store, or send
    them through running brokers."""
    _store_or_namesrv(store, namesrv)
    on = _choice(use_spark, master)
    jobs = _jobs(on is not None)
    args = (store or "", source, topic, fmt, commit_log_file_size)
    try:
        if on is None:
            from ..spark._local_import import import_local

            with _rows_bar(f"import → {namesrv or store}") as progress:
                n = import_local(*args, namesrv=namesrv, progress=progress)
        else:
            n = jobs.import_file(
                *args, namesrv=namesrv, master=on, log_dir=_log_dir(log_dir, store)
            )
    except Exception as exc:
        raise click.ClickException(f"import failed: {jobs.failure_line(exc)}") from None
    out: dict[str, Any] = {"imported": n}
    out.update({"namesrv": namesrv} if namesrv else {"store": store})
    out["spark"] = on
    click.echo(json.dumps(out))


COMMANDS = [export_cmd, import_cmd]
