"""Runs benchmark scenarios and prints their figures (a table, or JSON)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
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


class BenchDirectoryError(Exception):
    """The directory given for the benchmark's scratch stores cannot be used."""


def _holds_store(path: Path) -> bool:
    """Whether ``path`` looks like a store directory (a commit log, consume queues or a lock)."""
    return any((path / name).exists() for name in ("commitlog", "consumequeue", "lock", "abort"))


@contextlib.contextmanager
def scratch_directory(store: str | None) -> Iterator[Path]:
    """Where the scenarios make their stores: a new temporary directory (removed afterwards)
    unless ``store`` is given. A given directory must not hold a store, nor be inside one; the
    scenarios' own sub-directories are removed after each run, and the directory itself when the
    benchmark created it."""
    if store is None:
        with tempfile.TemporaryDirectory(prefix="rocketstore-bench-") as tmp:
            yield Path(tmp)
        return
    root = Path(store).resolve()
    for candidate in (root, *root.parents):
        if _holds_store(candidate):
            raise BenchDirectoryError(
                f"{candidate} holds a store: give --store a directory of its own "
                "(or leave it out for a temporary one)"
            )
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    try:
        yield root
    finally:
        if created:
            shutil.rmtree(root, ignore_errors=True)


def run_scenarios(
    scenarios: dict[str, Scenario],
    names: tuple[str, ...],
    store: str | None,
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
    with scratch_directory(store) as root:
        return _run(chosen, root, count, as_json)


def _run(chosen: list[Scenario], root: Path, count: int | None, as_json: bool) -> int:
    console = Console(stderr=True)
    console.print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[str, Any] = {}
    failed = 0
    for s in chosen:
        work = root / f"bench-{s.name}"
        if work.exists():
            raise BenchDirectoryError(f"{work} exists: remove it or give another --store")
        work.mkdir(parents=True)
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
            {"machine": _machine(), "results": results},
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
    return 1 if failed else 0


def _machine() -> dict[str, Any]:
    """What the figures were measured on, the load at the end of the run included."""
    return {
        "python": platform.python_version(),
        "cpus": _cpus(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
