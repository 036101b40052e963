"""What a plain gRPC send costs `rocketstore serve` (ACL off): the server's CPU time per message
and the client's rate, for comparing two trees in alternated runs.

    python benchmarks/grpc_send_cost.py [--count 20000] [--size 256] [--in-flight 64]
        [--pythonpath DIR]

``rocketstore serve`` runs in a subprocess (a temporary store, ports chosen at start, ACL,
console and metrics off; ``--pythonpath``: the ``src`` of the tree to run, default this one's);
a grpc.aio client in this process sends ``--count`` messages of ``--size`` bytes to one topic,
``--in-flight`` at once, after 1,000 unmeasured ones. Prints sends/s and the server's CPU time
(user + system, from /proc) per message, and the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import grpc

from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.grpc._pb import service_pb2 as spb


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_serve(tmp: str, pythonpath: str | None) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", f"{tmp}/store"),
            *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
            *("--grpc-listen", "127.0.0.1:0", "--metrics-listen", "", "--console-listen", ""),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert server.stdout is not None
    for line in server.stdout:
        m = re.search(r"gRPC front end listening on (\S+)", line)
        if m:
            threading.Thread(target=server.stdout.read, daemon=True).start()
            return server, m.group(1)
    raise SystemExit("the server did not start")


async def send_all(
    address: str, pid: int, count: int, size: int, in_flight: int
) -> tuple[float, float]:
    """(seconds, server CPU seconds) of the measured sends."""
    message = pb.Message(body=b"x" * size)
    message.topic.name = "SendCost"
    message.system_properties.message_id = "COST"
    message.system_properties.body_encoding = pb.IDENTITY
    message.system_properties.message_type = pb.NORMAL
    request = spb.SendMessageRequest(messages=[message]).SerializeToString()
    async with grpc.aio.insecure_channel(address) as channel:
        send = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=None,
            response_deserializer=spb.SendMessageResponse.FromString,
        )
        route = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=spb.QueryRouteRequest.SerializeToString,
            response_deserializer=spb.QueryRouteResponse.FromString,
        )
        await route(spb.QueryRouteRequest(topic=pb.Resource(name="SendCost")), timeout=30)
        left = [0]

        async def sender() -> None:
            while left[0] > 0:
                left[0] -= 1
                r = await send(request, metadata=[("x-mq-client-id", "cost@1")], timeout=30)
                if r.status.code != pb.OK:
                    raise SystemExit(f"send answered {pb.Code.Name(r.status.code)}")

        left[0] = 1_000  # warm-up
        await asyncio.gather(*(sender() for _ in range(in_flight)))
        left[0] = count
        cpu0, t0 = cpu_s(pid), time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(in_flight)))
        return time.perf_counter() - t0, cpu_s(pid) - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--pythonpath", default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        server, address = start_serve(tmp, args.pythonpath)
        try:
            took, cpu = asyncio.run(
                send_all(address, server.pid, args.count, args.size, args.in_flight)
            )
        finally:
            server.terminate()
            server.wait(30)
    print(
        f"{args.pythonpath or 'this tree'}: {args.count / took:,.0f} sends/s, server CPU "
        f"{cpu / args.count * 1e6:,.0f} µs a message, load average "
        f"{load_before:.2f} → {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
