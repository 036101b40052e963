"""The test suite's house rules, checked: test modules take what they share from the
``support`` package, never from one another; ports come from ``support.ports``; and no test
or shipped file reads a path outside the repository (the files RocketMQ wrote are in
tests/fixtures)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def _python_files(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_test_modules_import_no_test_module_and_no_loose_helper() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _python_files("tests", "benchmarks")
        for line, module in _imported_modules(path)
        if module.split(".")[0].startswith(("test_", "_")) and module != "__future__"
    ]
    assert not wrong, "shared helpers belong in tests/support:\n" + "\n".join(wrong)


def test_ports_are_chosen_in_one_place() -> None:
    copies = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in _python_files("tests")
        if path != TESTS / "support" / "ports.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and "free" in node.name and "port" in node.name
    ]
    assert not copies, "use support.ports: " + ", ".join(copies)


OUTSIDE = re.compile(r"/work/|\.\./shared|[\"']shared[\"']\s*/|/tmp/\w+/bin/python")


def test_no_file_names_a_path_outside_the_repository() -> None:
    files = _python_files("tests", "src", "benchmarks") + sorted((ROOT / "scripts").iterdir())
    named = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        if path.is_file()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line) and path != Path(__file__).resolve()
    ]
    assert not named, "\n".join(named)


def test_the_fixtures_the_tests_read_are_in_the_repository() -> None:
    from support.fixtures import FIXTURES, TRANSCRIPTS, tarball

    assert FIXTURES.is_relative_to(TESTS) and TRANSCRIPTS.is_relative_to(TESTS)
    for name in ("clean", "abort"):
        assert tarball(name).stat().st_size > 500_000
    assert {p.name for p in TRANSCRIPTS.glob("*.jsonl")} >= {
        "send.jsonl",
        "pull.jsonl",
        "push.jsonl",
        "retry.jsonl",
        "newtopic.jsonl",
    }
