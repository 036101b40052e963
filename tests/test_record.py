"""The commit-log record format: encode/decode, checks, msgIds, Java hashes, a real RocketMQ file."""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import CorruptRecordError, StoreConfig
from rocketstore.store.log._record import (
    BLANK,
    BLANK_MAGIC,
    INT16,
    INT32,
    MAGIC_V1,
    MAGIC_V2,
    NAME_VALUE_SEPARATOR,
    OFFSET_BODY_CRC,
    OFFSET_MAGIC,
    OFFSET_TOTAL_SIZE,
    PROPERTY_SEPARATOR,
    SCHEDULE_TOPIC,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    DispatchRequest,
    check_record,
    decode_message,
    decode_msg_id,
    encode_blank,
    encode_record,
    java_string_hash,
    make_msg_id,
    pack_host,
    properties_to_string,
    read_layout,
    record_length,
    string_to_properties,
    tags_code,
    unpack_host,
)
from support.fixtures import tarball, unpack_fixture

CLEAN_TARBALL = tarball("clean")

# ---- strategies -----------------------------------------------------------------------------

_no_sep = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=20,
)
properties_st = st.dictionaries(_no_sep.filter(bool), _no_sep, max_size=6)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
topic_chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|"
topics = st.one_of(
    st.text(alphabet=topic_chars, min_size=1, max_size=127),  # V1
    st.text(alphabet=topic_chars, min_size=128, max_size=400),  # V2
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30),
)
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(lambda a: f"[{a}]")
hosts = st.tuples(st.one_of(ipv4, ipv6), st.integers(0, 65535)).map(lambda t: f"{t[0]}:{t[1]}")


@st.composite
def records(draw: st.DrawFn) -> dict[str, object]:
    return {
        "topic": draw(topics),
        "body": draw(st.binary(max_size=300)),
        "queue_id": draw(int32),
        "flag": draw(int32),
        "queue_offset": draw(int64),
        "phys_offset": draw(int64),
        "sys_flag": draw(st.integers(0, 0xF)),
        "born_timestamp": draw(int64),
        "born_host": pack_host(draw(hosts)),
        "store_timestamp": draw(int64),
        "store_host": pack_host(draw(hosts)),
        "reconsume_times": draw(int32),
        "prepared_transaction_offset": draw(int64),
        "properties": properties_to_string(draw(properties_st)),
    }


# ---- round trips ----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(fields=records(), lead=st.binary(max_size=16))
def test_encode_decode_round_trip(fields: dict[str, object], lead: bytes) -> None:
    raw = encode_record(**fields)  # type: ignore[arg-type]
    buf = lead + raw + b"\x00" * 8
    m = decode_message(buf, len(lead), len(buf))
    topic_b = str(fields["topic"]).encode()
    assert m.topic == fields["topic"]
    assert m.body == fields["body"]
    assert m.body_crc == zlib.crc32(fields["body"]) & 0x7FFFFFFF  # type: ignore[arg-type]
    for name in (
        "queue_id",
        "flag",
        "queue_offset",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
        "prepared_transaction_offset",
        "born_host",
        "store_host",
    ):
        assert getattr(m, name) == fields[name], name
    assert m.commitlog_offset == fields["phys_offset"]
    assert m.properties_string == fields["properties"]
    assert m.store_size == len(raw)
    v6_born = len(fields["born_host"]) == 20  # type: ignore[arg-type]
    v6_store = len(fields["store_host"]) == 20  # type: ignore[arg-type]
    assert bool(m.sys_flag & SYSFLAG_BORNHOST_V6) == v6_born
    assert bool(m.sys_flag & SYSFLAG_STOREHOST_V6) == v6_store
    assert m.sys_flag & 0xF == fields["sys_flag"]
    magic = INT32.unpack_from(raw, OFFSET_MAGIC)[0]
    assert magic == (MAGIC_V2 if len(topic_b) > 127 else MAGIC_V1)
    assert INT32.unpack_from(raw, OFFSET_TOTAL_SIZE)[0] == len(raw)
    assert len(raw) == record_length(
        len(fields["body"]),
        len(topic_b),
        len(str(fields["properties"]).encode()),  # type: ignore[arg-type]
        m.sys_flag,
        2 if len(topic_b) > 127 else 1,
    )
    r = check_record(buf, len(lead), len(buf), check_crc=True)
    assert isinstance(r, DispatchRequest)
    assert (r.topic, r.queue_id, r.commitlog_offset, r.msg_size, r.queue_offset) == (
        m.topic,
        m.queue_id,
        m.commitlog_offset,
        len(raw),
        m.queue_offset,
    )
    assert r.tags_code == tags_code(m.tags)
    assert r.keys == m.properties.get("KEYS")
    assert r.uniq_key == m.properties.get("UNIQ_KEY")


def test_fixed_overhead_is_91_bytes_plus_12_per_ipv6_host() -> None:
    v4 = pack_host("10.1.2.3:5000")
    v6 = pack_host("[fe80::1]:5000")
    base = encode_record(topic="T", body=b"", born_host=v4, store_host=v4)
    assert len(base) == 91 + 1  # one topic byte, empty body, no properties
    assert len(encode_record(topic="T", body=b"", born_host=v6, store_host=v4)) == len(base) + 12
    assert len(encode_record(topic="T", body=b"", born_host=v6, store_host=v6)) == len(base) + 24


def test_empty_body_and_unicode_properties() -> None:
    props = {"TAGS": "标签-ü", "KEYS": "k1 键2", "emoji": "😀", "empty": ""}
    raw = encode_record(topic="TopicA", body=b"", properties=properties_to_string(props))
    m = decode_message(raw, 0, len(raw))
    assert m.body == b""
    assert m.properties == props
    assert m.tags == "标签-ü"
    assert m.keys == ["k1", "键2"]


def test_v2_record_has_two_byte_topic_length() -> None:
    topic = "t" * 300
    raw = encode_record(topic=topic, body=b"xyz")
    lay = read_layout(raw, 0, len(raw))
    assert lay.magic == MAGIC_V2
    assert lay.topic - lay.topic_length == 2
    assert INT16.unpack_from(raw, lay.topic_length)[0] == 300
    assert decode_message(raw, 0, len(raw)).topic == topic


@given(properties_st)
def test_properties_string_round_trip(props: dict[str, str]) -> None:
    text = properties_to_string(props)
    assert string_to_properties(text) == props
    assert not text.endswith(PROPERTY_SEPARATOR)
    assert text.count(NAME_VALUE_SEPARATOR) == len(props)


def test_properties_string_tolerates_trailing_separator() -> None:
    assert string_to_properties("A\x011\x02B\x012\x02") == {"A": "1", "B": "2"}
    assert string_to_properties("") == {}


# ---- check_record ---------------------------------------------------------------------------


def sample(**kw: object) -> bytes:
    fields: dict[str, object] = {
        "topic": "TopicA",
        "body": b"hello body",
        "properties": properties_to_string({"TAGS": "TagA", "KEYS": "a b"}),
    }
    fields.update(kw)
    return encode_record(**fields)  # type: ignore[arg-type]


def test_check_record_message_blank_and_end() -> None:
    rec = sample()
    blank_len = 64
    buf = rec + encode_blank(blank_len) + bytes(blank_len - BLANK.size)
    r = check_record(buf, 0, len(buf), check_crc=True)
    assert isinstance(r, DispatchRequest)
    assert r.msg_size == len(rec)
    assert r.tags_code == java_string_hash("TagA")
    assert check_record(buf, len(rec), len(buf), check_crc=True) == blank_len
    zeros = bytes(64)
    assert check_record(zeros, 0, len(zeros), check_crc=True) == 0
    # no room for even a BLANK header: the data ends
    assert check_record(buf, len(buf) - 4, len(buf), check_crc=True) == 0


def test_check_record_schedule_topic_tags_code_is_delivery_time() -> None:
    rec = sample(
        topic=SCHEDULE_TOPIC,
        store_timestamp=1_000_000,
        properties=properties_to_string({"TAGS": "x", "DELAY": "3"}),
    )
    levels = StoreConfig().delay_levels_ms()
    r = check_record(
        rec, 0, len(rec), check_crc=True, delay_time=lambda level, ts: ts + levels[level - 1]
    )
    assert isinstance(r, DispatchRequest)
    assert r.tags_code == 1_000_000 + 10_000


def corrupt(raw: bytes, at: int, data: bytes) -> bytes:
    return raw[:at] + data + raw[at + len(data) :]


def test_bad_magic_is_corrupt() -> None:
    rec = sample()
    bad = corrupt(rec, OFFSET_MAGIC, INT32.pack(0x12345678))
    with pytest.raises(CorruptRecordError, match="magic"):
        check_record(bad, 0, len(bad), check_crc=False)
    with pytest.raises(CorruptRecordError):
        decode_message(bad, 0, len(bad))


def test_bad_crc_is_corrupt_only_when_checked() -> None:
    rec = sample()
    stored = INT32.unpack_from(rec, OFFSET_BODY_CRC)[0]
    bad = corrupt(rec, OFFSET_BODY_CRC, INT32.pack(stored ^ 1))
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_record(bad, 0, len(bad), check_crc=True)
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_message(bad, 0, len(bad))
    assert isinstance(check_record(bad, 0, len(bad), check_crc=False), DispatchRequest)
    assert decode_message(bad, 0, len(bad), check_crc=False).body == b"hello body"
    # a flipped body byte is caught the same way
    lay = read_layout(rec, 0, len(rec))
    flipped = corrupt(rec, lay.body, bytes([rec[lay.body] ^ 0xFF]))
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_record(flipped, 0, len(flipped), check_crc=True)


@pytest.mark.parametrize("delta", [-3, -1, 1, 5])
def test_total_size_disagreeing_with_fields_is_corrupt(delta: int) -> None:
    rec = sample()
    buf = corrupt(rec, OFFSET_TOTAL_SIZE, INT32.pack(len(rec) + delta)) + bytes(16)
    with pytest.raises(CorruptRecordError):
        check_record(buf, 0, len(buf), check_crc=False)


def test_body_length_disagreeing_is_corrupt() -> None:
    rec = sample()
    lay = read_layout(rec, 0, len(rec))
    for bad_len in (-1, 5, 10_000):
        bad = corrupt(rec, lay.body_length, INT32.pack(bad_len))
        with pytest.raises(CorruptRecordError):
            check_record(bad, 0, len(bad), check_crc=False)


def test_truncated_record_is_corrupt() -> None:
    rec = sample()
    for cut in (12, 50, len(rec) // 2, len(rec) - 1):
        with pytest.raises(CorruptRecordError):
            check_record(rec, 0, cut, check_crc=False)


def test_bad_blank_length_is_corrupt() -> None:
    buf = BLANK.pack(4, BLANK_MAGIC) + bytes(8)
    with pytest.raises(CorruptRecordError):
        check_record(buf, 0, len(buf), check_crc=True)


@settings(max_examples=200, deadline=None)
@given(pos=st.integers(0, 200), junk=st.binary(min_size=1, max_size=8))
def test_random_damage_never_escapes_as_another_error(pos: int, junk: bytes) -> None:
    rec = sample(body=bytes(range(200)))
    pos = min(pos, len(rec) - 1)
    bad = corrupt(rec, pos, junk)[: len(rec)]
    try:
        r = check_record(bad, 0, len(bad), check_crc=True)
    except CorruptRecordError:
        return
    if isinstance(r, DispatchRequest):
        assert r.msg_size <= len(bad)


# ---- hosts, msgIds, hashes ------------------------------------------------------------------


def test_msg_id_matches_rocketmq_format() -> None:
    # values RocketMQ 4.9.8 itself produced (manifest of the clean fixture)
    host = pack_host("127.0.0.1:10911")
    assert make_msg_id(host, 0) == "7F00000100002A9F0000000000000000"
    assert make_msg_id(host, 4287) == "7F00000100002A9F00000000000010BF"
    assert decode_msg_id("7F00000100002A9F00000000006A8ED6") == ("127.0.0.1:10911", 6983382)


@given(host=hosts, offset=st.integers(0, 2**63 - 1))
def test_msg_id_round_trip(host: str, offset: int) -> None:
    packed = pack_host(host)
    msg_id = make_msg_id(packed, offset)
    assert msg_id == msg_id.upper()
    assert len(msg_id) == (32 if len(packed) == 8 else 56)
    back, off = decode_msg_id(msg_id)
    assert off == offset
    assert pack_host(back) == packed
    assert unpack_host(packed) == back


def test_ipv6_msg_id() -> None:
    packed = pack_host("[2001:db8::7]:10911")
    assert len(packed) == 20
    msg_id = make_msg_id(packed, 1)
    assert msg_id == "20010DB8000000000000000000000007" + "00002A9F" + "0000000000000001"
    assert decode_msg_id(msg_id) == ("2001:db8::7:10911", 1)


@pytest.mark.parametrize("bad", ["", "XYZ", "7F000001", "7F00000100002A9F00000000000000000"])
def test_decode_msg_id_refuses_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_msg_id(bad)


@pytest.mark.parametrize("bad", ["10.0.0.1", "nohost:1", "300.1.1.1:5"])
def test_pack_host_refuses_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        pack_host(bad)


# Expected values printed by `String.hashCode()` under OpenJDK 17 (a throw-away H.java run with
# javac + java on this machine; strings written with \u escapes so the source is unambiguous).
JDK_HASHES = [
    ("", 0),
    ("a", 97),
    ("TagA", 2598919),
    ("TagB", 2598920),
    ("TopicA", -1784167150),
    ("hello world", 1794106052),
    ("\u84dd\u8272", 1087797),
    ("\u6807\u7b7e\u0041", 26572490),
    ("\ud83d\ude00emoji", -1233692477),
    ("polygenelubricants", -2147483648),
    ("Aa", 2112),
    ("BB", 2112),
    ("%RETRY%G1", -1978267828),
    ("a\u0000b", 93315),
    ("\u00ff" * 20, 1796482752),
]


@pytest.mark.parametrize(("text", "expected"), JDK_HASHES)
def test_java_string_hash_matches_jdk(text: str, expected: int) -> None:
    if "\ud83d" in text:  # the JDK's UTF-16 pair, as one Python code point
        text = text.encode("utf-16", "surrogatepass").decode("utf-16")
    assert java_string_hash(text) == expected


@given(st.text(max_size=50))
def test_java_string_hash_is_the_polynomial_over_utf16_units(text: str) -> None:
    units = [
        int.from_bytes(text.encode("utf-16-be")[i : i + 2], "big")
        for i in range(0, len(text.encode("utf-16-be")), 2)
    ]
    n = len(units)
    value = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    expected = value - 2**32 if value >= 2**31 else value
    assert java_string_hash(text) == expected


def test_tags_code() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919


# ---- a real RocketMQ 4.9.8 store ------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack_fixture("clean", tmp_path_factory.mktemp("rmq-clean"))


def load_jsonl(path: Path, kind: str) -> list[dict[str, object]]:
    with path.open(encoding="utf-8") as f:
        return [d for d in map(json.loads, f) if d.get("type") == kind]


def test_decode_every_record_of_a_real_rocketmq_store(clean_fixture: Path) -> None:
    expected = {d["offset"]: d for d in load_jsonl(clean_fixture / "reader-output.jsonl", "record")}
    manifest = {d["wroteOffset"]: d for d in load_jsonl(clean_fixture / "manifest.jsonl", "msg")}
    blanks = {
        d["offset"]: d["declaredSize"]
        for d in load_jsonl(clean_fixture / "manifest.jsonl", "blank")
    }
    (config_line,) = load_jsonl(clean_fixture / "manifest.jsonl", "config")
    (summary,) = load_jsonl(clean_fixture / "manifest.jsonl", "summary")
    file_size = int(config_line["mappedFileSizeCommitLog"])  # type: ignore[call-overload]
    levels = StoreConfig().delay_levels_ms()

    seen: dict[int, DispatchRequest] = {}
    seen_blanks: dict[int, int] = {}
    end = 0
    files = sorted((clean_fixture / "store" / "commitlog").iterdir())
    for path in files:
        buf = path.read_bytes()
        assert len(buf) == file_size
        base = int(path.name)
        pos = 0
        while True:
            r = check_record(
                buf,
                pos,
                len(buf),
                check_crc=True,
                delay_time=lambda level, ts: ts + levels[level - 1],
            )
            if isinstance(r, int):
                if r > 0:
                    seen_blanks[base + pos] = r
                    assert pos + r == file_size
                break
            seen[base + pos] = r
            m = decode_message(buf, pos, len(buf))
            want = expected[base + pos]
            assert (
                r.commitlog_offset,
                r.msg_size,
                r.topic,
                r.queue_id,
                r.queue_offset,
                r.sys_flag,
                r.tags_code,
                r.store_timestamp,
                r.keys,
                r.uniq_key,
                r.prepared_transaction_offset,
            ) == (
                want["offset"],
                want["size"],
                want["topic"],
                want["queueId"],
                want["queueOffset"],
                want["sysFlag"],
                want["tagsCode"],
                want["storeTimestamp"],
                want["keys"],
                want["uniqKey"],
                want["preparedTransactionOffset"],
            )
            assert m.properties == want["properties"]
            put = manifest[base + pos]
            assert m.msg_id == put["msgId"]
            assert m.body_crc == put["bodyCRC"]
            assert len(m.body) == put["bodyLength"]
            assert hashlib.sha256(m.body).hexdigest() == put["bodySha256"]
            assert (m.born_timestamp, m.flag, m.reconsume_times, m.store_size) == (
                put["bornTimestamp"],
                put["flag"],
                put["reconsumeTimes"],
                put["wroteBytes"],
            )
            assert m.born_host_str == "127.0.0.1:5000"
            assert m.store_host_str == "127.0.0.1:10911"
            if m.sys_flag & 0x1:
                assert zlib.decompress(m.body)  # compressed bodies really are zlib
            pos += r.msg_size
            end = base + pos
    assert set(seen) == set(expected) == set(manifest)
    assert seen_blanks == blanks
    assert len(seen) == summary["messages"]
    assert end == summary["maxPhyOffset"]
