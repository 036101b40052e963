"""Remoting's hot path: an echo server answering send-shaped requests, measured from clients.

    python benchmarks/remoting_echo.py [--client async|raw|blocking|all|none] [--in-process]
        [--loop asyncio|uvloop] [--client-loop asyncio|uvloop] [--connections 64] [--depth 1]
        [--body 128] [--seconds 5] [--profile FILE]

The server runs in a process of its own (pinned to CPU 0 when the machine has two or more), the
clients in another (pinned to CPU 1), so the figures are what one server loop answers. Clients:

- ``async``: AsyncRemotingClient, ``--connections`` connections with ``--depth`` requests in
  flight on each (the broker's load: many producers and consumers, each waiting for answers);
- ``raw``: pre-encoded frames pipelined on plain asyncio protocols, ``--depth`` in flight per
  connection; the client does almost nothing, so this is the server's ceiling;
- ``blocking``: one RemotingClient, one request per round trip (the CLI's and Spark's way).

Requests look like the C++ client's SEND_MESSAGE (15 ext fields, some JSON numbers) with a
``--body``-byte body; the echo handler answers SUCCESS with a send response's five string ext
fields and the request's body. Besides requests/s each line gives the CPU time per request of
the server process and of the client process: on a shared machine requests/s swing with the
neighbours' load, CPU time per request much less. ``--in-process`` measures the connection
alone (decode, dispatch, encode, write to a null transport), fed from memory, no sockets.
To compare with another version of the package: ``PYTHONPATH=/that/src python ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

STATS = 9999  # a code of the benchmark's own: the server's served count and CPU time

SEND_EXT: dict[str, Any] = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "PNVfw1/JgGTyxJ3G/EW22H+7dY0=",
    "batch": "0",
    "bornTimestamp": "1795532961562",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": 4,
    "flag": 0,
    "producerGroup": "PID_bench",
    "properties": "KEYS\u0001key-0\u0002TAGS\u0001TagA\u0002UNIQ_KEY\u00010100007F0000F440\u0002",
    "queueId": 0,
    "reconsumeTimes": "0",
    "sysFlag": 0,
    "topic": "BenchTopic",
    "unitMode": "0",
}


def _runner(loop: str) -> asyncio.Runner:
    if loop == "uvloop":
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    return asyncio.Runner()


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu % (os.cpu_count() or 1)})


# ---- server process ---------------------------------------------------------------------------


SEND_RESPONSE_EXT = {
    "msgId": "7F0000010000CBC90000000000000000",
    "queueId": "0",
    "queueOffset": "12345",
    "MSG_REGION": "DefaultRegion",
    "TRACE_ON": "true",
}


def serve(loop: str, profile: str | None) -> None:
    from rocketstore.remoting import RemotingCommand, RemotingServer

    _pin(0)
    served = 0

    def echo(cmd: RemotingCommand, conn: object) -> RemotingCommand:
        nonlocal served
        served += 1
        return RemotingCommand.response(
            0,
            None,
            {
                "msgId": "7F0000010000CBC90000000000000000",
                "queueId": "0",
                "queueOffset": str(served),
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
            cmd.body,
        )

    def stats(cmd: RemotingCommand, conn: object) -> RemotingCommand:
        ext = {"served": str(served), "cpu": repr(time.process_time())}
        return RemotingCommand.response(0, None, ext)

    async def main() -> None:
        server = RemotingServer({10: echo, STATS: stats})
        await server.start()
        print(server.port, flush=True)
        reader = asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await reader  # the parent closes stdin when it is done
        await server.close()

    if profile:
        import cProfile

        with cProfile.Profile() as prof, _runner(loop) as runner:
            runner.run(main())
        prof.dump_stats(profile)
    else:
        with _runner(loop) as runner:
            runner.run(main())


# ---- in process: the connection's own work, no sockets ----------------------------------------


class _NullTransport(asyncio.Transport):
    """Takes writes and counts them; what a Connection needs of a transport."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: object) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def close(self) -> None:
        pass


def in_process(args: argparse.Namespace) -> None:
    """Decode, dispatch, encode and write on a Connection fed from memory: one frame a read
    (many connections with one request in flight each) and 16 frames a read (pipelined)."""
    from rocketstore.remoting import Connection, RemotingCommand

    def echo(cmd: RemotingCommand, conn: object) -> RemotingCommand:
        return RemotingCommand.response(0, None, dict(SEND_RESPONSE_EXT), cmd.body)

    async def run() -> None:
        body = os.urandom(args.body)
        frame = RemotingCommand.request(10, dict(SEND_EXT), body).encode()
        for per_read in (1, 16):
            chunk = frame * per_read
            conn = Connection({10: echo})
            conn.connection_made(_NullTransport())
            feed = _feeder(conn, chunk)
            reads = max(1, 200_000 // per_read // max(1, args.body // 1024))
            best = float("inf")
            for _ in range(5):
                start = time.process_time()
                for _ in range(reads):
                    feed()
                best = min(best, (time.process_time() - start) / (reads * per_read))
            print(f"  in process, {per_read:2} frame(s) a read: {best * 1e6:6.2f} µs/req")

    with _runner(args.loop) as runner:
        runner.run(run())


def _feeder(conn: Any, chunk: bytes) -> Callable[[], None]:
    """Feed ``chunk`` as the transport would: reads of at most 256 KiB (asyncio's read size)
    into the protocol's buffer, or as ``bytes`` objects to a plain Protocol."""
    step = 256 * 1024
    if hasattr(conn, "get_buffer"):  # a BufferedProtocol: the read lands in its buffer
        view = memoryview(chunk)

        def feed() -> None:
            pos = 0
            while pos < len(chunk):
                buf = conn.get_buffer(-1)
                n = min(len(buf), len(chunk) - pos, step)
                buf[:n] = view[pos : pos + n]
                conn.buffer_updated(n)
                pos += n

        return feed

    def feed_bytes() -> None:
        for pos in range(0, len(chunk), step):
            conn.data_received(chunk[pos : pos + step])  # the read's own bytes object

    return feed_bytes


# ---- client processes -------------------------------------------------------------------------


def _server_stats(address: str) -> tuple[int, float]:
    from rocketstore.remoting import RemotingClient, RemotingCommand

    with RemotingClient() as client:
        r = client.invoke(address, RemotingCommand.request(STATS))
    return int(r.ext_fields["served"]), float(r.ext_fields["cpu"])


async def _async_clients(
    address: str, connections: int, depth: int, body: bytes, seconds: float
) -> int:
    from rocketstore.remoting import AsyncRemotingClient, RemotingCommand

    clients = [AsyncRemotingClient() for _ in range(connections)]
    done = 0
    stop = False

    async def worker(client: AsyncRemotingClient) -> None:
        nonlocal done
        while not stop:
            cmd = RemotingCommand.request(10, dict(SEND_EXT), body)
            r = await client.invoke(address, cmd, 10.0)
            assert r.code == 0 and len(r.body) == len(body)
            done += 1

    for c in clients:
        await c.connection(address)
    tasks = [asyncio.create_task(worker(c)) for c in clients for _ in range(depth)]
    await asyncio.sleep(seconds)
    stop = True
    await asyncio.gather(*tasks)
    for c in clients:
        c.close()
    return done


async def _raw_clients(
    address: str, connections: int, depth: int, body: bytes, seconds: float
) -> int:
    from rocketstore.remoting import RemotingCommand, split_address

    frame = RemotingCommand.request(10, dict(SEND_EXT), body).encode()
    host, port = split_address(address)
    total = 0
    stop = False

    class Pipeline(asyncio.Protocol):
        def __init__(self) -> None:
            self.buf = bytearray()
            self.done = asyncio.get_running_loop().create_future()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.Transport = transport  # type: ignore[assignment]
            self.transport.write(frame * depth)

        def data_received(self, data: bytes) -> None:
            nonlocal total
            buf = self.buf
            buf += data
            pos = 0
            got = 0
            while len(buf) - pos >= 4:
                n = int.from_bytes(buf[pos : pos + 4], "big")
                if len(buf) - pos - 4 < n:
                    break
                pos += 4 + n
                got += 1
            del buf[:pos]
            total += got
            if stop:
                self.transport.close()
            elif got:
                self.transport.write(frame * got)

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.done.done():
                self.done.set_result(None)

    loop = asyncio.get_running_loop()
    protocols: list[Pipeline] = []
    for _ in range(connections):
        _, p = await loop.create_connection(Pipeline, host, port)
        protocols.append(p)
    await asyncio.sleep(seconds)
    stop = True
    counted = total
    await asyncio.wait([p.done for p in protocols], timeout=10)
    return counted


def _blocking_client(address: str, body: bytes, seconds: float) -> int:
    from rocketstore.remoting import RemotingClient, RemotingCommand

    done = 0
    with RemotingClient(timeout=10.0) as client:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(100):
                r = client.invoke(address, RemotingCommand.request(10, dict(SEND_EXT), body))
                assert r.code == 0
            done += 100
    return done


def run_client(kind: str, address: str, args: argparse.Namespace) -> dict[str, float]:
    """One measurement in this (client) process: warm up, then count responses."""
    _pin(1)
    body = os.urandom(args.body)
    measure: Callable[[float], int]
    if kind == "blocking":

        def measure(seconds: float) -> int:
            return _blocking_client(address, body, seconds)

    else:
        coro = _async_clients if kind == "async" else _raw_clients

        def measure(seconds: float) -> int:
            with _runner(args.client_loop) as runner:
                return runner.run(coro(address, args.connections, args.depth, body, seconds))

    measure(min(1.0, args.seconds))  # warm-up: connections, caches
    served0, cpu0 = _server_stats(address)
    start = time.perf_counter()
    own = time.process_time()
    done = measure(args.seconds)
    own = time.process_time() - own
    took = time.perf_counter() - start
    served1, cpu1 = _server_stats(address)
    served = max(served1 - served0, 1)
    return {
        "rps": done / took,
        "server_us": (cpu1 - cpu0) / served * 1e6,
        "client_us": own / max(done, 1) * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--client", choices=("async", "raw", "blocking", "all", "none"), default="all")
    ap.add_argument("--in-process", action="store_true", help="the connection alone, no sockets")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    ap.add_argument("--client-loop", choices=("asyncio", "uvloop"), default=None)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--body", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--profile", help="write the server's cProfile stats to this file")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--measure-address", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client_loop is None:
        args.client_loop = args.loop
    if args.serve:
        serve(args.loop, args.profile)
        return
    if args.measure:
        print(json.dumps(run_client(args.measure, args.measure_address, args)))
        return

    if args.in_process:
        in_process(args)
    kinds = ["async", "raw", "blocking"] if args.client == "all" else [args.client]
    if args.client == "none":
        return
    server_cmd = [sys.executable, __file__, "--serve", "--loop", args.loop]
    if args.profile:
        server_cmd += ["--profile", args.profile]
    server = subprocess.Popen(server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        address = f"127.0.0.1:{server.stdout.readline().strip()}"
        print(
            f"server loop {args.loop}, client loop {args.client_loop}, {args.connections} "
            f"connections x depth {args.depth}, body {args.body} B, {args.seconds:g} s"
        )
        for kind in kinds:
            cmd = [sys.executable, __file__, "--measure", kind, *_pass_on(args, address)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            shape = "1 connection, 1 in flight" if kind == "blocking" else "pipelined"
            if kind == "async":
                shape = f"{args.connections} x {args.depth} in flight"
            elif kind == "raw":
                shape = f"{args.connections} x {args.depth} pipelined"
            print(
                f"  {kind:8} {r['rps']:>10,.0f} req/s   server {r['server_us']:6.1f} µs/req"
                f"   client {r['client_us']:6.1f} µs/req   ({shape})"
            )
    finally:
        with contextlib.suppress(OSError):
            assert server.stdin is not None
            server.stdin.close()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
    if args.profile:
        import pstats

        pstats.Stats(args.profile).sort_stats("tottime").print_stats(25)


def _pass_on(args: argparse.Namespace, address: str) -> list[str]:
    return [
        "--measure-address",
        address,
        "--client-loop",
        args.client_loop,
        "--connections",
        str(args.connections),
        "--depth",
        str(args.depth),
        "--body",
        str(args.body),
        "--seconds",
        str(args.seconds),
    ]


if __name__ == "__main__":
    main()
