"""What hostile gRPC traffic costs `rocketstore serve` with the ACL on: its RSS before, at its
peak and after.

    python benchmarks/grpc_abuse.py [--what unsigned|forbidden|telemetry|streams|all]
        [--calls 64]
        [--body-mb 5] [--seconds 20] [--streams 2000] [--settle 10] [--rss-limit-mib 4096]

``rocketstore serve`` runs in a subprocess (a temporary store, ports chosen at start, the
broker's and the gRPC front end's ACL from a plain_acl.yml with an admin account and a
PUB-only one; console and metrics off). The server's RSS is sampled every 50 ms.

``unsigned``: ``--calls`` SendMessage calls at once, without a signature, each with a message
of ``--body-mb`` MB (10^6 bytes), sent again as each is answered, for ``--seconds``; every one
is refused. Prints the answers' status codes.

``forbidden``: the same, signed by the PUB-only account to a topic it may not publish: each
request is read (the refusal needs its topic), within the front end's byte budget.

``telemetry``: the PUB-only account opens a Telemetry stream, and for ``--seconds`` sends
Settings whose topic list names its one topic over and over (some 660 KB), never reading what
comes back. Prints how many commands it could send and how the stream ended.

``streams``: ``--streams`` Telemetry streams of the PUB-only account on one connection, each
with a small Settings, then all closed. Prints how many the server took.

Each prints the RSS before, at the peak, and ``--settle`` seconds after the abuse stopped. A run
whose RSS passes ``--rss-limit-mib`` is stopped there (the server killed) and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from rocketstore.grpc._acl import authorization_header, date_time_now
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.grpc._pb import service_pb2 as spb
from rocketstore.grpc._pb import service_pb2_grpc

MiB = 1024 * 1024
ACL_YML = """\
accounts:
  - accessKey: adminAK01
    secretKey: adminSK01
    admin: true
  - accessKey: pubOnlyAK
    secretKey: pubOnlySK
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [PubOnly=PUB]
"""
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * MiB),
    ("grpc.max_receive_message_length", 64 * MiB),
]


def rss(pid: int) -> int:
    """Resident set size of process ``pid`` in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """The peak RSS of a process, sampled every 50 ms; kills it past ``limit`` bytes."""

    def __init__(self, proc: subprocess.Popen[str], limit: int) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.limit = limit
        self.peak = 0
        self.over_limit = False
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.05):
            now = rss(self.proc.pid)
            self.peak = max(self.peak, now)
            if now > self.limit and not self.over_limit:
                self.over_limit = True
                self.proc.kill()

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return self.peak


def start_serve(tmp: str) -> tuple[subprocess.Popen[str], str]:
    acl = Path(tmp) / "plain_acl.yml"
    acl.write_text(ACL_YML)
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", f"{tmp}/store"),
            *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
            *("--grpc-listen", "127.0.0.1:0", "--acl-file", str(acl)),
            *("--metrics-listen", "", "--console-listen", ""),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    for line in server.stdout:
        m = re.search(r"gRPC front end listening on (\S+)", line)
        if m:
            threading.Thread(target=server.stdout.read, daemon=True).start()  # keep draining
            return server, m.group(1)
    raise SystemExit("the server did not start")


def signed(ak: str, sk: str, client_id: str) -> list[tuple[str, str]]:
    when = date_time_now()
    return [
        ("x-mq-client-id", client_id),
        ("x-mq-date-time", when),
        ("authorization", authorization_header(ak, sk, when)),
    ]


def create_topic(address: str, topic: str) -> None:
    """The topic, made by the admin account (QueryRoute creates it: autoCreateTopicEnable)."""
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        r = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=signed("adminAK01", "adminSK01", "bench-admin"),
            timeout=30,
        )
        print(f"  QueryRoute {topic}: {pb.Code.Name(r.status.code)}")


async def unsigned(
    address: str, calls: int, body_mb: float, seconds: float, *, signed_to: str = ""
) -> None:
    """Unsigned sends to PubOnly; with ``signed_to``, the PUB-only account's to that topic."""
    message = pb.Message(body=b"x" * int(body_mb * 1_000_000))
    message.topic.name = signed_to or "PubOnly"
    message.system_properties.message_id = "ABUSE"
    request = spb.SendMessageRequest(messages=[message]).SerializeToString()
    codes: collections.Counter[str] = collections.Counter()
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        send = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=None,
            response_deserializer=spb.SendMessageResponse.FromString,
        )
        end = time.monotonic() + seconds

        async def caller() -> None:
            while time.monotonic() < end:
                metadata = signed("pubOnlyAK", "pubOnlySK", "bench-f") if signed_to else None
                try:
                    r = await send(request, metadata=metadata, timeout=30)
                    codes[pb.Code.Name(r.status.code)] += 1
                except grpc.aio.AioRpcError as exc:
                    codes[f"gRPC {exc.code().name}"] += 1

        await asyncio.gather(*(caller() for _ in range(calls)))
    print(f"  answers: {dict(codes)}")


def settings_command(topics: int) -> spb.TelemetryCommand:
    command = spb.TelemetryCommand()
    command.settings.client_type = pb.PRODUCER
    for _ in range(topics):
        command.settings.publishing.topics.add(name="PubOnly")
    return command


async def telemetry(address: str, seconds: float) -> None:
    command = settings_command(60_000).SerializeToString()
    print(f"  a Settings of {len(command):,} bytes")
    sent = 0
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        open_stream = channel.stream_stream(
            "/apache.rocketmq.v2.MessagingService/Telemetry",
            request_serializer=None,
            response_deserializer=spb.TelemetryCommand.FromString,
        )
        call: Any = open_stream(metadata=signed("pubOnlyAK", "pubOnlySK", "bench-tel"))
        end = time.monotonic() + seconds
        outcome = "open at the end"
        while time.monotonic() < end:
            try:
                await asyncio.wait_for(call.write(command), max(0.1, end - time.monotonic()))
                sent += 1
            except TimeoutError:
                outcome = "its writes held back at the end (the server stopped reading)"
                break
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
                outcome = f"ended by the server ({type(exc).__name__})"
                break
        if call.done() and outcome == "open at the end":
            outcome = f"ended by the server: {await call.code()}"
        call.cancel()
    print(f"  {sent:,} Settings sent in {seconds:g} s; stream {outcome}")


async def streams(address: str, count: int) -> None:
    command = settings_command(1)
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        calls: list[Any] = []
        answered = 0

        async def one(i: int) -> None:
            nonlocal answered
            call = stub.Telemetry(metadata=signed("pubOnlyAK", "pubOnlySK", f"bench-s{i}"))
            calls.append(call)
            try:
                await asyncio.wait_for(call.write(command), 10)
                await asyncio.wait_for(call.read(), 10)
                answered += 1
            except (TimeoutError, grpc.aio.AioRpcError, grpc.aio.UsageError):
                pass

        await asyncio.gather(*(one(i) for i in range(count)))
        print(f"  {count:,} streams asked for on one connection, {answered:,} open and answered")
        for call in calls:
            call.cancel()


def run(what: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server, address = start_serve(tmp)
        try:
            create_topic(address, "PubOnly")
            time.sleep(2)
            before = rss(server.pid)
            sampler = Sampler(server, args.rss_limit_mib * MiB)
            sampler.start()
            t0 = time.perf_counter()
            if what == "unsigned":
                asyncio.run(unsigned(address, args.calls, args.body_mb, args.seconds))
            elif what == "forbidden":
                asyncio.run(
                    unsigned(address, args.calls, args.body_mb, args.seconds, signed_to="Other")
                )
            elif what == "telemetry":
                asyncio.run(telemetry(address, args.seconds))
            else:
                asyncio.run(streams(address, args.streams))
            took = time.perf_counter() - t0
            time.sleep(args.settle)
            peak = sampler.stop()
            after = rss(server.pid)
            print(
                f"{what}: RSS {before / MiB:,.0f} MiB before → peak {peak / MiB:,.0f} MiB → "
                f"{after / MiB:,.0f} MiB {args.settle:g} s after (the abuse took {took:.1f} s)"
                + (" — killed at the RSS limit" if sampler.over_limit else "")
            )
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--what", choices=("unsigned", "forbidden", "telemetry", "streams", "all"))
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--body-mb", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--rss-limit-mib", type=int, default=4096)
    args = parser.parse_args()
    what = args.what or "all"
    every = ("unsigned", "forbidden", "telemetry", "streams")
    for one in every if what == "all" else (what,):
        run(one, args)


if __name__ == "__main__":
    main()
