"""The write task's store thread: errors reach the task, and the store is closed after them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.store._lock import lock_owner

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.types import StructType  # noqa: E402

from rocketstore.spark._path_writer import _settings, write_batches  # noqa: E402

SCHEMA = StructType.fromJson(
    {
        "type": "struct",
        "fields": [
            {"name": name, "type": t, "nullable": True, "metadata": {}}
            for name, t in (("topic", "string"), ("body", "binary"))
        ],
    }
)


def _batch(bodies: list[bytes], topic: str = "T") -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"topic": [topic] * len(bodies), "body": pa.array(bodies, pa.binary())}
    )


def test_a_refused_batch_fails_the_task_and_releases_the_store(tmp_path: Path) -> None:
    settings = _settings({"path": str(tmp_path / "s"), "commitLogFileSize": "65536"}, SCHEMA)
    for bad in ("bad topic!", "L" * 128, ""):
        batches = [_batch([b"a", b"b"]), _batch([b"c"], topic=bad), _batch([b"d"])]
        with pytest.raises(RuntimeError, match="refused 1 message"):
            write_batches(settings, iter(batches))
        assert lock_owner(str(tmp_path / "s")) is None
    report = write_batches(settings, iter([_batch([b"e"])]))  # the store opens again
    assert report.rows == 1


def test_an_input_error_fails_the_task_after_what_was_handed_over(tmp_path: Path) -> None:
    settings = _settings({"path": str(tmp_path / "s"), "commitLogFileSize": "65536"}, SCHEMA)

    def broken() -> Iterator[pa.RecordBatch]:
        yield _batch([b"x%d" % i for i in range(100)])
        raise OSError("the input broke")

    with pytest.raises(OSError, match="the input broke"):
        write_batches(settings, broken())
    assert lock_owner(str(tmp_path / "s")) is None
    from rocketstore.store.read._reader import StoreReader

    with StoreReader(tmp_path / "s") as reader:  # what was handed over is stored
        assert sum(reader.max_offset("T", q) for q in reader.queue_ids("T")) == 100


# ---- a frame read from rocketstore, written as it is --------------------------------------


def _struct(*names: str, extra: pa.Field | None = None) -> StructType:
    """The Spark schema of the rocketstore read's ``names`` (all: the whole read) and
    ``extra``."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from rocketstore.columns._arrow import ARROW_SCHEMA

    fields = [f for f in ARROW_SCHEMA if not names or f.name in names]
    return from_arrow_schema(pa.schema(fields + ([extra] if extra is not None else [])))


def test_the_read_schema_is_accepted_and_only_its_writable_columns_taken() -> None:
    from rocketstore.spark._options import SourceOptionError
    from rocketstore.spark._write_common import check_schema as _check_schema

    assert _check_schema(_struct()) == (
        "topic",
        "queue_id",
        "body",
        "tags",
        "keys",
        "properties",
    )
    with pytest.raises(SourceOptionError, match="'extra' cannot be written"):
        _check_schema(_struct(extra=pa.field("extra", pa.int32())))
    with pytest.raises(SourceOptionError, match="'properties' has type map<string,int>"):
        bad = pa.field("properties", pa.map_(pa.string(), pa.int32()))
        _check_schema(_struct("topic", "body", extra=bad))


def _props_batch(rows: list[tuple[bytes, str | None, list[str], dict[str, str] | None]]) -> Any:
    props_type = pa.map_(pa.field("key", pa.string(), nullable=False), pa.string())
    return pa.RecordBatch.from_pydict(
        {
            "topic": ["P"] * len(rows),
            "queue_id": pa.array([0] * len(rows), pa.int32()),
            "body": pa.array([r[0] for r in rows], pa.binary()),
            "tags": [r[1] for r in rows],
            "keys": pa.array([r[2] for r in rows], pa.list_(pa.string())),
            "properties": pa.array(
                [list(r[3].items()) if r[3] is not None else None for r in rows], props_type
            ),
        }
    )


@pytest.mark.parametrize("keep", [False, True])
def test_system_properties_are_left_out_unless_kept(tmp_path: Path, keep: bool) -> None:
    from rocketstore.store.read._reader import StoreReader

    schema = _struct("topic", "queue_id", "body", "tags", "keys", "properties")
    options = {"path": str(tmp_path / "s"), "commitLogFileSize": "65536"}
    if keep:
        options["keepSystemProperties"] = "true"
    system = {"UNIQ_KEY": "AC1100", "WAIT": "true", "TAGS": "old", "KEYS": "old", "PGROUP": "g"}
    rows = [
        (b"a", "t", ["k1", "k2"], {**system, "user": "1"}),
        (b"b", None, [], dict(system)),  # nothing left: the column-wise path
        (b"c", "t", ["k3"], None),
        (b"d", None, [], {"DELAY": "1", "REAL_TOPIC": "P", "REAL_QID": "0", "x": "y"}),
    ]
    report = write_batches(_settings(options, schema), iter([_props_batch(rows)]))
    assert report.rows == 4
    with StoreReader(tmp_path / "s") as reader:
        got = {m.body: m.properties for m in reader.read("P", 0)}
        assert "SCHEDULE_TOPIC_XXXX" not in reader.topics()  # d is not delayed again
    if keep:
        assert got[b"a"] == {**system, "TAGS": "t", "KEYS": "k1 k2", "user": "1"}
        assert got[b"b"] == system
        assert got[b"d"] == {"REAL_TOPIC": "P", "REAL_QID": "0", "x": "y"}
    else:
        assert got[b"a"] == {"TAGS": "t", "KEYS": "k1 k2", "user": "1"}
        assert got[b"b"] == {}
        assert got[b"d"] == {"x": "y"}
    assert got[b"c"] == {"TAGS": "t", "KEYS": "k3"}
