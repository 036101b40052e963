"""The whole-batch Arrow decoder against the per-record decoder (the reference).

Stores are laid out here byte by byte (records from ``encode_record``, BLANK records where a
record does not fit, consume-queue units), so the records can be anything the format allows:
V1 and V2 (topics over 127 bytes), IPv6 born and store hosts, empty, non-ASCII and odd
properties (items without a value separator, empty names, a name twice, trailing separators),
bodies of any length, and damage at random places. Both decoders must give the same rows, for
every selection of columns, or both refuse.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.store._errors import CorruptRecordError
from rocketstore.store.log._record import (
    END_FILE_MIN_BLANK_LENGTH,
    encode_blank,
    encode_record,
    tags_code,
    unpack_host,
)
from rocketstore.store.queue._consume_queue import UNIT, UNIT_SIZE
from rocketstore.store.read._reader import StoreReader
from support.spark_helpers import unpack_fixture

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from rocketstore.columns._arrow import (  # noqa: E402
    ARROW_SCHEMA,
    COLUMNS,
    QueueRange,
    RangeDecoder,
)

CL_FILE = 4096
CQ_FILE = UNIT_SIZE * 16
LONG_TOPIC = "L" * 130  # a V2 record (2-byte topic length)
TOPICS = ["T", "topic_B", LONG_TOPIC]


@dataclass
class Rec:
    topic: str
    queue_id: int
    body: bytes
    properties: str
    born_host: bytes
    store_host: bytes
    sys_flag: int
    born_ts: int
    store_ts: int
    reconsume: int
    flag: int


def _write_store(root: Path, records: list[Rec]) -> None:
    """Commit-log files of CL_FILE bytes (BLANK at a file's end when the next record does not
    fit) and the consume queues of the records, as RocketMQ lays them out."""
    (root / "commitlog").mkdir(parents=True)
    files: list[bytearray] = [bytearray(CL_FILE)]
    wrote = 0  # position in the last file
    queue_offsets: dict[tuple[str, int], int] = {}
    units: dict[tuple[str, int], list[bytes]] = {}
    for r in records:
        key = (r.topic, r.queue_id)
        qoff = queue_offsets.get(key, 0)
        probe = encode_record(topic=r.topic, body=r.body, properties=r.properties,
                              born_host=r.born_host, store_host=r.store_host)  # fmt: skip
        if len(probe) + END_FILE_MIN_BLANK_LENGTH > CL_FILE - wrote:
            files[-1][wrote : wrote + 8] = encode_blank(CL_FILE - wrote)
            files.append(bytearray(CL_FILE))
            wrote = 0
        phys = (len(files) - 1) * CL_FILE + wrote
        raw = encode_record(
            topic=r.topic,
            body=r.body,
            queue_id=r.queue_id,
            flag=r.flag,
            queue_offset=qoff,
            phys_offset=phys,
            sys_flag=r.sys_flag,
            born_timestamp=r.born_ts,
            born_host=r.born_host,
            store_timestamp=r.store_ts,
            store_host=r.store_host,
            reconsume_times=r.reconsume,
            properties=r.properties,
        )
        files[-1][wrote : wrote + len(raw)] = raw
        wrote += len(raw)
        queue_offsets[key] = qoff + 1
        tags = None
        for item in r.properties.split("\x02"):
            name, sep, value = item.partition("\x01")
            if sep and name == "TAGS":
                tags = value
        units.setdefault(key, []).append(UNIT.pack(phys, len(raw), tags_code(tags)))
    for i, data in enumerate(files):
        (root / "commitlog" / f"{i * CL_FILE:020d}").write_bytes(bytes(data))
    for (topic, qid), us in units.items():
        qdir = root / "consumequeue" / topic / str(qid)
        qdir.mkdir(parents=True)
        per = CQ_FILE // UNIT_SIZE
        for start in range(0, len(us), per):
            blob = b"".join(us[start : start + per]).ljust(CQ_FILE, b"\0")
            (qdir / f"{start * UNIT_SIZE:020d}").write_bytes(blob)


def _decode(root: Path, whole: bool, columns: list[str], **kw: object) -> list[dict[str, object]]:
    schema = pa.schema([ARROW_SCHEMA.field(c) for c in columns])
    rows: list[dict[str, object]] = []
    with StoreReader(root) as reader:
        dec = RangeDecoder(reader, schema=schema, whole_batch=whole, **kw)  # type: ignore[arg-type]
        for topic in reader.topics():
            for qid in reader.queue_ids(topic):
                r = QueueRange(topic, qid, 0, reader.max_offset(topic, qid))
                for b in dec.batches(r):
                    assert b.schema.equals(schema)
                    # timestamps as int64: damaged ones are outside datetime's range
                    plain = [
                        c.view(pa.int64()) if pa.types.is_timestamp(c.type) else c
                        for c in b.columns
                    ]
                    rows.extend(pa.RecordBatch.from_arrays(plain, names=columns).to_pylist())
    return rows


def _outcome(root: Path, whole: bool, columns: list[str], **kw: object) -> object:
    try:
        return _decode(root, whole, columns, **kw)
    except CorruptRecordError:
        return "refused"


# ---- strategies ---------------------------------------------------------------------------

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
    max_size=12,
)
_name = st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "ключ", "n"]), _text)
_keys_value = st.lists(st.sampled_from(["k1", "k2", "", "ä", "x y"]), max_size=4).map(" ".join)
_item = st.one_of(
    st.tuples(_name, st.one_of(_text, _keys_value)).map(lambda nv: f"{nv[0]}\x01{nv[1]}"),
    st.tuples(_name, _text, _text).map(lambda t: f"{t[0]}\x01{t[1]}\x01{t[2]}"),  # \x01 in value
    _text,  # no separator: dropped by both decoders
)
_properties = st.one_of(
    st.just(""),
    st.lists(_item, max_size=5).map("\x02".join),
    st.lists(_item, min_size=1, max_size=3).map(lambda items: "\x02".join(items) + "\x02"),
)
_ipv4 = st.binary(min_size=4, max_size=4).map(lambda b: b + b"\x00\x00\x27\x10")
_ipv6 = st.binary(min_size=16, max_size=16).map(lambda b: b + b"\x00\x00\x2a\x9f")
_host = st.one_of(st.sampled_from([b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"]), _ipv4, _ipv6)
_record = st.builds(
    Rec,
    topic=st.sampled_from(TOPICS),
    queue_id=st.integers(0, 2),
    body=st.one_of(st.binary(max_size=40), st.binary(min_size=200, max_size=700)),
    properties=_properties,
    born_host=_host,
    store_host=_host,
    sys_flag=st.integers(0, 0xF),
    born_ts=st.integers(0, 2**41),
    store_ts=st.integers(0, 2**41),
    reconsume=st.integers(0, 20),
    flag=st.integers(-(2**31), 2**31 - 1),
)


def _fresh_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="rs-arrow-"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(_record, min_size=1, max_size=40),
    batch_rows=st.integers(1, 50),
    columns=st.permutations(list(COLUMNS)).flatmap(
        lambda cols: st.integers(1, len(cols)).map(lambda k: cols[:k])
    ),
)
def test_whole_batch_equals_per_record(
    records: list[Rec], batch_rows: int, columns: list[str]
) -> None:
    root = _fresh_dir()
    try:
        _write_store(root, records)
        reference = _decode(root, False, list(COLUMNS), batch_rows=batch_rows)
        assert len(reference) == len(records)  # nothing here is damaged
        assert _decode(root, True, list(COLUMNS), batch_rows=batch_rows) == reference
        # a selection of columns, in any order: the reference's rows, those columns
        got = _decode(root, True, columns, batch_rows=batch_rows)
        assert got == [{c: row[c] for c in columns} for row in reference]
    finally:
        shutil.rmtree(root)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(_record, min_size=1, max_size=25),
    seed=st.integers(0, 2**32),
    flips=st.integers(1, 6),
    check_crc=st.booleans(),
)
def test_damaged_records_are_refused_alike(
    records: list[Rec], seed: int, flips: int, check_crc: bool
) -> None:
    """Bytes flipped at seeded random places of the commit log: both decoders refuse the
    same records (failOnDataLoss=true: both raise; false: the same rows come back)."""
    root = _fresh_dir()
    try:
        _write_store(root, records)
        rng = random.Random(seed)
        files = sorted((root / "commitlog").iterdir())
        for _ in range(flips):
            path = rng.choice(files)
            data = bytearray(path.read_bytes())
            at = (
                rng.randrange(min(len(data), 900))
                if rng.random() < 0.7
                else rng.randrange(len(data))
            )
            data[at] ^= 1 << rng.randrange(8)
            path.write_bytes(bytes(data))
        cols = list(COLUMNS)
        for fail in (True, False):
            kw = {"check_crc": check_crc, "fail_on_data_loss": fail, "batch_rows": 7}
            assert _outcome(root, True, cols, **kw) == _outcome(root, False, cols, **kw)
    finally:
        shutil.rmtree(root)


def test_units_pointing_at_other_queues_are_refused(tmp_path: Path) -> None:
    """A unit of queue 0 that points at a record of queue 1: refused by both decoders."""
    recs = [
        Rec("T", q, b"body%d" % i, "TAGS\x01a", b"\x7f\x00\x00\x01\x00\x00\x00\x01",
            b"\x7f\x00\x00\x01\x00\x00\x2a\x9f", 0, i, i, 0, 0)
        for i, q in enumerate([0, 1, 0, 1])
    ]  # fmt: skip
    _write_store(tmp_path, recs)
    q0 = tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}"
    q1 = tmp_path / "consumequeue" / "T" / "1" / f"{0:020d}"
    units0 = bytearray(q0.read_bytes())
    units0[UNIT_SIZE : 2 * UNIT_SIZE] = q1.read_bytes()[:UNIT_SIZE]
    q0.write_bytes(bytes(units0))
    for whole in (True, False):
        with pytest.raises(CorruptRecordError):
            _decode(tmp_path, whole, ["body"])
        rows = _decode(tmp_path, whole, ["queue_offset", "body"], fail_on_data_loss=False)
        assert rows == [  # queue 0 loses offset 1; queue 1 is whole
            {"queue_offset": 0, "body": b"body0"},
            {"queue_offset": 0, "body": b"body1"},
            {"queue_offset": 1, "body": b"body3"},
        ]


def test_ipv6_v2_and_odd_properties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v6 = bytes(range(16)) + b"\x00\x00\x2a\x9f"
    v4 = b"\x0a\x00\x00\x05\x00\x00\x13\x88"
    recs = [
        Rec("T", 0, b"a", "TAGS\x01x\x02KEYS\x01 k1  k2 ", v4, v6, 0, 1, 2, 3, 0),
        Rec("T", 0, b"", "", v6, v4, 0, 1, 2, 0, 0),
        Rec("T", 0, b"b" * 30, "n\x01ü\x02\x02=\x02\x01v\x02", v4, v4, 0, 1, 2, 0, 0),
        Rec(LONG_TOPIC, 0, b"c", "TAGS\x01t\x02TAGS\x01u", v6, v6, 0, 1, 2, 0, 0),
    ]
    _write_store(tmp_path, recs)
    per_record: list[int] = []
    slow = RangeDecoder._slow

    def counted(self: RangeDecoder, topic: str, qid: int, offsets: object, *rest: object) -> object:
        per_record.extend(offsets)  # type: ignore[call-overload]
        return slow(self, topic, qid, offsets, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(RangeDecoder, "_slow", counted)
    rows = _decode(tmp_path, True, list(COLUMNS))
    assert per_record == [0]  # only the record that repeats TAGS (queue offset 0 of its topic)
    assert rows == _decode(tmp_path, False, list(COLUMNS))
    by_body = {r["body"]: r for r in rows}
    first = by_body[b"a"]
    assert first["store_host"] == unpack_host(v6) == "1:203:405:607:809:a0b:c0d:e0f:10911"
    assert first["born_host"] == "10.0.0.5:5000"
    assert first["keys"] == ["k1", "k2"] and first["tags"] == "x"
    assert len(first["msg_id"]) == 56 and first["msg_id"].startswith(v6[:20].hex().upper())
    assert by_body[b""]["properties"] == [] and by_body[b""]["tags"] is None
    assert by_body[b"b" * 30]["properties"] == [("n", "ü")]
    assert by_body[b"c"]["topic"] == LONG_TOPIC and by_body[b"c"]["tags"] == "u"
    assert by_body[b"c"]["properties"] == [("TAGS", "u")]


@pytest.mark.parametrize("name", ["clean", "abort"])
def test_rocketmq_fixtures_whole_batch_equals_per_record(tmp_path: Path, name: str) -> None:
    store = unpack_fixture(name, tmp_path) / "store"
    cols = list(COLUMNS)
    full = _decode(store, True, cols, batch_rows=97)
    assert full == _decode(store, False, cols, batch_rows=97)
    assert len(full) > 1000
    for columns in (["body", "queue_id"], ["properties", "msg_id"], ["keys", "store_host"]):
        got = _decode(store, True, columns)
        assert got == [{c: row[c] for c in columns} for row in full]
