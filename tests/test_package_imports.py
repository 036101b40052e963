"""The import graph inside spark/ and cli/ has no cycles, counting every import: module level,
inside functions and under TYPE_CHECKING. And spark/'s options module stands alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rocketstore"


def _modules(package: str) -> dict[str, tuple[Path, bool]]:
    root = SRC / package
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
        out[".".join(["rocketstore", package, *parts])] = (path, path.name == "__init__.py")
    return out


def _graph(package: str) -> dict[str, set[str]]:
    """Module → the modules of ``package`` it imports anywhere in its source."""
    mods = _modules(package)

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, is_package) in mods.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here[: len(here) - (node.level - 1)]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                # ``from . import _x`` imports the submodule, not something of the package
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            for target in targets:
                hit = known(target)
                if hit is not None and hit != name:
                    graph[name].add(hit)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_cycle_finder_sees_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", ["spark", "cli"])
def test_no_import_cycle(package: str) -> None:
    graph = _graph(package)
    assert len(graph) > 3
    assert _cycle(graph) is None


def test_spark_options_import_nothing_else_of_spark() -> None:
    assert _graph("spark")["rocketstore.spark._options"] == set()
