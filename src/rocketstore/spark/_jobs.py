"""Spark jobs behind ``rocketstore export --spark`` and ``rocketstore import --spark`` (the
session from ``_session``: local[2] or the master the user chose, with a progress bar fed by
Spark's status tracker), and the one-line reason a job failed. Without Spark the commands run
``_local_export`` / ``_local_import``, which write the same rows."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .._extras import install_hint
from ..store._errors import StoreError
from ._export_target import StagedOutput, check_target
from ._local_import import check_source, check_store, detect_format
from ._master import DEFAULT_MASTER
from ._session import cli_session

TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
JSON_SCHEMA = (
    "topic string, body string, body_base64 string, tags string, keys array<string>, "
    "properties map<string,string>, queue_id int"
)
_ERROR_LINE = re.compile(r"^(?::\s*|Caused by:\s*)?((?:[\w$]+\.)*)(\w*(?:Error|Exception)): (.+)$")


def failure_line(exc: BaseException) -> str:
    """One line saying why a job failed. Spark's errors carry the JVM's and the Python
    worker's tracebacks in their text: the last of rocketstore's own exceptions there is the
    cause, else the first exception line."""
    if isinstance(exc, ImportError):
        return f"{exc}: {install_hint('spark')}"
    if isinstance(exc, (StoreError, OSError)) and not hasattr(exc, "getErrorClass"):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [m for m in map(_ERROR_LINE.match, lines) if m is not None]
    ours = [m for m in errors if m.group(1).startswith("rocketstore.")]
    if ours or errors:
        _, name, text = (ours[-1] if ours else errors[0]).groups()
        line = f"{name}: {text}"
    else:
        line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= 400 else line[:397] + "..."


def run_with_progress(
    spark: Any, what: str, job: Callable[[], Any], console: Console | None = None
) -> Any:
    """Run ``job`` (in this thread: Spark resolves data sources per thread) while a helper
    thread shows the tasks of Spark's active stages (on a terminal; elsewhere nothing)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        return job()
    done = threading.Event()
    tracker = spark.sparkContext.statusTracker()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tasks"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task(what, total=None)

        def watch() -> None:
            while not done.wait(0.25):
                try:
                    stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
                except Exception:  # the context is going away
                    return
                stages = [s for s in stages if s is not None]
                if stages:
                    total = sum(s.numTasks for s in stages)
                    finished = sum(s.numCompletedTasks for s in stages)
                    progress.update(bar, total=total, completed=finished)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            value = job()
        finally:
            done.set()
            watcher.join(2)
        total = progress.tasks[0].total or 1
        progress.update(bar, total=total, completed=total)
    return value


def export_topic(
    store: str,
    topics: list[str],
    to: str,
    fmt: str,
    starting: str | None,
    ending: str | None,
    *,
    namesrv: str | None = None,
    overwrite: bool = False,
    master: str = DEFAULT_MASTER,
    log_dir: Path = Path("logs"),
) -> int:
    """Export ``topics`` of the store directory ``store``, or, with ``namesrv``, of the
    brokers behind that name server (topics required), into the directory ``to``: a new or
    empty one, or with ``overwrite`` a previous export (see ``_export_target``). Spark writes
    beside it; the output replaces ``to`` only once the job has succeeded."""
    target = check_target(to, overwrite)
    spark, created = cli_session(master, log_dir)
    try:
        reader = spark.read.format("rocketstore")
        reader = reader.option("namesrv", namesrv) if namesrv else reader.option("path", store)
        if topics:
            reader = reader.option("topics", ",".join(topics))
        if starting:
            reader = reader.option("startingOffsets", starting)
        if ending:
            reader = reader.option("endingOffsets", ending)
        df = reader.load()
        with StagedOutput(target, overwrite) as staged:
            out = str(staged.path)

            def job() -> None:
                if fmt == "parquet":
                    # times as the source types them (microseconds, UTC), not as INT96
                    previous = spark.conf.get(TIMESTAMP_TYPE, None)
                    spark.conf.set(TIMESTAMP_TYPE, "TIMESTAMP_MICROS")
                    try:
                        df.write.mode("errorifexists").parquet(out)
                    finally:
                        if previous is None:
                            spark.conf.unset(TIMESTAMP_TYPE)
                        else:
                            spark.conf.set(TIMESTAMP_TYPE, previous)
                else:
                    body_as_text = df.selectExpr("*", "base64(body) AS body_base64").drop("body")
                    body_as_text.write.mode("errorifexists").json(out)

            run_with_progress(spark, f"export → {to}", job)
            rows = int(
                spark.read.parquet(out).count()
                if fmt == "parquet"
                else spark.read.json(out).count()
            )
            staged.commit(
                {
                    "format": fmt,
                    "rows": rows,
                    "topics": topics,
                    "source": namesrv or os.path.abspath(store),
                }
            )
        return rows
    finally:
        if created:
            spark.stop()


def import_file(
    store: str,
    source: str,
    topic: str | None,
    fmt: str,
    commit_log_file_size: int | None = None,
    *,
    namesrv: str | None = None,
    master: str = DEFAULT_MASTER,
    log_dir: Path = Path("logs"),
) -> int:
    """Write the rows of a Parquet / JSON-lines source into ``store``; a new store gets
    commit-log files of ``commit_log_file_size`` bytes (RocketMQ's 1 GiB when None). With
    ``namesrv`` the rows are sent through the brokers instead, by every task."""
    check_source(source)
    if not namesrv:
        check_store(store)
    fmt = detect_format(source, fmt)
    spark, created = cli_session(master, log_dir)
    try:
        from pyspark.sql import functions as F

        if fmt == "parquet":
            df = spark.read.parquet(source)
        else:  # the fields import takes, typed (inferred, properties would be a struct)
            df = spark.read.schema(JSON_SCHEMA).json(source)
            df = df.withColumn(
                "body", F.coalesce(F.unbase64("body_base64"), F.col("body").cast("binary"))
            )
        if "body" not in df.columns and "body_base64" in df.columns:
            df = df.selectExpr("*", "unbase64(body_base64) AS body").drop("body_base64")

        if topic:
            df = df.withColumn("topic", F.lit(topic))
        keep = [
            c
            for c in ("topic", "body", "tags", "keys", "properties", "queue_id")
            if c in df.columns
        ]
        df = df.select(*keep)
        if "properties" in df.columns:
            # exported messages that were delivered late keep DELAY; importing them must not
            # delay them again
            df = df.withColumn(
                "properties", F.expr("map_filter(properties, (k, v) -> k != 'DELAY')")
            )
        if "queue_id" in df.columns:
            df = df.withColumn("queue_id", df["queue_id"].cast("int"))
        rows = df.count()
        if namesrv:
            writer = df.write.format("rocketstore").option("namesrv", namesrv).mode("append")
        else:  # a store has one owner: one task writes
            writer = df.coalesce(1).write.format("rocketstore").option("path", store)
            writer = writer.mode("append")
            if commit_log_file_size:
                writer = writer.option("commitLogFileSize", str(commit_log_file_size))
        run_with_progress(spark, f"import → {namesrv or store}", writer.save)
        return int(rows)
    finally:
        if created:
            spark.stop()
