"""The send frame path (broker/messaging/_send_frame.py) against the connection's decode.

- The compiled header scanner against its reference (``scan_send_py``): on the send headers of
  the fast-path tests, the recorded C++ client's sends, random headers and random damage to
  them, the compiled scanner returns the reference's tuple or None (no verdict), never a tuple
  the reference would not give.
- Whole brokers: the same frames (plain and unusual sends, the recorded client's, a header
  that spells one field twice) fed to a server connection with the frame path and to one
  without it store the same commit log and consume queues, write the same answers and count
  the same request statistics; the frame path served the plain sends and left the others.
- The frame path stands aside while the ACL is on (every send is checked by the handlers).
- Its properties (``plain_properties``: cut and reordered as text) against the general path's
  (a dict, CLUSTER added, RocketMQ's stored order) on random properties.

The scanner's tests run wherever the compiled twin is built (ROCKETSTORE_NO_EXTENSIONS or not);
the brokers' in both builds (the frame path runs the compiled scanner or its reference).
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import ManualClock, StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker.messaging import _send_scan
from rocketstore.broker.messaging._send import plain_properties, stored_properties
from rocketstore.broker.messaging._send_frame import answer_frame
from rocketstore.broker.state._topic_config import TopicConfig
from rocketstore.remoting import Connection, RemotingCommand
from rocketstore.remoting._command import SERIALIZE_ROCKETMQ, _encode_json_header_py
from rocketstore.server import BrokerServer
from rocketstore.store.log._record import properties_to_string, string_to_properties, tags_code
from support.ports import free_port
from support.remoting import RecordingTransport
from support.send_frames import (
    PLAIN,
    TOPIC,
    UNIQ,
    commit_log_bytes,
    frames_by_opaque,
    recorded_sends,
    v1,
    v2,
)

try:  # the twin itself, under either setting of ROCKETSTORE_NO_EXTENSIONS
    from rocketstore.broker.messaging._send_scan_c import scan_send
except ImportError:
    scan_send = None
scan_send_py = _send_scan.scan_send_py
compiled = pytest.mark.skipif(scan_send is None, reason="the compiled header scanner is not built")


def frame_of(cmd: RemotingCommand) -> bytes:
    return cmd.encode()[4:]


def agree(frame: bytes) -> Any:
    """The compiled scanner's verdict, checked against the reference's."""
    got = scan_send(frame)
    if got is not None:
        assert got == scan_send_py(frame)
    return got


def java_ext(**changes: Any) -> dict[str, str]:
    """SEND_MESSAGE_V2's ext fields as RocketMQ 4.9.8's Java client sends them."""
    return {k: str(v) for k, v in v2(l=16, n="broker-a", **changes).items()}


def requests() -> list[RemotingCommand]:
    out = []
    for opaque, (code, ext, body, _fast) in enumerate(PLAIN, 100):
        out.append(RemotingCommand(code, opaque, 0, None, dict(ext), body, "CPP", 405))
    return out


# ---- the scanner --------------------------------------------------------------------------


@compiled
def test_the_scanner_reads_the_plain_headers_as_the_reference_does() -> None:
    accepted = 0
    for cmd in requests() + [cmd for cmd, _ in recorded_sends()]:
        got = agree(frame_of(cmd))
        accepted += got is not None
        cmd.serialize_type = SERIALIZE_ROCKETMQ  # as RocketMQ's benchmark clients send
        binary = agree(frame_of(cmd))
        assert (binary is None) == (got is None) or not all(
            type(v) is str for v in cmd.ext_fields.values()
        )
        if binary is not None and got is not None:
            assert binary[:4] == got[:4] and binary[4] == 1 and binary[5:12] == got[5:12]
    # RocketMQ 4.9.8's Java client's header: every value text (its properties escaped by the
    # JSON encoder), with the retry count (l) and the broker's name (n)
    java = RemotingCommand(310, 7, 0, None, java_ext(), b"x", "JAVA")
    got = agree(frame_of(java))
    assert got is not None
    assert got[5:8] == (TOPIC, 0, UNIQ + "WAIT\x01true\x02")
    assert accepted >= 20


def test_the_scanner_reads_a_signed_send_as_the_same_send_unsigned() -> None:
    """A request signature's names (the C++ client sends them, empty, without credentials) are
    read past, in both spellings and both serialize types: only the ACL reads them, and the
    frame path serves only while it is off."""
    for code, ext in ((310, v2()), (10, v1())):
        signed = {**ext, "AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "PNVfw1/J="}
        for serialize_type in (0, SERIALIZE_ROCKETMQ):
            frames = []
            for fields in (ext, signed):
                cmd = RemotingCommand(code, 7, 0, None, {k: str(v) for k, v in fields.items()})
                cmd.body = b"signed"
                cmd.serialize_type = serialize_type
                frames.append(memoryview(cmd.encode())[4:])
            plain, got = (scan_send_py(f) for f in frames)
            assert plain is not None and got is not None
            assert got[:12] == plain[:12] and bytes(frames[1][got[12] :]) == b"signed"
            if scan_send is not None:
                assert scan_send(frames[1]) == got


@pytest.mark.parametrize(
    "header",
    [
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","e":"0","i":"","f":"0","h":"0",'
        '"g":"1","j":"0","Signature":"x","Signature":"y"}}',
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","e":"0","i":"","f":"0","h":"0",'
        '"g":"1","j":"0","Signed":"x"}}',
    ],
)
def test_the_reference_leaves_unusual_names_to_the_general_path(header: str) -> None:
    raw = header.encode()
    assert scan_send_py(len(raw).to_bytes(4, "big") + raw + b"body") is None


@compiled
@pytest.mark.parametrize(
    "header",
    [
        # a field given twice, in either spelling, or twice in one
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","b":"U","e":"0","i":"","f":"0",'
        '"h":"0","g":"1","j":"0"}}',
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","topic":"U","e":"0","i":"",'
        '"f":"0","h":"0","g":"1","j":"0"}}',
        '{"code":10,"opaque":1,"flag":0,"extFields":{"topic":"T","b":"U","queueId":"0",'
        '"properties":"","sysFlag":"0","flag":"0","bornTimestamp":"1","reconsumeTimes":"0"}}',
        '{"code":310,"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","e":"0","i":"",'
        '"f":"0","h":"0","g":"1","j":"0"}}',
        # a signature given twice, a name not the send's, a float, an exponent, an escaped
        # surrogate
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","e":"0","i":"","f":"0","h":"0",'
        '"g":"1","j":"0","Signature":"x","Signature":"y"}}',
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","e":"0","i":"","f":"0","h":"0",'
        '"g":"1","j":"0","Signed":"x"}}',
        '{"code":310,"opaque":1.0,"flag":0,"extFields":{"b":"T","e":"0","i":"","f":"0","h":"0",'
        '"g":"1","j":"0"}}',
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","e":1e0,"i":"","f":"0","h":"0",'
        '"g":"1","j":"0"}}',
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T\\ud800","e":"0","i":"","f":"0",'
        '"h":"0","g":"1","j":"0"}}',
        # not a JSON object, bytes after it, no ext fields, a batch
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","e":"0","i":"","f":"0","h":"0",'
        '"g":"1","j":"0"}} x',
        '{"code":310,"opaque":1,"flag":0}',
        '{"code":310,"opaque":1,"flag":0,"extFields":{"b":"T","e":"0","i":"","f":"0","h":"0",'
        '"g":"1","j":"0","m":"true"}}',
    ],
)
def test_the_scanner_leaves_unusual_headers_to_the_general_path(header: str) -> None:
    raw = header.encode()
    frame = len(raw).to_bytes(4, "big") + raw + b"body"
    assert scan_send(frame) is None


_text = st.text(max_size=12)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    _text,
    st.sampled_from(["0", "7", "0007", "2147483648", "1795532961562", "-1", " 1", "\u0661"]),
)
_names = st.sampled_from([*_send_scan.NAMES_V1, *_send_scan.NAMES_V2, "x", "AccessKey", "\u00e9"])


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    code = draw(st.sampled_from([10, 310, 320, 11]))
    base = v1() if code == 10 else v2()
    ext: dict[str, Any] = {k: draw(st.one_of(st.just(v), _scalar)) for k, v in base.items()}
    for _ in range(draw(st.integers(0, 2))):
        ext[draw(_names)] = draw(_scalar)
    if draw(st.booleans()):
        ext = {k: v for k, v in ext.items() if draw(st.integers(0, 9))}
    top: dict[str, Any] = {
        "code": code,
        "language": draw(st.sampled_from(["JAVA", "CPP", "\u00e9"])),
        "version": draw(st.integers(-(10**19), 10**19)),
        "opaque": draw(st.integers(-(10**19), 10**19)),
        "flag": draw(st.sampled_from([0, 1, 2, 3])),
        "extFields": ext,
    }
    if draw(st.booleans()):
        top["remark"] = draw(st.one_of(st.none(), _text))
    if draw(st.booleans()):
        top["serializeTypeCurrentRPC"] = "JSON"
    text = json.dumps(
        top, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1]))
    )
    raw = bytearray(text.encode("utf-8", "surrogatepass"))
    for _ in range(draw(st.integers(0, 2))):  # damage: a byte changed, cut or doubled
        if raw:
            at = draw(st.integers(0, len(raw) - 1))
            how = draw(st.integers(0, 2))
            if how == 0:
                raw[at] = draw(st.integers(0, 255))
            elif how == 1:
                del raw[at]
            else:
                raw.insert(at, raw[at])
    body = draw(st.binary(max_size=8))
    mark = draw(st.sampled_from([0, 0, 0, 1 << 24]))
    return (mark | len(raw)).to_bytes(4, "big") + bytes(raw) + body


@compiled
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers())
def test_the_scanner_agrees_with_its_reference_on_random_headers(frame: bytes) -> None:
    agree(frame)


@st.composite
def binary_headers(draw: st.DrawFn) -> bytes:
    code = draw(st.sampled_from([10, 310, 320]))
    base = v1() if code == 10 else v2()
    ext = {k: str(draw(st.one_of(st.just(v), _scalar))) for k, v in base.items()}
    for _ in range(draw(st.integers(0, 2))):
        ext[draw(_names)] = str(draw(_scalar))
    cmd = RemotingCommand(
        code,
        draw(st.integers(-(2**31), 2**31 - 1)),
        draw(st.sampled_from([0, 1, 2])),
        draw(st.one_of(st.none(), _text)),
        ext,
        b"",
        "JAVA",
        draw(st.integers(-(2**15), 2**15 - 1)),
    )
    cmd.serialize_type = SERIALIZE_ROCKETMQ
    raw = bytearray(frame_of(cmd))
    if draw(st.booleans()):  # a name given twice: the first pair again at the end
        header_end = 4 + (int.from_bytes(raw[:4], "big") & 0xFFFFFF)
        raw[header_end:header_end] = b"\x00\x01a\x00\x00\x00\x01x"
        raw[0:4] = (int.from_bytes(raw[:4], "big") + 11).to_bytes(4, "big")
    for _ in range(draw(st.integers(0, 2))):  # damage: a byte changed
        at = draw(st.integers(0, len(raw) - 1))
        raw[at] = draw(st.integers(0, 255))
    return bytes(raw)


@compiled
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(binary_headers())
def test_the_scanner_agrees_with_its_reference_on_random_binary_headers(frame: bytes) -> None:
    agree(frame)


def test_the_answer_template_writes_what_the_connection_writes() -> None:
    response = RemotingCommand.response(
        0,
        None,
        {
            "msgId": "7F00000100002A9F0000000000001234",
            "queueId": "3",
            "queueOffset": "12345",
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        },
    )
    response.opaque = 987654  # as the connection answers: the request's opaque, JSON
    written = answer_frame(987654, "7F00000100002A9F0000000000001234", 3, 12345)
    assert written == response.encode()
    header = _encode_json_header_py(response)  # the hand-written encoder, the reference
    assert written == (len(header) + 4).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
    response.serialize_type = SERIALIZE_ROCKETMQ
    assert (
        answer_frame(987654, "7F00000100002A9F0000000000001234", 3, 12345, 1) == response.encode()
    )


# ---- whole brokers ------------------------------------------------------------------------


def run_frames(
    root: Path,
    frames: list[bytes],
    *,
    frame_path: bool,
    port: int,
    acl: bool = False,
    flush: str = "ASYNC_FLUSH",
) -> tuple[list[bytes], int, dict[Any, list[int]], dict[Any, list[int]]]:
    """Feed ``frames`` (one read each) into a broker's server connection, made with the send
    frame path or without it, with the request statistics on; the answers written, how many
    sends the frame path served, and the statistics' histogram counts."""

    async def go() -> tuple[list[bytes], int, dict[Any, list[int]], dict[Any, list[int]]]:
        store_config = StoreConfig(
            store_path_root_dir=str(root),
            mapped_file_size_commit_log=1024 * 1024,
            ha_listen_port=0,
            flush_disk_type=flush,
        )
        config = BrokerConfig.from_store_config(store_config, listen_port=port)
        server = BrokerServer(store_config, config, clock=ManualClock(1_795_532_962_000))
        await server.start()
        try:
            broker = server.broker
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            broker.topics.update(TopicConfig("CapTopic", 8, 8))
            handlers = server.server.handlers
            handlers.update(broker.stats.timed_handlers(handlers))  # as the metrics do
            if acl:
                from rocketstore.acl import StaticAcl, admin_accounts

                broker.enable_acl(StaticAcl(admin_accounts({"ak": "sk"})))
            path = broker.send_frame_path
            assert path is not None and server.server.frame_path is not None
            sink = RecordingTransport()
            conn = Connection(
                handlers,
                backpressure=True,
                frame_path=server.server.frame_path if frame_path else None,
            )
            conn.connection_made(sink)  # type: ignore[arg-type]
            random.seed(7)
            for frame in frames:
                buf = conn.get_buffer(len(frame))
                buf[: len(frame)] = frame
                conn.buffer_updated(len(frame))
            for _ in range(100):
                if len(frames_by_opaque(sink.writes)) >= len(frames):
                    break
                await asyncio.sleep(0.01)
            stats = broker.stats
            rpc = {k: [h.count] for k, h in stats.rpc_latency.items()}  # (times vary)
            sizes = {k: list(h.counts) for k, h in stats.message_size.items()}
            return sink.writes, path.served, rpc, sizes
        finally:
            await server.shutdown()

    return asyncio.run(go())


def queue_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / "consumequeue").rglob("*"))
        if p.is_file()
    }


def test_the_same_frames_store_answer_and_count_the_same_with_and_without_the_path(
    tmp_path: Path,
) -> None:
    sends = requests() + [cmd for cmd, _ in recorded_sends()]
    twice = v2()
    twice["topic"] = TOPIC  # the topic in both spellings: the general path decides
    sends.append(RemotingCommand(310, 500, 0, None, twice, b"spelled twice", "JAVA"))
    java = java_ext(e=2)
    sends += [
        RemotingCommand(310, 600 + i, 0, None, java, b"java %d" % i, "JAVA") for i in range(20)
    ]
    for cmd in list(sends):  # each again in the binary serialize type, as RocketMQ's benchmark
        again = copy.copy(cmd)
        again.opaque += 10_000
        again.ext_fields = {k: str(v) for k, v in cmd.ext_fields.items()}
        again.serialize_type = SERIALIZE_ROCKETMQ
        sends.append(again)
    frames = [cmd.encode() for cmd in sends]
    port = free_port()
    with_path = run_frames(tmp_path / "path", frames, frame_path=True, port=port)
    without = run_frames(tmp_path / "decoded", frames, frame_path=False, port=port)
    assert frames_by_opaque(with_path[0]) == frames_by_opaque(without[0])
    assert len(frames_by_opaque(with_path[0])) == len(frames)
    log = commit_log_bytes(tmp_path / "path")
    assert log and log == commit_log_bytes(tmp_path / "decoded")
    assert queue_files(tmp_path / "path") == queue_files(tmp_path / "decoded")
    assert with_path[2] == without[2]  # request latencies: the same keys and counts
    assert with_path[3] == without[3]  # message sizes by topic and type
    plain = sum(1 for *_, fast in PLAIN if fast)
    assert without[1] == 0
    assert with_path[1] >= 2 * (plain + 20)  # the plain, Java-style and recorded plain sends
    assert with_path[1] < len(frames) - 20  # the unusual ones went the general way


def test_sends_that_wait_for_the_group_commit_store_answer_and_count_the_same(
    tmp_path: Path,
) -> None:
    """SYNC_FLUSH: the frame path answers its sends when their group commit ends, with the
    bytes, the stores and the statistics (a pending answer's latency) of the general path."""
    frames = [cmd.encode() for cmd in requests()]
    port = free_port()
    runs = [
        run_frames(tmp_path / way, frames, frame_path=way == "path", port=port, flush="SYNC_FLUSH")
        for way in ("path", "decoded")
    ]
    assert frames_by_opaque(runs[0][0]) == frames_by_opaque(runs[1][0])
    assert len(frames_by_opaque(runs[0][0])) == len(frames)
    assert commit_log_bytes(tmp_path / "path") == commit_log_bytes(tmp_path / "decoded")
    assert runs[0][2] == runs[1][2] and runs[0][3] == runs[1][3]
    assert runs[0][1] > 0 and runs[1][1] == 0


def test_the_path_stands_aside_while_the_acl_is_on(tmp_path: Path) -> None:
    frames = [cmd.encode() for cmd in requests()[:3]]
    writes, served, _rpc, _sizes = run_frames(
        tmp_path, frames, frame_path=True, port=free_port(), acl=True
    )
    assert served == 0
    answers = frames_by_opaque(writes)
    assert len(answers) == 3
    assert all(b"AclException" in frame for frame in answers.values())  # unsigned: refused


_NAMES = st.one_of(
    st.sampled_from(
        ["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER", "DELAY", "TRAN_MSG", "a", "b", "MSG_REGION"]
    ),
    st.text(max_size=6),
)


@given(
    st.lists(
        st.tuples(
            _NAMES,
            st.sampled_from(["\x01", "\x01", "", "\x01\x01"]),
            st.one_of(st.sampled_from(["true", "false", "TRUE", "x y", ""]), st.text(max_size=6)),
        ),
        max_size=8,
    ),
    st.booleans(),
)
def test_the_send_path_stores_properties_as_the_general_path_does(
    pairs: list[tuple[str, str, str]], trailing: bool
) -> None:
    """The frame path's properties, where it takes them, are the general path's: the same
    stored text, TAGS code, KEYS, UNIQ_KEY and wait; it takes every text of distinct plain
    names without a rule's property."""
    text = "\x02".join(name + sep + value for name, sep, value in pairs)
    text += "\x02" if trailing and text else ""
    plans: dict[Any, Any] = {}
    got = plain_properties(text, "CLUSTER\x01DefaultCluster", plans)
    props = string_to_properties(text)
    props["CLUSTER"] = "DefaultCluster"
    stored, wait = stored_properties(props)
    want_text = properties_to_string(stored)
    names = [name for name, _sep, _value in pairs]
    plain = (
        all(
            sep == "\x01" and name and not {"\x01", "\x02"} & set(name + value)
            for name, sep, value in pairs
        )
        and len(set(names)) == len(names)
        and not {"DELAY", "TRAN_MSG"} & set(names)
    )
    if plain:
        assert got is not None
    if got is not None:
        assert got == (
            want_text.encode(),
            tags_code(stored.get("TAGS")),
            stored.get("KEYS"),
            stored.get("UNIQ_KEY"),
            wait,
        )
        assert plain_properties(text, "CLUSTER\x01DefaultCluster", plans) == got  # planned
