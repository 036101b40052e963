"""Exactly-once streaming writes through brokers: their cost against at-least-once, and many
kill -9 restarts.

    python benchmarks/spark_exactly_once.py [--rows N] [--pairs K] [--per-trigger M]
    python benchmarks/spark_exactly_once.py --crash-rounds R [--rows N] [--per-trigger M]

Starts a name server and two broker groups (two queues a topic each) in this process and
fills a source topic with N rows of 100 bytes, each body a unique id.

Throughput (default): K alternated pairs of a streaming query (local[2], availableNow,
maxOffsetsPerTrigger M) reading the source through the brokers and writing every row into a
new topic, once at-least-once and once with ``exactlyOnce=true`` (the order alternates in
every pair); prints rows a second of each run with the load average before it, the medians
and their ratio. On a loaded machine the figures say little by themselves; the ratio of
alternated pairs says more.

Crash rounds (``--crash-rounds R``): for each crash point (task, precommit, mid_end,
postcommit), R times: a child process runs the exactly-once query from its checkpoint with the
point set at a batch drawn from a seeded generator, is killed with SIGKILL (its whole process
group) when it gets there, and the query is then run to its end; a consumer pulls the
destination topic and counts every id: lost, duplicated and unknown ids are printed (all 0
when the guarantee holds).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.client import MessageQueue, Producer
from rocketstore.client._admin import AdminClient
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer

BROKERS = ("bench-a", "bench-b")
QUEUES = 2

CHILD = textwrap.dedent(
    """
    import sys, time
    from pyspark.sql import SparkSession

    ns, src, dst, ckpt, per_trigger, eos = sys.argv[1:7]
    b = SparkSession.builder.master("local[2]").appName("eos-bench")
    for k, v in {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
    }.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    rows = (
        spark.readStream.format("rocketstore").option("namesrv", ns).option("topics", src)
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_trigger)
        .load().selectExpr(f"'{dst}' AS topic", "body")
    )
    start = time.perf_counter()
    q = (
        rows.writeStream.format("rocketstore").option("namesrv", ns)
        .option("exactlyOnce", eos).option("checkpointLocation", ckpt)
        .trigger(availableNow=True).start()
    )
    q.awaitTermination()
    print("ELAPSED", time.perf_counter() - start, flush=True)
    spark.stop()
    """
)


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.servers: list[BrokerServer] = []
        self.namesrv = NameServer(port=0)
        self.run(self.namesrv.start())
        for name in BROKERS:
            self.servers.append(self.run(self._broker(name)))

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    async def _broker(self, name: str) -> BrokerServer:
        store = StoreConfig(store_path_root_dir=str(self.root / name), ha_listen_port=0)
        config = BrokerConfig(
            listen_port=0,
            namesrv_addr=self.namesrv.address,
            broker_name=name,
            transaction_timeout=2_000,
            transaction_check_interval=1_000,
            transaction_check_max=100_000,
        )
        server = BrokerServer(store, config)
        await server.start()
        return server

    def close(self) -> None:
        for s in self.servers:
            self.run(s.shutdown())
        self.run(self.namesrv.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @property
    def ns(self) -> str:
        return self.namesrv.address

    def topic(self, topic: str) -> None:
        with AdminClient(self.ns) as admin:
            for s in self.servers:
                admin.create_topic(
                    s.address, topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES
                )
            while (r := admin.route(topic)) is None or len(r.brokers) < len(BROKERS):
                time.sleep(0.05)

    def fill(self, topic: str, rows: int) -> set[bytes]:
        self.topic(topic)
        bodies = [f"{i:012d}".encode().ljust(100, b".") for i in range(rows)]
        queues = [MessageQueue(topic, b, q) for b in BROKERS for q in range(QUEUES)]
        with Producer(self.ns) as p:
            for i, lo in enumerate(range(0, rows, 256)):
                p.send_batch(topic, bodies[lo : lo + 256], queue=queues[i % len(queues)])
        return set(bodies)

    def bodies(self, topic: str) -> collections.Counter[bytes]:
        out: collections.Counter[bytes] = collections.Counter()
        with AdminClient(self.ns) as admin:
            route = admin.route(topic)
            assert route is not None
            for mq in route.queues(write=False):
                addr = route.master(mq.broker_name)
                assert addr is not None
                offset = 0
                while True:
                    msgs, offset2 = admin.pull_messages(addr, mq, offset, 256)
                    if not msgs:
                        break
                    out.update(bytes(m.body) for m in msgs)
                    offset = offset2
        return out


def _end_session(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the child's whole session: its JVM and Spark's Python workers (process groups
    of their own, same session) go with it."""
    while True:
        left = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            state, _ppid, _pgrp, session = stat[stat.rindex(")") + 2 :].split()[:4]
            if state != "Z" and int(session) == proc.pid:
                left.append(int(name))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
        if not left and proc.poll() is not None:
            return
        time.sleep(0.05)


def _child(
    script: Path, args: list[str], crash: str | None, marker: Path, log: Path
) -> float | None:
    env = dict(os.environ)
    env.pop("ROCKETSTORE_SPARK_CRASH", None)
    if crash:
        env["ROCKETSTORE_SPARK_CRASH"] = crash
        env["ROCKETSTORE_SPARK_CRASH_FILE"] = str(marker)
    marker.unlink(missing_ok=True)
    with log.open("a") as out:
        proc = subprocess.Popen(
            [sys.executable, str(script), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            start_new_session=True,
        )
        try:
            while proc.poll() is None:
                if crash and marker.exists():
                    _end_session(proc)
                    return None
                time.sleep(0.1)
            text = proc.stdout.read() if proc.stdout else ""
        finally:
            _end_session(proc)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}); see {log}")
    for line in text.splitlines():
        if line.startswith("ELAPSED"):
            return float(line.split()[1])
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--per-trigger", type=int, default=5_000)
    ap.add_argument("--crash-rounds", type=int, default=0)
    ap.add_argument("--seed", type=int, default=37)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="eos-bench-") as tmp_s:
        tmp = Path(tmp_s)
        script = tmp / "child.py"
        script.write_text(CHILD)
        log = tmp / "child.log"
        c = Cluster(tmp / "brokers")
        try:
            expected = c.fill("BENCH_SRC", args.rows)
            if args.crash_rounds:
                _crash_rounds(c, tmp, script, log, expected, args)
            else:
                _pairs(c, tmp, script, log, args)
        finally:
            c.close()


def _pairs(c: Cluster, tmp: Path, script: Path, log: Path, args: Any) -> None:
    rates: dict[str, list[float]] = {"at-least-once": [], "exactly-once": []}
    for i in range(args.pairs):
        order = ["false", "true"] if i % 2 == 0 else ["true", "false"]
        for eos in order:
            name = "exactly-once" if eos == "true" else "at-least-once"
            dst = f"BENCH_DST_{i}_{eos}"
            c.topic(dst)
            load = os.getloadavg()[0]
            ckpt = tmp / f"ckpt-{i}-{eos}"
            run = [c.ns, "BENCH_SRC", dst, str(ckpt), str(args.per_trigger), eos]
            elapsed = _child(script, run, None, tmp / "m", log)
            assert elapsed is not None
            rate = args.rows / elapsed
            rates[name].append(rate)
            print(f"pair {i} {name:14s} {rate:10.0f} rows/s  (load average {load:.1f})")
    alo = statistics.median(rates["at-least-once"])
    eo = statistics.median(rates["exactly-once"])
    print(
        f"median at-least-once {alo:.0f} rows/s, exactly-once {eo:.0f} rows/s, ratio {eo / alo:.2f}"
    )


def _crash_rounds(
    c: Cluster, tmp: Path, script: Path, log: Path, expected: set[bytes], args: Any
) -> None:
    rng = random.Random(args.seed)
    batches = max(1, args.rows // args.per_trigger)
    for point in ("task", "precommit", "mid_end", "postcommit"):
        lost = dup = unknown = 0
        for r in range(args.crash_rounds):
            dst = f"CRASH_{point}_{r}"
            c.topic(dst)
            ckpt = tmp / f"ckpt-{point}-{r}"
            run = [c.ns, "BENCH_SRC", dst, str(ckpt), str(args.per_trigger), "true"]
            batch = rng.randrange(batches)
            _child(script, run, f"{point}:{batch}", tmp / "crashed", log)
            _child(script, run, None, tmp / "crashed", log)
            got = c.bodies(dst)
            lost += len(expected - set(got))
            dup += sum(n - 1 for n in got.values() if n > 1)
            unknown += len(set(got) - expected)
            print(f"{point} round {r} (batch {batch}): {len(got)} ids", flush=True)
        print(
            f"{point}: {args.crash_rounds} kills, lost {lost}, duplicated {dup}, unknown {unknown}"
        )


if __name__ == "__main__":
    main()
