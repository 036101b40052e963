"""The modules mypyc compiles from their own sources (``rocketstore._speedups.COMPILED_MODULES``).

- setup.py compiles exactly the modules ``_speedups`` names;
- ``ROCKETSTORE_NO_EXTENSIONS=1`` loads their ``.py`` sources, a build loads the compiled ones;
- their sources keep to what mypyc compiles as Python runs it (see docs/compiled-core.md);
- a broker scenario (sends of every kind, a batch, pulls, a malformed frame) writes the same
  answers and the same store files, byte for byte, over the compiled modules and the sources.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocketstore import _speedups
from support.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def _source(module: str) -> Path:
    return ROOT / "src" / (module.replace(".", "/") + ".py")


def _setup_modules() -> set[str]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MYPYC_MODULES" for t in node.targets
        ):
            paths = ast.literal_eval(node.value)
            return {p.removeprefix("src/").removesuffix(".py").replace("/", ".") for p in paths}
    raise AssertionError("setup.py has no MYPYC_MODULES")


def test_setup_compiles_the_modules_speedups_names() -> None:
    assert _setup_modules() == set(_speedups.COMPILED_MODULES)
    for module in _speedups.COMPILED_MODULES:
        assert _source(module).is_file(), module


def _loaded_files(env: dict[str, str]) -> dict[str, str]:
    code = (
        "import importlib, rocketstore._speedups as s\n"
        "for m in sorted(s.COMPILED_MODULES):\n"
        "    print(m, importlib.import_module(m).__file__)\n"
        "print('compiled_glue', s.compiled_glue())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


def _env(no_extensions: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ROCKETSTORE_NO_EXTENSIONS"}
    if no_extensions:
        env["ROCKETSTORE_NO_EXTENSIONS"] = "1"
    return env


def test_no_extensions_loads_the_sources() -> None:
    files = _loaded_files(_env(no_extensions=True))
    assert files.pop("compiled_glue") == "False"
    assert files == {m: str(_source(m)) for m in _speedups.COMPILED_MODULES}


def _built() -> bool:
    return all(
        any(_source(m).parent.glob(_source(m).stem + ".*.so")) for m in _speedups.COMPILED_MODULES
    )


@pytest.mark.skipif(not _built(), reason="mypyc's modules are not built in this tree")
def test_a_build_loads_the_compiled_modules() -> None:
    files = _loaded_files(_env(no_extensions=False))
    assert files.pop("compiled_glue") == "True"
    assert all(not f.endswith(".py") for f in files.values()), files


# ---- what mypyc compiles as Python runs it ---------------------------------------------------


def _trees() -> list[tuple[str, ast.Module]]:
    return [(m, ast.parse(_source(m).read_text())) for m in sorted(_speedups.COMPILED_MODULES)]


def test_no_slots_in_compiled_classes() -> None:
    """A compiled class has a fixed layout already; mypyc refuses ``__slots__`` at import."""
    found = [
        f"{m}:{n.lineno}"
        for m, tree in _trees()
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef)
        for s in n.body
        if isinstance(s, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in s.targets)
    ]
    assert not found


def test_an_exception_name_has_one_type_per_function() -> None:
    """mypyc gives ``except A as e`` and ``except B as e`` in one function one variable, typed
    by the first clause: a B then fails a type check that Python never makes."""
    found = []
    for m, tree in _trees():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            types: dict[str, set[str]] = {}
            for n in ast.walk(fn):
                if isinstance(n, ast.ExceptHandler) and n.name:
                    kind = ast.unparse(n.type) if n.type else "BaseException"
                    types.setdefault(n.name, set()).add(kind)
            found += [f"{m}:{fn.lineno} {name}" for name, t in types.items() if len(t) > 1]
    assert not found


def test_no_method_aliases_in_compiled_classes() -> None:
    """``close = shutdown`` in a class body is not an attribute mypyc's class has."""
    found = []
    for m, tree in _trees():
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            methods = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
            found += [
                f"{m}:{s.lineno}"
                for s in cls.body
                if isinstance(s, ast.Assign)
                and isinstance(s.value, ast.Name)
                and s.value.id in methods
            ]
    assert not found


# ---- the same bytes either way ---------------------------------------------------------------


def _scenario(out: Path, port: int, no_extensions: bool) -> str:
    out.mkdir()
    env = _env(no_extensions)  # the scenario imports tests/support
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-m", "support.glue_scenario", str(out), str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


@pytest.mark.skipif(not _built(), reason="mypyc's modules are not built in this tree")
def test_compiled_and_sources_write_the_same_bytes(tmp_path: Path) -> None:
    port = free_port()  # it names the store's host in message ids
    assert _scenario(tmp_path / "compiled", port, no_extensions=False) == "compiled"
    assert _scenario(tmp_path / "sources", port, no_extensions=True) == "sources"
    compiled, sources = _files(tmp_path / "compiled"), _files(tmp_path / "sources")
    assert sorted(compiled) == sorted(sources)
    assert len([f for f in compiled if f.startswith("store/consumequeue/")]) >= 6
    for name in compiled:
        assert compiled[name] == sources[name], name
    answers = compiled["answers.bin"]
    assert answers.count(b'"queueOffset"') >= 200  # the sends were answered


@pytest.mark.skipif(not _built(), reason="mypyc's modules are not built in this tree")
def test_a_library_that_fails_to_load_falls_back_to_the_sources() -> None:
    """Built modules whose shared library cannot be loaded (a broken install): the sources
    load instead, and the one warning line names the library."""
    code = (
        "import importlib.abc, importlib.machinery, logging, sys\n"
        "class Broken(importlib.abc.Loader):\n"
        "    def create_module(self, spec): raise ImportError('broken library')\n"
        "    def exec_module(self, module): pass\n"
        "class Finder(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'rocketstore__mypyc':\n"
        "            return importlib.machinery.ModuleSpec(name, Broken())\n"
        "sys.meta_path.insert(0, Finder())\n"
        "logging.basicConfig(format='%(levelname)s %(message)s')\n"
        "import rocketstore._speedups as s, rocketstore.store.log._commit_log as c\n"
        "print(c.__file__, s.compiled_glue(), s.missing_modules())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(no_extensions=False),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        str(_source("rocketstore.store.log._commit_log")),
        "False",
        "('rocketstore__mypyc',)",
    ]
    warnings = [line for line in out.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "rocketstore__mypyc" in warnings[0]
