"""The asyncio client's connections time their requests with one timer each: every request still
fails at its own deadline (shorter timeouts after longer ones included), answered requests are
not failed, the timer stops when nothing is in flight, and a lost connection fails what waits."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rocketstore.remoting import AsyncRemotingClient, RemotingCommand, RemotingError
from rocketstore.remoting._client import ClientConnection
from rocketstore.remoting._command import decode_frame
from support.remoting import run_on as run

pytestmark = pytest.mark.timeout(60)
LOOPS = ["asyncio", "uvloop"]


class Answering(asyncio.Protocol):
    """Answers requests of code 1 at once (the remark: the request's opaque), of code 3 in
    pieces with a large body, of code 4 two at a time in one write, of code 5 after a request
    of its own (code 40), of code 6 with a frame that is no command; others never. Keeps the
    requests, and what the client sends that is no request (its answers to code 40)."""

    def __init__(self, peers: list[Answering]) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.held: list[bytes] = []
        self.requests: list[RemotingCommand] = []
        self.answers: list[RemotingCommand] = []
        self.tasks: set[asyncio.Future[None]] = set()
        peers.append(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 4:
            (length,) = struct.unpack_from(">i", self.buf, 0)
            if len(self.buf) < 4 + length:
                return
            cmd = decode_frame(bytes(self.buf[4 : 4 + length]))
            del self.buf[: 4 + length]
            if cmd.is_response:
                self.answers.append(cmd)
                continue
            self.requests.append(cmd)
            r = RemotingCommand.response(0, str(cmd.opaque))
            r.opaque = cmd.opaque
            assert self.transport is not None
            if cmd.code == 1:
                self.transport.write(r.encode())
            elif cmd.code == 3:  # the answer in pieces, a large body
                r.body = bytes(range(256)) * 400
                self.tasks.add(asyncio.ensure_future(self.pieces(r.encode())))
            elif cmd.code == 5:  # a request to the client first, then the answer
                ask = RemotingCommand.request(40, {"from": "server"})
                self.transport.write(ask.encode())
                self.transport.write(r.encode())
            elif cmd.code == 6:  # a frame that is no command: the client closes the connection
                self.transport.write(struct.pack(">ii", 8, 4) + b"nope")
            elif cmd.code == 4:  # held until the next code 4: both answers in one write
                self.held.append(r.encode())
                if len(self.held) == 2:
                    self.transport.write(b"".join(self.held))
                    self.held.clear()

    async def pieces(self, data: bytes) -> None:
        assert self.transport is not None
        for cut in (0, 3, 9, 5000, len(data) - 1):
            nxt = {0: 3, 3: 9, 9: 5000, 5000: len(data) - 1, len(data) - 1: len(data)}[cut]
            self.transport.write(data[cut:nxt])
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def peer() -> AsyncIterator[tuple[str, list[Answering]]]:
    peers: list[Answering] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Answering(peers), "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}", peers
    finally:
        server.close()
        for p in peers:
            if p.transport is not None:
                p.transport.abort()
        await server.wait_closed()


async def timed(conn: Any, code: int, timeout: float) -> tuple[float, str]:
    start = time.monotonic()
    try:
        r = await conn.invoke(RemotingCommand.request(code), timeout)
    except RemotingError as exc:
        return time.monotonic() - start, str(exc)
    return time.monotonic() - start, f"answered {r.remark}"


@pytest.mark.parametrize("kind", LOOPS)
def test_each_request_fails_at_its_own_deadline(kind: str) -> None:
    async def main() -> tuple[list[tuple[float, str]], int, bool]:
        async with peer() as (address, _):
            client = AsyncRemotingClient(signer=None)
            try:
                conn = await client.connection(address)
                assert isinstance(conn, ClientConnection)
                results = await asyncio.gather(
                    timed(conn, 2, 0.6),
                    timed(conn, 2, 0.2),  # shorter than the one before: the timer moves up
                    timed(conn, 1, 0.2),  # answered
                    timed(conn, 2, 0.4),
                )
                return list(results), len(conn._deadlines), conn._timer is None
            finally:
                client.close()

    results, left, stopped = run(kind, main())
    (t1, e1), (t2, e2), (t3, e3), (t4, e4) = results
    assert 0.55 <= t1 < 1.5 and "code 2 in 0.6 s" in e1
    assert 0.15 <= t2 < 0.5 and "code 2 in 0.2 s" in e2
    assert t3 < 0.2 and e3.startswith("answered ")
    assert 0.35 <= t4 < 1.0 and "code 2 in 0.4 s" in e4
    assert left == 0
    assert stopped


@pytest.mark.parametrize("kind", LOOPS)
def test_answered_requests_are_not_failed_and_later_ones_still_time_out(kind: str) -> None:
    async def main() -> tuple[list[str], tuple[float, str]]:
        async with peer() as (address, _):
            client = AsyncRemotingClient(signer=None)
            try:
                conn = await client.connection(address)
                answers = []
                for _ in range(50):
                    r = await conn.invoke(RemotingCommand.request(1), 0.3)
                    answers.append(r.remark or "")
                await asyncio.sleep(0.35)  # past the first deadline: the timer found none due
                late = await timed(conn, 2, 0.2)
                return answers, late
            finally:
                client.close()

    answers, (took, error) = run(kind, main())
    assert len(answers) == 50 and all(a.isdigit() for a in answers)
    # timed out by the timer (not failed early, not left hanging)
    assert took >= 0.15 and "in 0.2 s" in error


@pytest.mark.parametrize("kind", LOOPS)
def test_a_lost_connection_fails_the_requests_in_flight_and_stops_the_timer(kind: str) -> None:
    async def main() -> tuple[list[tuple[float, str]], bool, int]:
        async with peer() as (address, peers):
            client = AsyncRemotingClient(signer=None)
            try:
                conn = await client.connection(address)
                waits = [asyncio.ensure_future(timed(conn, 2, 50.0)) for _ in range(3)]
                while not peers or len(peers[0].requests) < 3:  # in flight: the peer has them
                    await asyncio.sleep(0.01)
                assert peers[0].transport is not None
                peers[0].transport.close()
                results = await asyncio.gather(*waits)
                assert isinstance(conn, ClientConnection)
                return list(results), conn._timer is None, len(conn._deadlines)
            finally:
                client.close()

    results, stopped, left = run(kind, main())
    for _took, error in results:
        assert "closed" in error  # failed by the close, not timed out ("in 50.0 s")
    assert stopped and left == 0


def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    async def main() -> tuple[int, int, str]:
        async with peer() as (address, _):
            client = AsyncRemotingClient(signer=None)
            try:
                conn = await client.connection(address)
                assert isinstance(conn, ClientConnection)
                wait = asyncio.ensure_future(conn.invoke(RemotingCommand.request(2), 5.0))
                await asyncio.sleep(0.05)
                wait.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await wait
                r = await conn.invoke(RemotingCommand.request(1), 1.0)
                return len(conn._deadlines), len(conn._pending), r.remark or ""
            finally:
                client.close()

    deadlines, pending, remark = run("asyncio", main())
    assert deadlines == 0 and pending == 0 and remark.isdigit()


@pytest.mark.parametrize("kind", LOOPS)
def test_answers_in_pieces_and_several_in_one_read_reach_their_waiters(kind: str) -> None:
    async def main() -> tuple[list[RemotingCommand], list[RemotingCommand], int]:
        async with peer() as (address, _):
            client = AsyncRemotingClient(signer=None)
            try:
                conn = await client.connection(address)
                pieces = [await conn.invoke(RemotingCommand.request(3), 5.0) for _ in range(2)]
                pairs = await asyncio.gather(
                    *(conn.invoke(RemotingCommand.request(4), 5.0) for _ in range(4))
                )
                r = await conn.invoke(RemotingCommand.request(1), 5.0)
                assert r.remark is not None
                return pieces, list(pairs), conn.read_buffer_size
            finally:
                client.close()

    pieces, pairs, buffer_size = run(kind, main())
    assert len(pieces) == 2 and len(pairs) == 4
    for r in pieces + pairs:
        assert r.code == 0 and r.is_response
    assert all(r.body == bytes(range(256)) * 400 for r in pieces)
    assert len({r.remark for r in pieces + pairs}) == 6
    assert buffer_size <= 64 * 1024  # the large answers' buffer was let go


def _encoded(code: int, body: bytes = b"") -> tuple[bytes, bytes, int]:
    cmd = RemotingCommand.request(code, {"k": "v"}, body)
    head, _ = cmd.encode_parts()
    return head, body, cmd.opaque


@pytest.mark.parametrize("kind", LOOPS)
def test_encoded_requests_are_answered_timed_and_refused_like_commands(kind: str) -> None:
    async def main() -> dict[str, Any]:
        async with peer() as (address, peers):
            client = AsyncRemotingClient(signer=None)
            out: dict[str, Any] = {}
            try:
                conn = await client.connection(address)
                head, body, opaque = _encoded(1, b"small")
                r = await conn.invoke_encoded(head, body, opaque, 1, 2.0)
                out["small"] = (r.remark, opaque)
                head, body, opaque = _encoded(1, bytes(100_000))
                r = await conn.invoke_encoded(head, body, opaque, 1, 2.0)
                out["large"] = (r.remark, opaque)
                head, body, opaque = _encoded(2)
                wait = asyncio.ensure_future(conn.invoke_encoded(head, body, opaque, 2, 0.3))
                await asyncio.sleep(0.05)
                try:
                    await conn.invoke_encoded(head, body, opaque, 2, 0.3)
                except ValueError as exc:
                    out["twice"] = str(exc)
                out["late"] = await asyncio.gather(wait, return_exceptions=True)
                out["left"] = (len(conn._deadlines), len(conn._pending))
                assert peers[0].transport is not None
                peers[0].transport.close()
                await asyncio.sleep(0.1)
                head, body, opaque = _encoded(1)
                try:
                    await conn.invoke_encoded(head, body, opaque, 1, 1.0)
                except RemotingError as exc:
                    out["closed"] = str(exc)
            finally:
                client.close()
            return out

    out = run(kind, main())
    assert out["small"][0] == str(out["small"][1])
    assert out["large"][0] == str(out["large"][1])
    assert "in flight" in out["twice"]
    (late,) = out["late"]
    assert isinstance(late, RemotingError) and "code 2 in 0.3 s" in str(late)
    assert out["left"] == (0, 0)
    assert "closed" in out["closed"]


@pytest.mark.parametrize("kind", LOOPS)
def test_requests_from_the_server_reach_the_handlers_and_bad_frames_close(kind: str) -> None:
    async def main() -> tuple[list[Any], str, list[RemotingCommand], str]:
        asked: list[Any] = []

        def handler(cmd: RemotingCommand, conn: Any) -> RemotingCommand:
            asked.append(cmd.ext_fields.get("from"))
            return RemotingCommand.response(0, "handled")

        async with peer() as (address, peers):
            client = AsyncRemotingClient({40: handler}, signer=None)
            try:
                conn = await client.connection(address)
                r = await conn.invoke(RemotingCommand.request(5), 5.0)
                for _ in range(100):
                    if peers[0].answers:
                        break
                    await asyncio.sleep(0.01)
                try:
                    await conn.invoke(RemotingCommand.request(6), 5.0)
                    closed = "no error"
                except RemotingError as exc:
                    closed = str(exc)
                return asked, r.remark or "", peers[0].answers, closed
            finally:
                client.close()

    asked, remark, answers, closed = run(kind, main())
    assert asked == ["server"]
    assert remark.isdigit()
    assert [a.remark for a in answers] == ["handled"]
    assert "closed" in closed
