"""`rocketstore bench` makes its scratch stores in a temporary directory of its own, never
inside a store, and removes what it made."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_default_directory_is_temporary_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "mine.txt").write_text("a user's file")
    made: list[str] = []
    real_mkdtemp = __import__("tempfile").mkdtemp

    def spy(*args: object, **kwargs: object) -> str:
        path = real_mkdtemp(*args, **kwargs)  # type: ignore[arg-type]
        made.append(path)
        return path

    monkeypatch.setattr("tempfile.mkdtemp", spy)
    r = CliRunner().invoke(
        main, ["bench", "--scenario", "put_async", "--messages", "300", "--json"]
    )
    assert r.exit_code == 0, r.output
    figures = json.loads(r.stdout)
    assert "put_async" in figures["results"] and "error" not in figures["results"]["put_async"]
    assert len(figures["machine"]["load_average"]) == 3
    assert sorted(os.listdir(tmp_path)) == ["store"]
    assert os.listdir(tmp_path / "store") == ["mine.txt"]
    assert made and not any(os.path.exists(p) for p in made)


def test_refuses_a_directory_inside_a_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore(
        StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20)
    ) as ms:
        assert ms.put_message(Message("T", b"keep me", 0)).ok
    before = _tree(root)
    for target in (root, root / "sub"):
        r = CliRunner().invoke(main, ["bench", "--store", str(target), "--scenario", "put_async"])
        assert r.exit_code != 0
        assert "holds a store" in r.output and "Traceback" not in r.output
    assert _tree(root) == before


def test_given_directory_keeps_its_files(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "notes.txt").write_text("keep")
    r = CliRunner().invoke(
        main, ["bench", "--store", str(scratch), "--scenario", "put_async", "--messages", "300"]
    )
    assert r.exit_code == 0, r.output
    assert os.listdir(scratch) == ["notes.txt"]
    fresh = tmp_path / "fresh"
    r = CliRunner().invoke(
        main, ["bench", "--store", str(fresh), "--scenario", "put_async", "--messages", "300"]
    )
    assert r.exit_code == 0, r.output
    assert not fresh.exists()
