"""benchmarks/broker_compare.py gives a verdict for each measured figure, not for what a
scenario prints about its own set-up (message counts, rounds, producers, window)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "broker_compare.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("broker_compare_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_measured_figures_get_a_verdict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = _script()
    rates = iter([100.0, 120.0, 100.0, 130.0])

    def run_once(scenarios: list[str], env_name: str, value: str, args: Any) -> Any:
        return {
            "broker-send-many": {
                "producers": 64,
                "messages": 3000,
                "window": 8,
                "seconds": 1.5,
                "async_many_msgs_per_s": next(rates),
            }
        }

    monkeypatch.setattr(module, "run_once", run_once)
    monkeypatch.setattr(sys, "argv", ["broker_compare.py", "--runs", "2"])
    module.main()
    out = capsys.readouterr().out
    assert "broker-send-many async_many_msgs_per_s" in out
    assert "by pair 1.20 / 1.30: up" in out
    for setup in ("producers", "messages ", "window", "seconds"):
        assert f"broker-send-many {setup}" not in out
