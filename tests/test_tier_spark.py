"""rocketstore.spark.read_topic: the tier's listed Parquet files and the rocketstore source from
the tier's boundary, as one DataFrame. Over an untruncated store it gives exactly the source's
rows (every column compared); after retention removed the tiered commit-log files it still
gives every row, and when retention went past the tier the read fails; a selection of columns is the same on both sides; files no manifest lists are
not read. A batch of tier_snapshot's files and a stream from its startingOffsets give every
row once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from rocketstore import Message, MessageStore
from rocketstore.spark import read_topic, tier_files, tier_snapshot, tiered_boundary
from rocketstore.tier._manifest import load_manifest, topic_dir
from support.spark_helpers import run_query
from support.tier_files import expire_oldest, store_rows, tier_store, wait_dispatched

TOPICS = ("SA", "SB")
ORDER = ["topic", "queue_id", "queue_offset"]


@pytest.fixture
def store(open_store: Callable[..., MessageStore]) -> MessageStore:
    s = open_store(file_reserved_time=1, delete_commit_log_files_interval=0)
    for n in range(200):
        for topic in TOPICS:
            r = s.put_message(
                Message(
                    topic,
                    f"{topic}{n}".encode() * (120 + n % 30),
                    n % 3,
                    tags=f"t{n % 4}",
                    keys=[f"k{n}"],
                    properties={"n": str(n)},
                )
            )
            assert r.ok
    # a queue the tier will not hold: only past the tiered files
    for n in range(5):
        assert s.put_message(Message("SB", b"late", 3, keys=[f"late{n}"])).ok
    wait_dispatched(s)
    return s


def rows(df: Any) -> list[Any]:
    return [tuple(r) for r in df.orderBy(*ORDER).collect()]


def source(spark: Any, path: str, columns: str | None = None) -> Any:
    reader = spark.read.format("rocketstore").option("path", path).option("topics", "SA,SB")
    if columns:
        reader = reader.option("columns", columns)
    return reader.load()


def test_read_topic_equals_the_source_before_and_after_retention(
    spark: Any, store: MessageStore, tmp_path: Path
) -> None:
    path = str(store.config.store_path_root_dir)
    tiered = tmp_path / "tiered"
    tier_store(path, tiered, files=3)
    # a file no manifest lists (a crash's leftover) is never read
    leftover = store_rows(path, "SA").slice(0, 5)
    pq.write_table(leftover, topic_dir(tiered, "SA") / "part-99999999999999999999.parquet")

    want = rows(source(spark, path))
    got_df = read_topic(spark, path=path, topics=["SA", "SB"], tiered_dir=str(tiered))
    assert got_df.columns == source(spark, path).columns
    got = rows(got_df)
    assert len(got) == len(want) == 405
    assert got == want

    expire_oldest(store, 3)
    assert source(spark, path).count() < len(want)  # the source alone no longer has them
    after = rows(read_topic(spark, path=path, topics="SA,SB", tiered_dir=str(tiered)))
    assert after == want


def test_columns_are_selected_alike_on_both_sides(
    spark: Any, store: MessageStore, tmp_path: Path
) -> None:
    path = str(store.config.store_path_root_dir)
    tiered = tmp_path / "tiered"
    tier_store(path, tiered, files=2)
    cols = ["queue_offset", "body", "queue_id", "topic", "store_timestamp"]
    df = read_topic(spark, path, ["SB", "SA"], columns=cols, tiered_dir=str(tiered))
    assert df.columns == cols
    want = source(spark, path, ",".join(cols))
    assert rows(df) == rows(want)
    # retention past the tier's boundary: messages are missing, and the read says so
    expire_oldest(store, 3)
    with pytest.raises(Exception, match="retention"):
        read_topic(spark, path, "SA", columns=cols, tiered_dir=str(tiered)).count()


def test_a_stream_takes_over_where_the_tier_snapshot_ends(
    spark: Any, store: MessageStore, tmp_path: Path
) -> None:
    path = str(store.config.store_path_root_dir)
    tiered = tmp_path / "tiered"
    tier_store(path, tiered, files=2)
    snap = tier_snapshot(path, ["SA", "SB"], str(tiered))
    assert snap.starting_offsets == tiered_boundary(path, "SA,SB", str(tiered))
    assert snap.files == tier_files(str(tiered), ["SA", "SB"])
    boundary = json.loads(snap.starting_offsets)
    assert snap.files == [
        str(topic_dir(tiered, t) / f.name) for t in TOPICS for f in load_manifest(tiered, t).files
    ]
    for topic in TOPICS:
        manifest = load_manifest(tiered, topic)
        for q in (0, 1, 2):
            held = manifest.queue_range(q)
            assert held is not None
            assert boundary[topic][str(q)] == held[1] + 1
    assert boundary["SB"]["3"] == -2  # not tiered: from the earliest
    assert list(boundary["SB"]) == ["0", "1", "2", "3"]

    # the recipe of docs/spark.md: the files as a batch, then a stream from the offsets
    history = rows(spark.read.parquet(*snap.files))
    live = (
        spark.readStream.format("rocketstore")
        .option("path", path)
        .option("topics", "SA,SB")
        .option("startingOffsets", snap.starting_offsets)
        .load()
    )
    run_query(
        lambda: (
            live.writeStream.format("memory")
            .queryName("tier_stream")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
    )
    streamed = rows(spark.table("tier_stream"))
    assert sorted(history + streamed) == rows(source(spark, path))


def test_bad_arguments(spark: Any, store: MessageStore, tmp_path: Path) -> None:
    path = str(store.config.store_path_root_dir)
    with pytest.raises(ValueError, match="unknown topic"):
        read_topic(spark, path, "NOPE", tiered_dir=str(tmp_path))
    with pytest.raises(ValueError, match="startingOffsets"):
        read_topic(spark, path, "SA", options={"startingOffsets": "latest"})
    with pytest.raises(ValueError, match="column"):
        read_topic(spark, path, "SA", columns=["nope"])
