"""A pull's compiled per-record check against the reference (``_raw_read._check``): on good,
damaged, truncated and foreign records it lets through exactly what the reference lets through,
and the errors are the reference's."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.store.log._record import crc32, encode_record
from rocketstore.store.read import _raw_read

raw_read_c = pytest.importorskip(
    "rocketstore.store.read._raw_read_c", reason="the compiled core is not built"
)


def _reference(buf: bytes, pos: Any, size: Any, topic: bytes, queue_id: Any) -> str:
    try:
        _raw_read._check(memoryview(buf), pos, size, topic, queue_id)
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc)
    return "ok"


def _combined(buf: bytes, pos: Any, size: Any, topic: bytes, queue_id: Any) -> str:
    """What the pull does: the compiled check, the reference when it says no."""
    view = memoryview(buf)
    if raw_read_c.check_v4(view, pos, size, topic, queue_id, crc32):
        return "ok"
    return _reference(buf, pos, size, topic, queue_id)


record_st = st.builds(
    lambda topic, body, qid, props, v6: encode_record(
        topic=topic,
        body=body,
        queue_id=qid,
        properties=props,
        born_host=b"\x00" * 20 if v6 else b"\x7f\x00\x00\x01\x00\x00\x00\x00",
    ),
    st.sampled_from(["T", "TopicTest", "x" * 130]),
    st.binary(max_size=200),
    st.integers(0, 7),
    st.sampled_from(["", "TAGS\x01a", "KEYS\x01k\x02UNIQ_KEY\x01u"]),
    st.sampled_from([False, False, False, True]),
)


@settings(max_examples=500, deadline=None)
@given(record_st, st.data())
def test_check_matches_the_reference(record: bytes, data: st.DataObject) -> None:
    raw = bytearray(b"\x00" * data.draw(st.integers(0, 16)) + record + b"\x00" * 8)
    start = len(raw) - len(record) - 8
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    buf = bytes(raw)
    pos = data.draw(st.one_of(st.just(start), st.just(start), st.integers(-4, len(buf) + 4)))
    size = data.draw(st.one_of(st.just(len(record)), st.integers(-2, len(record) + 4)))
    topic = data.draw(st.sampled_from([b"T", b"TopicTest", b"x" * 130, b"Other"]))
    queue_id = data.draw(st.one_of(st.integers(0, 7), st.just(2**40)))
    assert _combined(buf, pos, size, topic, queue_id) == _reference(buf, pos, size, topic, queue_id)


def test_a_good_record_passes_without_the_reference() -> None:
    body = b"b" * 1024
    record = encode_record(topic="TopicTest", body=body, queue_id=3)
    view = memoryview(b"\x00" * 8 + record)
    assert raw_read_c.check_v4(view, 8, len(record), b"TopicTest", 3, crc32) is True
    assert raw_read_c.check_v4(view, 8, len(record), b"TopicTest", 3, zlib.crc32) is True
    # one flipped body byte: the compiled check says no, the reference names the CRC
    bad = bytearray(view)
    bad[8 + 100] ^= 1
    assert raw_read_c.check_v4(memoryview(bad), 8, len(record), b"TopicTest", 3, crc32) is False
    assert "CRC" in _reference(bytes(bad), 8, len(record), b"TopicTest", 3)
