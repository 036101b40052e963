"""The send processor's fast path against its general path: the same sends, byte for byte.

Each scenario runs twice over a fresh store with a standing clock, once with the fast path
(plain sends skip the general path) and once with every send forced through the general path
(``SendProcessor.fast_path = False``); the commit logs and the answers' frames must be the same
bytes. The sends: SEND_MESSAGE_V2 as the C++ and Java clients send it (numbers as text and as
JSON numbers), the recorded C++ client's SEND_MESSAGE frames, and the unusual sends the fast
path leaves to the general one (delays, transactions, retry topics, unknown topics, bad
numbers, batches, queue ids out of range).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from pathlib import Path
from typing import Any

import pytest

from _fixtures import TRANSCRIPTS
from _remoting import RecordingTransport
from rocketstore import ManualClock, StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker.messaging._send import SendProcessor
from rocketstore.broker.state._topic_config import TopicConfig
from rocketstore.remoting import Connection, RemotingCommand
from rocketstore.remoting._command import decode_frame
from rocketstore.server import BrokerServer

RECORDED = TRANSCRIPTS / "send.jsonl"
TOPIC = "FastTopic"
UNIQ = "UNIQ_KEY\u00010100007F0000F44000000000\u0002"


def v2(**changes: Any) -> dict[str, Any]:
    """SEND_MESSAGE_V2's header as the C++ client sends it (some fields JSON numbers)."""
    ext: dict[str, Any] = {
        "a": "PID_fast",
        "b": TOPIC,
        "c": "TBW102",
        "d": 4,
        "e": 0,
        "f": 0,
        "g": "1795532961562",
        "h": 0,
        "i": UNIQ + "WAIT\u0001true\u0002",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    ext.update(changes)
    return {k: v for k, v in ext.items() if v is not None}


def v1(**changes: Any) -> dict[str, Any]:
    """SEND_MESSAGE's header as the Java client sends it (every field text)."""
    ext: dict[str, Any] = {
        "producerGroup": "PID_fast",
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1795532961563",
        "flag": "0",
        "properties": UNIQ + "TAGS\u0001TagA\u0002KEYS\u0001k1 k2\u0002",
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
    }
    ext.update(changes)
    return {k: v for k, v in ext.items() if v is not None}


# (code, ext fields, body, served by the fast path)
PLAIN: list[tuple[int, dict[str, Any], bytes, bool]] = [
    (310, v2(), b"plain", True),
    (310, v2(e=3, f="0", h="7", j=2), b"text numbers", True),
    (310, v2(e="2", g=1795532961999), b"a JSON born timestamp", True),
    (310, v2(i=UNIQ + "WAIT\u0001false\u0002"), b"wait false", True),
    (310, v2(i=UNIQ + "WAIT\u0001TRUE\u0002a\u0001b\u0002"), b"WAIT upper case", True),
    (310, v2(i=""), b"no properties", True),
    (310, v2(i="CLUSTER\u0001Other\u0002" + UNIQ), b"own CLUSTER", True),
    (310, v2(i=UNIQ + "k\u0001\u00e9t\u00e9 \u4e2d\u0002"), b"unicode", True),
    (310, v2(m="0"), b"batch 0", True),
    (310, v2(m=False), b"batch false", True),
    (310, v2(), b"", True),
    (310, v2(), bytes(range(256)) * 8, True),
    (10, v1(), b"long names", True),
    (10, v1(batch=None, queueId="0"), b"no batch field", True),
    (310, v2(e=2, f=4, h=2147483647), b"a big flag", True),
    # left to the general path
    (310, v2(i=UNIQ + "DELAY\u00012\u0002"), b"delayed", False),
    (310, v2(i=UNIQ + "TRAN_MSG\u0001true\u0002PGROUP\u0001PID_fast\u0002"), b"half", False),
    (310, v2(i=UNIQ + "TIMER_DELAY_SEC\u00015\u0002"), b"timer", False),
    (310, v2(e=-1), b"any queue", False),
    (310, v2(e=16), b"queue out of range", False),
    (310, v2(e="x"), b"queue not a number", False),
    (310, v2(f="-1"), b"a negative sys flag", False),
    (310, v2(h=-5), b"a negative flag", False),
    (310, v2(h="2147483648"), b"flag beyond int32", False),
    (310, v2(g=""), b"empty born timestamp", False),
    (310, v2(g="12a"), b"bad born timestamp", False),
    (310, v2(j=None), b"no reconsume times", False),
    (310, v2(b="NewTopicA"), b"auto-created", False),
    (310, v2(b="%RETRY%group"), b"retry topic", False),
    (310, v2(b="SCHEDULE_TOPIC_XXXX"), b"refused topic", False),
    (310, v2(b=5), b"numeric topic", False),
    (310, v2(m="true"), b"not a batch body", False),
    (310, v2(m=1), b"batch 1", False),
    (10, v1(queueId=" 1"), b"spaced queue id", False),
    (10, v1(properties=None), b"no properties field", False),
]


def recorded_sends() -> list[tuple[RemotingCommand, dict[str, Any] | None]]:
    """The C++ client's recorded requests to the broker, each with the recorded broker's
    answer (None for a one-way send)."""
    requests: dict[int, RemotingCommand] = {}
    answers: dict[int, dict[str, Any]] = {}
    for line in RECORDED.read_text().splitlines():
        entry = json.loads(line)
        header = entry["header"]
        if entry["link"] != "broker" or (
            header["code"] not in (10, 310) and entry["dir"] == "c->s"
        ):
            continue
        if entry["dir"] == "c->s":
            cmd = RemotingCommand(
                header["code"],
                header["opaque"],
                header["flag"],
                header.get("remark"),
                header.get("extFields", {}),
                entry.get("body", "").encode("utf-8"),
                header["language"],
                header["version"],
            )
            requests[cmd.opaque] = cmd
        else:
            answers[header["opaque"]] = header.get("extFields", {})
    return [(cmd, answers.get(opaque)) for opaque, cmd in sorted(requests.items())]


def commit_log_bytes(root: Path) -> bytes:
    files = sorted((root / "commitlog").iterdir())
    data = b"".join(f.read_bytes() for f in files)
    return data.rstrip(b"\0")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_sends(
    root: Path,
    frames: list[bytes],
    *,
    topics: dict[str, int],
    port: int,
    flush: str,
    reads: list[bytes] | None = None,
    transport: RecordingTransport | None = None,
) -> list[bytes]:
    """Feed ``frames`` one read each (or the bytes of ``reads`` as they are cut) into a
    broker's server connection; the answers written. ``port``: the broker's (a message id
    names the store's host and port)."""

    async def go() -> list[bytes]:
        store_config = StoreConfig(
            store_path_root_dir=str(root),
            mapped_file_size_commit_log=1024 * 1024,
            flush_disk_type=flush,
            ha_listen_port=0,
        )
        config = BrokerConfig.from_store_config(store_config, listen_port=port)
        broker = BrokerServer(store_config, config, clock=ManualClock(1_795_532_962_000))
        await broker.start()
        try:
            assert broker.broker is not None
            for name, queues in topics.items():
                broker.broker.topics.update(TopicConfig(name, queues, queues))
            sink = transport or RecordingTransport()
            conn = Connection(broker.server.handlers, backpressure=True)
            conn.connection_made(sink)  # type: ignore[arg-type]
            random.seed(7)  # a send to queue -1 picks a queue at random
            for frame in frames if reads is None else reads:
                buf = conn.get_buffer(len(frame))
                buf[: len(frame)] = frame
                conn.buffer_updated(len(frame))
            for _ in range(100):  # every answer written (a put may complete off the loop)
                if len(frames_by_opaque(sink.writes)) >= len(frames) or sink.closed:
                    break
                await asyncio.sleep(0.01)
            return sink.writes
        finally:
            await broker.shutdown()

    return asyncio.run(go())


def both_paths(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    requests: list[RemotingCommand],
    topics: dict[str, int],
    flush: str = "ASYNC_FLUSH",
) -> tuple[list[bytes], int]:
    """Run ``requests`` through both paths; assert the stored bytes and the answers are the
    same; return the answers and how many sends the fast path left to the general one."""
    frames = [r.encode() for r in requests]
    general_calls = 0
    general = SendProcessor._send

    def counted(self: SendProcessor, cmd: RemotingCommand, conn: Connection) -> Any:
        nonlocal general_calls
        general_calls += 1
        return general(self, cmd, conn)

    monkeypatch.setattr(SendProcessor, "_send", counted)
    port = free_port()
    fast_answers = run_sends(tmp_path / "fast", frames, topics=topics, port=port, flush=flush)
    fell_back = general_calls
    monkeypatch.setattr(SendProcessor, "fast_path", False)
    general_answers = run_sends(tmp_path / "general", frames, topics=topics, port=port, flush=flush)
    assert general_calls - fell_back == len(requests)

    assert frames_by_opaque(fast_answers) == frames_by_opaque(general_answers)
    fast_log = commit_log_bytes(tmp_path / "fast")
    assert fast_log  # something was stored
    assert fast_log == commit_log_bytes(tmp_path / "general")
    return fast_answers, fell_back


def frames_by_opaque(writes: list[bytes]) -> dict[int, bytes]:
    """The answer frames written, by opaque (answers that wait for a flush may be written in
    another order than the requests came)."""
    data = b"".join(writes)
    out: dict[int, bytes] = {}
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        frame = data[pos : pos + 4 + length]
        out[decode_frame(frame[4:]).opaque] = frame
        pos += 4 + length
    return out


def answers_of(writes: list[bytes]) -> dict[int, RemotingCommand]:
    return {o: decode_frame(f[4:]) for o, f in frames_by_opaque(writes).items()}


@pytest.mark.sources_only
@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_plain_and_unusual_sends_store_and_answer_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: str
) -> None:
    requests = []
    for opaque, (code, ext, body, _fast) in enumerate(PLAIN, 100):
        cmd = RemotingCommand(code, opaque, 0, None, dict(ext), body, "CPP", 405)
        requests.append(cmd)
    writes, fell_back = both_paths(tmp_path, monkeypatch, requests, {TOPIC: 4}, flush)
    assert fell_back == sum(1 for *_, fast in PLAIN if not fast)
    answers = answers_of(writes)
    assert len(answers) == len(PLAIN)
    plain = answers[100]
    assert plain.code == 0
    assert list(plain.ext_fields) == ["msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"]
    refused = next(i for i, (*_, body, _f) in enumerate(PLAIN) if body == b"queue out of range")
    assert answers[100 + refused].code != 0


@pytest.mark.sources_only
def test_recorded_cpp_client_sends_store_and_answer_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = recorded_sends()
    assert len(sent) >= 5
    requests = [cmd for cmd, _ in sent]
    writes, fell_back = both_paths(tmp_path, monkeypatch, requests, {"CapTopic": 8})
    assert fell_back == 1  # the delayed message alone
    answers = answers_of(writes)
    for cmd, recorded in sent:
        if recorded is None:
            continue
        ours = answers[cmd.opaque].ext_fields
        assert sorted(ours) == sorted(recorded)
        for name in ("queueId", "queueOffset", "MSG_REGION", "TRACE_ON"):
            assert ours[name] == recorded[name], name


def test_the_sends_of_one_read_are_answered_in_one_write(tmp_path: Path) -> None:
    """A pipelining client's frames that arrive in one read are served in one call and their
    answers go out in one write; a frame cut across reads is answered with the read that
    completes it."""
    requests = [RemotingCommand(310, i, 0, None, v2(e=i % 4), b"m%d" % i) for i in range(20)]
    frames = [r.encode() for r in requests]
    whole = b"".join(frames)
    cut = len(b"".join(frames[:12])) + 30  # the 13th frame's first 30 bytes end a read
    transport = RecordingTransport()
    writes = run_sends(
        tmp_path,
        frames,
        topics={TOPIC: 4},
        port=free_port(),
        flush="ASYNC_FLUSH",
        reads=[whole[:cut], whole[cut:]],
        transport=transport,
    )
    assert len(writes) == 2
    assert sorted(frames_by_opaque(writes[:1])) == list(range(12))
    assert sorted(frames_by_opaque(writes[1:])) == list(range(12, 20))
    assert all(a.code == 0 for a in answers_of(writes).values())


def test_a_bad_frame_after_good_ones_answers_them_then_closes(tmp_path: Path) -> None:
    """The frames before one whose length is out of bounds are stored and answered (in one
    write) before the connection closes; nothing after it is read."""
    good = [RemotingCommand(310, i, 0, None, v2(), b"m%d" % i).encode() for i in range(3)]
    bad = (64 * 1024 * 1024).to_bytes(4, "big") + b"\0" * 16
    after = RemotingCommand(310, 9, 0, None, v2(), b"after").encode()
    transport = RecordingTransport()
    writes = run_sends(
        tmp_path,
        good,
        topics={TOPIC: 4},
        port=free_port(),
        flush="ASYNC_FLUSH",
        reads=[b"".join(good) + bad + after],
        transport=transport,
    )
    assert transport.closed
    assert len(writes) == 1
    assert sorted(frames_by_opaque(writes)) == [0, 1, 2]
    stored = commit_log_bytes(tmp_path)
    assert b"m2" in stored and b"after" not in stored
