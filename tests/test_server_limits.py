"""Servers that one client cannot knock over: compressed bodies inflate to a bounded size
(REGISTER_BROKER bodies, message bodies with the compressed flag, gRPC GZIP bodies); a server
takes a bounded number of connections, and what they hold (unsent answers, large frames) stays
within its budget, per connection and in all, while a well-behaved client is served."""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import struct
import time
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rocketstore import StoreConfig
from rocketstore._inflate import (
    DEFAULT_MAX_BODY,
    GZIP,
    ZLIB_OR_GZIP,
    InflateError,
    InflateLimitError,
    inflate,
)
from rocketstore.broker._config import BrokerConfig
from rocketstore.client._consumer import plain_body
from rocketstore.grpc._convert import GrpcError, decoded_body
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.namesrv import NameServer
from rocketstore.protocol._namesrv_bodies import (
    MAX_REGISTER_BODY,
    DataVersion,
    RegisterBrokerBody,
    TopicConfigWrapper,
    body_crc32,
)
from rocketstore.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    ResponseCode,
    ServerLimits,
    ServerStatistics,
)
from rocketstore.remoting import _server as remoting_server
from rocketstore.remoting._limits import TRIM_AFTER, BufferBudget, LogLimiter
from rocketstore.store._errors import StoreConfigError
from rocketstore.store.log._record import SYSFLAG_COMPRESSED, decode_message, encode_record
from support.broker import RunningBroker, heartbeat, pull_request, send_request
from support.remoting import WAIT, Served, closed_by_peer, raw_connect, read_command, serve
from support.waits import wait_dispatched, wait_until

MiB = 1024 * 1024
T = TypeVar("T")


def deflate_padded(data: bytes, zeros: int, *, gzip_format: bool = False) -> bytes:
    """``data`` and ``zeros`` zero bytes after it, deflated (a few KiB a GiB) without ever
    holding the zeros in memory."""
    c = zlib.compressobj(9, zlib.DEFLATED, GZIP if gzip_format else zlib.MAX_WBITS)
    out = [c.compress(data)]
    chunk = bytes(MiB)
    for _ in range(zeros // MiB):
        out.append(c.compress(chunk))
    out.append(c.compress(bytes(zeros % MiB)))
    out.append(c.flush())
    return b"".join(out)


# ---- the helper -------------------------------------------------------------------------------


def test_inflate_up_to_the_limit_and_not_a_byte_more() -> None:
    data = bytes(range(256)) * 40
    packed = zlib.compress(data)
    assert inflate(packed, len(data)) == data
    with pytest.raises(InflateLimitError, match=f"more than {len(data) - 1} bytes") as info:
        inflate(packed, len(data) - 1, what="the body")
    assert info.value.limit == len(data) - 1
    assert str(info.value).startswith("the body inflates")
    assert inflate(zlib.compress(b""), 0) == b""


@pytest.mark.parametrize("size", [MiB - 1, MiB, MiB + 1, 3 * MiB, 3 * MiB + 7])
def test_inflate_in_pieces_at_every_boundary(size: int) -> None:
    data = bytes(range(251)) * (size // 251) + bytes(size % 251)
    for wbits, packed in ((ZLIB_OR_GZIP, zlib.compress(data)), (GZIP, gzip.compress(data))):
        assert inflate(packed, size, wbits=wbits) == data
        with pytest.raises(InflateLimitError):
            inflate(packed, size - 1, wbits=wbits)
        with pytest.raises(InflateError, match="cut short"):
            inflate(packed[: len(packed) // 2], size, wbits=wbits)


def test_inflate_refuses_what_is_not_deflate_or_cut_short() -> None:
    packed = zlib.compress(b"hello world" * 100)
    with pytest.raises(InflateError, match="does not inflate"):
        inflate(b"not deflate at all", MiB)
    with pytest.raises(InflateError, match="cut short"):
        inflate(packed[:-6], MiB)
    with pytest.raises(InflateError):
        inflate(gzip.compress(b"x"), MiB)  # gzip where zlib is expected
    assert not isinstance(InflateError("x"), InflateLimitError)
    assert isinstance(InflateLimitError("x", 1), ValueError)


def test_inflate_gzip_and_its_members() -> None:
    assert inflate(gzip.compress(b"ab"), 2, wbits=GZIP) == b"ab"
    two = gzip.compress(b"ab") + gzip.compress(b"cd")
    assert inflate(two, 4, wbits=ZLIB_OR_GZIP) == b"abcd"
    with pytest.raises(InflateLimitError):  # the limit counts every member
        inflate(two, 3, wbits=ZLIB_OR_GZIP)
    assert inflate(zlib.compress(b"ab"), 2, wbits=ZLIB_OR_GZIP) == b"ab"


def test_a_bomb_stops_at_the_limit_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = deflate_padded(b"", 256 * MiB)
    assert len(bomb) < 300_000
    produced = count_inflated(monkeypatch)
    with pytest.raises(InflateLimitError):
        inflate(bomb, MiB)
    assert 0 < produced[0] <= 2 * MiB  # what 1 MiB takes, not 256 MiB


def count_inflated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the bytes every zlib inflater of rocketstore._inflate hands out (one total)."""
    import zlib

    from rocketstore import _inflate

    total = [0]

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def decompress(self, data: Any, max_length: int = 0) -> bytes:
            out = self.inner.decompress(data, max_length)
            total[0] += len(out)
            return out

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    class CountingZlib:
        def __getattr__(self, name: str) -> Any:
            return getattr(zlib, name)

        @staticmethod
        def decompressobj(*args: Any, **kw: Any) -> Counting:
            return Counting(zlib.decompressobj(*args, **kw))

    monkeypatch.setattr(_inflate, "zlib", CountingZlib())
    return total


# ---- message bodies ---------------------------------------------------------------------------


def compressed_message(packed: bytes) -> Any:
    raw = encode_record(topic="T", body=packed, sys_flag=SYSFLAG_COMPRESSED)
    return decode_message(raw, 0, len(raw))


def test_a_compressed_message_body_inflates_within_the_max_message_size() -> None:
    text = b"a body the producer compressed " * 200
    msg = compressed_message(zlib.compress(text))
    assert msg.decompressed_body() == text
    assert plain_body(msg).body == text
    assert plain_body(msg).sys_flag & SYSFLAG_COMPRESSED == 0

    bomb = compressed_message(deflate_padded(b"x", DEFAULT_MAX_BODY))
    with pytest.raises(InflateLimitError, match=f"more than {DEFAULT_MAX_BODY} bytes"):
        bomb.decompressed_body()
    with pytest.raises(InflateLimitError):
        plain_body(bomb)
    assert len(bomb.decompressed_body(DEFAULT_MAX_BODY + 1)) == DEFAULT_MAX_BODY + 1
    with pytest.raises(InflateError):
        compressed_message(b"\x78\x9cgarbage").decompressed_body()


def test_a_grpc_gzip_body_inflates_within_the_max_message_size() -> None:
    def message(body: bytes) -> pb.Message:
        m = pb.Message(body=body)
        m.system_properties.body_encoding = pb.GZIP
        return m

    assert decoded_body(message(gzip.compress(b"hello")), 5) == b"hello"
    assert decoded_body(message(zlib.compress(b"hello")), 5) == b"hello"
    for bomb in (
        deflate_padded(b"", 64 * MiB, gzip_format=True),
        deflate_padded(b"", 64 * MiB),
    ):
        with pytest.raises(GrpcError) as info:
            decoded_body(message(bomb), 4 * MiB)
        assert info.value.code == pb.Code.MESSAGE_BODY_TOO_LARGE
        assert "cannot exceed 4194304" in info.value.message
    with pytest.raises(GrpcError) as info:
        decoded_body(message(b"\x1f\x8bnot gzip"), MiB)
    assert info.value.code == pb.Code.MESSAGE_CORRUPTED


# ---- REGISTER_BROKER --------------------------------------------------------------------------


def run(main: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(main(), timeout))


def register_command(body: bytes, broker_name: str = "b") -> RemotingCommand:
    ext = {
        "brokerName": broker_name,
        "brokerAddr": f"127.0.0.1:{10911 + len(broker_name)}",
        "clusterName": "C",
        "haServerAddr": "127.0.0.1:2",
        "brokerId": "0",
        "compressed": "true",
        "bodyCrc32": str(body_crc32(body)),
    }
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)


def register_body(topic: str, padding: int = 0) -> bytes:
    """A compressed RegisterBrokerBody for ``topic``, followed by ``padding`` zero bytes (which
    a decoder that inflates everything reads past without a complaint)."""
    table = {topic: {"topicName": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}
    wrapper = TopicConfigWrapper(DataVersion(1_700_000_000_000, 1), table)
    raw = zlib.decompress(RegisterBrokerBody(wrapper).encode(compressed=True))
    return deflate_padded(raw, padding)


async def invoke(client: RemotingClient, addr: str, cmd: RemotingCommand) -> RemotingCommand:
    return await asyncio.to_thread(client.invoke, addr, cmd)


def test_a_zip_bomb_registration_is_refused_quickly_and_the_name_server_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bomb = register_body("Bomb", 2 * MAX_REGISTER_BODY)  # 128 MiB of zeros in some 130 KB

    inflated = count_inflated(monkeypatch)

    async def main() -> None:
        async with NameServer(port=0) as ns:
            with RemotingClient(timeout=60) as client:
                refused = await invoke(client, ns.address, register_command(bomb))
                assert refused.code == ResponseCode.SYSTEM_ERROR
                assert f"inflates to more than {MAX_REGISTER_BODY} bytes" in (refused.remark or "")
                assert inflated[0] <= 2 * MAX_REGISTER_BODY  # 64 MiB and a piece, not 128
                assert ns.routes.route("Bomb") is None
                ok = await invoke(client, ns.address, register_command(register_body("T"), "b2"))
                assert ok.code == ResponseCode.SUCCESS
                assert ns.routes.route("T") is not None

    run(main)


def test_the_register_body_limit_is_the_name_servers_to_set() -> None:
    async def main() -> None:
        async with NameServer(port=0, max_register_body=MiB) as ns:
            with RemotingClient(timeout=60) as client:
                big = await invoke(client, ns.address, register_command(register_body("A", MiB)))
                assert big.code == ResponseCode.SYSTEM_ERROR
                assert f"more than {MiB} bytes" in (big.remark or "")
                fits = register_body("B", MiB // 2)
                ok = await invoke(client, ns.address, register_command(fits, "b2"))
                assert ok.code == ResponseCode.SUCCESS
                assert ns.routes.route("A") is None and ns.routes.route("B") is not None

    run(main)


# ---- connections and what they hold ---------------------------------------------------------

ANSWER = 64 * 1024  # the body of every answer below


def big_answer(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
    return RemotingCommand.response(ResponseCode.SUCCESS, None, None, bytes(ANSWER))


def small_answer(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
    return RemotingCommand.response(ResponseCode.SUCCESS, None, {"got": str(len(cmd.body))})


BIG, SMALL, LATER = 1, 2, 3


def non_reader(address: str) -> socket.socket:
    """A connection with a small receive window, for a peer that never reads."""
    host, _, port = address.rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(WAIT)
    sock.connect((host, int(port)))
    return sock


def requests(code: int, n: int) -> bytes:
    return b"".join(RemotingCommand.request(code, {}).encode() for _ in range(n))


def stats(s: Served) -> ServerStatistics:
    return s.call(s.server.statistics)


class Sampler:
    """The largest ``buffered_bytes`` a server's statistics showed, sampled on its loop every
    few milliseconds (statistics count exactly; the loop runs nothing else meanwhile)."""

    def __init__(self, s: Served) -> None:
        self.peak = 0
        self._stop = False
        self._task = s.loop.submit(self._run(s.server))

    async def _run(self, server: RemotingServer) -> None:
        while not self._stop:
            self.peak = max(self.peak, server.statistics().buffered_bytes)
            await asyncio.sleep(0.002)

    def stop(self) -> int:
        self._stop = True
        self._task.result(WAIT)
        return self.peak


def round_trip(client: RemotingClient, address: str) -> float:
    start = time.perf_counter()
    answer = client.invoke(address, RemotingCommand.request(SMALL, {}, b"ping"))
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["got"] == "4"
    return time.perf_counter() - start


def test_connections_beyond_the_limit_are_closed_at_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # refusals are logged a few a minute in the whole process: another test's count is not ours
    monkeypatch.setattr(remoting_server, "_refusals_log", LogLimiter(remoting_server.log))
    limits = ServerLimits(max_connections=3)
    with caplog.at_level(logging.INFO), serve({SMALL: small_answer}, limits=limits) as s:
        clients = [RemotingClient(timeout=60) for _ in range(3)]
        try:
            for c in clients:
                round_trip(c, s.address)
            extra = [raw_connect(s.address) for _ in range(5)]
            assert all(closed_by_peer(sock, 60) for sock in extra)
            for sock in extra:
                sock.close()
            assert stats(s).refused_connections == 5
            assert stats(s).connections == 3
            clients.pop().close()
            deadline = time.monotonic() + WAIT
            while s.connection_count() > 2:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            with RemotingClient(timeout=60) as again:  # room again
                round_trip(again, s.address)
        finally:
            for c in clients:
                c.close()
    refusals = [r for r in caplog.records if "refusing a connection" in r.getMessage()]
    assert 1 <= len(refusals) <= 5
    assert "3 connections open (max_connections)" in refusals[0].getMessage()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_non_readers_hold_no_more_than_the_budget_and_a_good_client_is_served(loop: str) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    limits = ServerLimits(
        write_high_water=512 * 1024,
        write_low_water=128 * 1024,
        max_buffered_per_connection=2 * MiB,
        max_buffered_total=4 * MiB,
    )
    with serve({BIG: big_answer, SMALL: small_answer}, loop=loop, limits=limits) as s:
        sampler = Sampler(s)
        bad = [non_reader(s.address) for _ in range(20)]
        try:
            with RemotingClient(timeout=60) as good:
                burst = requests(BIG, 200)  # 12.5 MiB of answers each
                slowest = 0.0
                for sock in bad:
                    sock.sendall(burst)
                    slowest = max(slowest, round_trip(good, s.address))
                deadline = time.monotonic() + WAIT
                while stats(s).closed_over_budget < len(bad) // 2:
                    assert time.monotonic() < deadline, stats(s)
                    slowest = max(slowest, round_trip(good, s.address))
                    time.sleep(0.01)
                # the good client was answered every time (within its timeout) all along
                assert slowest > 0.0
                assert stats(s).buffered_bytes <= limits.max_buffered_total
        finally:
            for sock in bad:
                sock.close()
            peak = sampler.stop()
        assert 0 < peak <= limits.max_buffered_total
        deadline = time.monotonic() + WAIT
        while stats(s).connections:  # the bad ones are gone, and what they held with them
            assert time.monotonic() < deadline, stats(s)
            time.sleep(0.01)
        after = stats(s)
        assert after.buffered_bytes == 0 and after.unsent_bytes == 0
        assert s.call(lambda: s.server.budget.total) == 0


def test_a_connection_over_its_share_is_aborted() -> None:
    release: list[asyncio.Future[None]] = []

    async def later(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fut = asyncio.get_running_loop().create_future()
        release.append(fut)
        await fut
        return big_answer(cmd, conn)

    limits = ServerLimits(max_buffered_per_connection=2 * MiB)
    with serve({LATER: later, SMALL: small_answer}, limits=limits) as s:
        sock = non_reader(s.address)
        try:
            sock.sendall(requests(LATER, 300))  # answered all at once: 18.75 MiB
            deadline = time.monotonic() + WAIT
            while s.call(lambda: len(release)) < 300:
                assert time.monotonic() < deadline
                time.sleep(0.01)

            def answer_all() -> None:
                for fut in release:
                    fut.set_result(None)

            s.call(answer_all)
            assert closed_by_peer(sock, 60)
            assert stats(s).closed_over_budget == 1
            with RemotingClient(timeout=60) as good:
                round_trip(good, s.address)
        finally:
            sock.close()


def test_a_connection_that_does_not_take_its_answers_is_closed_after_the_stall_timeout() -> None:
    limits = ServerLimits(write_high_water=256 * 1024, write_stall_timeout=0.3)
    with serve({BIG: big_answer, SMALL: small_answer}, limits=limits) as s:
        sock = non_reader(s.address)
        try:
            start = time.monotonic()
            sock.sendall(requests(BIG, 300))
            while not stats(s).closed_stalled:  # (reading here would end the stall)
                assert time.monotonic() - start < WAIT
                time.sleep(0.02)
            assert time.monotonic() - start >= 0.3
            assert closed_by_peer(sock, 60)
            assert stats(s).closed_stalled == 1 and stats(s).closed_over_budget == 0
            with RemotingClient(timeout=60) as good:
                round_trip(good, s.address)
        finally:
            sock.close()


def test_an_announced_frame_gets_no_buffer_beyond_the_budget() -> None:
    limits = ServerLimits(
        write_high_water=256 * 1024,
        max_buffered_per_connection=8 * MiB,
        max_buffered_total=8 * MiB,
    )
    with serve({SMALL: small_answer}, limits=limits) as s:
        socks = [raw_connect(s.address) for _ in range(20)]
        try:
            for sock in socks:  # 4 MiB frames, 16 KiB of each sent (without a budget each
                # would have its 4 MiB buffer once the first read buffer is full: 80 MiB)
                sock.sendall(struct.pack(">ii", 4 * MiB, 20) + bytes(16 * 1024))
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                assert stats(s).buffered_bytes <= limits.max_buffered_total
                time.sleep(0.02)
            assert stats(s).connections == 20
            with RemotingClient(timeout=60) as good:  # a whole large frame still goes through
                big = RemotingCommand.request(SMALL, {}, bytes(3 * MiB))
                assert good.invoke(s.address, big).ext_fields["got"] == str(3 * MiB)
        finally:
            for sock in socks:
                sock.close()


def test_idle_connections_let_their_large_read_buffers_go() -> None:
    limits = ServerLimits(write_stall_timeout=0.4)  # the sweep runs every 0.1 s
    with serve({SMALL: small_answer}, idle_timeout=None, limits=limits) as s:
        socks = [raw_connect(s.address) for _ in range(20)]
        try:
            frame = RemotingCommand.request(SMALL, {}, bytes(70_000)).encode()
            for sock in socks:
                sock.sendall(frame)
                answer = read_command(sock)
                assert answer is not None and answer.ext_fields["got"] == "70000"
            deadline = time.monotonic() + WAIT
            while stats(s).read_buffer_bytes > 20 * 8 * 1024:
                assert time.monotonic() < deadline, stats(s)
                time.sleep(0.02)
            for sock in socks:  # and they still read what comes
                sock.sendall(frame)
                answer = read_command(sock)
                assert answer is not None and answer.ext_fields["got"] == "70000"
        finally:
            for sock in socks:
                sock.close()


def test_server_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        ServerLimits(max_connections=0)
    with pytest.raises(ValueError, match="write_low_water"):
        ServerLimits(write_low_water=2 * MiB)
    with pytest.raises(ValueError, match="max_buffered_total"):
        ServerLimits(max_buffered_total=MiB)


# ---- a broker and fifty clients that never read -----------------------------------------------


def test_a_broker_keeps_non_readers_within_its_budget_and_serves_others(tmp_path: Path) -> None:
    bad_count = 50
    budget = 8 * MiB
    broker = RunningBroker(
        tmp_path / "b",
        store={},
        broker={"max_connections": bad_count + 1, "max_buffered_bytes": budget},
    )
    bad: list[socket.socket] = []
    try:
        assert broker.controller is not None
        server = broker.controller.server
        consumers = broker.controller.consumers

        def broker_stats() -> ServerStatistics:
            return broker.run(_call(server.statistics))

        with RemotingClient(timeout=60) as good:
            for _ in range(64):  # a pull of 32 answers with some 130 KiB
                sent = good.invoke(broker.addr, send_request("T", bytes(4096), queue_id=0))
                assert sent.code == ResponseCode.SUCCESS
            wait_dispatched(broker.controller.store)

            def served() -> float:
                start = time.perf_counter()
                r = good.invoke(
                    broker.addr, RemotingCommand.request(30, {"topic": "T", "queueId": "0"})
                )
                assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "64"
                return time.perf_counter() - start

            served()
            bad = [non_reader(broker.addr) for _ in range(bad_count)]
            for sock in bad:  # established: a whole frame sent (a connection that has sent
                # none gives its place to a new one)
                sock.sendall(RemotingCommand.request(30, {"topic": "T", "queueId": "0"}).encode())

            def established() -> int:
                return int(
                    broker.run(_call(lambda: sum(c.established for c in server.connections)))
                )

            assert wait_until(lambda: established() == bad_count + 1)
            extra = raw_connect(broker.addr)  # one more than max_connections
            assert closed_by_peer(extra, 60)
            extra.close()
            assert broker_stats().refused_connections == 1

            sampler = _BrokerSampler(broker, server)
            burst = heartbeat("bad", "BAD", "T").encode() + b"".join(
                pull_request("T", 0, 0, group="BAD").encode() for _ in range(60)
            )
            slowest = 0.0
            for sock in bad:
                sock.sendall(burst)
                slowest = max(slowest, served())
            deadline = time.monotonic() + 60
            while broker_stats().closed_over_budget < bad_count // 2:
                assert time.monotonic() < deadline, broker_stats()
                slowest = max(slowest, served())
                time.sleep(0.02)
            assert slowest < 2.0, slowest
            peak = sampler.stop()
            assert 0 < peak <= budget, peak

            for sock in bad:
                sock.close()
            deadline = time.monotonic() + 60
            while broker_stats().connections > 1:
                assert time.monotonic() < deadline, broker_stats()
                time.sleep(0.02)
            after = broker_stats()
            assert after.buffered_bytes == 0
            assert consumers.channels("BAD") == []
            assert broker.run(_call(lambda: server.budget.total)) == 0
            served()
    finally:
        for sock in bad:
            sock.close()
        broker.stop()


async def _call(fn: Callable[[], T]) -> T:
    return fn()


class _BrokerSampler:
    """The largest ``buffered_bytes`` of a broker's server, sampled on its loop."""

    def __init__(self, broker: RunningBroker, server: RemotingServer) -> None:
        self.peak = 0
        self._stop = False
        self._future = asyncio.run_coroutine_threadsafe(self._run(server), broker.loop)

    async def _run(self, server: RemotingServer) -> None:
        while not self._stop:
            self.peak = max(self.peak, server.statistics().buffered_bytes)
            await asyncio.sleep(0.002)

    def stop(self) -> int:
        self._stop = True
        self._future.result(WAIT)
        return self.peak


def test_freed_memory_goes_back_to_the_system_once_enough_was_let_go() -> None:
    trims: list[int] = []
    budget = BufferBudget(ServerLimits(), [], "test", trim=lambda: trims.append(1))
    budget.total = 1  # a connection still holds something
    budget.released = TRIM_AFTER - 1
    assert not budget.maybe_trim() and trims == []
    budget.released += 1
    assert budget.maybe_trim() and trims == [1]
    assert budget.released == 0 and not budget.maybe_trim()
    # less than TRIM_AFTER goes back too once the connections hold nothing
    budget.released = 1024
    budget.reserved = 10
    budget.total = 0
    assert not budget.maybe_trim() and trims == [1]
    budget.reserved = 0
    assert budget.maybe_trim() and trims == [1, 1]
    assert not budget.maybe_trim()  # nothing let go since
    assert not BufferBudget(ServerLimits(), [], "test", trim=None).maybe_trim()


def test_the_brokers_limits_come_from_its_config() -> None:
    store = StoreConfig(
        extra=(("serverMaxConnections", "500"), ("serverMaxBufferedBytes", "8388608"))
    )
    config = BrokerConfig.from_store_config(store)
    limits = config.server_limits()
    assert (limits.max_connections, limits.max_buffered_total) == (500, 8 * MiB)
    assert limits.max_buffered_per_connection == 8 * MiB
    assert BrokerConfig().server_limits() == ServerLimits()
    with pytest.raises(StoreConfigError, match="max_connections"):
        BrokerConfig(max_connections=0)
    with pytest.raises(StoreConfigError, match="max_buffered_bytes"):
        BrokerConfig(max_buffered_bytes=1000)


def test_a_connection_stops_being_read_at_its_limit_of_requests_in_flight() -> None:
    waiting: list[asyncio.Future[RemotingCommand]] = []

    def later(cmd: RemotingCommand, conn: Connection) -> asyncio.Future[RemotingCommand]:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        waiting.append(fut)
        return fut

    def answer(n: int) -> None:
        for fut in [f for f in waiting if not f.done()][:n]:
            fut.set_result(RemotingCommand.response(ResponseCode.SUCCESS))

    def count() -> int:
        return s.call(lambda: len(waiting))

    def settle(expected: int) -> None:
        deadline = time.monotonic() + WAIT
        while count() != expected:
            assert time.monotonic() < deadline, count()
            time.sleep(0.01)
        time.sleep(0.1)  # and no more arrive
        assert count() == expected

    with serve({LATER: later, SMALL: small_answer}, limits=ServerLimits(max_in_flight=10)) as s:
        sock = raw_connect(s.address)
        try:
            sock.sendall(requests(LATER, 50) + RemotingCommand.request(SMALL, {}).encode())
            settle(10)  # ten in flight, the rest not read
            with RemotingClient(timeout=60) as other:  # other connections are served
                round_trip(other, s.address)
            s.call(lambda: answer(2))
            settle(10)  # 8 in flight: still more than three quarters
            s.call(lambda: answer(1))
            settle(13)  # 7: read again, up to 10 in flight
            for _ in range(20):
                s.call(lambda: answer(10))
            settle(50)
            s.call(lambda: answer(50))
            codes = [read_command(sock) for _ in range(51)]
            assert all(c is not None and c.code == ResponseCode.SUCCESS for c in codes)
            assert [c.ext_fields for c in codes if c is not None].count({"got": "0"}) == 1
        finally:
            sock.close()


def test_held_pulls_go_with_their_connection(tmp_path: Path) -> None:
    broker = RunningBroker(tmp_path / "b", store={}, broker={})
    try:
        assert broker.controller is not None
        holds = broker.controller.holds
        with RemotingClient(timeout=60) as client:
            assert client.invoke(broker.addr, send_request("T")).code == ResponseCode.SUCCESS
        # the pulls wait past the message: dispatch must have put it in its new queue first
        wait_dispatched(broker.controller.store)
        sock = raw_connect(broker.addr)
        burst = heartbeat("c", "G", "T").encode() + b"".join(
            pull_request("T", 0, 1, group="G", suspend_ms=60_000).encode() for _ in range(100)
        )
        sock.sendall(burst)

        def held() -> int:
            return broker.run(_call(lambda: holds.statistics().held))

        deadline = time.monotonic() + WAIT
        while held() < 100:
            assert time.monotonic() < deadline, held()
            time.sleep(0.01)
        sock.close()
        while held():  # not the 60 s of their suspend
            assert time.monotonic() < deadline, held()
            time.sleep(0.01)
        assert broker.run(_call(lambda: holds.statistics().cancelled)) == 100
    finally:
        broker.stop()
