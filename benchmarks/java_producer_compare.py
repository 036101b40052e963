"""RocketMQ's own benchmark producer against rocketstore's broker and against RocketMQ's broker,
run alternately (A B A B ...), with the ratio of each pair.

    ROCKETMQ_CLASSPATH=... python benchmarks/java_producer_compare.py [--pairs 3]
        [--duration 30] [--threads 1,64] [--size 1024] [--work-dir DIR] [--keep]

A is ``rocketstore serve`` (ASYNC_FLUSH, no gRPC, console or metrics), B is RocketMQ 4.9.8's
NamesrvStartup and BrokerStartup (ASYNC_FLUSH, 1 GiB commit-log files like rocketstore's
default); each run starts its side afresh on an empty store under the work directory (a new
temporary one unless given), makes topic ``JavaBench`` with 8 queues with mqadmin, then runs
``org.apache.rocketmq.example.benchmark.Producer`` (``-w`` sending threads, ``-s`` bytes a
message) for ``--duration`` seconds. The producer prints the send rate of the last 10 s every
10 s; the first such line (the JVM warming up) is dropped and the rest averaged. The machine's
speed drifts, so compare within a pair; the load average is printed with each run.

``ROCKETMQ_CLASSPATH`` (or ``--classpath``) must hold RocketMQ 4.9.8's namesrv, broker, tools,
client and example.benchmark classes and their dependencies; see tests/_rocketmq_java.py.
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

import _rocketmq_java as rj
from _interop import ServerProcess, free_port

PRODUCER = "org.apache.rocketmq.example.benchmark.Producer"
ADMIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
TOPIC = "JavaBench"
_TPS = re.compile(
    r"Send TPS: (\d+) Max RT\(ms\): (\d+) Average RT\(ms\):\s*([\d.]+) Send Failed: (\d+)"
)


@dataclass
class Run:
    side: str
    threads: int
    tps: float
    avg_rt_ms: float
    max_rt_ms: int
    failed: int
    lines: int
    load_before: str
    load_after: str


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def start_rocketstore(root: Path) -> tuple[ServerProcess, str]:
    root.mkdir(parents=True)
    args = [sys.executable, "-c", "from rocketstore.cli import main; main()", "serve"]
    args += ["--store", str(root / "store"), "--flush", "ASYNC_FLUSH"]
    args += ["--namesrv-listen", f"127.0.0.1:{free_port()}", "--listen", "127.0.0.1:0"]
    args += ["--grpc-listen", "", "--metrics-listen", "", "--console-listen", ""]
    args += ["--log-dir", str(root / "logs")]
    server = ServerProcess(args, root / "serve.log", want_namesrv=True, want_broker=True)
    server._wait_started(60.0)
    assert server.namesrv is not None
    return server, server.namesrv


def make_topic(root: Path, namesrv: str) -> None:
    cmd = rj.java_command(root, ADMIN, "updateTopic", "-n", namesrv, "-c", "DefaultCluster")
    cmd += ["-t", TOPIC, "-r", "8", "-w", "8"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=rj.java_env(root), check=False
    )
    if "success" not in done.stdout:
        raise RuntimeError(f"updateTopic failed:\n{done.stdout}\n{done.stderr[-2000:]}")


def produce(root: Path, namesrv: str, threads: int, size: int, duration: float) -> list[str]:
    """Run the benchmark producer for about ``duration`` seconds; its lines."""
    cmd = rj.java_command(
        root,
        PRODUCER,
        *("-n", namesrv, "-t", TOPIC, "-w", str(threads), "-s", str(size)),
        opts=rj.BENCH_JAVA_OPTS,
    )
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
    # a rate line every 10 s once it runs: wait for as many as the duration holds
    want = max(1, int(duration // 10))
    deadline = time.monotonic() + duration + 15
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if sum(1 for line in list(lines) if _TPS.search(line)) >= want:
                break
            time.sleep(0.2)
    finally:
        rj.kill_process(proc)
        reader.join(10)
    return lines


def one_run(side: str, work: Path, threads: int, args: argparse.Namespace) -> Run:
    root = work / f"{side}-{threads}-{time.monotonic_ns()}"
    stop: list[Callable[[], object]] = []
    try:
        if side == "rocketstore":
            server, namesrv = start_rocketstore(root)
            stop.append(server.stop)
        else:
            servers = rj.RocketMQServers.start(
                root,
                opts=["-Xms2g", "-Xmx2g", "-XX:MaxDirectMemorySize=2g", *rj.OPENS],
                mappedFileSizeCommitLog=str(1024 * 1024 * 1024),
            )
            stop.append(servers.stop)
            namesrv = servers.namesrv
        make_topic(root, namesrv)
        before = load()
        lines = produce(root, namesrv, threads, args.size, args.duration)
        after = load()
    finally:
        for fn in reversed(stop):
            fn()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    stats = [m for m in map(_TPS.search, lines) if m]
    steady = stats[1:] or stats
    if not steady:
        raise RuntimeError(f"{side}: no TPS lines from the producer:\n" + "\n".join(lines[-30:]))
    return Run(
        side,
        threads,
        sum(int(m.group(1)) for m in steady) / len(steady),
        sum(float(m.group(3)) for m in steady) / len(steady),
        max(int(m.group(2)) for m in steady),
        sum(int(m.group(4)) for m in steady),
        len(steady),
        before,
        after,
    )


def show(run: Run) -> None:
    print(
        f"  {run.side:<11} -w {run.threads:<3} {run.tps:>9.0f} msg/s  avg RT {run.avg_rt_ms:7.3f} ms"
        f"  max RT {run.max_rt_ms:5d} ms  failed {run.failed}  ({run.lines} lines)"
        f"  load {run.load_before} -> {run.load_after}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds a run")
    ap.add_argument("--threads", default="1,64", help="sending threads, comma separated")
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--work-dir", default=None, help="default: a new temporary directory")
    ap.add_argument("--keep", action="store_true", help="keep each run's stores and logs")
    ap.add_argument("--classpath", default=None, help="default: $ROCKETMQ_CLASSPATH")
    args = ap.parse_args()
    if args.classpath:
        rj.CLASSPATH = args.classpath
    if not rj.CLASSPATH or rj.JAVA is None:
        sys.exit(f"error: {rj.unavailable() or 'no classpath'}")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="java-producer-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    compiled = not os.environ.get("ROCKETSTORE_NO_EXTENSIONS")
    print(f"work dir {work}; rocketstore compiled core {'on' if compiled else 'off'}")
    try:
        for threads in (int(t) for t in args.threads.split(",")):
            ratios = []
            print(f"-w {threads}, {args.size} B messages, {args.duration:.0f} s a run:")
            for pair in range(args.pairs):
                a = one_run("rocketstore", work, threads, args)
                show(a)
                b = one_run("rocketmq", work, threads, args)
                show(b)
                ratios.append(a.tps / b.tps if b.tps else float("nan"))
                print(f"  pair {pair + 1}: rocketstore / RocketMQ = {ratios[-1]:.3f}", flush=True)
            print(f"  ratios {', '.join(f'{r:.3f}' for r in ratios)}")
    finally:
        if not args.work_dir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
