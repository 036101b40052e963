"""`rocketstore put` through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rocketstore import MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.store.log._record import decode_msg_id


def conf(tmp_path: Path) -> Path:
    path = tmp_path / "broker.conf"
    path.write_text("brokerName=b\nmappedFileSizeCommitLog=65536\nbrokerIP1=10.1.2.3\n")
    return path


def test_put_body_argument(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    args = [
        "put",
        "--store",
        str(store_dir),
        "--conf",
        str(conf(tmp_path)),
        "--topic",
        "CliT",
        "--queue",
        "2",
        "--tags",
        "TagX",
        "--key",
        "k1",
        "--key",
        "k2",
        "--property",
        "a=b=c",
        "hello cli",
    ]
    result = CliRunner().invoke(main, [*args[:-1], "--create", args[-1]])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["status"] == "PUT_OK"
    assert out["queue_offset"] == 0 and out["wrote_offset"] == 0
    assert decode_msg_id(out["msg_id"]) == ("10.1.2.3:10911", 0)
    second = CliRunner().invoke(main, args)
    out2 = json.loads(second.output)
    assert out2["queue_offset"] == 1 and out2["wrote_offset"] == out["wrote_bytes"]
    cfg = StoreConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=65536)
    assert sorted(p.name for p in (store_dir / "commitlog").iterdir()) == [f"{0:020d}"]
    with MessageStore(cfg) as store:
        m = store.look_message_by_offset(0)
        assert m is not None
        assert (m.topic, m.queue_id, m.body, m.tags, m.keys) == (
            "CliT",
            2,
            b"hello cli",
            "TagX",
            ["k1", "k2"],
        )
        assert m.properties["a"] == "b=c"


def test_put_body_from_stdin(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    result = CliRunner().invoke(
        main,
        [
            "put",
            "--store",
            str(store_dir),
            "--conf",
            str(conf(tmp_path)),
            "--topic",
            "In",
            "--create",
        ],
        input=b"\x00binary\xffbody",
    )
    assert result.exit_code == 0, result.output
    cfg = StoreConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=65536)
    with MessageStore(cfg) as store:
        m = store.look_message_by_offset(0)
        assert m is not None and m.body == b"\x00binary\xffbody"


def test_put_refused_message_exits_nonzero(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    result = CliRunner().invoke(
        main,
        [
            "put",
            "--store",
            str(store_dir),
            "--conf",
            str(conf(tmp_path)),
            "--topic",
            "../x",
            "--create",
            "body",
        ],
    )
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert out["status"] == "MESSAGE_ILLEGAL" and out["error"]
    assert out["msg_id"] is None
    assert not (tmp_path / "x").exists()


def test_put_bad_property_syntax(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["put", "--store", str(tmp_path / "s"), "--topic", "T", "--property", "novalue", "b"]
    )
    assert result.exit_code == 2
    assert "name=value" in result.output


def test_put_bad_conf_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text("flushDiskType=SOMETIMES\n")
    result = CliRunner().invoke(
        main,
        [
            "put",
            "--store",
            str(tmp_path / "s"),
            "--conf",
            str(bad),
            "--topic",
            "T",
            "--create",
            "b",
        ],
    )
    assert result.exit_code != 0
    assert "flushDiskType: 'SOMETIMES'" in str(result.exception) + result.output
