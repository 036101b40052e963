"""``rocketstore inspect`` on directories that are not stores: an error, never "OK"."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.store.recovery._inspect import Inspector


def test_a_directory_without_store_entries_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "sub").mkdir()
    report = Inspector(tmp_path).run()
    assert not report.ok and not report.is_store
    assert report.errors == [
        f"{tmp_path} is not a store directory: it has no commitlog/, consumequeue/, "
        "index/ or checkpoint"
    ]
    assert report.warnings == []  # nothing else is looked at


def test_cli_exits_non_zero_on_a_non_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert result.exit_code == 1
    text = " ".join(result.output.split())  # rich wraps long lines
    assert "is not a store directory" in text
    assert "OK" not in text
    missing = CliRunner().invoke(main, ["inspect", str(tmp_path / "absent")])
    assert missing.exit_code != 0


def test_a_store_is_still_inspected(tmp_path: Path) -> None:
    root = tmp_path / "store"
    config = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 40,
    )
    with MessageStore(config) as store:
        assert store.put_message(Message("T", b"x", 0)).ok
    report = Inspector(root).run()
    assert report.is_store and report.ok, report.errors
    assert report.commit_log["records"] == 1
    # a store directory with only a commit log (consume queues removed) is still a store
    only_log = tmp_path / "only-log"
    (only_log / "commitlog").mkdir(parents=True)
    assert Inspector(only_log).run().is_store
