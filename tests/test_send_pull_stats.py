"""The broker's send and pull statistics after real traffic over loopback.

- Sends of sizes across every message size bucket, by the client and as frames pipelined in one
  write (the send frame path counts those by read; under SYNC_FLUSH when the group commit
  ends): the scrape's ``rocketmq_message_size`` buckets, count and sum are the sizes sent,
  ``rocketmq_rpc_latency`` counts every send once.
- Pulls in pieces: ``rocketmq_messages_out_total`` / ``rocketmq_throughput_out_total`` and
  VIEW_BROKER_STATS_DATA's GROUP_GET_NUMS, GROUP_GET_SIZE and BROKER_GET_NUMS are the messages
  and bytes the consumer received, and the pulls that brought them.
- ``BrokerStats``' counting by read: every send of a read gets the read's latency, from the
  first send's start to the read's end, which the connection reports after writing the read's
  answers; a read of sends on another connection closes the one before.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")


from rocketstore.broker.state._stats import (
    BROKER_GET_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    MESSAGE_SIZE_BUCKETS,
    RESULT_SUCCESS,
    BrokerStats,
)
from rocketstore.client import MessageQueue, Producer, PullConsumer
from rocketstore.client._admin import AdminClient
from rocketstore.remoting import Connection, RemotingCommand
from rocketstore.remoting._command import decode_frame
from support.metrics_broker import WAIT_S, Running, running_broker
from support.remoting import RecordingTransport
from support.send_frames import v2
from support.waits import wait_dispatched

TOPIC = "TStatsCounted"
GROUP = "GStatsCounted"
# one size at, below and above each message size bucket's bound (the largest well under the
# default maximum message size)
SIZES = [0, 1, 1023, 1024, 1025, 4095, 4096, 4097, 512 * 1024, 512 * 1024 + 1, 1024 * 1024 + 7]
PIPELINED = [17, 1024, 2000, 5000, 100, 1024 * 1024, 3, 4096, 9000, 64] * 3


@pytest.fixture
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    flush = getattr(request, "param", "ASYNC_FLUSH")
    with running_broker(
        tmp_path / "store",
        topic=TOPIC,
        mapped_file_size_commit_log=8 * 1024 * 1024,
        flush_disk_type=flush,
    ) as r:
        yield r


def found(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    got = [v for n, ls, v in samples if n == name and labels.items() <= ls.items()]
    assert len(got) == 1, (name, labels, got)
    return got[0]


def send_pipelined(address: str, bodies: list[bytes]) -> list[RemotingCommand]:
    """SEND_MESSAGE_V2 frames of ``bodies`` to queue 1 of TOPIC, written in one write; their
    answers in order."""
    frames = b"".join(
        RemotingCommand(
            310, opaque, 0, None, v2(b=TOPIC, e=1, i=f"UNIQ_KEY\x01P{opaque:08d}\x02"), body
        ).encode()
        for opaque, body in enumerate(bodies, 1)
    )
    host, port = address.rsplit(":", 1)
    answers: list[RemotingCommand] = []
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        sock.sendall(frames)
        data = b""
        while len(answers) < len(bodies):
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            data += chunk
            while len(data) >= 4:
                (length,) = struct.unpack_from(">i", data)
                if len(data) < 4 + length:
                    break
                answers.append(decode_frame(data[4 : 4 + length]))
                data = data[4 + length :]
    return answers


@pytest.mark.parametrize("running", ["ASYNC_FLUSH", "SYNC_FLUSH"], indirect=True)
def test_sends_count_their_sizes_and_latencies(running: Running) -> None:
    broker = running.broker
    path = broker.send_frame_path
    assert path is not None
    served_before = running.loop.call(lambda: path.served)
    mq = MessageQueue(TOPIC, broker.config.broker_name, 0)
    with Producer(running.namesrv.address) as producer:
        for i, size in enumerate(SIZES):
            producer.send(TOPIC, bytes([i]) * size, queue=mq)
    answers = send_pipelined(broker.address, [b"p" * size for size in PIPELINED])
    assert [a.opaque for a in answers] == list(range(1, len(PIPELINED) + 1))
    assert {a.code for a in answers} == {0}
    sent = SIZES + PIPELINED
    # the frame path answered them all (the statistics under test are its)
    assert running.loop.call(lambda: path.served) - served_before == len(sent)

    samples = running.scrape()
    size_labels = {"topic": TOPIC, "message_type": "normal"}
    assert found(samples, "rocketmq_message_size_count", **size_labels) == len(sent)
    assert found(samples, "rocketmq_message_size_sum", **size_labels) == sum(sent)
    for bound in MESSAGE_SIZE_BUCKETS:
        le = str(bound)
        below = sum(1 for size in sent if size <= bound)
        assert found(samples, "rocketmq_message_size_bucket", le=le, **size_labels) == below
    assert found(samples, "rocketmq_message_size_bucket", le="+Inf", **size_labels) == len(sent)
    assert found(samples, "rocketmq_messages_in_total", topic=TOPIC) == len(sent)

    # answered in their read (ASYNC_FLUSH), or when the group commit ended (SYNC_FLUSH: as a
    # handler's pending future is counted)
    latency = {
        "request_code": "send_message_v2",
        "response_code": "success",
        "is_long_polling": "true" if running.flush == "SYNC_FLUSH" else "false",
        "result": RESULT_SUCCESS,
    }
    assert found(samples, "rocketmq_rpc_latency_count", **latency) == len(sent)
    assert found(samples, "rocketmq_rpc_latency_bucket", le="+Inf", **latency) == len(sent)
    assert found(samples, "rocketmq_rpc_latency_sum", **latency) > 0.0


def test_pulls_count_what_the_consumer_received(running: Running) -> None:
    broker = running.broker
    mq = MessageQueue(TOPIC, broker.config.broker_name, 2)
    bodies = [b"x" * (10 + 37 * i) for i in range(11)]
    with Producer(running.namesrv.address) as producer:
        for body in bodies:
            producer.send(TOPIC, body, queue=mq)
    wait_dispatched(broker.store, WAIT_S)  # in the queue before the first pull
    messages = size = pulls = 0
    with PullConsumer(running.namesrv.address, GROUP) as consumer:
        offset = 0
        while offset < len(bodies):
            got = consumer.pull(mq, offset, 3)
            assert got.status == "FOUND"
            pulls += 1
            messages += len(got.messages)
            size += len(got.raw)
            offset = got.next_begin_offset
    assert messages == len(bodies) and pulls == 4

    samples = running.scrape()
    out = {"topic": TOPIC, "consumer_group": GROUP}
    assert found(samples, "rocketmq_messages_out_total", **out) == messages
    assert found(samples, "rocketmq_throughput_out_total", **out) == size

    with AdminClient(running.namesrv.address) as admin:
        nums = admin.broker_stats(broker.address, GROUP_GET_NUMS, f"{TOPIC}@{GROUP}")
        sizes = admin.broker_stats(broker.address, GROUP_GET_SIZE, f"{TOPIC}@{GROUP}")
        cluster = admin.broker_stats(broker.address, BROKER_GET_NUMS, broker.config.cluster_name)
    for window in (nums.minute, nums.hour, nums.day):
        assert window.sum == messages
        assert window.avgpt == pytest.approx(messages / pulls)
    for window in (sizes.minute, sizes.hour, sizes.day):
        assert window.sum == size
    assert cluster.minute.sum == messages


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_sends_of_one_read_share_the_read_latency() -> None:
    clock = FakeClock()
    stats = BrokerStats(clock)
    a = Connection({})
    b = Connection({})
    began = stats.read_began()  # none open: the clock
    assert began == 100.0
    stats.sent_in_read(310, 0, "T", "", 10, began, a)
    clock.now = 100.001
    stats.sent_in_read(310, 0, "T", "", 2000, stats.read_began(), a)  # the read's start
    stats.sent_in_read(10, 0, "T", "", 5000, stats.read_began(), a)
    stats.sent_in_read(310, 14, "T", "", 5, stats.read_began(), a)  # answered with an error
    assert stats.rpc_latency == {}  # counted when the read ends
    assert a.after_read is not None
    clock.now = 100.004
    a.after_read()  # as the connection calls it
    v2_ok = stats.rpc_latency[(310, 0, False, RESULT_SUCCESS)]
    assert v2_ok.count == 2 and v2_ok.counts[2] == 2  # 4 ms each: (3, 5]
    assert v2_ok.sum == pytest.approx(8.0)
    assert stats.rpc_latency[(10, 0, False, RESULT_SUCCESS)].counts[2] == 1
    assert stats.rpc_latency[(310, 14, False, RESULT_SUCCESS)].count == 1
    sizes = stats.message_size[("T", "normal")]
    assert sizes.count == 3 and sizes.sum == 7010.0  # the refused send has no size
    stats.read_ended()  # nothing open: nothing counted twice
    assert v2_ok.count == 2

    # a read on another connection closes the one before it
    stats.sent_in_read(310, 0, "T", "", 1, stats.read_began(), a)
    clock.now = 100.0045
    stats.sent_in_read(310, 0, "T", "", 1, stats.read_began(), b)
    assert v2_ok.count == 3 and v2_ok.counts[0] == 1  # 0.5 ms
    clock.now = 100.0065
    assert b.after_read is not None
    b.after_read()
    # b's read began when a's ended: 2 ms, (1, 3]
    assert v2_ok.count == 4 and v2_ok.counts[1] == 1
    assert v2_ok.sum == pytest.approx(8.0 + 0.5 + 2.0)


class WritesSeen:
    """A clock that notes how many writes the transport had each time it is read."""

    def __init__(self, transport: RecordingTransport) -> None:
        self.transport = transport
        self.seen: list[int] = []

    def __call__(self) -> float:
        self.seen.append(len(self.transport.writes))
        return float(len(self.seen))


def test_the_connection_reports_a_read_after_writing_its_answers() -> None:
    async def run() -> None:
        sink = RecordingTransport()
        clock = WritesSeen(sink)
        stats = BrokerStats(clock)

        def serve(frame: memoryview, conn: Connection) -> bytes:
            stats.sent_in_read(310, 0, "T", "", len(frame), stats.read_began(), conn)
            return RemotingCommand.response(0).encode()

        conn = Connection({}, frame_path=serve)
        conn.connection_made(sink)  # type: ignore[arg-type]
        frames = b"".join(RemotingCommand.request(310, {}, b"b" * n).encode() for n in (1, 2, 3))
        buf = conn.get_buffer(len(frames))
        buf[: len(frames)] = frames
        conn.buffer_updated(len(frames))
        # read at the first send's start, then once when the read ended, after its one write
        assert clock.seen == [0, 1]
        assert conn.after_read is None
        histogram = stats.rpc_latency[(310, 0, False, RESULT_SUCCESS)]
        assert histogram.count == 3 and histogram.sum == pytest.approx(3 * 1000.0)

    asyncio.run(run())
