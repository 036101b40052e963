"""The rocketstore PySpark data source end to end, on one local SparkSession (small data)."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from support.spark_helpers import expected_queue_messages, run_query, unpack_fixture

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

FMT = "rocketstore"


# new stores written by the tests use small commit-log files (1 GiB is RocketMQ's default)
SMALL_FILE = str(4 * 1024 * 1024)


def _config(root: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 40,
        max_hash_slot_num=1000,
        max_index_num=4000,
    )


def _put(root: Path, topic: str, queues: int, count: int, start: int = 0) -> None:
    with MessageStore(_config(root)) as store:
        for i in range(start, start + count):
            msg = Message(
                topic,
                b"%s-%d" % (topic.encode(), i),
                i % queues,
                tags=f"t{i % 3}",
                keys=[f"{topic}-k{i}", "common"],
                properties={"n": str(i)},
            )
            assert store.put_message(msg).ok
        deadline = time.monotonic() + 10
        while (
            time.monotonic() < deadline
            and sum(store.get_max_offset_in_queue(topic, q) for q in range(queues)) < start + count
        ):
            time.sleep(0.01)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spark") / "store"
    _put(root, "T1", 4, 200)
    _put(root, "T2", 2, 60)
    return root


def _read(spark: Any, store: Path, **options: str) -> Any:
    reader = spark.read.format(FMT).option("path", str(store))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _error(fn: Any) -> str:
    with pytest.raises(Exception) as info:
        fn()
    return str(info.value)


def test_batch_read_everything(spark: Any, store: Path) -> None:
    df = _read(spark, store)
    assert df.count() == 260
    rows = df.filter("topic = 'T1' AND queue_id = 1").orderBy("queue_offset").collect()
    assert [r.queue_offset for r in rows] == list(range(50))
    r = rows[0]
    assert r.body == b"T1-1" and r.tags == "t1" and r.keys == ["T1-k1", "common"]
    assert r.properties["n"] == "1"
    assert r.store_host.endswith(":10911") and len(r.msg_id) == 32
    assert df.schema.simpleString().startswith(
        "struct<topic:string,queue_id:int,queue_offset:bigint"
    )


def test_topics_and_offsets_options(spark: Any, store: Path) -> None:
    assert _read(spark, store, topics="T2").count() == 60
    df = _read(
        spark,
        store,
        topics="T1",
        startingOffsets=json.dumps({"T1": {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({"T1": {"0": 20, "2": 5}}),
    )
    counts = {r.queue_id: r["count"] for r in df.groupBy("queue_id").count().collect()}
    assert counts == {0: 10, 1: 50, 2: 5, 3: 50}
    assert _read(spark, store, startingOffsets="latest").count() == 0


def test_timestamp_options(spark: Any, store: Path) -> None:
    rows = _read(spark, store, topics="T2").orderBy("store_timestamp").collect()
    cut = rows[30].store_timestamp.replace(tzinfo=UTC)
    ms = int(cut.timestamp() * 1000)
    later = _read(spark, store, topics="T2", startingTimestamp=str(ms)).collect()
    assert later and all(r.store_timestamp.replace(tzinfo=UTC) >= cut for r in later)
    assert len(later) == sum(1 for r in rows if r.store_timestamp.replace(tzinfo=UTC) >= cut)
    earlier = _read(spark, store, topics="T2", endingTimestamp=str(ms)).count()
    assert earlier + len(later) == 60


def test_partitions_and_batches(spark: Any, store: Path) -> None:
    df = _read(spark, store, topics="T1", maxRowsPerPartition="20", batchRows="7")
    assert df.rdd.getNumPartitions() == 4 * 3  # 50 rows a queue → 20 + 20 + 10
    assert df.count() == 200


def test_pushdown_prunes_partitions(spark: Any, store: Path) -> None:
    df = _read(spark, store)
    one = df.filter("topic = 'T1' AND queue_id = 2 AND queue_offset >= 5 AND queue_offset < 9")
    assert one.rdd.getNumPartitions() == 1
    assert sorted(r.queue_offset for r in one.collect()) == [5, 6, 7, 8]
    some = df.filter("topic IN ('T2') AND queue_id > 0")
    assert some.rdd.getNumPartitions() == 1 and some.count() == 30
    keyed = df.filter("keys = array('T1-k17', 'common')")
    assert keyed.rdd.getNumPartitions() == 1
    assert [(r.queue_id, r.queue_offset) for r in keyed.collect()] == [(1, 4)]
    rows = df.filter("topic = 'T2'").orderBy("store_timestamp").collect()
    t = rows[40].store_timestamp
    recent = df.filter("topic = 'T2'").filter(df.store_timestamp >= t)
    assert recent.count() == sum(1 for r in rows if r.store_timestamp >= t)
    none = df.filter("queue_offset = -1")
    assert none.count() == 0


def test_pushdown_conf_off_still_reads(spark: Any, store: Path) -> None:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        assert _read(spark, store).filter("topic = 'T2'").count() == 60
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def test_planning_errors(spark: Any, store: Path, tmp_path: Path) -> None:
    assert "not a store directory" in _error(lambda: _read(spark, tmp_path).count())
    assert "unknown topic(s) Nope" in _error(lambda: _read(spark, store, topics="Nope").count())
    assert "startingOffsets" in _error(lambda: _read(spark, store, startingOffsets="{bad").count())
    assert "path" in _error(lambda: spark.read.format(FMT).load().count())


def _copy_store(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("lock"))
    return dst


def _run_available_now(spark: Any, store: Path, checkpoint: Path, **options: str) -> list[int]:
    sizes: list[int] = []
    seen: list[Any] = []

    def sink(df: Any, _batch_id: int) -> None:
        rows = df.collect()
        sizes.append(len(rows))
        seen.extend(rows)

    reader = spark.readStream.format(FMT).option("path", str(store))
    for k, v in options.items():
        reader = reader.option(k, v)
    run_query(
        lambda: (
            reader.load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
    )
    _run_available_now.rows = seen  # type: ignore[attr-defined]
    return sizes


def test_streaming_available_now_twice(spark: Any, store: Path, tmp_path: Path) -> None:
    live = _copy_store(store, tmp_path / "live")
    ckpt = tmp_path / "ckpt"
    first = _run_available_now(spark, live, ckpt, topics="T2", startingOffsets="earliest")
    assert sum(first) == 60
    _put(live, "T2", 2, 10, start=60)
    _put(live, "T3", 1, 0)
    second = _run_available_now(spark, live, ckpt, topics="T2", startingOffsets="earliest")
    assert sum(second) == 10
    rows = _run_available_now.rows  # type: ignore[attr-defined]
    assert sorted(r.body for r in rows) == sorted(b"T2-%d" % i for i in range(60, 70))
    assert sum(_run_available_now(spark, live, ckpt, topics="T2")) == 0


def test_streaming_max_offsets_per_trigger(spark: Any, store: Path, tmp_path: Path) -> None:
    sizes = _run_available_now(
        spark,
        store,
        tmp_path / "ckpt",
        topics="T1",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="64",
    )
    assert sum(sizes) == 200
    assert max(sizes) <= 64 and len([s for s in sizes if s]) >= 4


def test_streaming_fail_on_data_loss_option_parses(spark: Any, store: Path, tmp_path: Path) -> None:
    sizes = _run_available_now(
        spark,
        store,
        tmp_path / "c",
        topics="T2",
        startingOffsets="earliest",
        failOnDataLoss="false",
    )
    assert sum(sizes) == 60


def test_write_then_read_back(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out"
    rows = [
        ("W", bytearray(b"w%d" % i), f"tag{i % 2}", [f"k{i}"], {"p": str(i)}, i % 3)
        for i in range(90)
    ]
    df = spark.createDataFrame(
        rows,
        "topic string, body binary, tags string, keys array<string>, "
        "properties map<string,string>, queue_id int",
    )
    df.repartition(2).write.format(FMT).option("path", str(target)).option(
        "commitLogFileSize", SMALL_FILE
    ).mode("append").save()
    strings = spark.createDataFrame(
        [("S", f"text{i}") for i in range(8)], "topic string, body string"
    )
    strings.coalesce(1).write.format(FMT).option("path", str(target)).option(
        "commitLogFileSize", SMALL_FILE
    ).mode("append").save()
    back = _read(spark, target)
    assert back.count() == 98
    w = back.filter("topic = 'W'").collect()
    assert sorted(r.body for r in w) == sorted(b"w%d" % i for i in range(90))
    assert {r.queue_id for r in w} == {0, 1, 2}
    one = next(r for r in w if r.body == b"w7")
    assert one.tags == "tag1" and one.keys == ["k7"] and one.properties["p"] == "7"
    s = back.filter("topic = 'S'").collect()
    assert sorted(r.body for r in s) == sorted(b"text%d" % i for i in range(8))
    assert {r.queue_id for r in s} == {0, 1, 2, 3}  # spread over the default 4 queues


def test_streaming_write(spark: Any, store: Path, tmp_path: Path) -> None:
    target = tmp_path / "copy"
    run_query(
        lambda: (
            spark.readStream.format(FMT)
            .option("path", str(store))
            .option("topics", "T2")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("topic", "body", "tags", "keys", "queue_id")
            .writeStream.format(FMT)
            .option("path", str(target))
            .option("commitLogFileSize", SMALL_FILE)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
    )
    back = _read(spark, target).collect()
    assert sorted(r.body for r in back) == sorted(b"T2-%d" % i for i in range(60))


def test_write_errors(spark: Any, tmp_path: Path) -> None:
    bad = spark.createDataFrame([("x",)], "topic string")
    assert "'body' column" in _error(
        lambda: bad.write.format(FMT).option("path", str(tmp_path / "a")).mode("append").save()
    )
    extra = spark.createDataFrame([("x", b"y", 1)], "topic string, body binary, other int")
    assert "other" in _error(
        lambda: extra.write.format(FMT).option("path", str(tmp_path / "b")).mode("append").save()
    )
    ok = spark.createDataFrame([("x", b"y")], "topic string, body binary")
    with MessageStore(_config(tmp_path / "owned")):
        import os

        msg = _error(
            lambda: (
                ok.write.format(FMT).option("path", str(tmp_path / "owned")).mode("append").save()
            )
        )
        assert f"owned by process {os.getpid()}" in msg
    assert "append" in _error(
        lambda: ok.write.format(FMT).option("path", str(tmp_path / "c")).mode("overwrite").save()
    )


@pytest.mark.parametrize("name", ["clean", "abort"])
def test_reads_rocketmq_fixtures(spark: Any, tmp_path: Path, name: str) -> None:
    fixture = unpack_fixture(name, tmp_path)
    expected = expected_queue_messages(fixture)
    rows = _read(spark, fixture / "store").collect()
    got = {(r.topic, r.queue_id, r.queue_offset): r for r in rows}
    assert len(rows) == len(got) == len(expected)
    assert set(got) == set(expected)
    for key, rec in expected.items():
        r = got[key]
        assert r.commitlog_offset == rec["wroteOffset"]
        assert r.msg_id == rec["msgId"]
        assert hashlib.sha256(r.body).hexdigest() == rec["bodySha256"]
        assert r.tags == (rec["tags"] or None)
        assert r.keys == (rec["keys"].split() if rec["keys"] else [])
        assert dict(r.properties) == rec["properties"]
        ts = r.store_timestamp.replace(tzinfo=UTC)
        assert int(ts.timestamp() * 1000) == rec["storeTimestamp"]


def test_cli_export_then_import(spark: Any, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rocketstore.cli import main

    fixture = unpack_fixture("clean", tmp_path)
    out = tmp_path / "topic-b.parquet"
    runner = CliRunner()
    r = runner.invoke(
        main, ["export", "--store", str(fixture / "store"), "--topic", "TopicB", "--to", str(out)]
    )
    assert r.exit_code == 0, r.output
    expected = [k for k in expected_queue_messages(fixture) if k[0] == "TopicB"]
    assert json.loads(r.stdout.strip().splitlines()[-1])["exported"] == len(expected)
    target = tmp_path / "imported"
    r = runner.invoke(
        main,
        [
            "import",
            "--store",
            str(target),
            "--from",
            str(out),
            "--topic",
            "Copy",
            "--commit-log-file-size",
            SMALL_FILE,
        ],
    )
    assert r.exit_code == 0, r.output
    back = _read(spark, target).collect()
    assert len(back) == len(expected) and {x.topic for x in back} == {"Copy"}
    src = {x.body for x in spark.read.parquet(str(out)).collect()}
    assert {x.body for x in back} == src
