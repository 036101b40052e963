"""What a gRPC client may make the front end hold: an unsigned call's request is never read, a
send's request is read only within the front end's byte budget, a Telemetry stream's unread
replies are bounded and the stream ends, and calls are capped per connection and in all.

The clients that send large requests run in a subprocess, so this process's RSS is the
broker's (and the test's) alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rocketstore.grpc._acl import authorization_header, date_time_now
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.grpc._pb import service_pb2 as spb
from rocketstore.grpc._pb import service_pb2_grpc
from rocketstore.server._run import _settle_allocator
from support.acl_env import ACL_YML
from support.grpc_broker import TEST_GRPC_CONFIG, BrokerThread
from support.memory import MiB, PeakRss, rss
from support.waits import wait_until

Code = pb.Code
WAIT = 120.0


def signed(ak: str, sk: str, client_id: str) -> list[tuple[str, str]]:
    when = date_time_now()
    return [
        ("x-mq-client-id", client_id),
        ("x-mq-date-time", when),
        ("authorization", authorization_header(ak, sk, when)),
    ]


# a client process: CALLS SendMessage calls at once, ROUNDS each, of one BODY_MB message to
# TOPIC, signed by AK/SK when given; prints the answers' codes
SENDER = textwrap.dedent(
    """
    import asyncio, collections, sys
    import grpc
    from rocketstore.grpc._acl import authorization_header, date_time_now
    from rocketstore.grpc._pb import definition_pb2 as pb, service_pb2 as spb

    address, topic, calls, rounds, body_mb, ak, sk = sys.argv[1:8]
    message = pb.Message(body=b"x" * int(float(body_mb) * 1024 * 1024))
    message.topic.name = topic
    message.system_properties.message_id = "BUDGET"
    request = spb.SendMessageRequest(messages=[message]).SerializeToString()

    def metadata():
        if not ak:
            return [("x-mq-client-id", "sender@1")]
        when = date_time_now()
        return [("x-mq-client-id", "sender@1"), ("x-mq-date-time", when),
                ("authorization", authorization_header(ak, sk, when))]

    async def main():
        codes = collections.Counter()
        options = [("grpc.max_send_message_length", 64 << 20)]
        async with grpc.aio.insecure_channel(address, options=options) as channel:
            send = channel.unary_unary(
                "/apache.rocketmq.v2.MessagingService/SendMessage",
                request_serializer=None,
                response_deserializer=spb.SendMessageResponse.FromString,
            )
            async def caller():
                for _ in range(int(rounds)):
                    try:
                        r = await send(request, metadata=metadata(), timeout=60)
                        codes[pb.Code.Name(r.status.code)] += 1
                    except grpc.aio.AioRpcError as exc:
                        codes["grpc:" + exc.code().name] += 1
            await asyncio.gather(*(caller() for _ in range(int(calls))))
        print(dict(codes))

    asyncio.run(main())
    """
)


def run_senders(
    address: str, topic: str, *, calls: int, rounds: int, body_mb: float, ak: str = "", sk: str = ""
) -> dict[str, int]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            SENDER,
            address,
            topic,
            str(calls),
            str(rounds),
            str(body_mb),
            ak,
            sk,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    codes: dict[str, int] = eval(out.stdout.strip().splitlines()[-1])  # a dict's repr
    return codes


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    config = TEST_GRPC_CONFIG.replace(max_buffered_bytes=24 * MiB, send_wait_ms=500)
    _settle_allocator()  # as serve does on its way up
    b = BrokerThread(
        tmp_path / "store",
        grpc_config=config,
        broker_overrides={"acl_enable": True, "acl_file": str(acl)},
    )
    try:
        yield b.start()
    finally:
        b.close()


def test_unsigned_sends_are_refused_before_their_request_is_read(acl_broker: BrokerThread) -> None:
    """32 unsigned SendMessage calls at once, 4 MiB each, 4 rounds: each was read and decoded
    before the refusal (the process grew by hundreds of MiB). Now every one is answered
    UNAUTHORIZED, none of their requests was read, and the process did not grow by their
    size."""
    b = acl_broker
    gate = b.grpc.gate
    reads: list[int] = []
    read_send = gate._read_send

    async def counted(requests: Any) -> Any:
        reads.append(1)
        return await read_send(requests)

    b.run(lambda: setattr(gate, "_read_send", counted))
    baseline = rss()
    peaks = PeakRss()
    try:
        codes = run_senders(b.grpc_address, "PubOnly", calls=32, rounds=4, body_mb=4)
    finally:
        peak = peaks.stop()
    assert codes == {"UNAUTHORIZED": 128}, codes
    assert reads == [] and b.run(lambda: gate.refused_unread) == 128
    assert b.run(lambda: b.grpc.room.peak) == 0  # no room taken: nothing was read
    assert peak - baseline < 64 * MiB, f"grew {(peak - baseline) / MiB:.0f} MiB"


def test_sends_are_read_within_the_budget_and_memory_goes_back(acl_broker: BrokerThread) -> None:
    """A signed account without PUB on the topic: its requests are read (the refusal needs the
    topic), so they count against the 24 MiB budget: at most two 4 MiB requests are read at
    once (room for the largest request, twice, until read), the others wait or are answered
    TOO_MANY_REQUESTS unread; the process's RSS stays within the budget and some, and goes
    back once they stop."""
    b = acl_broker
    baseline = rss()
    peaks = PeakRss()
    try:
        codes = run_senders(
            b.grpc_address, "Shared", calls=24, rounds=3, body_mb=4, ak="attackAK1", sk="attackSK1"
        )
    finally:
        peak = peaks.stop()
    assert set(codes) <= {"FORBIDDEN", "TOO_MANY_REQUESTS"} and sum(codes.values()) == 72, codes
    assert codes.get("FORBIDDEN", 0) > 0
    room = b.grpc.room
    budget = b.grpc.config.max_buffered_bytes
    assert 0 < b.run(lambda: room.peak) <= budget
    assert b.run(lambda: b.grpc.gate.sends_refused) == codes.get("TOO_MANY_REQUESTS", 0)
    assert peak - baseline < budget + 96 * MiB, f"grew {(peak - baseline) / MiB:.0f} MiB"
    assert wait_until(lambda: b.run(lambda: room.taken) == 0, WAIT)
    # handed back (malloc_trim) by the front end's housekeeping once nothing is held
    assert wait_until(lambda: b.run(lambda: b.grpc._trimmer.trims) > 0, WAIT)
    assert wait_until(lambda: rss() < baseline + 32 * MiB, WAIT), (rss() - baseline) / MiB


# ---- Telemetry ----------------------------------------------------------------------------------


def publishing(topics: int, topic: str = "Shared") -> spb.TelemetryCommand:
    command = spb.TelemetryCommand()
    command.settings.client_type = pb.PRODUCER
    for _ in range(topics):
        command.settings.publishing.topics.add(name=topic)
    return command


class Stream:
    """A Telemetry stream: ``first`` sent, then held open until closed; what comes down it is
    read only when ``read`` is True."""

    def __init__(
        self,
        stub: Any,
        metadata: list[tuple[str, str]],
        first: list[spb.TelemetryCommand],
        *,
        read: bool = True,
    ) -> None:
        self._stop = threading.Event()
        self.received: list[spb.TelemetryCommand] = []
        self.error: grpc.RpcError | None = None
        self.done = threading.Event()

        def commands() -> Iterator[spb.TelemetryCommand]:
            yield from first
            self._stop.wait(WAIT)

        self.call = stub.Telemetry(commands(), metadata=metadata, timeout=WAIT)
        self._thread: threading.Thread | None = None
        if read:
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        else:
            self.call.add_done_callback(lambda _call: self.done.set())

    def _read(self) -> None:
        try:
            for command in self.call:
                self.received.append(command)
        except grpc.RpcError as exc:
            self.error = exc
        self.done.set()

    def close(self) -> None:
        self._stop.set()
        self.call.cancel()
        if self._thread is not None:
            self._thread.join(10)


@pytest.fixture
def small_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    config = TEST_GRPC_CONFIG.replace(
        telemetry_queue_size=4,
        telemetry_stall_ms=1_000,
        max_settings_topics=2_000,
        max_streams_per_connection=4,
        max_concurrent_calls=64,
    )
    b = BrokerThread(tmp_path / "store", grpc_config=config)
    try:
        yield b.start()
    finally:
        b.close()


def test_a_telemetry_stream_that_never_reads_is_bounded_and_ended(
    small_broker: BrokerThread,
) -> None:
    """Settings sent over and over, the answers never read: the answers waited in an unbounded
    queue (the process grew by the size of each Settings, without end). Now at most
    telemetry_queue_size of them wait, counted in the budget; then the stream reads no more
    and what waited is dropped, its room given back while the stream is still open."""
    b = small_broker
    command = publishing(2_000)  # some 22 KB, each answer as large
    size = command.settings.ByteSize()
    channel = grpc.insecure_channel(b.grpc_address, options=[("grpc.http2.bdp_probe", 0)])
    stream: Stream | None = None
    try:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        b.run(lambda: setattr(b.grpc.room, "peak", 0))
        stream = Stream(stub, [("x-mq-client-id", "mute@1")], [command] * 400, read=False)
        service = b.grpc.service
        assert wait_until(lambda: b.run(lambda: service.telemetry_stalls) == 1, WAIT)
        assert wait_until(lambda: b.run(lambda: b.grpc.room.taken) == 0, WAIT)
        # the replies held waiting: at most the queue's, and the one waiting for a place
        assert 0 < b.run(lambda: b.grpc.room.peak) <= (4 + 1) * (size + 1024)
        assert b.run(lambda: service.telemetry_open) == 1  # open: its client has not ended it
        stream.close()
        assert wait_until(lambda: b.run(lambda: service.telemetry_open) == 0, WAIT)
    finally:
        if stream is not None:
            stream.close()
        channel.close()


def test_settings_name_at_most_max_settings_topics(small_broker: BrokerThread) -> None:
    channel = grpc.insecure_channel(b_address := small_broker.grpc_address)
    del b_address
    streams: list[Stream] = []
    try:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for count in (2_000, 2_001):
            s = Stream(stub, [("x-mq-client-id", f"topics@{count}")], [publishing(count)])
            streams.append(s)
            assert wait_until(lambda s=s: bool(s.received), WAIT)  # type: ignore[misc]
        ok, refused = (s.received[0].status for s in streams)
        assert ok.code == Code.OK, ok
        assert refused.code == Code.BAD_REQUEST and "2,001 topics" in refused.message
        info = small_broker.run(lambda: small_broker.grpc.service.clients.get("topics@2001"))
        assert info is None  # nothing of the refused settings kept
    finally:
        for s in streams:
            s.close()
        channel.close()


def test_streams_are_capped_per_connection_and_in_all(small_broker: BrokerThread) -> None:
    """Streams on one connection were not capped (2,000 Telemetry streams held some 54 MB).
    Now a connection has at most max_streams_per_connection under way: the fifth stream is
    served only once one of the first four ends; and beyond max_concurrent_calls in all,
    gRPC refuses a call."""
    b = small_broker
    service = b.grpc.service
    channel = grpc.insecure_channel(b.grpc_address)
    streams: list[Stream] = []
    try:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for i in range(6):
            streams.append(Stream(stub, [("x-mq-client-id", f"cap@{i}")], [publishing(1)]))
        assert wait_until(lambda: sum(1 for s in streams if s.received) == 4, WAIT)
        assert b.run(lambda: service.telemetry_open) == 4
        waiting = [s for s in streams if not s.received]
        assert len(waiting) == 2
        first = next(s for s in streams if s.received)
        first.close()
        assert wait_until(lambda: sum(1 for s in waiting if s.received) >= 1, WAIT)
        assert b.run(lambda: service.telemetry_open) <= 4
    finally:
        for s in streams:
            s.close()
        channel.close()
    assert wait_until(lambda: b.run(lambda: service.telemetry_open) == 0, WAIT)
    # in all: 64 calls at most (16 connections of 4 streams), the next one refused
    own = [("grpc.use_local_subchannel_pool", 1)]  # a connection each
    channels = [grpc.insecure_channel(b.grpc_address, options=own) for _ in range(17)]
    streams = []
    try:
        for i, ch in enumerate(channels[:16]):
            stub = service_pb2_grpc.MessagingServiceStub(ch)
            for j in range(4):
                streams.append(Stream(stub, [("x-mq-client-id", f"all@{i}.{j}")], [publishing(1)]))
        assert wait_until(lambda: all(s.received for s in streams), WAIT)
        extra = service_pb2_grpc.MessagingServiceStub(channels[16])
        with pytest.raises(grpc.RpcError) as refused:
            extra.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Shared")), timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        for s in streams:
            s.close()
        for ch in channels:
            ch.close()


def test_the_replies_queue_refuses_what_does_not_fit() -> None:
    """``Replies``: a check offered to a full queue (or without room) is not queued; ``put``
    gives up after its timeout; what was never written goes back to the room."""
    import asyncio

    from rocketstore.grpc._replies import Replies
    from rocketstore.remoting._room import ByteRoom

    async def scenario() -> None:
        room = ByteRoom(1_000_000)
        replies = Replies(room, 2)
        command = publishing(10)
        size = command.ByteSize()
        assert replies.offer(command) and await replies.put(command, 0.01)
        assert not replies.offer(command)  # full
        assert not await replies.put(command, 0.01)
        assert room.taken == 2 * size
        item = await replies.get()
        assert item is not None and item[1] == size
        replies.written(item[1])
        assert room.taken == size
        tight = Replies(ByteRoom(size), 8)
        assert tight.offer(command) and not tight.offer(command)  # no room for a second
        replies.end()
        replies.drain()
        assert room.taken == 0 and await replies.get() is None

    asyncio.run(scenario())


def test_a_drained_queue_ends_a_waiting_writer() -> None:
    """A reply that found no room (others hold the budget) while the writer waits on an empty
    queue: draining wakes the writer, which ends the stream."""
    import asyncio

    from rocketstore.grpc._replies import Replies
    from rocketstore.remoting._room import ByteRoom

    async def scenario() -> None:
        room = ByteRoom(100)
        room.try_acquire(100)  # all taken by others
        replies = Replies(room, 4)
        writer = asyncio.create_task(replies.get())
        assert not await replies.put(publishing(10), 0.01)
        replies.drain()
        assert await asyncio.wait_for(writer, 10) is None
        assert room.taken == 100

    asyncio.run(scenario())
