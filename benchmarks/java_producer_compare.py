"""RocketMQ's own benchmark producer and consumer against rocketstore's broker and against
RocketMQ's broker, both kept running and warmed, measured alternately (A B A B ...), with the
ratio of each pair.

    ROCKETMQ_CLASSPATH=... python benchmarks/java_producer_compare.py [--pairs 3]
        [--duration 30] [--threads 64,1] [--consumer-threads 64] [--warmup 30]
        [--size 1024] [--bare] [--work-dir DIR] [--keep]
        [--consumer-mode backlog|steady|both] [--steady-producers 64]

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

``--consumer-mode steady`` (or ``both``) measures a steady rate instead of (or besides) the
backlog: the benchmark Consumer (``--consumer-threads``) runs on topic ``JavaBenchSteady``
(empty at first, 8 queues) while the benchmark Producer (``--steady-producers`` threads,
``--duration`` seconds) sends to it, one group for every run on a side (each goes on where the
last stopped). The consumer's rate is the mean of its 10 s windows inside the producer's run
(the first dropped); the broker's CPU a message is its CPU over the producer's run divided by
the messages sent plus the messages consumed in that time (both are printed, and the CPU over
the consumed alone beside it). One unmeasured steady run on each side warms both first.
``--threads ''`` runs no producer pairs.

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
STEADY_TOPIC = "JavaBenchSteady"  # the steady runs': empty until they send to it
STEADY_GROUP = "bench_consumer_steady"  # one group: each run goes on where the last stopped
WARMUP_THREADS = 8
_SEND = re.compile(
    r"Send TPS: (\d+) Max RT\(ms\): (\d+) Average RT\(ms\):\s*([\d.]+) Send Failed: (\d+)"
)
_CONSUME = re.compile(r"TPS: (\d+) FAIL: (\d+) AVG\(B2C\) RT\(ms\):\s*([\d.]+)")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    side: str
    what: str  # "produce", "consume" (a backlog) or "steady" (beside a producer)
    threads: int
    tps: float
    avg_rt_ms: float
    failed: int
    lines: int
    broker_cpu_us: float  # the broker process's CPU a message (every thread)
    load_before: str
    load_after: str
    sent_rate: float = 0.0  # steady runs: the producer's msgs/s beside the consumer
    consumed_cpu_us: float = 0.0  # steady runs: the broker's CPU over the consumed alone


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


def make_topic(root: Path, namesrv: str, topic: str = TOPIC) -> None:
    cmd = rj.java_command(root, ADMIN, "updateTopic", "-n", namesrv, "-c", "DefaultCluster")
    cmd += ["-t", topic, "-r", "8", "-w", "8"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=rj.java_env(root), check=False
    )
    if "success" not in done.stdout:
        raise RuntimeError(f"updateTopic failed:\n{done.stdout}\n{done.stderr[-2000:]}")


class JavaRun:
    """A benchmark program running, its output lines gathered (with when each came)."""

    def __init__(self, root: Path, main: str, args: list[str]) -> None:
        cmd = rj.java_command(root, main, *args, opts=rj.BENCH_JAVA_OPTS)
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=rj.java_env(root),
        )
        self.lines: list[str] = []
        self.times: list[float] = []  # time.monotonic() each line came
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.times.append(time.monotonic())
            self.lines.append(line.rstrip("\n"))

    def wait(self, done: Callable[[list[str]], bool], timeout: float) -> None:
        """Until ``done(lines)``, the program's end or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if done(list(self.lines)):
                return
            time.sleep(0.2)

    def stop(self) -> list[str]:
        rj.kill_process(self.proc)
        self._reader.join(10)
        return self.lines


def run_java(
    root: Path, main: str, args: list[str], done: Callable[[list[str]], bool], timeout: float
) -> list[str]:
    """Run a benchmark program until ``done(lines)`` or ``timeout`` seconds; its lines."""
    run = JavaRun(root, main, args)
    try:
        run.wait(done, timeout)
    finally:
        run.stop()
    return run.lines


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


def steady(root: Path, side: Side, threads: int, producers: int, size: int, duration: float) -> Run:
    """RocketMQ's benchmark Consumer (``threads`` consuming threads, group ``STEADY_GROUP``,
    topic ``STEADY_TOPIC``) while its benchmark Producer (``producers`` threads) sends to the
    same topic for ``duration`` seconds. The consumer's rate is the mean of its 10 s windows
    that lie wholly inside the producer's run, the first dropped (the producer's start); the
    broker's CPU a message is its CPU over the producer's run divided by the messages it
    handled in that time, sent plus consumed (each counted once: a message sent and consumed
    in the run counts twice)."""
    group = STEADY_GROUP
    consumer = JavaRun(
        root,
        CONSUMER,
        ["-n", side.namesrv, "-t", STEADY_TOPIC, "-w", str(threads), "-g", group, "-p", "false"],
    )
    try:
        consumer.wait(lambda lines: any("Consumer Started" in line for line in lines), 120)
        time.sleep(3.0)  # the rebalance hands the consumer its queues
        want = max(1, int(duration // 10)) + 1
        args = ["-n", side.namesrv, "-t", STEADY_TOPIC, "-w", str(producers), "-s", str(size)]
        before, cpu = load(), cpu_seconds(side.broker_pid)
        began = time.monotonic()
        sent_lines = run_java(
            root,
            PRODUCER,
            args,
            lambda lines: sum(1 for line in lines if _SEND.search(line)) >= want,
            duration + 30,
        )
        ended = time.monotonic()
        cpu = cpu_seconds(side.broker_pid) - cpu
    finally:
        consumer.stop()
    sends = [int(m.group(1)) for m in map(_SEND.search, sent_lines) if m]
    # a consumer line reports the 10 s before it: those wholly inside the producer's run
    inside = [
        m
        for at, m in zip(consumer.times, map(_CONSUME.search, consumer.lines), strict=False)
        if m and began + 10.0 <= at <= ended
    ]
    windows = inside[1:] or inside
    if not windows or not sends:
        raise RuntimeError(
            f"{side.name}: no steady windows:\n"
            + "\n".join(sent_lines[-10:] + consumer.lines[-20:])
        )
    consumed = sum(int(m.group(1)) for m in inside) * 10
    sent = sum(sends) * 10
    handled = sent + consumed
    return Run(
        side.name,
        "steady",
        threads,
        sum(int(m.group(1)) for m in windows) / len(windows),
        sum(float(m.group(3)) for m in windows) / len(windows),
        sum(int(m.group(2)) for m in windows),
        len(windows),
        cpu / handled * 1e6 if handled else float("nan"),
        before,
        load(),
        sent_rate=sum(sends[1:] or sends) / len(sends[1:] or sends),
        consumed_cpu_us=cpu / consumed * 1e6 if consumed else float("nan"),
    )


def show(run: Run) -> None:
    rt = "RT" if run.what == "produce" else "B2C"
    steady = ""
    if run.what == "steady":
        steady = (
            f"  (sent {run.sent_rate:.0f} msg/s beside it; broker CPU over the consumed alone"
            f" {run.consumed_cpu_us:.1f} µs/msg)"
        )
    print(
        f"  {run.side:<11} {run.what} -w {run.threads:<3} {run.tps:>9.0f} msg/s"
        f"  avg {rt} {run.avg_rt_ms:9.3f} ms  failed {run.failed}  ({run.lines} windows)"
        f"  broker CPU {run.broker_cpu_us:6.1f} µs/msg  load {run.load_before} -> {run.load_after}"
        f"{steady}",
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
        "--consumer-mode",
        choices=("backlog", "steady", "both"),
        default="backlog",
        help="consumer runs over the producer runs' backlog, beside a producer, or both",
    )
    ap.add_argument(
        "--steady-producers", type=int, default=64, help="producer threads beside a steady consumer"
    )
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
        for threads in (int(t) for t in args.threads.split(",") if t.strip()):
            pairs(
                f"producer -w {threads}, {args.size} B messages, {args.duration:.0f} s a run:",
                args.pairs,
                lambda side, _pair, t=threads: produce(  # type: ignore[misc]
                    work / side.name, side, t, args.size, args.duration
                ),
                (a, b),
            )
        if args.consumer_threads > 0 and args.consumer_mode != "steady":
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
        if args.consumer_threads > 0 and args.consumer_mode != "backlog":
            for side in started:
                make_topic(work / side.name, side.namesrv, STEADY_TOPIC)

            def measure_steady(side: Side, _pair: int) -> Run:
                return steady(
                    work / side.name,
                    side,
                    args.consumer_threads,
                    args.steady_producers,
                    args.size,
                    args.duration,
                )

            print("steady warm-up: one run on each side", flush=True)
            for side in started:
                show(measure_steady(side, -1))
            pairs(
                f"consumer -w {args.consumer_threads}, push, steady: a producer -w "
                f"{args.steady_producers} sending beside it, {args.duration:.0f} s a run:",
                args.pairs,
                measure_steady,
                (a, b),
            )
    finally:
        for side in reversed(started):
            side.stop()
        if not args.work_dir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
