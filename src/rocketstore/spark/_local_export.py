"""``rocketstore export`` without Spark: the source's rows written as Parquet or JSON lines by
pyarrow in this process.

The rows are the ones a Spark read of the source gives (the same plan and decoder: one range
per (topic, queue, offset range) from ``_path_plan`` or ``_broker_plan``, decoded by
``RangeDecoder`` into ``ARROW_SCHEMA``), written in plan order. The files are those a Spark
export leaves, under the same rules (``_export_target``: a temporary sibling moved into place
once everything is written, the export marker):

    out/
      part-00000-<uuid>-c000.snappy.parquet   (or .json; a new part every ~512 MiB)
      _SUCCESS
      _rocketstore_export.json

Parquet: the source's Arrow schema as it is (times as TIMESTAMP_MICROS in UTC, as the Spark
export writes them), snappy, row groups of up to 1,048,576 rows. JSON lines: ``_json_lines``.

A ``--to`` named like a file (``out.parquet``, ``out.json``, ``out.jsonl``) gets one file of
that name instead (``export_local_file``): written beside it under a hidden temporary name and
renamed into place once complete.

No pyspark; runs in the calling thread.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from ..columns._arrow import ARROW_SCHEMA, RangeDecoder
from ..store._durable import fsync_dir
from ._broker import Cluster, drop_pool, pull_range
from ._broker_plan import plan_remote, remote_of
from ._export_target import ExportTargetError, StagedOutput, check_target, local_path
from ._json_lines import encode_batch
from ._options import SourceOptions
from ._path_plan import open_reader, plan_batch

PART_BYTES = 512 << 20
ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 128 << 20

Progress = Callable[[int, int], None]
"""Called with (rows written so far, rows planned) as the export goes."""


def source_options(
    store: str,
    topics: list[str],
    starting: str | None,
    ending: str | None,
    namesrv: str | None,
) -> SourceOptions:
    """The read options an export's command line stands for (the same as the Spark job's)."""
    options: dict[str, str] = {"namesrv": namesrv} if namesrv else {"path": store}
    if topics:
        options["topics"] = ",".join(topics)
    if starting:
        options["startingOffsets"] = starting
    if ending:
        options["endingOffsets"] = ending
    return SourceOptions.parse(options)


def _path_batches(opts: SourceOptions) -> tuple[int, Iterator[pa.RecordBatch]]:
    with open_reader(opts) as reader:
        ranges = plan_batch(reader, opts)

    def batches() -> Iterator[pa.RecordBatch]:
        with open_reader(opts) as reader:  # (as a Spark task opens its own)
            for r in ranges:
                decoder = RangeDecoder(
                    reader,
                    schema=ARROW_SCHEMA,
                    batch_rows=opts.batch_rows,
                    check_crc=opts.check_crc,
                    fail_on_data_loss=opts.fail_on_data_loss,
                )
                yield from decoder.batches(r)

    return sum(r.end - r.begin for r in ranges), batches()


def _broker_batches(opts: SourceOptions) -> tuple[int, Iterator[pa.RecordBatch]]:
    remote = remote_of(opts)
    with Cluster(remote) as cluster:
        ranges = plan_remote(cluster, opts)

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for r in ranges:
                yield from pull_range(
                    r,
                    remote,
                    ARROW_SCHEMA,
                    batch_rows=opts.batch_rows,
                    check_crc=opts.check_crc,
                    fail_on_data_loss=opts.fail_on_data_loss,
                )
        finally:
            drop_pool()

    return sum(r.end - r.begin for r in ranges), batches()


def source_batches(opts: SourceOptions) -> tuple[int, Iterator[pa.RecordBatch]]:
    """(offsets planned, the rows in plan order) of a batch read with ``opts``; planning errors
    (not a store, unknown topics, a broker out of reach) are raised here."""
    return _broker_batches(opts) if opts.remote is not None else _path_batches(opts)


class _Parts:
    """The part files of one export: a new one once the current one passed PART_BYTES."""

    def __init__(self, directory: Path, fmt: str, part_bytes: int = PART_BYTES) -> None:
        self.directory = directory
        self.fmt = fmt
        self.part_bytes = part_bytes
        self.job = uuid.uuid4()
        self.index = 0
        self.rows = 0
        self.parquet: pq.ParquetWriter | None = None
        self.parquet_path: Path | None = None
        self.lines: IO[bytes] | None = None
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_bytes = 0

    def _name(self) -> Path:
        suffix = "snappy.parquet" if self.fmt == "parquet" else "json"
        name = f"part-{self.index:05d}-{self.job}-c000.{suffix}"
        self.index += 1
        return self.directory / name

    def _flush_group(self) -> None:
        if not self.pending:
            return
        if self.parquet is None:
            self._open_parquet()
        assert self.parquet is not None and self.parquet_path is not None
        table = pa.Table.from_batches(self.pending, schema=ARROW_SCHEMA)
        self.parquet.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0
        if self.parquet_path.stat().st_size >= self.part_bytes:
            self.parquet.close()
            self.parquet = None

    def _open_parquet(self) -> None:
        self.parquet_path = self._name()
        self.parquet = pq.ParquetWriter(self.parquet_path, ARROW_SCHEMA, compression="snappy")

    def write(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        if self.fmt == "parquet":
            self.pending.append(batch)
            self.pending_rows += batch.num_rows
            self.pending_bytes += batch.nbytes
            if self.pending_rows >= ROW_GROUP_ROWS or self.pending_bytes >= ROW_GROUP_BYTES:
                self._flush_group()
            return
        if self.lines is None:
            self.lines = self._name().open("wb")
        self.lines.write(encode_batch(batch))
        if self.lines.tell() >= self.part_bytes:
            self.lines.close()
            self.lines = None

    def close(self) -> None:
        """Write what is pending and close the open part (an export of nothing leaves one
        empty part, as Spark does)."""
        if self.fmt == "parquet":
            self._flush_group()
            if self.parquet is None and self.index == 0:
                self._open_parquet()
            if self.parquet is not None:
                self.parquet.close()
                self.parquet = None
        else:
            if self.lines is None and self.index == 0:
                self.lines = self._name().open("wb")
            if self.lines is not None:
                self.lines.close()
                self.lines = None
        (self.directory / "_SUCCESS").write_bytes(b"")

    def write_all(
        self, batches: Iterator[pa.RecordBatch], planned: int, progress: Progress | None
    ) -> None:
        """Write every batch and close (``progress`` told after each); on any failure the
        open part is abandoned and the failure raised."""
        try:
            for batch in batches:
                self.write(batch)
                if progress is not None:
                    progress(self.rows, planned)
            self.close()
        except BaseException:
            self.abandon()
            raise

    def abandon(self) -> None:
        for f in (self.parquet, self.lines):
            if f is not None:
                try:
                    f.close()
                except Exception:  # the staged output is removed anyway
                    pass


def export_local(
    store: str,
    topics: list[str],
    to: str,
    fmt: str,
    starting: str | None,
    ending: str | None,
    *,
    namesrv: str | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> int:
    """Export ``topics`` of the store directory ``store`` (or, with ``namesrv``, of the brokers
    behind it) into the directory ``to`` as ``fmt`` ("parquet" or "json"); the rows written."""
    target = check_target(to, overwrite)
    opts = source_options(store, topics, starting, ending, namesrv)
    planned, batches = source_batches(opts)
    with StagedOutput(target, overwrite) as staged:
        staged.path.mkdir()
        parts = _Parts(staged.path, fmt)
        parts.write_all(batches, planned, progress)
        staged.commit(
            {
                "format": fmt,
                "rows": parts.rows,
                "topics": topics,
                "source": namesrv or os.path.abspath(store),
            }
        )
    return parts.rows


def export_local_file(
    store: str,
    topics: list[str],
    to: str,
    fmt: str,
    starting: str | None,
    ending: str | None,
    *,
    namesrv: str | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> int:
    """As ``export_local``, into the one file ``to``: ExportTargetError when it is a directory
    or a link, or exists and is not a previous export of ``fmt`` (one is replaced only with
    ``overwrite``); a failed export leaves it as it was."""
    target = Path(os.path.abspath(os.path.expanduser(local_path(to))))
    if target.is_symlink():
        raise ExportTargetError(f"{to} is a symbolic link: give the file itself")
    if target.is_dir():
        raise ExportTargetError(
            f"{to!r} is a directory: name a file, or a directory without a suffix"
        )
    if target.exists() and not _previous_file_export(target, fmt):
        raise ExportTargetError(
            f"{to} exists and is not a previous export: give a new file (--overwrite replaces "
            "only a previous export)"
        )
    if target.exists() and not overwrite:
        raise ExportTargetError(f"{to} holds a previous export: add --overwrite to replace it")
    if not target.parent.is_dir():
        raise ExportTargetError(f"{str(target.parent)!r} is not a directory")
    opts = source_options(store, topics, starting, ending, namesrv)
    planned, batches = source_batches(opts)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-", dir=target.parent))
    try:
        parts = _Parts(staging, fmt, part_bytes=1 << 62)  # one part: the file
        parts.write_all(batches, planned, progress)
        (part,) = staging.glob("part-*")
        with open(part, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(part, target)
        fsync_dir(target.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return parts.rows


def _previous_file_export(path: Path, fmt: str) -> bool:
    """Whether ``path`` is a file an export of ``fmt`` wrote: Parquet with the source's
    columns, or JSON lines whose first line is a row (an empty file holds nothing to lose)."""
    try:
        if fmt == "parquet":
            return bool(list(pq.read_schema(path).names) == list(ARROW_SCHEMA.names))
        with open(path, "rb") as f:
            first = f.readline()
            more = f.read(1)
        if not first.strip():
            return more == b""
        row = json.loads(first)
        return isinstance(row, dict) and {"topic", "queue_id", "queue_offset"} <= set(row)
    except (OSError, ValueError, pa.ArrowException):
        return False
