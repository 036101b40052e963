"""``rocketstore export`` / ``import`` without a JVM: pyarrow writes the rows the Spark job
writes (Parquet: the same schema and every row; JSON lines: the same lines), an import round-trips
through both ways into the same messages, Spark runs only when asked or configured, and a Spark
run started from the command line keeps its log off the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

pytest.importorskip("pyarrow")

import pyarrow.parquet as pq

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.spark._master import DEFAULT_MASTER, choose
from rocketstore.spark._system_props import SYSTEM_PROPERTIES
from rocketstore.store.log._record import SCHEDULE_TOPIC

CLI = [sys.executable, "-m", "rocketstore.cli"]
ORDER = [("topic", "ascending"), ("queue_id", "ascending"), ("queue_offset", "ascending")]
# what a message's copy keeps: the columns a write sets (system properties are the writer's)
KEPT = ("topic", "queue_id", "queue_offset", "body", "tags", "keys")
SMALL = ("--commit-log-file-size", str(1 << 20))


def _config(root: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 64,
        message_delay_level="1s 2s",
    )


def _messages() -> list[Message]:
    out = []
    for i in range(60):
        topic = "A" if i % 3 else "B"
        tags = None if i % 4 == 0 else ("täg" if i % 4 == 1 else f"t{i % 4}")
        keys = [f"k{i}", "ключ"][: i % 3] or None
        props = {"n": str(i), "ünï": "wert ✓"} if i % 5 else None
        body = bytes([i, 0, 255 - i]) + f"body {i} 🚀".encode()
        out.append(Message(topic, body, i % 4 if topic == "A" else 0, tags, keys, props))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two topics over several queues (tags, keys and properties present and absent, text
    beyond ASCII, bodies with zero bytes) and a delayed message the schedule delivered (so
    SCHEDULE_TOPIC_XXXX holds one and A holds it with DELAY and REAL_TOPIC)."""
    root = tmp_path_factory.mktemp("export-engines") / "store"
    with MessageStore(_config(root)) as ms:
        for m in _messages():
            assert ms.put_message(m).ok
        delayed = Message("A", b"delayed", 1, tags="late", properties={"DELAY": "1", "u": "1"})
        assert ms.put_message(delayed).ok
        deadline = time.monotonic() + 60
        while sum(ms.get_max_offset_in_queue("A", q) for q in range(4)) < 41:
            assert time.monotonic() < deadline, "the delayed message was not delivered"
            time.sleep(0.05)
    return root


def _run(*args: str) -> Result:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r


def _summary(r: Result) -> dict[str, Any]:
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _parquet_rows(d: Path) -> tuple[Any, list[dict[str, Any]]]:
    table = pq.read_table(d)
    return table.schema.remove_metadata(), table.sort_by(ORDER).to_pylist()


def _json_lines(d: Path) -> list[str]:
    parts = sorted(p for p in d.iterdir() if p.name.startswith("part-"))
    return [line for p in parts for line in p.read_text(encoding="utf-8").splitlines()]


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["topic"], row["queue_id"], row["queue_offset"])


# ---- the same rows both ways -------------------------------------------------------------


@pytest.mark.spark
def test_parquet_without_spark_equals_the_spark_export(
    spark: Any, store: Path, tmp_path: Path
) -> None:
    plain, on_spark = tmp_path / "plain", tmp_path / "spark"
    r = _run("export", "--store", str(store), "--to", str(plain))
    assert _summary(r) == {"exported": 62, "to": str(plain), "spark": None}
    r = _run("export", "--store", str(store), "--to", str(on_spark), "--spark")
    assert _summary(r)["exported"] == 62 and _summary(r)["spark"] == DEFAULT_MASTER

    schema, rows = _parquet_rows(plain)
    spark_schema, spark_rows = _parquet_rows(on_spark)
    assert schema.equals(spark_schema), f"{schema}\n!=\n{spark_schema}"
    assert len(rows) == 62
    assert {r["topic"] for r in rows} == {"A", "B", SCHEDULE_TOPIC}
    assert rows == spark_rows  # row by row, every column
    # as Spark reads them back: the same types and rows
    a, b = spark.read.parquet(str(plain)), spark.read.parquet(str(on_spark))
    assert a.schema == b.schema
    assert sorted(map(tuple, a.collect())) == sorted(map(tuple, b.collect()))
    for d in (plain, on_spark):
        marker = json.loads((d / "_rocketstore_export.json").read_text())
        assert marker == {"format": "parquet", "rows": 62, "topics": [], "source": str(store)}


def test_a_file_name_gets_one_file(store: Path, tmp_path: Path) -> None:
    """``--to out.parquet`` (``.json``, ``.jsonl``) writes that one file, with the rows the
    directory export writes; an existing file is kept unless --overwrite; Spark's export,
    which writes parts, is refused such a name in one line."""
    parts = tmp_path / "parts"
    _run("export", "--store", str(store), "--to", str(parts))
    _schema, rows = _parquet_rows(parts)
    one = tmp_path / "out.parquet"
    r = _run("export", "--store", str(store), "--to", str(one))
    assert _summary(r)["exported"] == 62 and one.is_file()
    assert pq.ParquetFile(one).metadata.num_rows == 62
    assert _parquet_rows(one)[1] == rows
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left

    again = CliRunner().invoke(main, ["export", "--store", str(store), "--to", str(one)])
    assert again.exit_code == 1 and "add --overwrite" in again.output and one.is_file()
    _run("export", "--store", str(store), "--to", str(one), "--overwrite", "-t", "A")
    assert 0 < pq.ParquetFile(one).metadata.num_rows < 62

    lines_dir = tmp_path / "lines"
    _run("export", "--store", str(store), "--to", str(lines_dir), "--format", "json")
    jsonl = tmp_path / "out.jsonl"
    _run("export", "--store", str(store), "--to", str(jsonl))
    assert jsonl.read_text(encoding="utf-8").splitlines() == _json_lines(lines_dir)

    spark = CliRunner().invoke(
        main, ["export", "--store", str(store), "--to", str(tmp_path / "s.parquet"), "--spark"]
    )
    assert spark.exit_code == 2 and "directory of part files" in spark.output
    clash = CliRunner().invoke(
        main, ["export", "--store", str(store), "--to", str(jsonl), "--format", "parquet"]
    )
    assert clash.exit_code == 2 and "names a json file" in clash.output


@pytest.mark.spark
def test_json_lines_without_spark_equal_the_spark_export(
    spark: Any, store: Path, tmp_path: Path
) -> None:
    plain, on_spark = tmp_path / "plain", tmp_path / "spark"
    offsets = json.dumps({"A": {"0": 2, "1": 1}})
    for d, extra in ((plain, ()), (on_spark, ("--spark",))):
        args = ("--topic", "A", "--topic", "B", "--starting-offsets", offsets, "--format", "json")
        r = _run("export", "--store", str(store), "--to", str(d), *args, *extra)
        assert _summary(r)["exported"] == 58  # A's queues 0 and 1 start past 2 and 1 rows
    lines, spark_lines = _json_lines(plain), _json_lines(on_spark)
    assert len(lines) == 58
    assert sorted(lines) == sorted(spark_lines)  # the same text, line for line
    rows = [json.loads(line) for line in lines]
    assert sorted(rows, key=_key) == sorted(map(json.loads, spark_lines), key=_key)
    delivered = next(r for r in rows if r.get("tags") == "late")
    assert delivered["properties"]["DELAY"] == "1" and delivered["properties"]["REAL_TOPIC"] == "A"
    assert any("tags" not in r for r in rows)  # a null is left out, never written as null
    assert all(v is not None for r in rows for v in r.values())


def _copy(store: Path, tmp_path: Path, name: str, fmt: str, *spark: str) -> list[dict[str, Any]]:
    """Export ``store`` (A and B) as ``fmt``, import that into a new store, export the new
    store: its rows (the columns a copy keeps, and the properties)."""
    out, copy, back = tmp_path / f"{name}-out", tmp_path / f"{name}-store", tmp_path / f"{name}-b"
    topics = ("--topic", "A", "--topic", "B")
    _run("export", "--store", str(store), "--to", str(out), "--format", fmt, *topics)
    r = _run("import", "--store", str(copy), "--from", str(out), *SMALL, *spark)
    want = {"imported": 61, "store": str(copy), "spark": DEFAULT_MASTER if spark else None}
    assert _summary(r) == want
    _run("export", "--store", str(copy), "--to", str(back))
    _, rows = _parquet_rows(back)
    return [{**{c: r[c] for c in KEPT}, "properties": dict(r["properties"] or [])} for r in rows]


def _user(properties: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES}


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_import_round_trips_the_same_without_spark_and_with_it(
    spark: Any, store: Path, tmp_path: Path, fmt: str
) -> None:
    plain = _copy(store, tmp_path, "plain", fmt)
    with_spark = _copy(store, tmp_path, "spark", fmt, "--spark")
    assert plain == with_spark  # the same queues, offsets, bodies, tags, keys and properties
    _run("export", "--store", str(store), "--to", str(tmp_path / "src"), "--topic", "A")
    _, original = _parquet_rows(tmp_path / "src")
    copied = [r for r in plain if r["topic"] == "A"]
    assert len(copied) == len(original) == 41
    for was, now in zip(original, copied, strict=True):
        assert [now[c] for c in KEPT] == [was[c] for c in KEPT]
        assert _user(now["properties"]) == _user(dict(was["properties"]))
        assert "DELAY" not in now["properties"]  # the delivered one is not delayed again
    assert any(_user(dict(r["properties"])).get("ünï") == "wert ✓" for r in original)


def test_import_of_json_lines_written_by_hand(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"topic": "T", "body": "plain text", "keys": "a b", "queue_id": 1}\n'
        "\n"
        '{"topic": "T", "body_base64": "AAH/", "tags": "x", "properties": {"p": "1"}}\n',
        encoding="utf-8",
    )
    r = _run("import", "--store", str(tmp_path / "s"), "--from", str(src), *SMALL)
    assert _summary(r)["imported"] == 2
    _run("export", "--store", str(tmp_path / "s"), "--to", str(tmp_path / "back"))
    _, rows = _parquet_rows(tmp_path / "back")
    assert [(r["queue_id"], r["body"], r["tags"], r["keys"]) for r in rows] == [
        (0, b"\x00\x01\xff", "x", []),  # no queue_id: the topic's queues in turn
        (1, b"plain text", None, ["a", "b"]),
    ]
    assert dict(rows[0]["properties"])["p"] == "1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"topic": "T", "body": "x"}\n{"topic": 5, "body": "y"}\n')
    r = CliRunner().invoke(main, ["import", "--store", str(tmp_path / "s2"), "--from", str(bad)])
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        f"Error: import failed: {bad}:2: topic is int, not a string"
    ]
    assert not (tmp_path / "s2").exists()  # nothing written before the bad line was found


# ---- when Spark runs ---------------------------------------------------------------------


def test_spark_runs_when_asked_or_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env: dict[str, str] = {}
    assert choose(False, None, env) is None
    assert choose(True, None, env) == DEFAULT_MASTER
    assert choose(False, "local[4]", env) == "local[4]"
    assert choose(False, None, {"SPARK_MASTER": "local[3]"}) is None
    assert choose(True, None, {"SPARK_MASTER": "local[3]"}) == "local[3]"
    assert choose(False, None, {"SPARK_MASTER": "spark://h:7077"}) == "spark://h:7077"
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "# mine\nspark.executor.memory 1g\nspark.master   spark://m:7077\n"
    )
    assert choose(False, None, {"SPARK_CONF_DIR": str(conf)}) == "spark://m:7077"
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "spark-defaults.conf").write_text("spark.master=local[*]\n")
    assert choose(False, None, {"SPARK_HOME": str(home)}) is None
    assert choose(True, None, {"SPARK_HOME": str(home)}) == "local[*]"


def _fake_java(directory: Path, version_line: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAVA_HOME", "SPARK_"))}
    return subprocess.run(
        [*CLI, *args],
        env={**base, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_error_line(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 1, done
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_java_is_checked_before_spark_starts(store: Path, tmp_path: Path) -> None:
    old = _fake_java(tmp_path / "old" / "bin", 'openjdk version "11.0.22" 2024-01-16')
    _fake_java(tmp_path / "ancient" / "bin", 'java version "1.8.0_392"')
    nowhere = tmp_path / "empty"
    nowhere.mkdir()
    export = ["export", "--store", str(store), "--to", str(tmp_path / "out")]
    done = _cli([*export, "--spark"], {"PATH": str(old.parent)}, tmp_path)
    _one_error_line(done, "Spark needs Java 17+", f"{old} is Java 11", "JAVA_HOME")
    done = _cli([*export, "--spark"], {"JAVA_HOME": str(tmp_path / "ancient")}, tmp_path)
    _one_error_line(done, "Spark needs Java 17+", "is Java 8")
    done = _cli([*export, "--spark"], {"PATH": str(nowhere)}, tmp_path)
    _one_error_line(done, "Spark needs Java 17+", "no java on PATH and no JAVA_HOME")
    done = _cli([*export, "--spark"], {"JAVA_HOME": str(nowhere)}, tmp_path)
    _one_error_line(done, f"JAVA_HOME is {nowhere}, which has no bin/java")
    importing = ["import", "--store", str(tmp_path / "s"), "--from", str(tmp_path)]
    done = _cli([*importing, "--master", "local[1]"], {"PATH": str(old.parent)}, tmp_path)
    _one_error_line(done, "import failed: Spark needs Java 17+")
    # a configured cluster master runs Spark (so Java is checked); a local one does not
    cluster = {"PATH": str(old.parent), "SPARK_MASTER": "spark://127.0.0.1:9"}
    _one_error_line(_cli(export, cluster, tmp_path), "Spark needs Java 17+")
    done = _cli(export, {"PATH": str(old.parent), "SPARK_MASTER": "local[2]"}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"exported": 62, "to": str(tmp_path / "out"), "spark": None}
    assert not (store.parent / "logs").exists() and not (tmp_path / "logs").exists()


@pytest.mark.spark
def test_a_spark_run_logs_to_the_log_file_not_the_terminal(store: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    args = ["export", "--store", str(store), "--to", str(tmp_path / "out"), "--spark"]
    done = _cli([*args, "--topic", "B", "--log-dir", str(logs)], {}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["exported"] == 20
    assert done.stderr == ""  # no WARN lines, no stage progress bars
    log = (logs / "spark.log").read_text(errors="replace")
    assert "INFO SparkContext: Running Spark version" in log
    assert (logs / "spark-log4j2.properties").is_file()
