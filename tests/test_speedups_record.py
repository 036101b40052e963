"""The compiled put-path writers and Java hash against their pure-Python references, byte for
byte, on random and on bad input (the same exception type, and nothing written on a refusal);
and the switch that selects them."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.store import _java_hash
from rocketstore.store.log import _record
from rocketstore.store.log._record import (
    HEAD_V4_SIZE,
    MAGIC_V1,
    decode_message,
    write_batch_v4_py,
    write_v4_py,
)

record_c = pytest.importorskip(
    "rocketstore.store.log._record_c", reason="the compiled core is not built"
)
java_hash_c = pytest.importorskip(
    "rocketstore.store._java_hash_c", reason="the compiled core is not built"
)

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
# mostly in range, sometimes just outside (struct.error in both)
wide32 = st.one_of(int32, int32, int32, st.sampled_from([2**31, -(2**31) - 1, 2**40]))
wide64 = st.one_of(int64, int64, int64, st.sampled_from([2**63, -(2**63) - 1, 2**70]))
host8 = st.binary(min_size=8, max_size=8)
any_host = st.one_of(host8, host8, host8, st.binary(max_size=20))
tail_st = st.binary(min_size=3, max_size=40)
body_st = st.binary(max_size=300)


def _outcome(fn: Any, target: bytearray, *args: Any) -> tuple[str, Any, bytes]:
    """(exception type name or "ok", the return value, the target afterwards)."""
    try:
        ret = fn(target, *args)
    except Exception as exc:
        return type(exc).__name__, None, bytes(target)
    return "ok", ret, bytes(target)


def _twins(fn_py: Any, fn_c: Any, size: int, *args: Any) -> tuple[str, Any, bytes]:
    fill = bytes(range(256)) * (size // 256 + 1)
    a = _outcome(fn_py, bytearray(fill[:size]), *args)
    b = _outcome(fn_c, bytearray(fill[:size]), *args)
    assert a == b
    return a


# ---- write_v4 ---------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    st.data(),
    body_st,
    tail_st,
    any_host,
    any_host,
    st.lists(wide32, min_size=6, max_size=6),
    st.lists(wide64, min_size=5, max_size=5),
)
def test_write_v4_matches_the_reference(
    data: st.DataObject,
    body: bytes,
    tail: bytes,
    born_host: bytes,
    store_host: bytes,
    i32s: list[int],
    i64s: list[int],
) -> None:
    size = data.draw(st.integers(0, 1200))
    exact = HEAD_V4_SIZE + len(body) + len(tail)
    total = data.draw(st.one_of(st.just(exact), st.just(exact), st.integers(-5, exact + 5)))
    pos = data.draw(st.one_of(st.integers(0, max(size - exact, 0)), st.integers(-10, size + 10)))
    magic, crc, queue_id, flag, sys_flag, reconsume = i32s
    qoff, phys, born_ts, store_ts, prepared = i64s
    body_obj = data.draw(st.sampled_from([bytes, bytearray, memoryview]))(body)
    kind, _, after = _twins(
        write_v4_py, record_c.write_v4, size,
        pos, total, magic, crc, queue_id, flag, qoff, phys, sys_flag, born_ts, born_host,
        store_ts, store_host, reconsume, prepared, body_obj, tail,
    )  # fmt: skip
    if kind == "ok":
        assert after[pos + HEAD_V4_SIZE : pos + HEAD_V4_SIZE + len(body)] == body


def test_write_v4_record_decodes() -> None:
    """What the compiled writer packs is a record the decoder reads back, CRC included."""
    body = os.urandom(1024)
    topic = b"BenchTopic"
    props = b"TAGS\x01a\x02KEYS\x01k1 k2"
    tail = bytes((len(topic),)) + topic + struct.pack(">h", len(props)) + props
    total = HEAD_V4_SIZE + len(body) + len(tail)
    target = bytearray(4096)
    host = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    crc = zlib.crc32(body) & 0x7FFFFFFF
    record_c.write_v4(
        target, 100, total, MAGIC_V1, crc, 3, 7, 42, 100, 0, 1_700_000_000_000, host,
        1_700_000_000_001, host, 2, 0, body, tail,
    )  # fmt: skip
    msg = decode_message(bytes(target), 100, len(target), check_crc=True)
    assert (msg.body, msg.topic, msg.queue_id, msg.queue_offset) == (body, "BenchTopic", 3, 42)
    assert msg.properties == {"TAGS": "a", "KEYS": "k1 k2"}
    assert msg.body_crc == crc


@pytest.mark.parametrize(
    "target",
    [b"\x00" * 4096, memoryview(bytearray(4096)).toreadonly(), "not a buffer", None],
    ids=["bytes", "readonly-view", "str", "none"],
)
def test_write_v4_unwritable_target_is_a_type_error(target: Any) -> None:
    body, tail = b"x" * 10, b"\x01a\x00\x00"
    args = (0, HEAD_V4_SIZE + 14, MAGIC_V1, 0, 0, 0, 0, 0, 0, 0, b"12345678", 0, b"12345678")
    for fn in (write_v4_py, record_c.write_v4):
        with pytest.raises(TypeError):
            fn(target, *args, 0, 0, body, tail)


def test_write_v4_refuses_a_record_past_the_end() -> None:
    """A length that does not fit is refused in C as in Python: no write past the buffer."""
    body, tail = b"x" * 100, b"\x01a\x00\x00"
    total = HEAD_V4_SIZE + 104
    for pos in (-1, 1, 2**40, -(2**40)):
        for fn in (write_v4_py, record_c.write_v4):
            target = bytearray(total)
            with pytest.raises((ValueError, OverflowError, IndexError)) as info:
                fn(target, pos, total, MAGIC_V1, 0, 0, 0, 0, 0, 0, 0, b"12345678", 0,
                   b"12345678", 0, 0, body, tail)  # fmt: skip
            assert target == bytearray(total)
            assert info.type is ValueError or abs(pos) >= 2**40


# ---- write_batch_v4 ---------------------------------------------------------------------------


def _prepared(body: bytes, tail: bytes, crc: int, flag: int, sys_flag: int, born_ts: int,
              host: bytes, reconsume: int, prep: int, total: int) -> tuple[Any, ...]:  # fmt: skip
    return ("T", tail, 0, body, crc, flag, sys_flag, born_ts, host, reconsume, prep, b"", total,
            0, None, None, True)  # fmt: skip


record_st = st.builds(
    lambda body, tail, crc, flag, sys_flag, born_ts, host, reconsume, prep, delta: _prepared(
        body,
        tail,
        crc,
        flag,
        sys_flag,
        born_ts,
        host,
        reconsume,
        prep,
        HEAD_V4_SIZE + len(body) + len(tail) + delta,
    ),
    st.binary(max_size=120),
    tail_st,
    wide32,
    int32,
    int32,
    st.one_of(st.just(0), int64),
    st.one_of(host8, host8, host8, host8, st.binary(max_size=12)),
    int32,
    wide64,
    st.sampled_from([0] * 12 + [-1, 1]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(record_st, max_size=8),
    st.integers(-4, 3000),
    st.integers(0, 2**40),
    wide32,
    st.one_of(st.integers(0, 2**40), st.just(2**63 - 2)),
    int64,
    any_host,
    st.integers(0, 3000),
)
def test_write_batch_v4_matches_the_reference(
    prepared: list[tuple[Any, ...]],
    pos: int,
    base: int,
    queue_id: int,
    qoff: int,
    now: int,
    store_host: bytes,
    size: int,
) -> None:
    kind, offsets, after = _twins(
        write_batch_v4_py, record_c.write_batch_v4, size,
        pos, base, queue_id, qoff, now, store_host, prepared,
    )  # fmt: skip
    if kind == "ok":
        assert offsets == [
            base + pos + sum(p[12] for p in prepared[:i]) for i in range(len(prepared))
        ]
        for off, p in zip(offsets, prepared, strict=True):
            at = off - base
            body = p[3]
            assert after[at + HEAD_V4_SIZE : at + HEAD_V4_SIZE + len(body)] == body
            assert struct.unpack_from(">q", after, at + 40)[0] == (p[7] or now)
            assert struct.unpack_from(">q", after, at + 56)[0] == now


def test_write_batch_v4_bad_shapes() -> None:
    host = b"12345678"
    for fn in (write_batch_v4_py, record_c.write_batch_v4):
        with pytest.raises(TypeError):
            fn(bytearray(100), 0, 0, 0, 0, 0, host, (("a",),))  # not a list
        with pytest.raises(TypeError):
            fn(bytearray(100), 0, 0, 0, 0, 0, host, [("a",)])  # a short tuple
        with pytest.raises(TypeError):
            fn(b"\x00" * 100, 0, 0, 0, 0, 0, host, [])  # read-only target
        assert fn(bytearray(100), 0, 0, 0, 0, 0, host, []) == []


# ---- the Java hash ----------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=60))
def test_java_hash_matches_the_reference(text: str) -> None:
    assert java_hash_c.java_hash_unsigned(text) == _java_hash.java_hash_unsigned_py(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    # Java: "".hashCode() == 0, "a" == 97, "TopicTest#key" and a supplementary character
    [("", 0), ("a", 97), ("hello", 99162322), ("\U0001f600", (0xD83D * 31 + 0xDE00))],
)
def test_java_hash_known_values(text: str, expected: int) -> None:
    assert java_hash_c.java_hash_unsigned(text) == expected
    assert _java_hash.java_hash_unsigned_py(text) == expected


def test_java_hash_lone_surrogates_and_bad_types() -> None:
    for text in ("\ud800", "a\udfffb", "\udbff\udc00"):
        assert java_hash_c.java_hash_unsigned(text) == _java_hash.java_hash_unsigned_py(text)
    for bad in (b"abc", 12, None):
        for fn in (java_hash_c.java_hash_unsigned, _java_hash.java_hash_unsigned_py):
            with pytest.raises(AttributeError):
                fn(bad)


# ---- the switch -------------------------------------------------------------------------------


def test_extensions_are_used_unless_switched_off() -> None:
    env_on = os.environ.get("ROCKETSTORE_NO_EXTENSIONS")
    selected = _record.write_v4 is record_c.write_v4
    assert selected == (not env_on)
    code = (
        "from rocketstore.store.log import _record; from rocketstore.store import _java_hash;"
        "print(_record.write_v4 is _record.write_v4_py,"
        " _java_hash.java_hash_unsigned is _java_hash.java_hash_unsigned_py)"
    )
    env = dict(os.environ, ROCKETSTORE_NO_EXTENSIONS="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["True", "True"], out.stderr
    env.pop("ROCKETSTORE_NO_EXTENSIONS")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["False", "False"], out.stderr
    assert out.stderr == ""  # nothing said when the compiled core is there


def test_a_missing_compiled_module_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    from rocketstore import _speedups

    before = list(_speedups._missing)
    try:
        _speedups._missing.clear()
        with caplog.at_level("WARNING", logger="rocketstore"):
            _speedups.missing("rocketstore.x_c")
            _speedups.missing("rocketstore.y_c")
        lines = [r for r in caplog.records if "compiled core" in r.getMessage()]
        assert len(lines) == 1
        assert "ROCKETSTORE_NO_EXTENSIONS" in lines[0].getMessage()
        assert _speedups.missing_modules() == ("rocketstore.x_c", "rocketstore.y_c")
    finally:
        _speedups._missing[:] = before
