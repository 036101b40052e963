"""Column pruning: reads that ask for some columns (``.schema(...)`` or option ``columns``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.log._record import OFFSET_BODY_LENGTH_V4
from rocketstore.store.read._reader import StoreReader
from support.spark_helpers import run_query

pa = pytest.importorskip("pyarrow")

from rocketstore.columns._arrow import (  # noqa: E402
    ARROW_SCHEMA,
    QueueRange,
    RangeDecoder,
    select_schema,
)
from rocketstore.columns._schema import ColumnError  # noqa: E402
from rocketstore.spark._options import SourceOptions  # noqa: E402

FMT = "rocketstore"


def _store(root: Path, count: int = 40) -> Path:
    config = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 40,
    )
    with MessageStore(config) as store:
        for i in range(count):
            msg = Message("C", b"c%d" % i, i % 2, tags="t", keys=[f"k{i}"])
            assert store.put_message(msg).ok
    return root


def _break_properties(root: Path) -> None:
    """Make the first record's properties invalid UTF-8 (its body CRC stays right)."""
    path = sorted((root / "commitlog").iterdir())[0]
    data = bytearray(path.read_bytes())
    body_len = int.from_bytes(data[OFFSET_BODY_LENGTH_V4 : OFFSET_BODY_LENGTH_V4 + 4], "big")
    topic_at = OFFSET_BODY_LENGTH_V4 + 4 + body_len
    props_at = topic_at + 1 + data[topic_at] + 2
    data[props_at] = 0xFF
    path.write_bytes(bytes(data))


def test_schema_selection_checks_names_and_types() -> None:
    fields = [ARROW_SCHEMA.field("body"), ARROW_SCHEMA.field("queue_id")]
    assert select_schema(fields).names == ["body", "queue_id"]
    with pytest.raises(ColumnError, match=r"unknown column.*nope.*rocketstore has: topic"):
        select_schema([pa.field("nope", pa.string())])
    with pytest.raises(ColumnError, match="body is binary in rocketstore"):
        select_schema([pa.field("body", pa.string())])
    opts = SourceOptions.parse({"path": "/x", "columns": " body , queue_id"})
    assert opts.columns == ("body", "queue_id")
    with pytest.raises(ColumnError, match="unknown column"):
        SourceOptions.parse({"path": "/x", "columns": "body,oops"})


def test_a_read_without_properties_never_parses_them(tmp_path: Path) -> None:
    root = _store(tmp_path / "s")
    _break_properties(root)
    r = QueueRange("C", 0, 0, 20)
    with StoreReader(root) as reader:
        narrow = select_schema([ARROW_SCHEMA.field("queue_id"), ARROW_SCHEMA.field("body")])
        rows = [x for b in RangeDecoder(reader, schema=narrow).batches(r) for x in b.to_pylist()]
        assert rows[0] == {"queue_id": 0, "body": b"c0"} and len(rows) == 20
        full = RangeDecoder(reader, fail_on_data_loss=False)
        assert [b.num_rows for b in full.batches(r)] == [19]  # the full read refuses it


@pytest.mark.spark
def test_spark_reads_a_subset_in_any_order(spark: Any, tmp_path: Path) -> None:
    root = str(_store(tmp_path / "s"))
    full = spark.read.format(FMT).option("path", root).load()
    expected = sorted((r.queue_id, r.body) for r in full.collect())
    df = spark.read.format(FMT).schema("body binary, queue_id int").option("path", root).load()
    assert df.columns == ["body", "queue_id"]
    assert sorted((r.queue_id, r.body) for r in df.collect()) == expected
    opt = spark.read.format(FMT).option("path", root).option("columns", "queue_id,body").load()
    assert opt.columns == ["queue_id", "body"]
    assert sorted((r.queue_id, r.body) for r in opt.collect()) == expected
    bad = spark.read.format(FMT).schema("body binary, size int").option("path", root).load()
    with pytest.raises(Exception, match=r"unknown column.*size.*rocketstore has"):
        bad.collect()
    clash = spark.read.format(FMT).schema("body binary").option("columns", "queue_id")
    with pytest.raises(Exception, match="name different columns"):
        clash.option("path", root).load().collect()


@pytest.mark.spark
def test_spark_stream_reads_a_subset(spark: Any, tmp_path: Path) -> None:
    root = str(_store(tmp_path / "s"))
    seen: list[Any] = []
    stream = (
        spark.readStream.format(FMT)
        .schema("queue_offset long, body binary")
        .option("path", root)
        .option("startingOffsets", "earliest")
        .load()
    )
    run_query(
        lambda: (
            stream.writeStream.foreachBatch(lambda df, _id: seen.extend(df.collect()))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
    )
    assert sorted(r.body for r in seen) == sorted(b"c%d" % i for i in range(40))
    assert set(seen[0].asDict()) == {"queue_offset", "body"}
