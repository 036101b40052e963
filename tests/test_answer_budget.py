"""Large answers are counted against the server's memory budget before they are built: clients
that pipeline requests for large answers and never read them keep the broker's accounted bytes
within its budget and its memory within the budget and a baseline, another client is served
meanwhile, and the memory goes back once they close. Through a real broker (remoting)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from rocketstore.server._run import _settle_allocator
from rocketstore.store.log._record import decode_message
from support.broker import RunningBroker, send_request
from support.memory import MiB, PeakRss, rss, settled_rss
from support.remoting import WAIT
from support.waits import wait_dispatched

T = TypeVar("T")


class Peaks:
    """The largest RSS of this process, sampled by a thread every few milliseconds, and the
    largest accounted bytes of a broker's server, sampled on its loop."""

    def __init__(self, broker: RunningBroker) -> None:
        assert broker.controller is not None
        self.server = broker.controller.server
        self.accounted = 0
        self._rss = PeakRss(interval=0.002)
        self._stop = threading.Event()
        self._future = asyncio.run_coroutine_threadsafe(self._sample_budget(), broker.loop)

    @property
    def rss(self) -> int:
        return self._rss.peak

    async def _sample_budget(self) -> None:
        while not self._stop.is_set():
            self.accounted = max(self.accounted, self.server.statistics().buffered_bytes)
            await asyncio.sleep(0.002)

    def stop(self) -> None:
        self._stop.set()
        self._rss.stop()
        self._future.result(WAIT)


async def _call(fn: Callable[[], T]) -> T:
    return fn()


def non_reader(address: str, burst: bytes) -> socket.socket:
    """A connection with a small receive window that sends ``burst`` and never reads."""
    host, _, port = address.rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(WAIT)
    sock.connect((host, int(port)))
    sock.sendall(burst)
    return sock


def test_pipelined_views_of_a_large_message_stay_within_the_budget(tmp_path: Path) -> None:
    """60 connections each pipeline 30 VIEW_MESSAGE_BY_ID of a 512 KiB message (900 MiB of
    answers) and never read, against a broker with a 16 MiB budget."""
    budget = 16 * MiB
    _settle_allocator()  # as serve does on its way up
    broker = RunningBroker(
        tmp_path / "b", store={}, broker={"max_buffered_bytes": budget, "max_connections": 100}
    )
    bad: list[socket.socket] = []
    try:
        assert broker.controller is not None
        server = broker.controller.server
        body = bytes(range(256)) * 2048  # 512 KiB
        with RemotingClient(timeout=10) as good:
            sent = good.invoke(broker.addr, send_request("Big", body))
            assert sent.code == ResponseCode.SUCCESS
            phys = int(sent.ext_fields["msgId"][-16:], 16)
            wait_dispatched(broker.controller.store)  # in its new queue: answered before that

            def view() -> bytes:
                r = good.invoke(broker.addr, RemotingCommand.request(33, {"offset": str(phys)}))
                assert r.code == ResponseCode.SUCCESS, r.remark
                raw = bytes(r.body)
                return decode_message(raw, 0, len(raw)).body

            def max_offset() -> None:
                r = good.invoke(
                    broker.addr, RemotingCommand.request(30, {"topic": "Big", "queueId": "0"})
                )
                assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "1"

            assert view() == body
            baseline = settled_rss()
            peaks = Peaks(broker)
            try:
                burst = b"".join(
                    RemotingCommand.request(33, {"offset": str(phys)}).encode() for _ in range(30)
                )
                for i, _ in enumerate(range(60)):
                    bad.append(non_reader(broker.addr, burst))
                    if i % 10 == 9:  # another client is served meanwhile, small and large
                        max_offset()
                        assert view() == body

                bound = baseline + budget + 96 * MiB
                deadline = time.monotonic() + 120
                while peaks.accounted < budget * 3 // 4 and peaks.rss <= bound:
                    assert time.monotonic() < deadline, broker.run(_call(server.statistics))
                    time.sleep(0.05)
                for _ in range(5):
                    max_offset()
                    assert view() == body
            finally:
                peaks.stop()
            # what the server counted never passed its budget, nor its memory the budget
            # above where it started (and a generous margin for the allocator)
            assert peaks.rss <= bound, (
                f"RSS {peaks.rss / MiB:.0f} MiB, baseline {baseline / MiB:.0f} MiB"
            )
            assert 0 < peaks.accounted <= budget, peaks.accounted
            assert broker.run(_call(lambda: server.budget.waited)) > 0  # requests waited

            for sock in bad:
                sock.close()
            bad = []
            deadline = time.monotonic() + 30
            while broker.run(_call(lambda: len(server.connections))) > 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            budget_now = broker.run(_call(lambda: (server.budget.total, server.budget.reserved)))
            assert budget_now == (0, 0)
            # and the memory the answers held goes back (within the budget of the baseline)
            deadline = time.monotonic() + 120
            while rss() > baseline + budget:
                assert time.monotonic() < deadline, f"RSS {rss() / MiB:.0f} MiB after the close"
                time.sleep(0.1)
            assert broker.run(_call(lambda: len(server.budget.waiting))) == 0
            assert view() == body  # and it serves on
    finally:
        for sock in bad:
            sock.close()
        broker.stop()


# ---- gRPC: receive answers ----------------------------------------------------------------------


def test_grpc_receives_take_room_before_they_read_and_answer_within_their_cap(
    tmp_path: Path,
) -> None:
    """A topic of 400 KiB messages; receives for 32 each, answers capped at 1 MiB and 3 MiB in
    all: streams that are not read keep their room until they end, the others wait for room
    (never past the budget), and every answer holds at most the cap (at least a message)."""
    import grpc

    from rocketstore.grpc._pb import service_pb2_grpc
    from support.grpc_broker import MD, TEST_GRPC_CONFIG, BrokerThread, receive, send_ok

    cap, total = 1 * MiB, 3 * MiB
    config = TEST_GRPC_CONFIG.replace(max_receive_bytes=cap, max_buffered_bytes=total)
    b = BrokerThread(tmp_path / "g", grpc_config=config).start()
    channels: list[grpc.Channel] = []
    try:
        body = bytes(range(256)) * 1600  # 400 KiB
        with grpc.insecure_channel(b.grpc_address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            for _ in range(24):
                send_ok(stub, "BigG", body)
            wait_dispatched(b.broker.store)  # in its queues (answered before dispatch)
            # (a send takes room for a request of the largest size before it reads: the
            # budget is the front end's, sends' and receives' alike; the receives' peak here)
            b.run(lambda: setattr(b.grpc.room, "peak", 0))
            # streams nobody reads (each on a connection of its own, its flow-control window
            # kept at 64 KiB): they fill the room and keep it, the ones past it wait for room
            unread = []
            for _ in range(6):
                ch = grpc.insecure_channel(b.grpc_address, options=[("grpc.http2.bdp_probe", 0)])
                channels.append(ch)
                req = _receive_request("GBig", "BigG", poll_ms=2_000)
                unread.append(
                    service_pb2_grpc.MessagingServiceStub(ch).ReceiveMessage(
                        req, metadata=MD, timeout=120
                    )
                )
            pops = b.grpc.service.pops
            deadline = time.monotonic() + 60
            while b.run(lambda: pops.room.waited) == 0:
                assert time.monotonic() < deadline, b.run(lambda: (pops.room.taken, pops.room.peak))
                time.sleep(0.05)
            assert b.run(lambda: pops.room.taken) > 2 * cap  # kept while nobody reads them
            for call in unread:  # they end: their room goes back
                call.cancel()
            # a reader is served: at most the cap, at least one message
            got: list[int] = []
            deadline = time.monotonic() + 60
            while sum(got) < 2 and time.monotonic() < deadline:
                _st, messages, _kinds = receive(
                    stub, "GBig", "BigG", poll_ms=3_000, timeout=15, invisible_ms=60_000
                )
                assert sum(len(m.body) for m in messages) <= cap or len(messages) == 1
                got.append(len(messages))
            assert sum(got) >= 2, got
        peak, waited = b.run(lambda: (pops.room.peak, pops.room.waited))
        assert 2 * cap < peak <= total and waited > 0  # full, never past it: others waited
        deadline = time.monotonic() + 30
        while b.run(lambda: pops.room.taken) != 0:
            assert time.monotonic() < deadline, b.run(lambda: pops.room.taken)
            time.sleep(0.05)
    finally:
        for ch in channels:
            ch.close()
        b.close()


def _receive_request(group: str, topic: str, *, poll_ms: int) -> object:
    from rocketstore.grpc._pb import definition_pb2 as pb
    from rocketstore.grpc._pb import service_pb2 as spb

    req = spb.ReceiveMessageRequest(batch_size=32)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.filter_expression.type = pb.TAG  # type: ignore[assignment]
    req.filter_expression.expression = "*"
    req.invisible_duration.FromMilliseconds(60_000)
    req.long_polling_timeout.FromMilliseconds(poll_ms)
    return req


# ---- the console's HTTP answers -----------------------------------------------------------------


def test_console_answers_count_before_they_are_built_and_unread_ones_are_cut() -> None:
    """The console's HTTP server, 6 MiB answers (more than a socket's buffers take), 24 MiB in
    all: 16 clients that ask and never read hold at most the budget (the handler runs only with
    room taken), are cut once their answer has waited a second, and a client that reads is
    answered meanwhile."""
    from rocketstore.console._http import HttpServer, Request, Response

    budget, room = 24 * MiB, 6 * MiB
    built = [0, 0]  # answers being built now, the most at once

    async def big(request: Request) -> Response:
        built[0] += 1
        built[1] = max(built[1], built[0])
        try:
            await asyncio.sleep(0.01)
            return Response(200, bytes(6 * MiB), "application/octet-stream")
        finally:
            built[0] -= 1

    async def scenario() -> tuple[int, int, int, int, list[bytes]]:
        server = HttpServer(
            big, "127.0.0.1", 0, max_buffered=budget, answer_room=room, write_timeout_s=1.0
        )
        await server.start()
        unread = []
        try:
            for _ in range(16):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.setblocking(False)
                await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
                await asyncio.get_running_loop().sock_sendall(sock, b"GET /x HTTP/1.1\r\n\r\n")
                unread.append(sock)
            answers = []
            for _ in range(3):  # a client that reads its answers
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(b"GET /x HTTP/1.1\r\n\r\n")
                answers.append(await asyncio.wait_for(reader.read(), 30))
                writer.close()
            for _ in range(3000):  # every unread answer cut, its room back
                if server.cut >= 8 and server.room.taken == 0 and not server._tasks:
                    break
                await asyncio.sleep(0.01)
            return server.room.peak, server.room.taken, server.cut, built[1], answers
        finally:
            for sock in unread:
                sock.close()
            await server.close()

    peak, taken, cut, most_built, answers = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert 0 < peak <= budget and taken == 0
    assert most_built <= budget // room
    assert cut >= 8
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 200 ") and len(answer) > 6 * MiB
