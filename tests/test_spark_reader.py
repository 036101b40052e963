"""StoreReader and the Arrow decoding behind the Spark data source (no JVM needed)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store._errors import CorruptRecordError
from rocketstore.store._lock import lock_owner
from rocketstore.store.log._record import OFFSET_BODY_LENGTH_V4
from rocketstore.store.read._reader import NotAStoreError, StoreReader
from support.spark_helpers import expected_queue_messages, unpack_fixture
from support.waits import wait_until

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from rocketstore.columns._arrow import ARROW_SCHEMA, QueueRange, RangeDecoder  # noqa: E402
from rocketstore.spark._options import (  # noqa: E402
    SourceOptionError,
    SourceOptions,
    canonical,
    parse_offsets,
)
from rocketstore.spark._path_plan import limit_offsets  # noqa: E402


def _tree_digest(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            out[str(p.relative_to(root))] = (p.stat().st_mtime_ns, hashlib.sha256(data).hexdigest())
    return out


@pytest.mark.parametrize("name", ["clean", "abort"])
def test_fixture_read_matches_manifest_and_changes_nothing(tmp_path: Path, name: str) -> None:
    fixture = unpack_fixture(name, tmp_path)
    store = fixture / "store"
    before = _tree_digest(store)
    expected = expected_queue_messages(fixture)
    got = {}
    with StoreReader(store) as reader:
        assert reader.commit_log_file_size == 1048576
        assert reader.consume_queue_file_size == 20000
        decoder = RangeDecoder(reader, batch_rows=64)
        for topic in reader.topics():
            for qid in reader.queue_ids(topic):
                r = QueueRange(topic, qid, 0, reader.max_offset(topic, qid))
                slow = list(reader.read(topic, qid))
                rows = [row for b in decoder.batches(r) for row in b.to_pylist()]
                assert len(rows) == len(slow)
                for row, msg in zip(rows, slow, strict=True):
                    assert row["msg_id"] == msg.msg_id and row["body"] == msg.body
                    got[(row["topic"], row["queue_id"], row["queue_offset"])] = row
    assert set(got) == set(expected)
    for key, rec in expected.items():
        row = got[key]
        assert row["commitlog_offset"] == rec["wroteOffset"]
        assert row["msg_id"] == rec["msgId"]
        assert hashlib.sha256(row["body"]).hexdigest() == rec["bodySha256"]
        assert row["tags"] == (rec["tags"] or None)
        assert row["keys"] == (rec["keys"].split() if rec["keys"] else [])
        assert dict(row["properties"]) == rec["properties"]
        assert int(row["store_timestamp"].timestamp() * 1000) == rec["storeTimestamp"]
        assert row["sys_flag"] == rec["sysFlag"]
    assert _tree_digest(store) == before  # read-only: nothing written, nothing touched


def test_fixture_lookups(tmp_path: Path) -> None:
    fixture = unpack_fixture("clean", tmp_path)
    expected = expected_queue_messages(fixture)
    with StoreReader(fixture / "store") as reader:
        first = expected[("TopicA", 0, 0)]
        for key in first["keys"].split():
            assert ("TopicA" in reader.topics()) and (0, 0) in (
                reader.lookup_key("TopicA", key) or []
            )
        ts = expected[("TopicA", 0, 10)]["storeTimestamp"]
        off = reader.offset_for_time("TopicA", 0, ts)
        assert off <= 10
        assert all(expected[("TopicA", 0, o)]["storeTimestamp"] >= ts for o in range(off, 11))


def _store(tmp_path: Path, **kw: object) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 50,
        **kw,  # type: ignore[arg-type]
    )


def test_reads_a_live_store_without_its_lock(tmp_path: Path) -> None:
    with MessageStore(_store(tmp_path)) as owner:
        for i in range(300):
            assert owner.put_message(Message("Live", b"m%d" % i, i % 2, keys=[f"k{i}"])).ok
        assert lock_owner(tmp_path / "store") == os.getpid()
        # the last put is queue 1's 150th: once dispatched, both queues hold every message
        assert wait_until(lambda: owner.get_max_offset_in_queue("Live", 1) == 150)
        with StoreReader(tmp_path / "store") as reader:
            assert reader.topics() == ["Live"]
            seen = reader.max_offset("Live", 0)
            assert 0 < seen <= 150
            bodies = [m.body for m in reader.read("Live", 0)]
            assert bodies == [b"m%d" % i for i in range(0, 2 * seen, 2)]
        # writing goes on while the reader was open; the owner is still the owner
        assert owner.put_message(Message("Live", b"after", 0)).ok
        assert lock_owner(tmp_path / "store") == os.getpid()


def test_bad_record_is_never_returned(tmp_path: Path) -> None:
    with MessageStore(_store(tmp_path)) as owner:
        for _ in range(20):
            assert owner.put_message(Message("Bad", b"x" * 100, 0)).ok
    with StoreReader(tmp_path / "store") as reader:
        unit = reader.queue("Bad", 0).unit(5)
        assert unit is not None
        phys = unit[0]
    path = tmp_path / "store" / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[phys + OFFSET_BODY_LENGTH_V4 + 4 + 10] ^= 0xFF  # flip a byte of the body
    path.write_bytes(bytes(data))
    with StoreReader(tmp_path / "store") as reader:
        with pytest.raises(CorruptRecordError):
            list(reader.read("Bad", 0))
        r = QueueRange("Bad", 0, 0, 20)
        with pytest.raises(CorruptRecordError, match="offset 5"):
            list(RangeDecoder(reader).batches(r))
        rows = [
            x
            for b in RangeDecoder(reader, fail_on_data_loss=False).batches(r)
            for x in b.to_pylist()
        ]
        assert [x["queue_offset"] for x in rows] == [o for o in range(20) if o != 5]
        for b in RangeDecoder(reader, fail_on_data_loss=False).batches(r):
            assert b.schema.equals(ARROW_SCHEMA)


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(NotAStoreError, match="not a store directory"):
        StoreReader(tmp_path)


def test_options_and_offsets() -> None:
    assert parse_offsets("startingOffsets", "earliest", -1) == -2
    assert parse_offsets("startingOffsets", '{"T": {"1": 5, "0": -2}}', -1) == {
        "T": {"1": 5, "0": -2}
    }
    for bad in ("{", "[1]", '{"T": 3}', '{"T": {"x": 1}}', '{"T": {"0": -5}}'):
        with pytest.raises(SourceOptionError, match="startingOffsets"):
            parse_offsets("startingOffsets", bad, -1)
    with pytest.raises(SourceOptionError, match="path"):
        SourceOptions.parse({})
    with pytest.raises(SourceOptionError, match="maxRowsPerPartition"):
        SourceOptions.parse({"path": "x", "maxRowsPerPartition": "0"})
    assert SourceOptions.parse({"PATH": "x", "topics": "a, b"}).topics == ("a", "b")
    assert list(canonical({"b": {"10": 1, "2": 2}, "a": {}})) == ["a", "b"]
    assert list(canonical({"b": {"10": 1, "2": 2}})["b"]) == ["2", "10"]


def test_limit_offsets_shares_the_budget() -> None:
    start = {"T": {"0": 0, "1": 0}}
    end = {"T": {"0": 100, "1": 300}}
    out = limit_offsets(start, end, {}, 40)
    assert out == {"T": {"0": 10, "1": 30}}
    assert limit_offsets(start, end, {}, 1000) == end
    # a queue that appeared later starts at its minimum
    out = limit_offsets({"T": {"0": 0}}, {"T": {"0": 10, "1": 10}}, {("T", "1"): 4}, 8)
    assert sum(out["T"][q] - s for q, s in (("0", 0), ("1", 4))) <= 8


def test_writer_column_wise_rows_match_messages(tmp_path: Path) -> None:
    """Rows without a properties map take the column-wise put, rows with one the Message path;
    both store what Message would, in input order within a queue."""
    pytest.importorskip("pyspark")
    from pyspark.sql.types import StructType

    from rocketstore.spark._path_writer import _settings, write_batches

    path = tmp_path / "w"
    n = 40
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["A" if i % 3 else "B" for i in range(n)],
            "body": [b"body%d" % i for i in range(n)],
            "tags": [None if i % 5 == 0 else ("" if i % 7 == 0 else f"t{i % 2}") for i in range(n)],
            "keys": [[f"k{i}", "x"] if i % 4 else [] for i in range(n)],
            "properties": [{"p": str(i)} if i % 6 == 0 else None for i in range(n)],
            "queue_id": [None if i % 2 else i % 3 for i in range(n)],
        },
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("body", pa.binary()),
                ("tags", pa.string()),
                ("keys", pa.list_(pa.string())),
                ("properties", pa.map_(pa.string(), pa.string())),
                ("queue_id", pa.int32()),
            ]
        ),
    )
    schema = StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {"name": f.name, "type": t, "nullable": True, "metadata": {}}
                for f, t in zip(
                    batch.schema,
                    [
                        "string",
                        "binary",
                        "string",
                        {"type": "array", "elementType": "string", "containsNull": True},
                        {
                            "type": "map",
                            "keyType": "string",
                            "valueType": "string",
                            "valueContainsNull": True,
                        },
                        "integer",
                    ],
                    strict=True,
                )
            ],
        }
    )
    settings = _settings({"path": str(path), "commitLogFileSize": "65536"}, schema)
    report = write_batches(settings, iter([batch.slice(0, 25), batch.slice(25)]))
    assert report.rows == n
    got = {}
    with StoreReader(path) as reader:
        for topic in reader.topics():
            for qid in reader.queue_ids(topic):
                bodies = [m.body for m in reader.read(topic, qid)]
                assert bodies == sorted(bodies, key=lambda b: int(b[4:]))  # input order
                for m in reader.read(topic, qid):
                    got[int(m.body[4:])] = m
    assert sorted(got) == list(range(n))
    for i, m in got.items():
        want = Message(
            "A" if i % 3 else "B",
            b"body%d" % i,
            tags=None if i % 5 == 0 else ("" if i % 7 == 0 else f"t{i % 2}"),
            keys=[f"k{i}", "x"] if i % 4 else None,
            properties={"p": str(i)} if i % 6 == 0 else None,
        )
        assert (m.topic, m.properties) == (want.topic, want.properties)
        if i % 2 == 0:
            assert m.queue_id == i % 3


@pytest.mark.parametrize("buffers", ["0", "2"])
def test_writer_with_and_without_write_buffers(tmp_path: Path, buffers: str) -> None:
    """Write buffers (the transient store pool) store the same messages, across many small
    commit-log files: more files than buffers, so buffers are reused or, when none is free,
    files are written directly. Everything is readable after the task, and after recovery."""
    pytest.importorskip("pyspark")
    from pyspark.sql.types import StructType

    from rocketstore.spark._path_writer import _settings, open_store, write_batches

    path = tmp_path / "w"
    n = 3000
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["T"] * n,
            "body": [b"body%05d" % i + b"x" * (i % 50) for i in range(n)],
            "keys": [f"k{i}" for i in range(n)],
        }
    )
    schema = StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {"name": name, "type": t, "nullable": True, "metadata": {}}
                for name, t in (("topic", "string"), ("body", "binary"), ("keys", "string"))
            ],
        }
    )
    options = {"path": str(path), "commitLogFileSize": "8192", "writeBuffers": buffers}
    settings = _settings(options, schema)
    assert settings.write_buffers == int(buffers)
    store = open_store(settings)
    try:
        assert store.config.transient_store_pool_active is (buffers != "0")
    finally:
        store.shutdown()
    chunks = [batch.slice(lo, 500) for lo in range(0, n, 500)]
    assert write_batches(settings, iter(chunks)).rows == n
    assert len(list((path / "commitlog").iterdir())) > 20
    with StoreReader(path) as reader:
        got = [m.body for q in reader.queue_ids("T") for m in reader.read("T", q)]
    assert sorted(got) == sorted(batch.column("body").to_pylist())
    (path / "abort").write_bytes(b"")  # as after a crash: recovery checks every record
    with MessageStore(
        StoreConfig(store_path_root_dir=str(path), mapped_file_size_commit_log=8192)
    ) as s:
        total = sum(s.get_max_offset_in_queue("T", q) for q in range(4))
        assert total == n
        hit = s.query_message("T", "k2999").messages
        assert [m.body for m in hit] == [b"body02999" + b"x" * (2999 % 50)]
