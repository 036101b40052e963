"""Benchmarks of ``rocketstore bench``: each scenario is a function registered by name that
returns a dict of figures. Scenarios live one module per area and register on import."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Figures = dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    name: str
    area: str
    description: str
    run: Callable[..., Figures]


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    name: str, area: str, description: str
) -> Callable[[Callable[..., Figures]], Callable[..., Figures]]:
    def register(fn: Callable[..., Figures]) -> Callable[..., Figures]:
        SCENARIOS[name] = Scenario(name, area, description, fn)
        return fn

    return register


def load_all() -> dict[str, Scenario]:
    """Import every scenario module (each registers itself)."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return SCENARIOS
