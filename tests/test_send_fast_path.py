"""The plain send path against the general path: the same sends, byte for byte.

Each scenario runs twice over a fresh store with a standing clock, fed to a connection made as
the broker's server makes them, once with the plain path (plain sends take the send frame
path) and once with every send forced through the general path (``SendProcessor.fast_path =
False``); the commit logs and the answers' frames must be the same bytes, under ASYNC_FLUSH
and under SYNC_FLUSH (answered when the group commit ends). The sends: SEND_MESSAGE_V2 as the C++ and Java clients send it (numbers as text and as
JSON numbers), the recorded C++ client's SEND_MESSAGE frames, and the unusual sends the fast
path leaves to the general one (delays, transactions, retry topics, unknown topics, bad
numbers, batches, queue ids out of range).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from rocketstore import ManualClock, StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker.messaging._send import SendProcessor
from rocketstore.broker.state._topic_config import TopicConfig
from rocketstore.remoting import Connection, RemotingCommand
from rocketstore.remoting._command import decode_frame
from rocketstore.server import BrokerServer
from support.ports import free_port
from support.remoting import RecordingTransport
from support.send_frames import PLAIN, TOPIC, commit_log_bytes, frames_by_opaque, recorded_sends, v2

# (code, ext fields, body, served by the fast path)


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
            conn = Connection(
                broker.server.handlers, backpressure=True, frame_path=broker.server.frame_path
            )
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
