"""SYNC_MASTER against ASYNC_MASTER through the broker, and against another build's SYNC_MASTER,
in alternated rounds (each ``rocketstore serve`` with a slave process attached).

    python benchmarks/sync_master_compare.py [--pairs 3] [--messages 64000]
        [--other-src OTHER_CHECKOUT/src] [--java --duration 30] [--work-dir DIR]

Sides: this build as ASYNC_MASTER and as SYNC_MASTER and, with ``--other-src`` (another
checkout's ``src`` directory, built in place), that build as SYNC_MASTER and ASYNC_MASTER: its
broker and slave processes run with ``PYTHONPATH`` set to it, the load (client side) is this
build's.

The load, default: per round a new broker and slave on an empty store; 32 connections of
pre-encoded SEND_MESSAGE_V2 frames with 8 outstanding on each (``raw``, the broker's ceiling),
after a warm-up of 6,400, then 32 AsyncProducers with 8 sends in flight each (``producers``),
as ``rocketstore bench --scenario ha_broker_sync_master``. ``--java``: RocketMQ 4.9.8's
benchmark producer (64 threads, 1 KiB) instead, every side started once, warmed by an 8-thread
run of 20 s on the very processes then measured, ``--duration`` seconds a run (needs
``ROCKETMQ_CLASSPATH``, see benchmarks/java_producer_compare.py).

Each figure is printed with the broker's CPU a message and the load average after it; ratios
are taken within a round (one pair each).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rocketstore import StoreConfig
from rocketstore.bench.broker import (
    BrokerServer,
    _body,
    _create_topic,
    _many_round,
    _raw_round,
    broker_server,
)
from rocketstore.bench.ha import _slave_of

ROLES = {"async": "ASYNC_MASTER", "sync": "SYNC_MASTER"}


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


@contextlib.contextmanager
def side(root: Path, role: str, src: str | None) -> Iterator[BrokerServer]:
    """A ``serve`` as ``role`` with a slave, both from ``src`` (None: this build)."""
    old = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(broker_server(str(root), role=role, want_ha=True))
            size = StoreConfig().mapped_file_size_commit_log
            stack.enter_context(_slave_of(str(root) + "-slave", server.ha_address, size))
            if src is not None:  # the client side stays this build's
                if old is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = old
            yield server
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def sides(other: str | None) -> list[tuple[str, str, str | None]]:
    out = [("async", "ASYNC_MASTER", None), ("sync", "SYNC_MASTER", None)]
    if other is not None:
        out += [("other-sync", "SYNC_MASTER", other), ("other-async", "ASYNC_MASTER", other)]
    return out


def project_rounds(work: Path, pairs: int, n: int, other: str | None) -> None:
    body = _body()
    for r in range(pairs):
        rates: dict[str, tuple[float, float]] = {}
        for name, role, src in sides(other):
            with side(work / f"{name}-{r}", role, src) as server:
                _create_topic(server)
                _raw_round(server, 32, min(n, 6400), body, 8)  # warm-up
                raw, raw_cpu = _raw_round(server, 32, n, body, 8)
                many, many_cpu, _client = _many_round(server, 32, n, body, 8)
            rates[name] = (raw, many)
            print(
                json.dumps(
                    {
                        "round": r + 1,
                        "side": name,
                        "raw_msgs_per_s": round(raw),
                        "raw_broker_cpu_us": raw_cpu,
                        "producers_msgs_per_s": round(many),
                        "producers_broker_cpu_us": many_cpu,
                        "load": load(),
                    }
                ),
                flush=True,
            )
        ratios: dict[str, float] = {"round": r + 1}
        for a, b in (("sync", "async"), ("other-sync", "other-async"), ("sync", "other-sync")):
            if a in rates and b in rates:
                for i, what in enumerate(("raw", "producers")):
                    ratios[f"{a}/{b} {what}"] = round(rates[a][i] / rates[b][i], 3)
        print(json.dumps(ratios), flush=True)


def java_rounds(work: Path, pairs: int, duration: float, other: str | None) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import java_producer_compare as j

    class Side(j.Side):
        def __init__(self, name: str, server: BrokerServer) -> None:
            self.name = name
            self.namesrv = server.namesrv
            self.broker_pid = server.proc.pid

    with contextlib.ExitStack() as stack:
        measured = []
        for name, role, src in sides(other):
            server = stack.enter_context(side(work / name, role, src))
            s = Side(name, server)
            for attempt in range(3):  # mqadmin's first request may miss on a loaded machine
                try:
                    j.make_topic(work, s.namesrv)
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
            j.show(j.produce(work, s, j.WARMUP_THREADS, 1024, 20.0))  # warm-up
            measured.append(s)
        for _ in range(pairs):
            for s in measured:
                j.show(j.produce(work, s, 64, 1024, duration))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=64_000)
    ap.add_argument("--other-src", default=None, help="another build's src directory")
    ap.add_argument("--java", action="store_true", help="RocketMQ's benchmark producer")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds a Java run")
    ap.add_argument("--work-dir", default=None, help="default: a new temporary directory")
    args = ap.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="sync-master-"))
    try:
        if args.java:
            java_rounds(work, args.pairs, args.duration, args.other_src)
        else:
            project_rounds(work, args.pairs, args.messages, args.other_src)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
