"""benchmarks/profile_paths.py times the path it names and nothing else: the store's shutdown
(the flush of every file, the threads joined) stays out of the timed and profiled run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rocketstore import MessageStore

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "profile_paths.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("profile_paths_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", ["put", "recover"])
def test_the_timed_run_does_not_shut_the_store_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    module = _script()
    prepare, run, finish = module.PATHS[path](tmp_path / "store", 200)
    shutdowns: list[MessageStore] = []
    real = MessageStore.shutdown

    def counted(self: MessageStore) -> None:
        shutdowns.append(self)
        real(self)

    monkeypatch.setattr(MessageStore, "shutdown", counted)
    prepare()
    run()
    assert shutdowns == []  # the run left its store open: its shutdown was not timed
    prepare()  # the next run's preparation shuts the last one down
    assert len(shutdowns) == 1
    run()
    finish()
    assert len(shutdowns) == 2
    finish()  # nothing left to shut down
    assert len(shutdowns) == 2


def test_prints_a_profile_and_removes_its_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "put", "--messages", "300", "--top", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(work)},
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines[0].startswith("put: 300 messages")
    assert "load average" in lines[0] and "without the profiler" in lines[0]
    assert len(lines) == 5  # the heading, the column names, the top 3
    assert list(work.iterdir()) == []
