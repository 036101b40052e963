"""JSON lines as ``rocketstore export --format json`` writes them, and their rows read back.

One message a line, the way Spark's JSON writer puts a rocketstore read whose ``body`` became
``body_base64`` (``df.selectExpr("*", "base64(body) AS body_base64").drop("body")``)::

    {"topic":"T","queue_id":0,"queue_offset":0,"commitlog_offset":0,"msg_id":"7F00...",
     "tags":"a","keys":["k1"],"properties":{"TAGS":"a","KEYS":"k1"},
     "born_timestamp":"2024-05-01T12:00:00.123Z","store_timestamp":"...","born_host":"...",
     "store_host":"...","reconsume_times":0,"sys_flag":0,"body_base64":"bTE="}

(on one line): the columns in the source's order with ``body_base64`` last, a null column left
out, times in UTC to the millisecond, the properties in the message's order, text as UTF-8.

Reading (``read_rows``) takes what import writes: ``topic``, ``body_base64`` (or ``body`` as
text), ``tags``, ``keys`` (an array, or one space-separated string), ``properties`` (an object
of strings) and ``queue_id``; other fields are ignored. A line that is not a JSON object, or a
field of another type, is an error naming the file and line.

No pyspark; any thread.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ._options import SourceOptionError

BODY_FIELD = "body_base64"
IMPORT_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.list_(pa.field("element", pa.string()))),
        pa.field(
            "properties",
            pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string())),
        ),
        pa.field("queue_id", pa.int32()),
    ]
)
"""The columns a row read from JSON lines has (a missing field: null)."""


class JsonLinesError(SourceOptionError):
    """A JSON line that is not a message import can write."""


def _millis_text(col: pa.Array) -> pa.Array:
    """A timestamp column as Spark's JSON writer prints it: UTC, milliseconds (rounded down)."""
    micros = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    values = micros.fill_null(0).to_numpy(zero_copy_only=False)
    millis = pa.array(
        np.floor_divide(values, 1000),
        pa.int64(),
        mask=micros.is_null().to_numpy(zero_copy_only=False),
    )
    as_time = millis.cast(pa.timestamp("ms", tz="UTC"))
    return pc.strftime(as_time, format="%Y-%m-%dT%H:%M:%SZ")


def encode_batch(batch: pa.RecordBatch) -> bytes:
    """The JSON lines of a batch of the source's columns (any subset, in the source's order)."""
    columns: list[tuple[str, list[Any]]] = []
    body: list[Any] | None = None
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if name == "body":
            body = col.to_pylist()
            continue
        if pa.types.is_timestamp(col.type):
            col = _millis_text(col)
        values = col.to_pylist()
        if pa.types.is_map(col.type):
            values = [dict(v) if v is not None else None for v in values]
        columns.append((name, values))
    if body is not None:
        encoded = [base64.b64encode(b).decode("ascii") if b is not None else None for b in body]
        columns.append((BODY_FIELD, encoded))
    out = bytearray()
    dumps = orjson.dumps
    for i in range(batch.num_rows):
        row = {name: values[i] for name, values in columns if values[i] is not None}
        out += dumps(row)
        out += b"\n"
    return bytes(out)


def _text(value: Any, what: str, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise JsonLinesError(f"{where}: {what} is {type(value).__name__}, not a string")


def _row(obj: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(obj, dict):
        raise JsonLinesError(f"{where}: not a JSON object")
    topic = _text(obj.get("topic"), "topic", where)
    body: bytes | None = None
    encoded = _text(obj.get(BODY_FIELD), BODY_FIELD, where)
    if encoded is not None:
        try:
            body = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise JsonLinesError(f"{where}: {BODY_FIELD} is not base64") from None
    else:
        text = _text(obj.get("body"), "body", where)
        body = text.encode("utf-8") if text is not None else None
    tags = _text(obj.get("tags"), "tags", where)
    keys = obj.get("keys")
    if isinstance(keys, str):
        keys = [k for k in keys.split(" ") if k]
    elif keys is not None and (
        not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)
    ):
        raise JsonLinesError(f"{where}: keys is not an array of strings")
    props = obj.get("properties")
    if props is not None:
        if not isinstance(props, dict) or not all(isinstance(v, str) for v in props.values()):
            raise JsonLinesError(f"{where}: properties is not an object of strings")
        props = list(props.items())
    qid = obj.get("queue_id")
    if qid is not None and (isinstance(qid, bool) or not isinstance(qid, int)):
        raise JsonLinesError(f"{where}: queue_id is not an integer")
    return topic, body, tags, keys, props, qid


def read_rows(path: Path, batch_rows: int = 8192) -> Iterator[pa.RecordBatch]:
    """The rows of one JSON-lines file (``IMPORT_SCHEMA``), ``batch_rows`` at a time; blank
    lines are skipped."""
    rows: list[tuple[Any, ...]] = []
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise JsonLinesError(f"{where}: not JSON ({exc})") from None
            rows.append(_row(obj, where))
            if len(rows) >= batch_rows:
                yield _batch(rows)
                rows = []
    if rows:
        yield _batch(rows)


def _batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    arrays = [
        pa.array(values, field.type) for values, field in zip(columns, IMPORT_SCHEMA, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=IMPORT_SCHEMA)
