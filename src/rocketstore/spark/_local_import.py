"""``rocketstore import`` without Spark: Parquet or JSON-lines rows read by pyarrow and written
into a store directory (``_store_write``) or sent through the brokers (``_broker_send``) from
this process.

The rows are taken as the Spark job takes them: ``topic`` (or ``--topic`` for every row),
``body`` (binary or text; ``body_base64`` as a JSON export writes it), ``tags``, ``keys``,
``properties`` and ``queue_id``; other columns are ignored. A ``DELAY`` property is dropped
(RocketMQ keeps it on a delivered delayed message; importing it would delay it again). Into a
store, one writer puts every row, as the Spark job's single write task does, so both give the
same queues and offsets.

Sources: a file, a directory of part files (names starting with ``_`` or ``.`` are skipped) or a
glob. ``format="auto"``: an export's marker says, else a file's first bytes (Parquet's ``PAR1``)
decide.

No pyspark; runs in the calling thread.
"""

from __future__ import annotations

import base64
import binascii
import glob
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..store._errors import StoreLockedError
from ..store._lock import lock_owner
from ._broker_send import send_settings, write_remote
from ._export_target import MARKER
from ._json_lines import read_rows
from ._options import SourceOptionError
from ._store_write import store_write_settings, write_batches
from ._write_common import WRITTEN_COLUMNS

BATCH_ROWS = 8192
DROPPED_PROPERTY = "DELAY"

Progress = Callable[[int, int], None]
"""Called with (rows read so far, rows in the source or 0 when unknown)."""


def check_source(source: str) -> None:
    """FileNotFoundError for a local source that does not exist (globs and URIs pass)."""
    if "://" not in source and not any(c in source for c in "*?[") and not os.path.exists(source):
        raise FileNotFoundError(f"{source} does not exist")


def check_store(store: str) -> None:
    """StoreLockedError when a process owns ``store`` (import writes it as its owner)."""
    owner = lock_owner(store)
    if owner is not None:
        raise StoreLockedError(
            f"{store} is owned by process {owner} (a running broker?): stop it, or import "
            "through it with --namesrv"
        )


def source_files(source: str) -> list[Path]:
    """The data files of ``source``: the file, a directory's files, or a glob's matches."""
    if "://" in source:
        raise SourceOptionError(
            f"{source} is a URI: import reads local files without Spark; add --spark"
        )
    if any(c in source for c in "*?["):
        found = [Path(p) for p in sorted(glob.glob(source)) if os.path.isfile(p)]
        if not found:
            raise FileNotFoundError(f"{source} matches no file")
        return found
    path = Path(source)
    if path.is_dir():
        return sorted(
            p for p in path.iterdir() if p.is_file() and not p.name.startswith(("_", "."))
        )
    return [path]


def detect_format(source: str, fmt: str) -> str:
    """``fmt``, or for "auto": what an export's marker says, else "parquet" when the first
    data file starts with Parquet's magic, else "json"."""
    if fmt != "auto":
        return fmt
    path = Path(source)
    if "://" not in source and path.is_dir() and (path / MARKER).is_file():
        try:
            said = json.loads((path / MARKER).read_text(encoding="utf-8")).get("format")
        except (OSError, ValueError, AttributeError):
            said = None
        if said in ("parquet", "json"):
            return str(said)
    if "://" in source:
        return "parquet" if path.suffix == ".parquet" else "json"
    for f in source_files(source):
        with f.open("rb") as head:
            return "parquet" if head.read(4) == b"PAR1" else "json"
    return "parquet"


def without_property(col: pa.Array, name: str) -> pa.Array:
    """A map<string, string> column without the entries named ``name`` (a map left empty
    stays an empty map, a null stays null)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    if n == 0 or col.null_count == n:
        return col
    offsets = col.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    names = col.keys.slice(lo, hi - lo)
    values = col.items.slice(lo, hi - lo)
    kept = ~pc.equal(names, name).to_numpy(zero_copy_only=False)
    if kept.all():
        return col
    parents = np.repeat(np.arange(n), np.diff(offsets))
    counts = np.bincount(parents[kept], minlength=n)
    new = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=new[1:])
    mask = pa.array(col.is_null().to_numpy(zero_copy_only=False), pa.bool_())
    keep = pa.array(kept)
    return pa.MapArray.from_arrays(
        pa.array(new, pa.int32()), names.filter(keep), values.filter(keep), type=col.type, mask=mask
    )


def _decode_base64(col: pa.Array) -> pa.Array:
    out: list[bytes | None] = []
    for value in col.to_pylist():
        if value is None:
            out.append(None)
            continue
        try:
            out.append(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            raise SourceOptionError(f"body_base64 {value[:40]!r} is not base64") from None
    return pa.array(out, pa.binary())


def rows_to_write(batch: pa.RecordBatch, topic: str | None) -> pa.RecordBatch:
    """The columns import writes (in WRITTEN_COLUMNS' order), from a batch of the source."""
    names = batch.schema.names
    cols: dict[str, pa.Array] = {}
    for name in WRITTEN_COLUMNS:
        if name in names:
            cols[name] = batch.column(names.index(name))
    if "body" not in cols and "body_base64" in names:
        cols["body"] = _decode_base64(batch.column(names.index("body_base64")))
    if topic:
        cols["topic"] = pa.array([topic] * batch.num_rows, pa.string())
    for required in ("topic", "body"):
        if required not in cols or cols[required].null_count == batch.num_rows:
            hint = " (or give --topic)" if required == "topic" else ""
            raise SourceOptionError(
                f"the rows have no {required!r}{hint}; their columns: {', '.join(names)}"
            )
    for name, col in list(cols.items()):
        kind = col.type
        if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
            cols[name] = col = col.cast(pa.string() if kind == pa.large_string() else pa.binary())
        if name == "body" and pa.types.is_string(col.type):
            cols[name] = col.cast(pa.binary())
        if name == "queue_id":
            if not pa.types.is_integer(col.type):
                raise SourceOptionError(f"column 'queue_id' has type {col.type}, not an integer")
            cols[name] = col.cast(pa.int32())
        if name == "properties":
            if not pa.types.is_map(col.type):
                raise SourceOptionError(
                    f"column 'properties' has type {col.type}, not a map of strings"
                )
            cols[name] = without_property(col, DROPPED_PROPERTY)
    order = [c for c in WRITTEN_COLUMNS if c in cols]
    return pa.RecordBatch.from_arrays([cols[c] for c in order], names=order)


def _parquet_batches(files: list[Path]) -> tuple[int, Iterator[pa.RecordBatch]]:
    readers = [pq.ParquetFile(f) for f in files]
    wanted = {*WRITTEN_COLUMNS, "body_base64"}

    def batches() -> Iterator[pa.RecordBatch]:
        for reader in readers:
            columns = [n for n in reader.schema_arrow.names if n in wanted]
            yield from reader.iter_batches(batch_size=BATCH_ROWS, columns=columns)

    return sum(r.metadata.num_rows for r in readers), batches()


def _json_batches(files: list[Path]) -> Iterator[pa.RecordBatch]:
    for f in files:
        yield from read_rows(f, BATCH_ROWS)


def import_local(
    store: str,
    source: str,
    topic: str | None,
    fmt: str,
    commit_log_file_size: int | None = None,
    *,
    namesrv: str | None = None,
    progress: Progress | None = None,
) -> int:
    """Write the rows of a Parquet / JSON-lines ``source`` into the store directory ``store``
    (a new store gets commit-log files of ``commit_log_file_size`` bytes, RocketMQ's 1 GiB when
    None), or with ``namesrv`` send them through the brokers; the rows written."""
    check_source(source)
    if not namesrv:
        check_store(store)
    fmt = detect_format(source, fmt)
    files = source_files(source)
    if fmt == "parquet":
        total, raw = _parquet_batches(files)
    else:
        total, raw = 0, _json_batches(files)
    read = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal read
        for batch in raw:
            if not batch.num_rows:
                continue
            out = rows_to_write(batch, topic)
            read += out.num_rows
            if progress is not None:
                progress(read, total)
            yield out

    rest = batches()
    first = next(rest, None)
    if first is None:
        return 0
    columns = tuple(first.schema.names)

    def all_batches() -> Iterator[pa.RecordBatch]:
        yield first
        yield from rest

    if namesrv:
        sent = write_remote(send_settings({"namesrv": namesrv}, columns), all_batches())
        return sent.rows
    options = {"path": store}
    if commit_log_file_size:
        options["commitLogFileSize"] = str(commit_log_file_size)
    stored = write_batches(store_write_settings(options, columns), all_batches())
    return stored.rows
