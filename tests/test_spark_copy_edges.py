"""A frame read from rocketstore written back as it is (the README's Spark example): into
another store directory and through a broker. The read-only columns are ignored, bodies, tags,
keys and user properties are copied, system properties are not (fresh UNIQ_KEY through a
broker, none in a store directory), and a message that was delayed is not delayed again."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.client import Producer
from rocketstore.spark._broker import drop_pool
from rocketstore.spark._system_props import SYSTEM_PROPERTIES
from rocketstore.store.log._record import SCHEDULE_TOPIC
from support.spark_broker import Brokers, create_topic

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parent.parent / "README.md"
COUNT = 30


def readme_spark_code() -> list[str]:
    """The paragraphs of the README's Spark code block (path mode, brokers, pruning)."""
    text = README.read_text()
    section = text[text.index("## Spark") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    return [p for p in block.group(1).split("\n\n") if p.strip()]


def _wait(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _source_store(root: Path) -> None:
    """Orders as a producer leaves it (UNIQ_KEY, WAIT, tags, keys, user properties) and one
    message delivered by the schedule (DELAY, REAL_TOPIC, REAL_QID kept on it)."""
    cfg = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=1 << 20,
        message_delay_level="1s 2s",
    )
    with MessageStore(cfg) as ms:
        for i in range(COUNT):
            props = {"UNIQ_KEY": f"SRC{i:020d}", "WAIT": "true", "PGROUP": "g", "u": str(i)}
            if i == 7:
                props["DELAY"] = "1"
            msg = Message("Orders", b"o%d" % i, i % 2, tags=f"t{i % 3}", keys=[f"k{i}", "common"])
            msg.properties.update(props)
            assert ms.put_message(msg).ok
        _wait(lambda: sum(ms.get_max_offset_in_queue("Orders", q) for q in (0, 1)) == COUNT)


def _rows(spark: Any, path: Path, topic: str = "Orders") -> list[Any]:
    return (
        spark.read.format("rocketstore")
        .option("path", str(path))
        .option("topics", topic)
        .load()
        .collect()
    )


def _copied(row: Any) -> tuple[bytes, str | None, tuple[str, ...], dict[str, str]]:
    user = {k: v for k, v in (row.properties or {}).items() if k not in SYSTEM_PROPERTIES}
    return bytes(row.body), row.tags, tuple(row.keys), user


def test_readme_example_copies_a_store_as_written(spark: Any, tmp_path: Path) -> None:
    src, dst = tmp_path / "store", tmp_path / "other-store"
    _source_store(src)
    source = _rows(spark, src)
    delivered = [r for r in source if r.body == b"o7"]
    assert delivered[0].properties["DELAY"] == "1" and "REAL_TOPIC" in delivered[0].properties
    path_mode, _, pruned = readme_spark_code()
    assert 'df.write.format("rocketstore")' in path_mode  # the frame goes back as read
    # as written, with the store directories at the test's place (Spark's workers resolve
    # relative paths against the JVM's directory)
    code = path_mode.replace('"store"', repr(str(src))).replace('"other-store"', repr(str(dst)))
    scope: dict[str, Any] = {"spark": spark}
    exec(code, scope)
    assert len(scope["df"].columns) == 15
    copy = _rows(spark, dst)
    assert sorted(map(_copied, copy)) == sorted(map(_copied, source))
    assert {r.queue_id for r in copy} == {0, 1}
    for r in copy:  # no system key came along: no UNIQ_KEY, WAIT, PGROUP, DELAY, REAL_*
        assert not set(r.properties) - {"TAGS", "KEYS", "u"}, r.properties
        assert r.properties["TAGS"] == r.tags
    assert not (dst / "consumequeue" / SCHEDULE_TOPIC).exists()  # o7 is not delayed again
    exec(pruned.replace('"store"', repr(str(dst))), {"spark": spark})

    # keepSystemProperties: the map as it was, UNIQ_KEY included; still not delayed again
    kept = tmp_path / "kept"
    scope["df"].write.format("rocketstore").option("path", str(kept)).option(
        "keepSystemProperties", "true"
    ).mode("append").save()
    again = {bytes(r.body): r.properties for r in _rows(spark, kept)}
    for r in source:
        want = {k: v for k, v in r.properties.items() if k != "DELAY"}
        assert again[bytes(r.body)] == want
    assert not (kept / "consumequeue" / SCHEDULE_TOPIC).exists()


def test_a_delay_asked_for_is_kept(spark: Any, tmp_path: Path) -> None:
    rows = [
        ("D", b"later", {"DELAY": "2", "u": "1"}),
        ("D", b"was-delayed", {"DELAY": "2", "REAL_TOPIC": "D", "REAL_QID": "0"}),
    ]
    df = spark.createDataFrame(rows, "topic string, body binary, properties map<string,string>")
    df.write.format("rocketstore").option("path", str(tmp_path / "s")).mode("append").save()
    assert [bytes(r.body) for r in _rows(spark, tmp_path / "s", "D")] == [b"was-delayed"]
    (waiting,) = _rows(spark, tmp_path / "s", SCHEDULE_TOPIC)
    assert waiting.body == b"later" and waiting.properties["DELAY"] == "2"
    assert waiting.properties["REAL_TOPIC"] == "D" and waiting.properties["u"] == "1"


def test_unknown_columns_are_still_refused(spark: Any, tmp_path: Path) -> None:
    _source_store(tmp_path / "store")
    df = spark.read.format("rocketstore").option("path", str(tmp_path / "store")).load()
    with pytest.raises(Exception, match="'extra' cannot be written"):
        df.selectExpr("*", "1 AS extra").write.format("rocketstore").option(
            "path", str(tmp_path / "out")
        ).mode("append").save()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    b = Brokers(tmp_path_factory.mktemp("copy-broker"))
    try:
        b.start("broker-a")
        create_topic(b, "Orders", ("broker-a",))
        yield b
    finally:
        b.stop()
        drop_pool()


def test_readme_example_through_a_broker(spark: Any, broker: Brokers) -> None:
    with Producer(broker.ns) as p:
        for i in range(COUNT):
            p.send(
                "Orders",
                b"b%d" % i,
                tags=f"t{i % 3}",
                keys=[f"k{i}"],
                properties={"u": str(i)},
                delay_level=1 if i == 3 else 0,
            )

    def read() -> list[Any]:
        return (
            spark.read.format("rocketstore")
            .option("namesrv", broker.ns)
            .option("topics", "Orders")
            .load()
            .collect()
        )

    _wait(lambda: len(read()) == COUNT)  # the delayed one delivered
    source = read()
    assert any("DELAY" in r.properties for r in source)
    _, through_brokers, _ = readme_spark_code()
    exec(through_brokers.replace('"127.0.0.1:9876"', repr(broker.ns)), {"spark": spark})
    _wait(lambda: len(read()) >= 2 * COUNT)
    both = read()
    assert len(both) == 2 * COUNT  # the example copies Orders into itself: nothing delayed
    old_ids = {r.properties["UNIQ_KEY"] for r in source}
    copies = [r for r in both if r.properties["UNIQ_KEY"] not in old_ids]
    assert len({r.properties["UNIQ_KEY"] for r in copies}) == COUNT  # fresh, one each
    assert sorted(map(_copied, copies)) == sorted(map(_copied, source))
    for r in copies:
        assert "DELAY" not in r.properties and "REAL_TOPIC" not in r.properties
