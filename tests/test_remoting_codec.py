"""The remoting codec without sockets: frames and both header forms round trip; every frame of
the recorded transcripts (the official C++ client against RocketMQ 4.9.8) decodes to what the
recording says and re-encodes to the same command; the C++ client's quirks (ext values as JSON
numbers, fastjson's bare integer keys in route bodies); malformed input is a FrameError."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import random
import struct
from typing import Any

import pytest

from rocketstore.remoting import (
    DEFAULT_MAX_FRAME,
    FrameError,
    RemotingCommand,
    ext_bool,
    ext_int,
    ext_str,
)
from rocketstore.remoting import _fastjson as fastjson
from rocketstore.remoting._command import (
    RESPONSE_FLAG,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    HeaderError,
    decode_frame,
    frame_length,
)
from support.fixtures import TRANSCRIPTS


def roundtrip(cmd: RemotingCommand) -> RemotingCommand:
    data = cmd.encode()
    assert frame_length(data, DEFAULT_MAX_FRAME) == len(data) - 4
    head, body = cmd.encode_parts()
    assert head + bytes(body) == data
    return decode_frame(data[4:])


# ---- round trips ----------------------------------------------------------------------------

COMMANDS = [
    RemotingCommand(10),
    RemotingCommand(10, 7, 0, None, {}, b""),
    RemotingCommand(0, 7, RESPONSE_FLAG, "", {}, b""),
    RemotingCommand(17, 2**31 - 1, RESPONSE_FLAG, "No topic route info\nSee the FAQ", {}),
    RemotingCommand(10, 3, 2, None, {"topic": "T", "queueId": "0"}, b"body"),
    RemotingCommand(
        11,
        4,
        0,
        "备注 ☃ 🚀",
        {"主题": "トピック", "emoji": "🚀", "ctl": 'a\u0001b\u0002c"d\\e\n'},
        bytes(range(256)),
    ),
    RemotingCommand(0, 5, RESPONSE_FLAG, None, {"": "", "empty": ""}, b"\x00" * 70_000),
    RemotingCommand(105, 6, 0, None, {"topic": "123"}, b"", "CPP", 63),
]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_json_roundtrip(cmd: RemotingCommand) -> None:
    assert roundtrip(cmd) == cmd


@pytest.mark.parametrize("cmd", COMMANDS)
def test_binary_roundtrip(cmd: RemotingCommand) -> None:
    cmd = dataclasses.replace(cmd, serialize_type=SERIALIZE_ROCKETMQ)
    back = roundtrip(cmd)
    assert back.serialize_type == SERIALIZE_ROCKETMQ
    if cmd.remark == "":  # the binary form writes no remark as length 0 and reads it as absent
        cmd.remark = None
    assert back == cmd


def test_binary_header_layout() -> None:
    cmd = RemotingCommand(310, 9, 2, "r", {"k": "v"}, b"B", "JAVA", 409, SERIALIZE_ROCKETMQ)
    data = cmd.encode()
    length, mark = struct.unpack_from(">ii", data)
    assert mark >> 24 == SERIALIZE_ROCKETMQ
    header = data[8 : 8 + (mark & 0xFFFFFF)]
    expected = struct.pack(">hbhii", 310, 0, 409, 9, 2)
    expected += struct.pack(">i", 1) + b"r"
    expected += struct.pack(">i", 2 + 1 + 4 + 1) + struct.pack(">h", 1) + b"k"
    expected += struct.pack(">i", 1) + b"v"
    assert header == expected
    assert data[8 + len(header) :] == b"B"
    assert length == 4 + len(header) + 1


def test_json_header_fields() -> None:
    cmd = RemotingCommand(10, 5, 0, None, {"a": "b", "skip": None}, b"xy")
    data = cmd.encode()
    _, mark = struct.unpack_from(">ii", data)
    header = json.loads(data[8 : 8 + (mark & 0xFFFFFF)])
    assert header == {
        "code": 10,
        "language": "PYTHON",
        "version": 409,
        "opaque": 5,
        "flag": 0,
        "extFields": {"a": "b"},
        "serializeTypeCurrentRPC": "JSON",
    }
    assert data.endswith(b"xy")


def test_absent_remark_and_ext_are_not_written() -> None:
    data = RemotingCommand.response(0).encode()
    assert b"remark" not in data and b"extFields" not in data
    back = decode_frame(data[4:])
    assert back.remark is None and back.ext_fields == {} and back.body == b""


def test_ext_values_that_are_not_text_are_written_as_text() -> None:
    cmd = RemotingCommand(10, 1, 0, None, {"n": 4, "b": True, "f": False, "x": 1.5, "none": None})
    for serialize_type in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        cmd.serialize_type = serialize_type
        assert roundtrip(cmd).ext_fields == {"n": "4", "b": "true", "f": "false", "x": "1.5"}


def test_unicode_is_utf8_on_the_wire() -> None:
    data = RemotingCommand(10, 1, 0, "é", {"k": "☃"}).encode()
    assert "é".encode() in data and "☃".encode() in data


def test_lone_surrogate_is_escaped_not_an_error() -> None:
    cmd = RemotingCommand.response(1, "bad \udc80 text")
    assert roundtrip(cmd).remark == "bad \udc80 text"


def test_intenum_codes_are_written_as_numbers() -> None:
    from rocketstore.remoting import RequestCode, ResponseCode

    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE)
    assert roundtrip(cmd).code == 11
    assert b'"code":0,' in RemotingCommand.response(ResponseCode.SUCCESS).encode()


def test_request_and_response_constructors() -> None:
    a = RemotingCommand.request(10)
    b = RemotingCommand.request(10, oneway=True)
    assert b.opaque != a.opaque and not a.is_response and not a.is_oneway and b.is_oneway
    r = RemotingCommand.response(0, "ok", {"k": "v"}, b"x")
    assert r.is_response and r.remark == "ok" and r.ext_fields == {"k": "v"} and r.body == b"x"


def test_body_may_be_a_view_and_is_not_copied_by_encode_parts() -> None:
    backing = bytearray(b"0123456789")
    cmd = RemotingCommand.response(0, body=memoryview(backing)[2:6])
    head, body = cmd.encode_parts()
    assert body is cmd.body
    assert decode_frame((head + bytes(body))[4:]).body == b"2345"


def test_decoded_body_is_bytes_detached_from_the_frame() -> None:
    buf = bytearray(RemotingCommand.request(10, {}, b"payload").encode())
    cmd = decode_frame(memoryview(buf)[4:])
    buf[-7:] = b"XXXXXXX"  # the reader reuses its buffer
    assert type(cmd.body) is bytes and cmd.body == b"payload"


# ---- the recorded transcripts ---------------------------------------------------------------


def transcript_frames() -> list[tuple[str, dict[str, Any]]]:
    frames = []
    for path in sorted(TRANSCRIPTS.glob("*.jsonl")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            frames.append((f"{path.name}:{n}", json.loads(line)))
    assert len(frames) >= 250
    return frames


def recorded_body(rec: dict[str, Any]) -> bytes:
    if "body" in rec:
        return str(rec["body"]).encode("utf-8")
    if "body_b64" in rec:
        return base64.b64decode(rec["body_b64"])
    return b""


def test_every_transcript_frame_decodes_and_reencodes() -> None:
    for where, rec in transcript_frames():
        header = rec["header"]
        body = recorded_body(rec)
        assert rec["serialize"] == SERIALIZE_JSON
        raw = json.dumps(header, ensure_ascii=False).encode("utf-8")
        data = struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body
        cmd = decode_frame(data[4:])
        assert cmd.code == header["code"], where
        assert cmd.opaque == header["opaque"], where
        assert cmd.flag == header["flag"], where
        assert cmd.is_response == (rec["dir"] == "s->c" and header["flag"] & 1 == 1), where
        assert cmd.remark == header.get("remark"), where
        assert cmd.ext_fields == header.get("extFields", {}), where
        assert cmd.language == header["language"], where
        assert cmd.version == header["version"], where
        assert cmd.body == body and len(body) == rec["body_len"], where
        again = roundtrip(cmd)
        # what we write is text: JSON numbers come back as their decimal text
        assert again.ext_fields == {k: ext_str(cmd.ext_fields, k) for k in cmd.ext_fields}
        again.ext_fields = cmd.ext_fields
        assert again == cmd, where
        binary = dataclasses.replace(cmd, serialize_type=SERIALIZE_ROCKETMQ)
        back = roundtrip(binary)
        assert back.ext_fields == again_text(cmd.ext_fields), where
        assert back.body == body and back.opaque == cmd.opaque, where


def again_text(ext: dict[str, Any]) -> dict[str, str | None]:
    return {k: ext_str(ext, k) for k in ext}


def test_ext_values_sent_as_json_numbers_read_as_integers() -> None:
    numeric: set[tuple[int, str]] = set()
    for where, rec in transcript_frames():
        ext = rec["header"].get("extFields", {})
        for name, value in ext.items():
            if isinstance(value, int):
                numeric.add((rec["header"]["code"], name))
                assert ext_int(ext, name) == value, where
                assert ext_str(ext, name) == str(value), where
            elif name in ("queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset"):
                assert ext_int(ext, name) == int(value), where
    # the C++ client's numbers: pull's maxMsgNums / sysFlag / queueId, send's queueId ...
    assert {(11, "maxMsgNums"), (11, "sysFlag"), (10, "queueId"), (15, "queueId")} <= numeric
    assert (10, "defaultTopicQueueNums") in numeric


def test_every_request_carries_the_acl_fields() -> None:
    for where, rec in transcript_frames():
        if rec["dir"] == "c->s":
            ext = rec["header"]["extFields"]
            assert {"AccessKey", "Signature", "OnsChannel"} <= set(ext), where


def route_bodies() -> list[str]:
    bodies = [
        str(rec["body"])
        for _, rec in transcript_frames()
        if rec["link"] == "namesrv" and rec["dir"] == "s->c" and "body" in rec
    ]
    assert bodies
    return bodies


def test_route_bodies_parse_and_are_written_back_identically() -> None:
    for body in route_bodies():
        with pytest.raises(json.JSONDecodeError):
            json.loads(body)  # not strict JSON: bare integer keys
        route = fastjson.loads(body)
        for broker in route["brokerDatas"]:
            assert all(type(k) is int for k in broker["brokerAddrs"])
            assert broker["brokerAddrs"][0].startswith("127.0.0.1:")
        assert route["filterServerTable"] == {}
        assert route["queueDatas"][0]["perm"] in (6, 7)
        assert fastjson.dumps(route) == body
        assert fastjson.loads(body.encode()) == route


def test_route_body_built_from_scratch_matches_the_recording() -> None:
    body = route_bodies()[0]
    route = {
        "brokerDatas": [
            {
                "brokerAddrs": {0: fastjson.loads(body)["brokerDatas"][0]["brokerAddrs"][0]},
                "brokerName": "broker-a",
                "cluster": "DefaultCluster",
            }
        ],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": "broker-a",
                "perm": 7,
                "readQueueNums": 8,
                "topicSysFlag": 0,
                "writeQueueNums": 8,
            }
        ],
    }
    assert fastjson.dumps(route) == body


def test_fastjson_quoted_numeric_key_stays_text() -> None:
    text = '{"123":{0:"a:1",1:"b"},"topicQueueTable":{"456":[{"perm":6}]}}'
    value = fastjson.loads(text)
    assert value == {"123": {0: "a:1", 1: "b"}, "topicQueueTable": {"456": [{"perm": 6}]}}
    assert fastjson.dumps(value) == text
    assert fastjson.loads('{"7":1}') == {"7": 1}  # strict JSON: keys stay text


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a":"{0:\\"x\\",1:2}",-1:true}', {"a": '{0:"x",1:2}', -1: True}),
        ("{ 0 : [1,2] , 10:{}}", {0: [1, 2], 10: {}}),
        ('[{1:"x"},{"2":null}]', [{1: "x"}, {"2": None}]),
        ('{"s":"\\u00e9 ☃","n":1.5e3}', {"s": "é ☃", "n": 1500.0}),
    ],
)
def test_fastjson_loads_forms(text: str, expected: Any) -> None:
    assert fastjson.loads(text) == expected


def test_fastjson_keys_holding_control_characters() -> None:
    value = {"\x00": 1, "\x005": {2: "\x01"}, 3: ["\u0000"], "k\x07": 4}
    text = fastjson.dumps(value)
    assert text == '{"\\u0000":1,"\\u00005":{2:"\\u0001"},3:["\\u0000"],"k\\u0007":4}'
    assert fastjson.loads(text) == value
    assert fastjson.loads('{"a\x00b":1,2:3}') == {"a\x00b": 1, 2: 3}  # raw: read leniently


def test_fastjson_dumps_forms() -> None:
    assert fastjson.dumps({0: "x", "k": [1, None, True, 2.5, "é"], "e": {}}) == (
        '{0:"x","k":[1,null,true,2.5,"é"],"e":{}}'
    )
    assert fastjson.dumps({True: 1}) == '{"True":1}'  # a bool key is no integer key


def random_json(rng: random.Random, depth: int = 0) -> Any:
    texts = ["", "a", "123", "-7", "{1:", ",2:x", 'q"{3:"', "\x00", "\x005", "é☃", "a\\b", "\n"]
    kind = rng.randrange(6 if depth < 4 else 3)
    if kind == 0:
        return rng.choice(texts)
    if kind == 1:
        return rng.choice([0, -1, 2**40, 1.5, True, False, None])
    if kind == 2:
        return rng.randrange(100)
    if kind == 3:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys: list[Any] = [*texts, 0, 1, -3, 10**12]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_fastjson_matches_the_reference_writer_and_round_trips() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        value = random_json(rng)
        text = fastjson.dumps(value)
        assert text == fastjson._slow_dumps(value, fastjson._COMPACT), value
        assert fastjson.loads(text) == value
        assert fastjson.loads(text.encode()) == value


@pytest.mark.parametrize("bad", ["{0:}", "{a:1}", "{", '{"x":1', "", "{0:1,}"])
def test_fastjson_rejects_what_is_not_json(bad: str) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(bad)


# ---- ext readers ----------------------------------------------------------------------------


def test_ext_int() -> None:
    ext: dict[str, Any] = {"a": "12", "b": 7, "c": "", "d": "-3", "f": 2.0}
    assert ext_int(ext, "a") == 12 and ext_int(ext, "b") == 7 and ext_int(ext, "d") == -3
    assert ext_int(ext, "c", 5) == 5 and ext_int(ext, "missing") is None
    assert ext_int(ext, "missing", 0) == 0 and ext_int(ext, "f") == 2
    for bad in ("x", "1.5", "1_000", True, 2.5, [1], {"a": 1}):
        with pytest.raises(ValueError):
            ext_int({"v": bad}, "v")


def test_ext_str_and_bool() -> None:
    ext: dict[str, Any] = {"s": "x", "n": 4, "t": "TRUE", "f": "false", "j": True}
    assert ext_str(ext, "s") == "x" and ext_str(ext, "n") == "4" and ext_str(ext, "j") == "true"
    assert ext_str(ext, "missing") is None and ext_str(ext, "missing", "d") == "d"
    assert ext_bool(ext, "t") and not ext_bool(ext, "f") and ext_bool(ext, "j")
    assert ext_bool(ext, "missing", True) and not ext_bool(ext, "missing")


# ---- malformed frames -----------------------------------------------------------------------


def test_frame_length_bounds() -> None:
    for length in (-1, 0, 3, DEFAULT_MAX_FRAME + 1, -(2**31)):
        with pytest.raises(FrameError):
            frame_length(struct.pack(">i", length), DEFAULT_MAX_FRAME)
    assert frame_length(struct.pack(">i", 4), DEFAULT_MAX_FRAME) == 4


def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">i", len(header)) + header + body


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00",
        struct.pack(">i", 100) + b"{}",  # header length beyond the frame
        struct.pack(">i", (5 << 24) | 2) + b"{}",  # unknown serialize type
        json_frame(b"not json"),
        json_frame(b"\xff\xfe{}"),
        json_frame(b"[1,2]"),
        json_frame(b'"text"'),
        json_frame(b'{"code":10,"opaque":"x"}'),
        json_frame(b"{" * 100_000),  # nesting deep enough to exhaust the recursion limit
        json_frame(b'{"code":1}x'),
    ],
)
def test_malformed_frames_are_frame_errors(data: bytes) -> None:
    with pytest.raises(FrameError):
        decode_frame(data)


@pytest.mark.parametrize(
    "header, opaque",
    [
        (b'{"code":"10","opaque":7}', 7),
        (b'{"opaque":8}', 8),
        (b'{"code":10,"opaque":9,"extFields":[1]}', 9),
        (b'{"code":10,"opaque":10,"remark":5}', 10),
        (b'{"code":10,"opaque":11,"version":"x"}', 11),
        (b'{"code":10,"opaque":12,"flag":"x"}', 12),
        (b'{"code":true,"opaque":13}', 13),
    ],
)
def test_header_of_the_wrong_shape_keeps_its_opaque(header: bytes, opaque: int) -> None:
    with pytest.raises(HeaderError) as info:
        decode_frame(json_frame(header))
    assert info.value.opaque == opaque


def binary_header(ext: bytes, remark_len: int = 0, ext_len: int | None = None) -> bytes:
    fixed = struct.pack(">hbhii", 10, 1, 63, 1, 0) + struct.pack(">i", remark_len)
    return fixed + struct.pack(">i", len(ext) if ext_len is None else ext_len) + ext


@pytest.mark.parametrize(
    "header",
    [
        b"\x00\x0a",  # cut in the fixed part
        binary_header(b"", remark_len=50),  # remark beyond the header
        binary_header(b"", ext_len=50),  # ext block beyond the header
        binary_header(struct.pack(">h", -2) + struct.pack(">i", -4)),  # negative key length
        binary_header(b"\xff\xff\xff\xff\xfb"),  # key -1, value -5: back to the start
        binary_header(struct.pack(">h", 1) + b"k" + struct.pack(">i", -5)),  # negative value
        binary_header(struct.pack(">h", 1) + b"k" + struct.pack(">i", 9) + b"v"),  # value cut
        binary_header(struct.pack(">h", 1) + b"\xff" + struct.pack(">i", 0)),  # key not UTF-8
        binary_header(struct.pack(">h", 1) + b"k"),  # value length missing
    ],
)
def test_malformed_binary_headers_are_frame_errors(header: bytes) -> None:
    data = struct.pack(">i", (SERIALIZE_ROCKETMQ << 24) | len(header)) + header
    with pytest.raises(FrameError):
        decode_frame(data)


def test_binary_lengths_below_zero_mean_absent() -> None:
    header = binary_header(b"", remark_len=-1, ext_len=-1)
    cmd = decode_frame(struct.pack(">i", (SERIALIZE_ROCKETMQ << 24) | len(header)) + header)
    assert cmd.remark is None and cmd.ext_fields == {} and cmd.code == 10


def test_random_bytes_never_raise_anything_but_frame_error() -> None:
    rng = random.Random(20240611)
    good = RemotingCommand(10, 1, 0, "r", {"a": "b", "n": "1"}, b"body").encode()[4:]
    good_binary = RemotingCommand(
        10, 1, 0, "r", {"a": "b"}, b"body", serialize_type=SERIALIZE_ROCKETMQ
    ).encode()[4:]
    for _ in range(3000):
        base = bytearray(rng.choice((good, good_binary)))
        for _ in range(rng.randint(1, 4)):
            base[rng.randrange(len(base))] = rng.randrange(256)
        data = bytes(base[: rng.randint(0, len(base))]) if rng.random() < 0.3 else bytes(base)
        try:
            decode_frame(data)
        except FrameError:
            pass


def test_a_copied_command_is_equal_and_shares_its_fields() -> None:
    cmd = RemotingCommand(310, 7, 0, "r", {"a": "1"}, b"body", "JAVA", 401, 0)
    twin = copy.copy(cmd)
    assert twin == cmd and twin is not cmd
    assert twin.ext_fields is cmd.ext_fields  # a shallow copy, as copy.copy makes
    assert twin.encode() == cmd.encode()
