"""A pull's answer written from its template (``answer_frame``) is byte for byte the frame the
connection writes for the command answer (``answer``, the reference), for the same store, in
both serialize types (JSON and the binary form), and its body is the records as the commit-log
files hold them: messages of several sizes, a pull spanning two commit-log files, pulls
stopped by the count and the size limits, empty pulls; the same over a socket; a long-polled
pull answered on arrival (its answer from the template too); a connection cut while a large
answer is on its way leaves the broker serving; the statistics count a framed answer as they
count the command."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.broker.messaging._pull import PullProcessor
from rocketstore.broker.state._stats import RESULT_SUCCESS, BrokerStats, frame_code
from rocketstore.remoting import Connection, RemotingClient, RemotingCommand
from rocketstore.remoting._command import RESPONSE_FLAG, SERIALIZE_ROCKETMQ, decode_frame
from support.broker import RunningBroker, pull_request, send_request
from support.waits import wait_dispatched

TOPIC = "PullFrame"
FILE = 1024 * 1024  # RunningBroker's commit-log file size
SIZES = (1, 100, 1000, 4096, 60_000, 1, 200_000, 333)
_INT = struct.Struct(">i")


class Peer:
    """What the pull processor reads of its connection."""

    peer = "127.0.0.1:1"
    closed = False


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    running = RunningBroker(tmp_path / "b", store={}, broker={})
    try:
        yield running
    finally:
        running.stop()


def fill(broker: RunningBroker, sizes: list[int], queue_id: int = 0) -> None:
    """Send messages of ``sizes`` bytes, then wait until dispatch has taken them (a send is
    answered before its record is in the consume queue)."""
    with RemotingClient(timeout=60.0) as client:
        for i, size in enumerate(sizes):
            body = bytes([65 + i % 26]) * size if size else b"arrived"
            r = client.invoke(broker.addr, send_request(TOPIC, body, queue_id=queue_id))
            assert r.code == 0, r.remark
    # a send to a new queue (or its next file) is answered before dispatch puts it there
    assert broker.controller is not None
    wait_dispatched(broker.controller.store)


def both(broker: RunningBroker, cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """(the template's frame, the reference command's frame as the connection writes it)."""
    assert broker.controller is not None
    processor = PullProcessor(broker.controller)  # type: ignore[arg-type]

    async def answer() -> tuple[Any, Any]:
        conn: Any = Peer()
        framed = processor.process(cmd, conn, allow_suspend=True, frame=True)
        reference = processor.process(cmd, conn, allow_suspend=True)
        return framed, reference

    framed, reference = broker.run(answer())
    assert type(framed) is bytes and isinstance(reference, RemotingCommand)
    reference.opaque = cmd.opaque
    reference.flag |= RESPONSE_FLAG
    reference.serialize_type = cmd.serialize_type
    return framed, reference.encode()


def records(body: bytes) -> list[tuple[int, int]]:
    """(commit-log offset, size) of each record in a pull's body."""
    out, pos = [], 0
    while pos < len(body):
        size = _INT.unpack_from(body, pos)[0]
        out.append((struct.unpack_from(">q", body, pos + 28)[0], size))
        pos += size
    assert pos == len(body)
    return out


def stored(broker: RunningBroker, phys: int, size: int) -> bytes:
    """The record at commit-log offset ``phys`` as its file holds it."""
    start = phys - phys % FILE
    path = Path(broker.store_config.store_path_root_dir) / "commitlog" / f"{start:020d}"
    with open(path, "rb") as f:
        f.seek(phys - start)
        return f.read(size)


def as_sent(cmd: RemotingCommand, serialize_type: int) -> RemotingCommand:
    """``cmd`` in ``serialize_type`` (1: the binary form RocketMQ's benchmark clients send)."""
    cmd.serialize_type = serialize_type
    return cmd


@pytest.mark.parametrize("serialize_type", [0, SERIALIZE_ROCKETMQ], ids=["json", "binary"])
def test_frames_equal_the_reference_across_sizes_files_and_limits(
    broker: RunningBroker, serialize_type: int
) -> None:
    sizes = list(SIZES) * 6  # some 1.6 MB: two commit-log files
    fill(broker, sizes)
    spans_files = by_count = by_bytes = empty = 0
    for offset in range(len(sizes) + 2):
        for max_nums in (1, 3, 32):
            cmd = as_sent(pull_request(TOPIC, 0, offset, max_nums=max_nums), serialize_type)
            framed, reference = both(broker, cmd)
            assert framed == reference, (offset, max_nums)
            answer = decode_frame(memoryview(framed)[4:])
            if answer.code != 0:
                empty += 1
                assert offset >= len(sizes) and not answer.body
                continue
            got = records(bytes(answer.body))
            assert got
            assert answer.body == b"".join(stored(broker, *record) for record in got)
            if got[0][0] // FILE != got[-1][0] // FILE:
                spans_files += 1
            left = len(sizes) - offset
            if len(got) == max_nums < left:
                by_count += 1
            elif len(got) < min(max_nums, left):
                by_bytes += 1  # the bytes limit stopped it
    assert spans_files and by_count and by_bytes and empty


@pytest.mark.parametrize("serialize_type", [0, SERIALIZE_ROCKETMQ], ids=["json", "binary"])
def test_frames_equal_the_reference_for_what_finds_nothing(
    broker: RunningBroker, serialize_type: int
) -> None:
    fill(broker, [10, 20, 30])
    for cmd in (
        pull_request(TOPIC, 0, 3),  # the end: not found
        pull_request(TOPIC, 0, 1000),  # far beyond: offset moved
        pull_request(TOPIC, 1, 0),  # a queue with nothing
        pull_request(TOPIC, 0, 0, expression="onlythis"),  # no tag matches
    ):
        framed, reference = both(broker, as_sent(cmd, serialize_type))
        assert framed == reference


def read_frame(sock: socket.socket) -> bytes:
    head = recv_exactly(sock, 4)
    return head + recv_exactly(sock, _INT.unpack(head)[0])


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        assert chunk, "the broker closed the connection"
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def test_the_answers_on_the_wire_are_the_reference_bytes(broker: RunningBroker) -> None:
    sizes = list(SIZES) * 2
    fill(broker, sizes)
    host, port = broker.addr.rsplit(":", 1)
    cmds = [
        as_sent(pull_request(TOPIC, 0, offset, max_nums=4), offset % 2)  # JSON, binary, ...
        for offset in range(len(sizes) + 1)
    ]
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(b"".join(cmd.encode() for cmd in cmds))  # pipelined: answered in order
        wire = [read_frame(sock) for _ in cmds]
    for cmd, got in zip(cmds, wire, strict=True):
        framed, reference = both(broker, cmd)
        assert got == reference == framed


def test_a_long_polled_pull_is_answered_on_arrival(broker: RunningBroker) -> None:
    fill(broker, [5])
    with RemotingClient(timeout=60.0) as client:
        held = pull_request(TOPIC, 0, 1, suspend_ms=30_000)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(client.invoke, broker.addr, held)
            began = time.monotonic()
            assert broker.controller is not None
            holds = broker.controller.holds
            while holds.held_count == 0:  # the pull waits in its hold
                assert time.monotonic() - began < 60 and not fut.done()
                time.sleep(0.01)
            fill(broker, [0])  # (another connection) the body below
            answer = fut.result(60)
            assert holds.statistics().woken_by_arrival == 1
    assert answer.code == 0
    assert [size for _, size in records(bytes(answer.body))] == [records_size(broker, 1)]
    assert b"arrived" in bytes(answer.body)
    # and the same pull now, answered at once from the template, is the reference's bytes
    framed, reference = both(broker, pull_request(TOPIC, 0, 1))
    assert framed == reference and decode_frame(memoryview(framed)[4:]).body == answer.body


def records_size(broker: RunningBroker, offset: int) -> int:
    framed, _ = both(broker, pull_request(TOPIC, 0, offset, max_nums=1))
    return records(bytes(decode_frame(memoryview(framed)[4:]).body))[0][1]


@pytest.mark.parametrize("serialize_type", [0, SERIALIZE_ROCKETMQ], ids=["json", "binary"])
def test_a_held_pull_is_answered_with_the_reference_bytes(
    broker: RunningBroker, serialize_type: int
) -> None:
    fill(broker, [5, 6])
    assert broker.controller is not None
    holds = broker.controller.holds
    host, port = broker.addr.rsplit(":", 1)
    held = as_sent(pull_request(TOPIC, 0, 2, suspend_ms=30_000), serialize_type)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(held.encode())
        began = time.monotonic()
        while holds.held_count == 0:  # the pull waits in its hold
            assert time.monotonic() - began < 60
            time.sleep(0.01)
        fill(broker, [7])  # (another connection) the record it is woken for
        got = read_frame(sock)  # (woken by the arrival or by the hold's own check)
    answer = decode_frame(memoryview(got)[4:])
    assert answer.code == 0 and answer.serialize_type == serialize_type
    assert len(records(bytes(answer.body))) == 1
    # the bytes of the same pull answered now: the template's and the reference command's
    again = as_sent(pull_request(TOPIC, 0, 2), serialize_type)
    again.opaque = held.opaque
    framed, reference = both(broker, again)
    assert got == reference == framed


def test_a_cut_connection_during_a_large_answer_leaves_the_broker_serving(
    broker: RunningBroker,
) -> None:
    fill(broker, [200_000] * 8)
    host, port = broker.addr.rsplit(":", 1)
    for _ in range(3):
        sock = socket.create_connection((host, int(port)), timeout=60)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            pulls = [pull_request(TOPIC, 0, i % 8, max_nums=32) for i in range(40)]
            sock.sendall(b"".join(cmd.encode() for cmd in pulls))
            head = recv_exactly(sock, 4)  # the first answer is on its way
            assert _INT.unpack(head)[0] > 200_000
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            sock.close()  # reset, most answers unread
    with RemotingClient(timeout=60.0) as client:
        assert client.invoke(broker.addr, send_request(TOPIC, b"after")).code == 0
        assert broker.controller is not None
        wait_dispatched(broker.controller.store)
        got = client.invoke(broker.addr, pull_request(TOPIC, 0, 8))
        assert got.code == 0 and b"after" in bytes(got.body)


@pytest.mark.parametrize("serialize_type", [0, SERIALIZE_ROCKETMQ], ids=["json", "binary"])
def test_the_statistics_count_a_framed_answer_by_its_code(
    broker: RunningBroker, serialize_type: int
) -> None:
    fill(broker, [10])
    framed, _ = both(broker, as_sent(pull_request(TOPIC, 0, 0), serialize_type))
    missing, _ = both(broker, as_sent(pull_request(TOPIC, 0, 1), serialize_type))
    assert frame_code(framed) == 0
    assert frame_code(missing) == decode_frame(memoryview(missing)[4:]).code != 0
    assert frame_code(b"\0" * 8 + b"[]") is None
    stats = BrokerStats()
    cmd = pull_request(TOPIC, 0, 0)
    stats.note_rpc(cmd, framed, False, stats.now())
    assert list(stats.rpc_latency) == [(11, 0, False, RESULT_SUCCESS)]


def test_a_timed_handler_counts_what_note_rpc_counts() -> None:
    """The handler table's timing keeps its own histograms of what it answers at once: the
    counts and keys are those ``note_rpc`` gives the same answers, in ``rpc_latency``."""
    answers: list[Any] = [
        RemotingCommand.response(0, "FOUND"),
        RemotingCommand.response(19, "OFFSET_FOUND_NULL"),
        RemotingCommand.response(0, "FOUND"),
        None,
        RemotingCommand.response(0, "FOUND"),
    ]
    for serialize_type in (0, SERIALIZE_ROCKETMQ):  # and each as its frame
        for a in answers[:3]:
            framed = RemotingCommand.response(a.code, a.remark)
            framed.flag |= RESPONSE_FLAG
            framed.serialize_type = serialize_type
            answers.append(framed.encode())
    timed, noted = BrokerStats(), BrokerStats()
    pending = list(answers)
    handler = timed.timed_handlers({11: lambda cmd, conn: pending.pop(0)})[11]
    for answer in answers:
        cmd = pull_request(TOPIC, 0, 0)
        assert handler(cmd, None) is answer
        noted.note_rpc(cmd, answer, False, noted.now())
    oneway = RemotingCommand.request(11, {}, oneway=True)  # counted by note_rpc's rule
    pending.append(RemotingCommand.response(0))
    handler(oneway, None)
    noted.note_rpc(oneway, RemotingCommand.response(0), False, noted.now())

    def counts(stats: BrokerStats) -> dict[Any, int]:
        return {key: h.count for key, h in stats.rpc_latency.items()}

    assert counts(timed) == counts(noted)
    assert counts(timed) == {
        (11, 0, False, RESULT_SUCCESS): 7,
        (11, 19, False, RESULT_SUCCESS): 3,
        (11, None, False, "oneway"): 1,
        (11, 0, False, "oneway"): 1,
    }


class Writes(asyncio.Transport):
    """A transport that records each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_write_buffer_size(self) -> int:
        return 0


def test_frames_written_outside_a_read_go_out_once_a_loop_turn() -> None:
    async def main() -> None:
        conn = Connection({})
        transport = Writes()
        conn.connection_made(transport)
        frames = [pull_request(TOPIC, 0, i).encode() for i in range(3)]
        for frame in frames:  # answers completed by futures in one turn, say
            assert conn.write_frames(frame)
        assert transport.writes == []  # held until the turn ends
        await asyncio.sleep(0)
        assert transport.writes == [b"".join(frames)]
        assert conn.write_frames(frames[0])
        conn.close()  # what is held goes out before the close
        assert transport.writes[1:] == [frames[0]]
        await asyncio.sleep(0)
        assert len(transport.writes) == 2

    asyncio.run(main())
