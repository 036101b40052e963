"""Runs benchmark scenarios and prints their figures (a table, or JSON)."""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import Scenario

# what a plain ``rocketstore bench`` runs: write, read back, and the put path against the floor
DEFAULT_SCENARIOS = ("put_async", "put_batch", "put_sync", "get_message", "dispatch_lag")
# scenarios of these areas run only when named (they are slow or need extras), even with --all
OPT_IN_AREAS = frozenset({"spark"})


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def run_scenarios(
    scenarios: dict[str, Scenario],
    names: tuple[str, ...],
    store: str,
    count: int | None,
    as_json: bool,
    run_all: bool = False,
) -> int:
    if names:
        chosen = [scenarios[n] for n in names]
    elif run_all:
        chosen = [s for s in scenarios.values() if s.area not in OPT_IN_AREAS]
    else:
        chosen = [scenarios[n] for n in DEFAULT_SCENARIOS if n in scenarios]
    console = Console(stderr=True)
    root = Path(store)
    results: dict[str, Any] = {}
    failed = 0
    for s in chosen:
        work = root / f"bench-{s.name}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        console.print(f"[bold]{s.name}[/bold]: {s.description}")
        started = time.perf_counter()
        try:
            figures = s.run(str(work), count)
        except Exception as exc:  # report and go on with the other scenarios
            figures = {"error": f"{type(exc).__name__}: {exc}"}
            failed += 1
        figures["seconds"] = round(time.perf_counter() - started, 2)
        results[s.name] = figures
        shutil.rmtree(work, ignore_errors=True)
        if not as_json:
            table = Table(title=s.name, show_header=False)
            for k, v in figures.items():
                table.add_row(k, _fmt(v))
            Console().print(table)
    if as_json:
        json.dump(
            {"machine": {"python": platform.python_version(), "cpus": _cpus()}, "results": results},
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
    return 1 if failed else 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
