"""The broker scenarios under two settings, run alternately, figures side by side.

    python benchmarks/broker_compare.py [--scenario broker-send ...] [--runs 3]
        [--vary loop|pin] [--messages N] [--store DIR]

``--vary loop`` (the default) alternates the broker's event loop between asyncio and uvloop
(``ROCKETSTORE_BENCH_BROKER_LOOP``); ``--vary pin`` alternates unpinned and pinned (broker on
CPU 0, clients on CPU 1: ``ROCKETSTORE_BENCH_PIN``). Each run is a ``rocketstore bench --json``
process of its own; the machine's speed drifts, so compare within a pair of runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

# what a scenario prints about its own set-up: the same in both settings, not a measurement
SETUP_FIGURES = frozenset(("messages_per_round", "rounds", "producers", "messages", "window"))

SETTINGS = {
    "loop": ("ROCKETSTORE_BENCH_BROKER_LOOP", ("asyncio", "uvloop")),
    "pin": ("ROCKETSTORE_BENCH_PIN", ("0", "1")),
}


def run_once(scenarios: list[str], env_name: str, value: str, args: argparse.Namespace) -> Any:
    cmd = [sys.executable, "-m", "rocketstore.cli", "bench", "--json"]
    if args.store:
        cmd += ["--store", args.store]
    for s in scenarios:
        cmd += ["--scenario", s]
    if args.messages:
        cmd += ["--messages", str(args.messages)]
    out = subprocess.run(
        cmd, capture_output=True, env={**os.environ, env_name: value}, check=False, timeout=3600
    )
    if not out.stdout.strip():
        raise RuntimeError(out.stderr.decode(errors="replace")[-2000:])
    return json.loads(out.stdout)["results"]


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", action="append", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--vary", choices=sorted(SETTINGS), default="loop")
    ap.add_argument("--messages", type=int, default=None)
    ap.add_argument(
        "--store", default=None, help="scratch directory (default: a new temporary one)"
    )
    args = ap.parse_args()
    scenarios = args.scenario or [
        "broker-send",
        "broker-send-many",
        "broker-pull",
        "broker-longpoll",
    ]
    env_name, values = SETTINGS[args.vary]
    table: dict[tuple[str, str], list[list[Any]]] = {}
    for run in range(args.runs):
        for value in values:
            before = load()
            results = run_once(scenarios, env_name, value, args)
            print(f"run {run + 1}, {env_name}={value} (load {before})", flush=True)
            for name, figures in results.items():
                for key, v in figures.items():
                    if (
                        isinstance(v, (int, float))
                        and key != "seconds"
                        and key not in SETUP_FIGURES
                    ):
                        row = table.setdefault((name, key), [[] for _ in values])
                        row[values.index(value)].append(v)
                if "error" in figures:
                    print(f"  {name}: {figures['error']}", flush=True)
    print(f"\n{'scenario / figure':58} " + "  ".join(f"{v:>26}" for v in values))
    for (name, key), cols in table.items():
        cells = "  ".join(f"{' / '.join(_fmt(x) for x in col):>26}" for col in cols)
        r = [b / a for a, b in zip(*cols, strict=False) if a]
        v = "up" if r and min(r) > 1 else "down" if r and max(r) < 1 else "no measurable difference"
        print(f"{name + ' ' + key:58} {cells}  by pair {' / '.join(f'{x:.2f}' for x in r)}: {v}")
    print(f"load average after: {load()}")


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


if __name__ == "__main__":
    main()
