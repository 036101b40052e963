"""Remoting headers parsed by orjson against the json module (the reference): the same command
or the same error for random, real, damaged and truncated frames."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.remoting import _command
from rocketstore.remoting._codes import RequestCode, ResponseCode
from rocketstore.remoting._command import RemotingCommand, decode_frame
from support.fixtures import TRANSCRIPTS

pytest.importorskip("orjson")


def _outcome(frame: bytes, fast: bool) -> tuple[str, Any]:
    saved = _command._orjson_loads
    if not fast:
        _command._orjson_loads = None
    elif saved is None:  # ROCKETSTORE_NO_EXTENSIONS=1: load it here, for the comparison
        import orjson

        _command._orjson_loads = orjson.loads
    try:
        cmd = decode_frame(frame)
    except Exception as exc:
        extra = (getattr(exc, "opaque", None), getattr(exc, "flag", None))
        return type(exc).__name__, (str(exc), extra)
    finally:
        _command._orjson_loads = saved
    return "ok", cmd


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">i", len(header)) + header + body


def _same(frame: bytes) -> tuple[str, Any]:
    a, b = _outcome(frame, True), _outcome(frame, False)
    assert a == b
    if a[0] == "ok":  # the same types too (1 and 1.0, True and 1 compare equal)
        assert repr(a[1]) == repr(b[1])
    return a


json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
header_st = st.fixed_dictionaries(
    {},
    optional={
        "code": st.one_of(st.integers(0, 400), json_value),
        "opaque": st.one_of(st.integers(-(2**31), 2**31), json_value),
        "flag": st.one_of(st.integers(0, 3), json_value),
        "language": st.one_of(st.sampled_from(["JAVA", "CPP", "GO"]), json_value),
        "version": st.one_of(st.integers(0, 500), json_value),
        "remark": st.one_of(st.none(), st.text(max_size=20), json_value),
        "extFields": st.one_of(
            st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=20), json_value)),
            json_value,
        ),
    },
)


@settings(max_examples=400, deadline=None)
@given(header_st, st.booleans(), st.binary(max_size=20))
def test_random_headers_decode_the_same(header: dict[str, Any], ascii: bool, body: bytes) -> None:
    text = json.dumps(header, ensure_ascii=ascii)
    _same(_frame(text.encode("utf-8", "surrogatepass"), body))


@settings(max_examples=400, deadline=None)
@given(header_st, st.data())
def test_damaged_and_truncated_headers_fail_the_same(
    header: dict[str, Any], data: st.DataObject
) -> None:
    raw = bytearray(json.dumps(header).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        if raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    _same(_frame(bytes(raw)))
    _same(_frame(bytes(raw[:cut])))
    # the header length itself beyond the frame, or truncated frames
    whole = _frame(bytes(raw))
    _same(whole[: data.draw(st.integers(0, len(whole)))])


@pytest.mark.parametrize(
    "text",
    [
        b'{"code":10,"opaque":1,"x":NaN}',
        b'{"code":10,"opaque":99999999999999999999999}',
        b'{"code":10,"opaque":1,"remark":"\\ud800"}',
        b'\xef\xbb\xbf{"code":10}',
        b'  {"code":10,"opaque":3}  ',
        b'{"code":10,"opaque":3} x',
        b'{"code":10,"opaque":3,"code":11}',
        b'{"code":10,"remark":"\xff"}',
        b"[1,2]",
        b"null",
        b"",
        b"[" * 5000 + b"]" * 5000,
        b'{"code":1e400,"opaque":1}',
        b'{"code":-0,"opaque":1.0}',
    ],
)
def test_edge_headers_decode_the_same(text: bytes) -> None:
    _same(_frame(text))


def test_recorded_client_headers_decode_the_same() -> None:
    """Every request header in the transcripts of real clients."""
    seen = 0
    for path in sorted(TRANSCRIPTS.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("serialize") != 0:
                continue
            kind, cmd = _same(_frame(json.dumps(rec["header"]).encode()))
            assert kind == "ok"
            assert isinstance(cmd, RemotingCommand)
            seen += 1
    assert seen, f"no recorded request headers in {TRANSCRIPTS}"


# ---- answers: the header encoded by orjson against the hand-written reference ----------------


def _encoded(cmd: RemotingCommand, fast: bool) -> tuple[str, Any]:
    saved = _command._orjson_dumps
    if not fast:
        _command._orjson_dumps = None
    elif saved is None:
        import orjson

        _command._orjson_dumps = orjson.dumps
    try:
        return "ok", cmd.encode()
    except Exception as exc:
        return type(exc).__name__, None
    finally:
        _command._orjson_dumps = saved


any_text = st.text(alphabet=st.characters(codec=None), max_size=16)  # surrogates included
field_value = st.one_of(
    st.none(), any_text, st.booleans(), st.integers(-(2**70), 2**70), st.floats(), any_text
)


def _built_command(**fields: Any) -> RemotingCommand | None:
    """A RemotingCommand of ``fields``; None where mypyc's class refuses a field's type (it
    holds only the annotated types; the sources' class holds anything, so both are tested)."""
    try:
        return RemotingCommand(**fields)
    except TypeError:
        return None


command_st = st.builds(
    _built_command,
    code=st.one_of(
        st.integers(-(2**31), 2**31),
        st.integers(-(2**70), 2**70),
        st.booleans(),
        st.sampled_from([*ResponseCode, *RequestCode]),
    ),
    opaque=st.one_of(st.integers(0, 2**31), st.integers(-(2**66), 2**66)),
    flag=st.integers(0, 3),
    remark=st.one_of(st.none(), any_text),
    ext_fields=st.dictionaries(
        st.one_of(any_text, any_text, any_text, st.integers(0, 9)), field_value, max_size=8
    ),
    body=st.binary(max_size=8),
    language=st.one_of(st.sampled_from(["JAVA", "PYTHON", "CPP"]), any_text),
    version=st.one_of(st.integers(0, 500), st.floats(0, 1)),
).filter(lambda cmd: cmd is not None)


@settings(max_examples=600, deadline=None)
@given(command_st)
def test_answers_encode_the_same(cmd: RemotingCommand) -> None:
    assert _encoded(cmd, True) == _encoded(cmd, False)


def test_answers_with_a_response_code_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("orjson")
    cmd = RemotingCommand.response(ResponseCode.SUCCESS, None, {"queueId": "1"})
    reference = _encoded(cmd, False)

    def refuse(_cmd: RemotingCommand) -> bytes:
        raise AssertionError("the hand-written encoder was used")

    monkeypatch.setattr(_command, "_encode_json_header_py", refuse)
    assert _encoded(cmd, True) == reference
    assert b'{"code":0,' in reference[1]


def test_a_send_answer_encodes_the_same() -> None:
    ext = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "1", "queueOffset": "5"}
    cmd = RemotingCommand.response(0, None, {**ext, "transactionId": None, "n": 3, "b": True})
    cmd.opaque = 77
    fast, ref = _encoded(cmd, True), _encoded(cmd, False)
    assert fast == ref
    assert fast[1].endswith(b'"n":"3","b":"true"},"serializeTypeCurrentRPC":"JSON"}')


@pytest.mark.parametrize(
    "text",
    ["\ud800", "a\udfffb", '\x00\x01\x1f\x7f\b\f\n\r\t"\\/', "\u2028\u2029", "\U0001f600é"],
)
def test_answers_with_odd_text_encode_the_same(text: str) -> None:
    for cmd in (
        RemotingCommand.response(1, text, {"k": text}),
        RemotingCommand.response(1, None, {text: "v"}),
    ):
        fast, ref = _encoded(cmd, True), _encoded(cmd, False)
        assert fast == ref
        assert fast[0] == "ok"
