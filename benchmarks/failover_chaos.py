"""The fault harness at length: a controller-mode group of three rocketstore brokers
(``allAckInSyncStateSet=true``, ``minInSyncReplicas=2``, every timing at its default) under the
project's client and the official RocketMQ 4.x client, with ``--faults`` mixed faults on a seeded
schedule, then the checker's verdict (see tests/support/chaos.py):

    sudo python benchmarks/failover_chaos.py [--faults 100] [--seed 30] [--backend etcd|file]
        [--kinds kill_master,kill_slave,...] [--minutes M] [--work-dir DIR] [--keep]
        [--json OUT]

The faults: kill -9 of the master, of a slave, of the active controller (three controllers over
a 3-member etcd cluster on loopback with ``--backend etcd``, the default when ``etcd`` is
installed; else the one file-backed controller is killed and started again), SIGSTOP of the
master past the election timeout then SIGCONT, a partition cutting the master off from the
controllers and the slaves (network namespaces: as root with ``ip``; elsewhere left out and
said so), and kill -9 of every broker, controller and the name server at once. Each fault is
healed (the group whole, every broker in the SyncStateSet) before the next. ``--minutes``
bounds the run: no fault is begun after that time (the verdict says how many were injected).

It prints one line per fault and at the end the verdict: acknowledged keys lost, duplicates,
replicas divergent below the confirm offset, reader anomalies, and per kind of fault on the
master the time from the fault to the first send acknowledged by another broker (p50, p99,
max). Exit status 1 when a key was lost, a replica diverged or the reader saw a queue go back.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.chaos import FAULT_KINDS, run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument(
        "--backend", choices=("etcd", "file"), default="etcd" if shutil.which("etcd") else "file"
    )
    parser.add_argument("--kinds", default=",".join(FAULT_KINDS))
    parser.add_argument(
        "--minutes", type=float, default=None, help="begin no fault after this many minutes"
    )
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", default=None, help="write the verdict here")
    parser.add_argument("--no-official-client", action="store_true")
    args = parser.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        parser.error(f"unknown fault kinds: {unknown} (known: {', '.join(FAULT_KINDS)})")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="failover-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    # the schedule, drawn from the seed
    import random

    rnd = random.Random(args.seed)
    schedule = [rnd.choice(kinds) for _ in range(args.faults)]
    began = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - began:8.1f} s] {text}", flush=True)

    log(f"{args.faults} faults, seed {args.seed}, {args.backend} backend, work {work}")
    log(f"load average {os.getloadavg()[0]:.2f}")
    try:
        verdict, history, cluster = run_chaos(
            work,
            schedule,
            backend=args.backend,
            seed=args.seed,
            official_client=not args.no_official_client,
            log=log,
            max_seconds=None if args.minutes is None else args.minutes * 60.0,
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    summary = verdict.summary()
    summary["scheduled"] = args.faults
    summary["seed"] = args.seed
    summary["backend"] = args.backend
    summary["netns"] = cluster.topology.can_partition
    summary["elapsed_s"] = round(time.monotonic() - began, 1)
    summary["load_average"] = round(os.getloadavg()[0], 2)
    summary["by_client"] = {
        c: {
            "sends": sum(1 for o in history.ops if o.client == c),
            "acked": sum(1 for o in history.ops if o.client == c and o.outcome == "ok"),
        }
        for c in sorted({o.client for o in history.ops})
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
