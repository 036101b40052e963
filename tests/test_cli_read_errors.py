"""Everyday mistakes with the store commands end in one line with a hint and a non-zero exit,
never a traceback, and never change anything: a path with no store, a store a broker owns, a
commit-log file cut short; and ``query --id`` finds a message by either of its ids."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from support.processes import child_env

FILE_SIZE = 16 * 1024
UNIQ = "0A0B0C0D00002A9F0000000000000ABC"


def cli(*args: str, stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin)


def one_line_error(result: Result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def config(root: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=20 * 500,
    )


def make_store(root: Path, count: int = 300) -> None:
    with MessageStore(config(root)) as store:
        for i in range(count):
            props = {"UNIQ_KEY": UNIQ} if i == 7 else None
            msg = Message("T", f"m{i}".encode() * 20, i % 2, keys=[f"k{i}"], properties=props)
            assert store.put_message(msg).ok


def read_args(store: Path) -> list[list[str]]:
    s = str(store)
    return [
        ["get", "--store", s, "T", "0", "0"],
        ["query", "--store", s, "--topic", "T", "--key", "k1"],
        ["stats", "--store", s],
        ["put", "--store", s, "--topic", "T", "body"],
    ]


# ---- no store there -------------------------------------------------------------------------


def test_a_mistyped_path_is_not_made_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    for args in read_args(missing):
        line = one_line_error(cli(*args))
        assert "no store" in line or "does not exist" in line, line
        assert "--store" in line  # the hint
        assert not missing.exists(), args


def test_a_directory_without_a_store_is_left_alone(tmp_path: Path) -> None:
    other = tmp_path / "docs"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for args in [
        *read_args(other),
        ["put", "--store", str(other), "--topic", "T", "--create", "b"],
    ]:
        line = one_line_error(cli(*args))
        assert "holds no store" in line, line
        assert sorted(p.name for p in other.iterdir()) == ["notes.txt"], args


def test_put_creates_a_store_only_with_create(tmp_path: Path) -> None:
    new = tmp_path / "new"
    line = one_line_error(cli("put", "--store", str(new), "--topic", "T", "b"))
    assert "--create" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "--create" in one_line_error(cli("put", "--store", str(empty), "--topic", "T", "b"))
    assert list(empty.iterdir()) == []
    for root in (new, empty):
        first = cli("put", "--store", str(root), "--topic", "T", "--create", "one")
        assert first.exit_code == 0, first.output
        again = cli("put", "--store", str(root), "--topic", "T", "two")  # a store now
        assert again.exit_code == 0, again.output
        got = cli("get", "--store", str(root), "T", "0", "0")
        assert [x.split("\t")[-1] for x in got.stdout.splitlines()] == ["one", "two"]


def test_put_delay_help_says_a_broker_delivers() -> None:
    text = " ".join(cli("put", "--help").output.split())
    assert "rocketstore serve" in text and "--create" in text


# ---- a store a broker owns ------------------------------------------------------------------


def test_a_store_a_broker_owns_is_read_but_not_written(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_store(root, 10)
    with MessageStore(config(root)) as owner:  # holds the lock, as a running broker does
        got = cli("get", "--store", str(root), "T", "0", "0")
        assert got.exit_code == 0, got.output
        assert len(got.stdout.splitlines()) == 5
        assert cli("stats", "--store", str(root)).exit_code == 0
        assert cli("query", "--store", str(root), "--topic", "T", "--key", "k3").exit_code == 0
        line = one_line_error(cli("put", "--store", str(root), "--topic", "T", "b"))
        assert f"process {os.getpid()}" in line
        assert "stop" in line and "rocketstore produce --namesrv" in line
        assert owner.get_max_offset_in_queue("T", 0) == 5  # nothing was added


OWNER = r"""
import sys
from rocketstore import MessageStore, StoreConfig
cfg = StoreConfig(store_path_root_dir=sys.argv[1], mapped_file_size_commit_log=16384,
                  mapped_file_size_consume_queue=10000)
with MessageStore(cfg):
    print("ready", flush=True)
    sys.stdin.read()
"""


def test_a_store_another_process_owns(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_store(root, 10)
    env = child_env()
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        got = cli("get", "--store", str(root), "T", "1", "0")
        assert got.exit_code == 0 and len(got.stdout.splitlines()) == 5, got.output
        line = one_line_error(cli("put", "--store", str(root), "--topic", "T", "b"))
        assert f"process {proc.pid}" in line and "rocketstore produce --namesrv" in line
    finally:
        proc.communicate("", timeout=30)
    assert proc.returncode == 0


# ---- damaged commit-log files ---------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 3, 5000])
def test_a_commit_log_file_cut_short(tmp_path: Path, size: int) -> None:
    root = tmp_path / "store"
    make_store(root)
    files = sorted((root / "commitlog").iterdir())
    assert len(files) >= 3
    os.truncate(files[1], size)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    line = one_line_error(cli("get", "--store", str(root), "T", "0", "0"))
    assert files[1].name in line and f"{size} bytes" in line and "rocketstore inspect" in line
    report = cli("inspect", str(root))
    assert report.exit_code == 1 and "Traceback" not in report.output
    text = " ".join(report.output.split())
    assert f"error: commitlog/{files[1].name}: {size} bytes" in text
    assert "1 error(s)" in text
    as_json = cli("inspect", str(root), "--json")
    assert as_json.exit_code == 1 and "Traceback" not in as_json.output
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_tiny_file_after_the_last(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_store(root)
    last = max(int(p.name) for p in (root / "commitlog").iterdir())
    tiny = root / "commitlog" / f"{last + FILE_SIZE:020d}"
    tiny.write_bytes(b"ab")
    line = one_line_error(cli("get", "--store", str(root), "T", "0", "0"))
    assert tiny.name in line and "2 bytes" in line
    report = cli("inspect", str(root))
    assert report.exit_code == 1 and "Traceback" not in report.output
    assert f"commitlog/{tiny.name}: 2 bytes" in " ".join(report.output.split())
    assert tiny.read_bytes() == b"ab"


# ---- query by id ----------------------------------------------------------------------------


def test_query_by_either_id(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_store(root)
    with MessageStore(config(root), maintenance=False) as store:
        offset_id = store.get_message("g", "T", 1, 3, 1).messages[0].msg_id  # message 7
    assert len(offset_id) == 32 and offset_id != UNIQ
    for msg_id in (UNIQ, offset_id, offset_id.lower()):
        for topic in ([], ["--topic", "T"]):
            r = cli("query", "--store", str(root), *topic, "--id", msg_id)
            assert r.exit_code == 0, r.output
            (line,) = r.stdout.splitlines()
            assert line.split("\t")[1] == offset_id and line.split("\t")[3] == "3"
    assert cli("query", "--store", str(root), "--topic", "Other", "--id", UNIQ).exit_code == 1
    unknown = cli("query", "--store", str(root), "--id", "0A0B0C0D00002A9F0000000000000ABD")
    assert unknown.exit_code == 1 and "0 message(s)" in unknown.output
    assert cli("query", "--store", str(root), "--key", "k1").exit_code == 2  # needs --topic
    both = cli("query", "--store", str(root), "--topic", "T", "--key", "k1", "--id", UNIQ)
    assert both.exit_code == 2


def test_a_missing_or_bad_conf_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_store(root, 4)
    bad = tmp_path / "bad.conf"
    bad.write_text("flushDiskType=SOMETIMES\n")
    for conf, says in (
        (tmp_path / "absent.conf", "absent.conf"),
        (bad, "flushDiskType: 'SOMETIMES'"),
    ):
        for args in [*read_args(root), ["inspect", str(root)]]:
            line = one_line_error(cli(*args, "--conf", str(conf)))
            assert says in line, (args, line)
