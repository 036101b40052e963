"""The gRPC front end against the remoting front end, one broker, the same workload, one run.

    python benchmarks/grpc_vs_remoting.py [--count 10000] [--size 256] [--threads 4]
        [--latency-rounds 200] [--json]

One broker (name server, BrokerController, GrpcFrontEnd; ASYNC_FLUSH) runs in this process on
a background event loop; the clients run in subprocesses:

- gRPC: the official RocketMQ 5.x Python client (rocketmq-python-client 5.1.2, from the venv the
  gRPC tests cache under ~/.cache/rocketstore-interop or $ROCKETSTORE_INTEROP_CACHE; run
  ``pytest tests/test_grpc_proto.py`` once to make it), with tests/support/grpc_interop_client.py:
  send: ``send_async`` with 256 in flight; receive + ack: a SimpleConsumer, ``--threads``
  threads each receiving batches of 32 and acking every message (one AckMessage each, as the
  5.x clients do); latency: a SimpleConsumer waiting in a long poll, a producer sending one
  message 50 ms into it, time from the send's start to the receive's return.
- remoting: rocketstore's own 4.x remoting client (rocketstore.client, pure Python, blocking),
  the same counts: send: ``--threads`` threads sending one message per round trip; receive +
  ack: ``--threads`` threads pulling batches of 32 from their queues and committing the offset
  with each pull (4.x's ack); latency: a pull suspended in a long poll, a send 50 ms into it.

``broker_cpu_us_per_msg``: the broker's CPU time (this process's) over a throughput scenario,
divided by the messages sent plus the messages received and acked.

Throughput figures are what these clients reach (both are Python clients on this machine's two
cores, sharing them with the broker); read them as a comparison, not as the broker's ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLIENT_SCRIPT = ROOT / "tests" / "support" / "grpc_interop_client.py"
CLIENT_VENV = "rocketmq-python-client-5.1.2"


def _client_python() -> Path:
    cache = os.environ.get("ROCKETSTORE_INTEROP_CACHE")
    root = Path(cache) if cache else Path.home() / ".cache" / "rocketstore-interop"
    python = root / CLIENT_VENV / "bin" / "python"
    if not (root / CLIENT_VENV / ".installed").exists():
        sys.exit(f"no client venv at {root / CLIENT_VENV}: run pytest tests/test_grpc_proto.py")
    return python


class Broker:
    """Name server + broker + gRPC front end on a loop in a background thread."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def start(self) -> None:
        from rocketstore import StoreConfig
        from rocketstore.broker._config import BrokerConfig
        from rocketstore.grpc import GrpcConfig
        from rocketstore.namesrv import NameServer
        from rocketstore.server import BrokerServer

        self.thread.start()

        async def up() -> None:
            self.namesrv = NameServer("127.0.0.1", 0)
            await self.namesrv.start()
            store = StoreConfig(
                store_path_root_dir=str(self.root),
                mapped_file_size_commit_log=256 * 1024 * 1024,
                max_hash_slot_num=100_000,
                max_index_num=400_000,
            )
            self.server = BrokerServer(
                store,
                BrokerConfig(listen_port=0, namesrv_addr=self.namesrv.address),
                grpc=GrpcConfig(port=0, min_invisible_ms=1000),
            )
            await self.server.start()
            assert self.server.grpc is not None
            self.broker, self.grpc = self.server.broker, self.server.grpc

        self._call(up())

    def stop(self) -> None:
        async def down() -> None:
            await self.server.shutdown()
            await self.namesrv.close()

        self._call(down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _run(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"{cmd[1]} failed ({r.returncode}): {r.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def run_grpc(python: Path, endpoints: str, scenario: str, home: Path, **args: Any) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["HOME"] = str(home)
    doc = {"scenario": scenario, "endpoints": endpoints, **args}
    return _run([str(python), str(CLIENT_SCRIPT), json.dumps(doc)], env)


def run_remoting(namesrv: str, scenario: str, **args: Any) -> Any:
    doc = {"scenario": scenario, "namesrv": namesrv, **args}
    return _run([sys.executable, __file__, "--remoting-client", json.dumps(doc)])


# ---- the remoting client side (run in a subprocess of its own) ---------------------------------


def _remoting_throughput(args: dict[str, Any]) -> dict[str, Any]:
    from rocketstore.client import Producer, PullConsumer

    topic, count, threads = args["topic"], args["count"], args["threads"]
    body = b"x" * args["size"]
    producers = [Producer(args["namesrv"]) for _ in range(threads)]
    producers[0].send(topic, body)  # creates the topic
    time.sleep(0.5)
    per = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]

    def send(i: int) -> None:
        for _ in range(per[i]):
            producers[i].send(topic, body)

    begin = time.perf_counter()
    workers = [threading.Thread(target=send, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    send_s = time.perf_counter() - begin
    for p in producers:
        p.close()

    consumers = [PullConsumer(args["namesrv"], "BenchRemotingG") for _ in range(threads)]
    queues = consumers[0].queues(topic)
    received = [0] * threads

    def consume(i: int) -> None:
        c = consumers[i]
        mine = queues[i::threads]
        offsets = {mq.queue_id: 0 for mq in mine}
        idle = 0
        while idle < len(mine):
            idle = 0
            for mq in mine:
                r = c.pull(mq, offsets[mq.queue_id], 32, commit_offset=offsets[mq.queue_id])
                if not r.messages:
                    idle += 1
                    continue
                received[i] += len(r.messages)
                offsets[mq.queue_id] = r.next_begin_offset
        for mq in mine:
            c.commit_offset(mq, offsets[mq.queue_id])

    begin = time.perf_counter()
    workers = [threading.Thread(target=consume, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    recv_s = time.perf_counter() - begin
    for c in consumers:
        c.close()
    total = sum(received)
    return {
        "sent": count,
        "send_per_s": count / send_s,
        "received": total,
        "receive_per_s": total / recv_s,
    }


def _remoting_latency(args: dict[str, Any]) -> dict[str, Any]:
    from rocketstore.client import Producer, PullConsumer

    topic = args["topic"]
    producer = Producer(args["namesrv"])
    producer.send(topic, b"warm-up")
    time.sleep(0.5)
    consumer = PullConsumer(args["namesrv"], "BenchLatencyG")
    mq = consumer.queues(topic)[0]
    offset = consumer.max_offset(mq)
    latencies = []
    for i in range(args["count"]):
        box: dict[str, float] = {}

        def send(i: int = i, box: dict[str, float] = box) -> None:
            time.sleep(0.05)
            box["t"] = time.perf_counter()
            producer.send(topic, f"lat-{i}".encode(), queue=mq)

        t = threading.Thread(target=send)
        t.start()
        r = consumer.pull(mq, offset, 32, suspend_ms=5000, commit_offset=offset)
        done = time.perf_counter()
        t.join()
        if r.messages:
            offset = r.next_begin_offset
            latencies.append((done - box["t"]) * 1000)
    producer.close()
    consumer.close()
    return {"latencies_ms": latencies}


def _remoting_client(doc: dict[str, Any]) -> None:
    fn = {"throughput": _remoting_throughput, "latency": _remoting_latency}[doc["scenario"]]
    print(json.dumps(fn(doc)), flush=True)


# ---- the run ----------------------------------------------------------------------------------


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--latency-rounds", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--remoting-client", default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.remoting_client is not None:
        _remoting_client(json.loads(opts.remoting_client))
        return
    python = _client_python()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as tmp:
        broker = Broker(Path(tmp) / "store")
        broker.start()
        try:
            endpoints = broker.grpc.address
            namesrv = broker.namesrv.address
            home = Path(tmp) / "home"
            work = {"count": opts.count, "size": opts.size, "threads": opts.threads}
            cpu = time.process_time()
            results["grpc"] = run_grpc(
                python, endpoints, "throughput", home, topic="BenchGrpc", group="BenchGrpcG", **work
            )
            results["grpc"]["broker_cpu_s"] = time.process_time() - cpu
            cpu = time.process_time()
            results["remoting"] = run_remoting(namesrv, "throughput", topic="BenchRemoting", **work)
            results["remoting"]["broker_cpu_s"] = time.process_time() - cpu
            for r in (results["grpc"], results["remoting"]):
                # this process is the broker (its main thread only waits for the client):
                # broker CPU per message sent plus per message received and acked
                handled = r["sent"] + r["received"]
                r["broker_cpu_us_per_msg"] = r["broker_cpu_s"] * 1e6 / max(1, handled)
            lat_grpc = run_grpc(
                python,
                endpoints,
                "latency",
                home,
                topic="BenchGrpcLat",
                group="BenchGrpcLatG",
                count=opts.latency_rounds,
            )["latencies_ms"]
            lat_remoting = run_remoting(
                namesrv, "latency", topic="BenchRemotingLat", count=opts.latency_rounds
            )["latencies_ms"]
        finally:
            broker.stop()
    for name, lat in (("grpc", lat_grpc), ("remoting", lat_remoting)):
        results[name]["latency_ms"] = {
            "n": len(lat),
            "p50": _p(lat, 0.50),
            "p99": _p(lat, 0.99),
            "max": max(lat) if lat else float("nan"),
            "mean": statistics.fmean(lat) if lat else float("nan"),
        }
    results["workload"] = {**work, "latency_rounds": opts.latency_rounds}
    results["load_average_after"] = os.getloadavg()
    if opts.json:
        print(json.dumps(results, indent=2))
        return
    print(f"workload: {opts.count} messages of {opts.size} B, {opts.threads} client threads")
    print(
        f"{'front end':10} {'send/s':>9} {'recv+ack/s':>11} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'broker us/msg':>14}"
    )
    for name in ("grpc", "remoting"):
        r = results[name]
        lat = r["latency_ms"]
        print(
            f"{name:10} {r['send_per_s']:9.0f} {r['receive_per_s']:11.0f} "
            f"{lat['p50']:8.2f} {lat['p99']:8.2f} {r['broker_cpu_us_per_msg']:14.0f}"
        )


if __name__ == "__main__":
    main()
