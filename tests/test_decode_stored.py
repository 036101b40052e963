"""The read path's decoder: decode_stored agrees with decode_message, whatever layouts it has
remembered for a record size, and damage never gets past it."""

from __future__ import annotations

import mmap
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import CorruptRecordError
from rocketstore.store.log import _record
from rocketstore.store.log._record import (
    INT32,
    OFFSET_BODY_CRC,
    OFFSET_MAGIC,
    OFFSET_TOTAL_SIZE,
    MessageExt,
    decode_message,
    decode_stored,
    encode_record,
    pack_host,
    read_layout,
)

FIELDS = (
    *MessageExt._fields,
    "topic",
    "properties_string",
    "properties",
    "tags",
    "keys",
    "uniq_key",
    "msg_id",
)
V6_HOST = pack_host("[::1]:10911")


@pytest.fixture(autouse=True)
def _fresh_layouts() -> Iterator[None]:
    _record._layouts.clear()
    yield
    _record._layouts.clear()


def same(a: MessageExt, b: MessageExt) -> None:
    for name in FIELDS:
        assert getattr(a, name) == getattr(b, name), name


def record(body: bytes, props: str, topic: str = "TopicA", **kw: object) -> bytes:
    return encode_record(
        topic=topic,
        body=body,
        queue_id=3,
        queue_offset=77,
        phys_offset=123_456,
        born_timestamp=1_700_000_000_000,
        store_timestamp=1_700_000_000_001,
        properties=props,
        **kw,  # type: ignore[arg-type]
    )


def corrupt(rec: bytes, pos: int, data: bytes) -> bytes:
    return rec[:pos] + data + rec[pos + len(data) :]


def test_decodes_as_decode_message_from_an_mmap() -> None:
    rec = record(b"x" * 100, "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC")
    mm = mmap.mmap(-1, 4096)
    mm[512 : 512 + len(rec)] = rec
    for _ in range(2):  # learning the layout, then using it
        m = decode_stored(mm, 512, len(rec))
        same(m, decode_message(rec, 0, len(rec)))
        assert type(m.body) is bytes
        assert m.keys == ["k1", "k2"]
        assert m.properties is m.properties  # parsed once


def test_layouts_sharing_a_size_take_turns() -> None:
    a = record(b"a" * 100, "K\x01" + "v" * 20)
    b = record(b"b" * 110, "K\x01" + "v" * 10)
    c = record(b"c" * 110, "K\x01" + "v" * 6, topic="Topic_ABCD")
    assert len(a) == len(b) == len(c)
    for rec in (a, b, a, c, c, b, a):
        same(decode_stored(rec, 0, len(rec)), decode_message(rec, 0, len(rec)))


def test_ipv6_and_v2_records_at_a_remembered_size() -> None:
    v4 = record(b"z" * 112, "")
    v6 = record(b"z" * 100, "", born_host=V6_HOST)
    v2 = record(b"", "", topic="T" * 200)  # a 2-byte topic length
    assert len(v4) == len(v6)
    for rec in (v4, v6, v4, v2, v2):
        same(decode_stored(rec, 0, len(rec)), decode_message(rec, 0, len(rec)))


def test_damage_is_caught_with_and_without_a_remembered_layout() -> None:
    rec = record(bytes(range(200)), "TAGS\x01TagA")
    lay = read_layout(rec, 0, len(rec))
    crc = INT32.unpack_from(rec, OFFSET_BODY_CRC)[0]
    damaged = [
        corrupt(rec, OFFSET_BODY_CRC, INT32.pack(crc ^ 1)),
        corrupt(rec, lay.body + 5, b"\xff"),
        corrupt(rec, OFFSET_MAGIC, INT32.pack(0x12345678)),
        corrupt(rec, OFFSET_TOTAL_SIZE, INT32.pack(len(rec) + 1)),
        corrupt(rec, lay.body_length, INT32.pack(199)),
        corrupt(rec, lay.topic_length, b"\x07"),
        corrupt(rec, lay.properties_length, b"\x00\x05"),
        corrupt(rec, lay.topic, b"\xff"),
    ]
    for learnt in (False, True):
        if learnt:
            decode_stored(rec, 0, len(rec))
            assert len(rec) in _record._layouts
        for bad in damaged:
            with pytest.raises(CorruptRecordError):
                decode_stored(bad, 0, len(bad))
        for cut in (50, 100, len(rec) - 1):  # truncated buffers
            with pytest.raises(CorruptRecordError):
                decode_stored(rec[:cut], 0, len(rec))
    with pytest.raises(CorruptRecordError):
        decode_stored(rec, 0, len(rec) - 1)  # the unit's size disagrees


def test_the_layout_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_record, "_MAX_LAYOUTS", 2)
    recs = [record(b"q" * n, "") for n in range(5)]
    for rec in recs * 2:
        same(decode_stored(rec, 0, len(rec)), decode_message(rec, 0, len(rec)))
    assert len(_record._layouts) == 2


@settings(max_examples=300, deadline=None)
@given(
    body_len=st.integers(0, 64),
    props_len=st.integers(0, 40),
    pos=st.integers(0, 200),
    junk=st.binary(min_size=1, max_size=8),
)
def test_random_damage_never_escapes_as_another_error(
    body_len: int, props_len: int, pos: int, junk: bytes
) -> None:
    rec = record(bytes(range(body_len)), "P\x01" + "v" * props_len)
    decode_stored(rec, 0, len(rec))  # remember its layout
    bad = corrupt(rec, min(pos, len(rec) - 1), junk)[: len(rec)]
    try:
        m = decode_stored(bad, 0, len(bad))
    except CorruptRecordError:
        return
    same(m, decode_message(bad, 0, len(bad)))
