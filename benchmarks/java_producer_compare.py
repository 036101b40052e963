"""RocketMQ's own benchmark producer and consumer against rocketstore's broker and against
RocketMQ's broker, both kept running and warmed, measured alternately (A B A B ...), with the
ratio of each pair.

    ROCKETMQ_CLASSPATH=... python benchmarks/java_producer_compare.py [--pairs 3]
        [--duration 30] [--threads 64,1] [--consumer-threads 64] [--warmup 30]
        [--size 1024] [--bare] [--work-dir DIR] [--keep]

A is ``rocketstore serve`` with its defaults (ASYNC_FLUSH, the metrics endpoint and the web
console on, on free ports; ``--bare`` turns both off: ``--metrics-listen= --console-listen=``);
B is RocketMQ 4.9.8's NamesrvStartup and BrokerStartup (ASYNC_FLUSH, 1 GiB commit-log files
like rocketstore's default). Each side is started once, on an empty store under the work
directory, gets topic ``JavaBench`` with 8 queues (mqadmin), and is warmed by an 8-thread
producer run of ``--warmup`` seconds on the very processes that are then measured: a broker
in production runs warm, and a JVM measured while its JIT still compiles is not. Then, per
thread count, ``--pairs`` pairs of ``org.apache.rocketmq.example.benchmark.Producer`` runs
(``-w`` threads, ``-s`` bytes a message, ``--duration`` seconds), A then B, on the same
processes. The producer prints the send rate of the last 10 s every 10 s; its first line
(the producer's own JVM warming up) is dropped and the rest averaged.

Then the consumer side: ``org.apache.rocketmq.example.benchmark.Consumer`` (push,
``--consumer-threads`` consuming threads), a new group each run, reading the topic the
producer runs filled from its first offset (a group without a committed offset starts at 0 on
both brokers while the queue's start is in memory). It prints the rate of the last 10 s every
10 s; the windows while the backlog lasts are averaged (the first, which holds the consumer's
start, and the last, in which the backlog ran out, are dropped when there are others). A
consumer run ends when its rate falls to zero or after ``--consumer-duration`` seconds. One
unmeasured consumer run on each side first warms the brokers' pull paths.

Each run prints the broker's CPU time a message (from /proc, every thread of its process)
and the load average before and after. The machine's speed drifts, so compare within a pair.

``ROCKETMQ_CLASSPATH`` (or ``--classpath``) must hold RocketMQ 4.9.8's namesrv, broker, tools,
client and example.benchmark classes and their dependencies; see tests/support/rocketmq_java.py.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import rocketmq_java as rj
from support.interop import ServerProcess
from support.ports import free_port

PRODUCER = "org.apache.rocketmq.example.benchmark.Producer"
CONSUMER = "org.apache.rocketmq.example.benchmark.Consumer"
ADMIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
TOPIC = "JavaBench"
WARMUP_THREADS = 8
_SEND = re.compile(
    r"Send TPS: (\d+) Max RT\(ms\): (\d+) Average RT\(ms\):\s*([\d.]+) Send Failed: (\d+)"
)
_CONSUME = re.compile(r"TPS: (\d+) FAIL: (\d+) AVG\(B2C\) RT\(ms\):\s*([\d.]+)")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    side: str
    what: str  # "produce" or "consume"
    threads: int
    tps: float
    avg_rt_ms: float
    failed: int
    lines: int
    broker_cpu_us: float  # the broker process's CPU a message (every thread)
    load_before: str
    load_after: str


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


class Side:
    """One broker (with its name server), started once and kept for every run."""

    name: str
    namesrv: str
    broker_pid: int

    def stop(self) -> None:
        raise NotImplementedError


class Rocketstore(Side):
    name = "rocketstore"

    def __init__(self, root: Path, *, bare: bool) -> None:
        root.mkdir(parents=True)
        args = [sys.executable, "-c", "from rocketstore.cli import main; main()", "serve"]
        args += ["--store", str(root / "store"), "--flush", "ASYNC_FLUSH"]
        args += ["--namesrv-listen", f"127.0.0.1:{free_port()}", "--listen", "127.0.0.1:0"]
        args += ["--grpc-listen", f"127.0.0.1:{free_port()}"]
        if bare:
            args += ["--metrics-listen", "", "--console-listen", ""]
        else:  # the defaults' endpoints, on ports known to be free
            args += ["--metrics-listen", f"127.0.0.1:{free_port()}"]
            args += ["--console-listen", f"127.0.0.1:{free_port()}"]
        args += ["--log-dir", str(root / "logs")]
        self.server = ServerProcess(args, root / "serve.log", want_namesrv=True, want_broker=True)
        try:
            self.server._wait_started(60.0)
        except BaseException:
            self.server.stop()
            raise
        assert self.server.namesrv is not None
        self.namesrv = self.server.namesrv
        self.broker_pid = self.server.proc.pid

    def stop(self) -> None:
        self.server.stop()


class RocketMQ(Side):
    name = "rocketmq"

    def __init__(self, root: Path) -> None:
        self.servers = rj.RocketMQServers.start(
            root,
            opts=["-Xms2g", "-Xmx2g", "-XX:MaxDirectMemorySize=2g", *rj.OPENS],
            mappedFileSizeCommitLog=str(1024 * 1024 * 1024),
        )
        self.namesrv = self.servers.namesrv
        self.broker_pid = self.servers.procs[-1].pid

    def stop(self) -> None:
        self.servers.stop()


def make_topic(root: Path, namesrv: str) -> None:
    cmd = rj.java_command(root, ADMIN, "updateTopic", "-n", namesrv, "-c", "DefaultCluster")
    cmd += ["-t", TOPIC, "-r", "8", "-w", "8"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=rj.java_env(root), check=False
    )
    if "success" not in done.stdout:
        raise RuntimeError(f"updateTopic failed:\n{done.stdout}\n{done.stderr[-2000:]}")


def run_java(
    root: Path, main: str, args: list[str], done: Callable[[list[str]], bool], timeout: float
) -> list[str]:
    """Run a benchmark program until ``done(lines)`` or ``timeout`` seconds; its lines."""
    cmd = rj.java_command(root, main, *args, opts=rj.BENCH_JAVA_OPTS)
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=rj.java_env(root),
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if done(list(lines)):
                break
            time.sleep(0.2)
    finally:
        rj.kill_process(proc)
        reader.join(10)
    return lines


def produce(root: Path, side: Side, threads: int, size: int, duration: float) -> Run:
    want = max(1, int(duration // 10)) + 1  # a rate line every 10 s; the first is dropped
    args = ["-n", side.namesrv, "-t", TOPIC, "-w", str(threads), "-s", str(size)]
    before, cpu = load(), cpu_seconds(side.broker_pid)
    lines = run_java(
        root,
        PRODUCER,
        args,
        lambda lines: sum(1 for line in lines if _SEND.search(line)) >= want,
        duration + 30,
    )
    cpu = cpu_seconds(side.broker_pid) - cpu
    stats = [m for m in map(_SEND.search, lines) if m]
    steady = stats[1:] or stats
    if not steady:
        raise RuntimeError(
            f"{side.name}: no TPS lines from the producer:\n" + "\n".join(lines[-30:])
        )
    # every line is 10 s: the messages of all lines, for the CPU a message
    sent = sum(int(m.group(1)) for m in stats) * 10
    return Run(
        side.name,
        "produce",
        threads,
        sum(int(m.group(1)) for m in steady) / len(steady),
        sum(float(m.group(3)) for m in steady) / len(steady),
        sum(int(m.group(4)) for m in steady),
        len(steady),
        cpu / sent * 1e6 if sent else float("nan"),
        before,
        load(),
    )


def consume(root: Path, side: Side, threads: int, group: str, duration: float) -> Run:
    args = ["-n", side.namesrv, "-t", TOPIC, "-w", str(threads), "-g", group, "-p", "false"]

    def drained(lines: list[str]) -> bool:
        rates = [int(m.group(1)) for m in map(_CONSUME.search, lines) if m]
        return bool(rates) and rates[-1] == 0

    before, cpu = load(), cpu_seconds(side.broker_pid)
    lines = run_java(root, CONSUMER, args, drained, duration)
    cpu = cpu_seconds(side.broker_pid) - cpu
    stats = [m for m in map(_CONSUME.search, lines) if m]
    rates = [int(m.group(1)) for m in stats]
    busy = [r for r in rates if r > 0]
    total = sum(busy) * 10
    full = busy[1:-1] if len(busy) > 2 else busy
    if not full:
        raise RuntimeError(
            f"{side.name}: no TPS lines from the consumer:\n" + "\n".join(lines[-30:])
        )
    return Run(
        side.name,
        "consume",
        threads,
        sum(full) / len(full),
        sum(float(m.group(3)) for m in stats if int(m.group(1)) > 0) / len(busy),
        sum(int(m.group(2)) for m in stats),
        len(full),
        cpu / total * 1e6 if total else float("nan"),
        before,
        load(),
    )


def show(run: Run) -> None:
    rt = "B2C" if run.what == "consume" else "RT"
    print(
        f"  {run.side:<11} {run.what} -w {run.threads:<3} {run.tps:>9.0f} msg/s"
        f"  avg {rt} {run.avg_rt_ms:9.3f} ms  failed {run.failed}  ({run.lines} windows)"
        f"  broker CPU {run.broker_cpu_us:6.1f} µs/msg  load {run.load_before} -> {run.load_after}",
        flush=True,
    )


def pairs(
    label: str, count: int, measure: Callable[[Side, int], Run], sides: tuple[Side, Side]
) -> list[float]:
    ratios = []
    print(label, flush=True)
    for pair in range(count):
        a = measure(sides[0], pair)
        show(a)
        b = measure(sides[1], pair)
        show(b)
        ratios.append(a.tps / b.tps if b.tps else float("nan"))
        print(f"  pair {pair + 1}: rocketstore / RocketMQ = {ratios[-1]:.3f}", flush=True)
    print(f"  ratios {', '.join(f'{r:.3f}' for r in ratios)}", flush=True)
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds a producer run")
    ap.add_argument("--threads", default="64,1", help="producer threads, comma separated")
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds of 8-thread warm-up")
    ap.add_argument(
        "--consumer-threads", type=int, default=64, help="consumer threads (0: no consumer runs)"
    )
    ap.add_argument("--consumer-duration", type=float, default=90.0, help="longest a consumer run")
    ap.add_argument(
        "--bare", action="store_true", help="rocketstore without its metrics and console"
    )
    ap.add_argument("--work-dir", default=None, help="default: a new temporary directory")
    ap.add_argument("--keep", action="store_true", help="keep the stores and logs")
    ap.add_argument("--classpath", default=None, help="default: $ROCKETMQ_CLASSPATH")
    args = ap.parse_args()
    if args.classpath:
        rj.CLASSPATH = args.classpath
    if not rj.CLASSPATH or rj.JAVA is None:
        sys.exit(f"error: {rj.unavailable() or 'no classpath'}")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="java-producer-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    compiled = not os.environ.get("ROCKETSTORE_NO_EXTENSIONS")
    print(
        f"work dir {work}; rocketstore compiled core {'on' if compiled else 'off'}, "
        f"{'--metrics-listen= --console-listen=' if args.bare else 'serve defaults'}",
        flush=True,
    )
    started: list[Side] = []
    try:
        a = Rocketstore(work / "rocketstore", bare=args.bare)
        started.append(a)
        b = RocketMQ(work / "rocketmq")
        started.append(b)
        for side in started:
            make_topic(work / side.name, side.namesrv)
        if args.warmup > 0:
            print(
                f"warm-up: {WARMUP_THREADS} threads, {args.warmup:.0f} s on each side", flush=True
            )
            for side in started:
                show(produce(work / side.name, side, WARMUP_THREADS, args.size, args.warmup))
        for threads in (int(t) for t in args.threads.split(",")):
            pairs(
                f"producer -w {threads}, {args.size} B messages, {args.duration:.0f} s a run:",
                args.pairs,
                lambda side, _pair, t=threads: produce(  # type: ignore[misc]
                    work / side.name, side, t, args.size, args.duration
                ),
                (a, b),
            )
        if args.consumer_threads > 0:
            print("consumer warm-up: one run on each side", flush=True)
            for side in started:
                show(
                    consume(
                        work / side.name,
                        side,
                        args.consumer_threads,
                        f"bench_consumer_warmup_{time.monotonic_ns()}",
                        args.consumer_duration,
                    )
                )
            pairs(
                f"consumer -w {args.consumer_threads}, push, a new group a run from offset 0:",
                args.pairs,
                lambda side, pair: consume(
                    work / side.name,
                    side,
                    args.consumer_threads,
                    f"bench_consumer_{pair}_{time.monotonic_ns()}",
                    args.consumer_duration,
                ),
                (a, b),
            )
    finally:
        for side in reversed(started):
            side.stop()
        if not args.work_dir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
