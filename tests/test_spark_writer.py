"""The write task's store thread: errors reach the task, and the store is closed after them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.store._lock import lock_owner

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.types import StructType  # noqa: E402

from rocketstore.spark._writer import _settings, write_batches  # noqa: E402

SCHEMA = StructType.fromJson(
    {
        "type": "struct",
        "fields": [
            {"name": name, "type": t, "nullable": True, "metadata": {}}
            for name, t in (("topic", "string"), ("body", "binary"))
        ],
    }
)


def _batch(bodies: list[bytes], topic: str = "T") -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"topic": [topic] * len(bodies), "body": pa.array(bodies, pa.binary())}
    )


def test_a_refused_batch_fails_the_task_and_releases_the_store(tmp_path: Path) -> None:
    settings = _settings({"path": str(tmp_path / "s"), "commitLogFileSize": "65536"}, SCHEMA)
    for bad in ("bad topic!", "L" * 128, ""):
        batches = [_batch([b"a", b"b"]), _batch([b"c"], topic=bad), _batch([b"d"])]
        with pytest.raises(RuntimeError, match="refused 1 message"):
            write_batches(settings, iter(batches))
        assert lock_owner(str(tmp_path / "s")) is None
    report = write_batches(settings, iter([_batch([b"e"])]))  # the store opens again
    assert report.rows == 1


def test_an_input_error_fails_the_task_after_what_was_handed_over(tmp_path: Path) -> None:
    settings = _settings({"path": str(tmp_path / "s"), "commitLogFileSize": "65536"}, SCHEMA)

    def broken() -> Iterator[pa.RecordBatch]:
        yield _batch([b"x%d" % i for i in range(100)])
        raise OSError("the input broke")

    with pytest.raises(OSError, match="the input broke"):
        write_batches(settings, broken())
    assert lock_owner(str(tmp_path / "s")) is None
    from rocketstore.store._reader import StoreReader

    with StoreReader(tmp_path / "s") as reader:  # what was handed over is stored
        assert sum(reader.max_offset("T", q) for q in reader.queue_ids("T")) == 100
