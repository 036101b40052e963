"""``rocketstore tier``: tiers every sealed commit-log file of a store no broker runs and says
what it did; every refusal is one line with a hint (no traceback). ``serve`` / ``broker``
take ``--tiered-dir``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("pyarrow")

from rocketstore.cli import main
from rocketstore.store._lock import StoreLock
from rocketstore.store._store import MessageStore
from rocketstore.tier._manifest import load_covered
from support.tier_helpers import (
    assert_same_rows,
    fill,
    source_rows,
    split_at,
    store_config,
    tier_rows,
)


def _store(tmp_path: Path, count: int = 1200) -> Path:
    with MessageStore(store_config(tmp_path / "store")) as store:
        fill(store, count)
    return tmp_path / "store"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_tier_writes_the_sealed_files_and_reports_them(tmp_path: Path) -> None:
    store, tiered = _store(tmp_path), tmp_path / "tier"
    code, out, err = _run("tier", "--store", str(store), "--tiered-dir", str(tiered), "--json")
    assert code == 0, err
    report = json.loads(out)
    covered = load_covered(tiered)
    assert report["covered"] == covered > 0 and report["complete"]
    rows = tier_rows(tiered)
    assert report["rows"] == rows.num_rows > 0
    assert report["commitlog_bytes"] == covered and report["commitlog_files"] >= 4
    assert 0 < report["ratio"] < 0.7
    below, _ = split_at(source_rows(store), covered)
    assert_same_rows(rows, below)
    code, out, _ = _run("tier", "--store", str(store), "--tiered-dir", str(tiered))
    assert code == 0 and out.startswith("nothing to tier")


def test_tier_prints_one_line(tmp_path: Path) -> None:
    store, tiered = _store(tmp_path), tmp_path / "tier"
    code, out, _ = _run("tier", "--store", str(store), "--tiered-dir", str(tiered))
    assert code == 0
    assert out.count("\n") == 1 and out.startswith("tiered ") and "ratio 0." in out


def test_a_store_a_broker_owns_is_refused(tmp_path: Path) -> None:
    store, tiered = _store(tmp_path), tmp_path / "tier"
    lock = StoreLock(store)
    lock.acquire()
    try:
        code, _out, err = _run("tier", "--store", str(store), "--tiered-dir", str(tiered))
    finally:
        lock.release()
    assert code == 1 and "owned by process" in err and err.count("\n") == 1
    assert "let the broker tier its own files (--tiered-dir" in err, err  # not "produce"
    assert not tiered.exists()


@pytest.mark.parametrize("case", ["no store", "inside the store", "a file"])
def test_bad_paths_are_refused_in_one_line(tmp_path: Path, case: str) -> None:
    store = _store(tmp_path, 10)
    if case == "no store":
        args = ["--store", str(tmp_path / "nothing"), "--tiered-dir", str(tmp_path / "t")]
        want = "no store at"
    elif case == "inside the store":
        args = ["--store", str(store), "--tiered-dir", str(store / "tier")]
        want = "must not be inside the store"
    else:
        (tmp_path / "f").write_text("x")
        args = ["--store", str(store), "--tiered-dir", str(tmp_path / "f")]
        want = "is not a directory"
    code, _out, err = _run("tier", *args)
    assert code == 1 and want in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_damaged_manifest_is_one_line(tmp_path: Path) -> None:
    store, tiered = _store(tmp_path), tmp_path / "tier"
    (tiered / "TopicA").mkdir(parents=True)
    (tiered / "TopicA" / "_manifest.json").write_text("{not json")
    code, _out, err = _run("tier", "--store", str(store), "--tiered-dir", str(tiered))
    assert code == 1 and "_manifest.json" in err and err.count("\n") == 1


def test_a_damaged_record_that_stops_tiering_exits_1(tmp_path: Path) -> None:
    store, tiered = _store(tmp_path), tmp_path / "tier"
    second = sorted((store / "commitlog").iterdir())[1]
    with open(second, "r+b") as f:  # the first record's length
        f.seek(1)
        f.write(b"\x7f")
    code, out, err = _run("tier", "--store", str(store), "--tiered-dir", str(tiered))
    assert code == 1
    assert f"{second} position 0" in err and "stopped at a damaged record" in err
    assert load_covered(tiered) == int(second.name)
    assert out.startswith("tiered 1 commit-log file(s)")


def test_no_traceback_reaches_the_terminal(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rocketstore.cli",
            "tier",
            "--store",
            str(tmp_path / "x"),
            "--tiered-dir",
            str(tmp_path / "t"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("Error: no store at")


def test_broker_and_serve_take_a_tiered_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rocketstore.cli._serve import _announce_tier, _make_broker

    for command in ("broker", "serve"):
        code, out, _ = _run(command, "--help")
        assert code == 0 and "--tiered-dir" in out
    broker = _make_broker(
        str(tmp_path / "s"), None, None, None, None, None, None, None, None,
        tiered_dir=str(tmp_path / "tier"),
    )  # fmt: skip
    assert broker.store_config.tiered_dir == str(tmp_path / "tier")
    _announce_tier(broker)
    assert f"tiered store (sealed commit-log files as Parquet) in {tmp_path / 'tier'}" in (
        capsys.readouterr().out
    )
    plain = _make_broker(str(tmp_path / "s"), None, None, None, None, None, None, None, None)
    assert plain.store_config.tiered_dir == ""
