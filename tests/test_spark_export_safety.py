"""``rocketstore export`` / ``import``: what a target directory held survives, a previous export
is replaced only when asked, and failures (no spark extra, an owned store, a failing job) are one
line without a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main


def _config(root: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 40,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export-safety") / "store"
    with MessageStore(_config(root)) as ms:
        for i in range(12):
            topic = "A" if i < 8 else "B"
            assert ms.put_message(Message(topic, b"m%d" % i, i % 2, tags="t")).ok
    return root


def _export(store: Path, to: Path | str, *extra: str) -> Result:
    args = ["export", "--store", str(store), "--to", str(to), *extra]
    return CliRunner().invoke(main, args)


_export_with = _export


def _one_line_error(r: Result, *needles: str) -> str:
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, SystemExit), r.exception  # nothing escaped click
    assert "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _user_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    (d / "part-00000.parquet").write_bytes(b"not ours either")
    return d


# ---- refused before Spark runs (no JVM needed) --------------------------------------------


def test_a_directory_with_a_users_file_is_refused_and_the_file_survives(
    store: Path, tmp_path: Path
) -> None:
    d = _user_dir(tmp_path)
    for extra in ((), ("--overwrite",)):
        _one_line_error(_export(store, d, *extra), "data", "export did not write")
        assert (d / "notes.txt").read_text() == "mine"
        assert sorted(p.name for p in d.iterdir()) == ["notes.txt", "part-00000.parquet"]
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # nothing staged beside it


def test_a_subdirectory_makes_a_directory_foreign(store: Path, tmp_path: Path) -> None:
    d = tmp_path / "out"
    (d / "part-00000").mkdir(parents=True)
    (d / "_SUCCESS").write_bytes(b"")
    _one_line_error(_export(store, d, "--overwrite"), "export did not write")
    assert (d / "part-00000").is_dir()


def test_the_current_directory_is_refused(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    _one_line_error(_export(store, ".", "--overwrite"), "current")  # even empty
    (here / "keep.txt").write_text("x")
    _one_line_error(_export(store, ".", "--overwrite"), "current")
    _one_line_error(_export(store, "..", "--overwrite"), "export did not write")
    assert (here / "keep.txt").read_text() == "x"


def test_a_file_as_target_is_refused(store: Path, tmp_path: Path) -> None:
    f = tmp_path / "out"
    f.write_text("a file")
    _one_line_error(_export(store, f, "--overwrite"), "not a directory")
    _one_line_error(_export(store, f"file://{f}", "--overwrite"), "not a directory")
    assert f.read_text() == "a file"
    _one_line_error(_export(store, "s3a://bucket/out"), "local directory")
    # a file named like an export's file is replaced only when an export wrote it
    for name in ("out.parquet", "out.jsonl"):
        g = tmp_path / name
        g.write_text("a file")
        for target in (g, f"file://{g}"):
            _one_line_error(_export(store, target, "--overwrite"), "not a previous export")
        assert g.read_text() == "a file"
        g.unlink()
        assert _export(store, g).exit_code == 0
        _one_line_error(_export(store, g), "add --overwrite")
        assert _export(store, f"file://{g}", "--overwrite").exit_code == 0


def _block(monkeypatch: pytest.MonkeyPatch, top: str) -> None:
    monkeypatch.setitem(sys.modules, top, None)  # import top → ModuleNotFoundError
    for name in [n for n in sys.modules if n.startswith(f"{top}.")]:
        monkeypatch.setitem(sys.modules, name, None)


def test_without_pyspark_export_and_import_run_and_spark_is_one_line(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _block(monkeypatch, "pyspark")
    r = _export(store, tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["exported"] == 12
    r = CliRunner().invoke(
        main, ["import", "--store", str(tmp_path / "s"), "--from", str(tmp_path / "out")]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["imported"] == 12
    hint = "running it on Spark needs pyspark: pip install pyspark"
    _one_line_error(_export(store, tmp_path / "again", "--spark"), hint)
    r = CliRunner().invoke(
        main, ["import", "--store", str(tmp_path / "s"), "--from", str(tmp_path / "out"), "--spark"]
    )
    _one_line_error(r, hint)
    assert not (tmp_path / "again").exists()


def test_without_pyarrow_one_line_with_the_hint(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _block(monkeypatch, "pyarrow")
    _one_line_error(_export(store, tmp_path / "out"), "needs pyarrow: pip install pyarrow numpy")
    src = tmp_path / "in.json"
    src.write_text('{"topic": "T", "body": "x"}\n')
    r = CliRunner().invoke(main, ["import", "--store", str(tmp_path / "s"), "--from", str(src)])
    _one_line_error(r, "pip install pyarrow numpy")
    assert not (tmp_path / "out").exists() and not (tmp_path / "s").exists()


_BLOCK = """
import sys

BLOCKED = sys.argv.pop(1).split(",")


class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocked())
from rocketstore.cli import main

main()
"""


@pytest.mark.parametrize("command", ["export", "import"])
def test_without_pyspark_the_command_line_runs_without_a_jvm(
    store: Path, tmp_path: Path, command: str
) -> None:
    import subprocess

    args = (
        ["export", "--store", str(store), "--to", str(tmp_path / "out")]
        if command == "export"
        else ["import", "--store", str(tmp_path / "s"), "--from", str(tmp_path / "in.json")]
    )
    (tmp_path / "in.json").write_text('{"topic": "T", "body": "x"}\n')

    def run(blocked: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _BLOCK, blocked, *args, *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = run("pyspark,py4j")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout)[f"{command}ed"] == (12 if command == "export" else 1)
    done = run("pyspark", "--spark")
    assert done.returncode != 0 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install pyspark" in lines[0], done.stderr
    done = run("pyarrow")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install pyarrow numpy" in lines[0], done.stderr


# ---- with Spark ----------------------------------------------------------------------------


@pytest.mark.spark
def test_import_into_an_owned_store_is_one_line(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "in.json"
    src.write_text('{"topic": "T", "body": "x"}\n')
    owned = tmp_path / "owned"
    with MessageStore(_config(owned)):
        import os

        r = CliRunner().invoke(main, ["import", "--store", str(owned), "--from", str(src)])
        _one_line_error(r, f"owned by process {os.getpid()}", "--namesrv")
    r = CliRunner().invoke(main, ["import", "--store", str(owned), "--from", str(tmp_path / "no")])
    _one_line_error(r, "does not exist")


B_BODIES = sorted([b"m8", b"m9", b"m10", b"m11"])


def _rows(spark: Any, d: Path) -> list[bytes]:
    return sorted(bytes(r.body) for r in spark.read.parquet(str(d)).collect())


@pytest.mark.spark
@pytest.mark.parametrize("engine", [(), ("--spark",)], ids=["pyarrow", "spark"])
def test_new_or_empty_target_then_overwrite_only_a_previous_export(
    spark: Any, store: Path, tmp_path: Path, engine: tuple[str, ...]
) -> None:
    def _export(store: Path, to: Path | str, *extra: str) -> Result:
        return _export_with(store, to, *extra, *engine)

    new = tmp_path / "new"
    r = _export(store, new, "--topic", "A")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["exported"] == 8
    assert _rows(spark, new) == sorted(b"m%d" % i for i in range(8))
    assert json.loads((new / "_rocketstore_export.json").read_text())["rows"] == 8

    empty = tmp_path / "empty"
    empty.mkdir()
    assert _export(store, empty, "--topic", "B").exit_code == 0
    assert _rows(spark, empty) == B_BODIES

    # a previous export: refused without --overwrite, replaced with it
    before = sorted(p.name for p in new.iterdir())
    _one_line_error(_export(store, new, "--topic", "B"), "--overwrite")
    assert sorted(p.name for p in new.iterdir()) == before
    r = _export(store, new, "--topic", "B", "--overwrite")
    assert r.exit_code == 0, r.output
    assert _rows(spark, new) == B_BODIES

    # a failing export leaves the previous one as it was, and nothing beside it
    before = {p.name: p.read_bytes() for p in new.iterdir()}
    r = _export(store, new, "--topic", "B", "--overwrite", "--starting-offsets", "{bad json")
    _one_line_error(r, "export failed", "startingOffsets")
    assert {p.name: p.read_bytes() for p in new.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "new"]

    # an export without the marker (Spark's own files only) counts as a previous export too
    (new / "_rocketstore_export.json").unlink()
    r = _export(store, new, "--topic", "A", "--overwrite", "--format", "json")
    assert r.exit_code == 0, r.output
    assert spark.read.json(str(new)).count() == 8
