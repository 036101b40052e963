"""The Spark data source's work outside Spark: decoding a store into Arrow batches, and a write
task's ``write_batches``, on one core.

    python benchmarks/spark_decode.py [--rows N] [--rounds K] [--store DIR] [--scratch DIR]

Decodes every queue of the store (written first, as benchmarks/spark_ceiling.py writes it,
when DIR holds none; without ``--store`` a temporary one) with every column and, where the code has column pruning, with
``queue_id, body``; then writes the same rows with ``write_batches`` from 10k-row Arrow
batches. Best of K rounds. It uses only what older versions have too, so an older tree can be
measured the same way, alternately with this one::

    git archive <commit> src | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old/src python benchmarks/spark_decode.py
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


def decode(store: Path, rounds: int, columns: list[str] | None) -> float:
    from rocketstore.columns._arrow import ARROW_SCHEMA, QueueRange, RangeDecoder
    from rocketstore.store.read._reader import StoreReader

    kw: dict[str, Any] = {}
    if columns:
        import pyarrow as pa

        kw["schema"] = pa.schema([ARROW_SCHEMA.field(c) for c in columns])
    best = 0.0
    for _ in range(rounds):
        with StoreReader(store) as reader:
            decoder = RangeDecoder(reader, **kw)
            rows = 0
            started = time.perf_counter()
            for topic in reader.topics():
                for qid in reader.queue_ids(topic):
                    r = QueueRange(topic, qid, 0, reader.max_offset(topic, qid))
                    rows += sum(b.num_rows for b in decoder.batches(r))
            best = max(best, rows / (time.perf_counter() - started))
    return best


def write(rows: int, rounds: int, target: Path) -> float:
    import pyarrow as pa

    from rocketstore.spark._path_writer import WriteSettings, write_batches

    batches = []
    for lo in range(0, rows, 10_000):
        ids = range(lo, min(lo + 10_000, rows))
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "topic": pa.array(["SparkBench"] * len(ids)),
                    "body": pa.array([str(i).rjust(1024, "x").encode() for i in ids], pa.binary()),
                    "tags": pa.array(["even" if i % 2 == 0 else "odd" for i in ids]),
                    "keys": pa.array([f"k{i}" for i in ids]),
                }
            )
        )
    columns = ("topic", "body", "tags", "keys")
    best = 0.0
    for _ in range(rounds):
        shutil.rmtree(target, ignore_errors=True)
        settings = WriteSettings(str(target), None, None, {}, 4, 1000, columns, "ASYNC_FLUSH", 2)
        started = time.perf_counter()
        write_batches(settings, iter(batches))
        best = max(best, rows / (time.perf_counter() - started))
    shutil.rmtree(target, ignore_errors=True)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store", default=None, help="input store (default: a temporary one)")
    ap.add_argument("--scratch", default=None, help="where temporary output goes")
    args = ap.parse_args()
    from spark_ceiling import input_store

    with tempfile.TemporaryDirectory(prefix="rocketstore-decode-", dir=args.scratch) as tmp:
        run(args, input_store(args.store, args.rows, Path(tmp)), Path(tmp))


def run(args: argparse.Namespace, store: Path, scratch: Path) -> None:
    import rocketstore

    print(f"code: {Path(rocketstore.__file__).parent}")
    print(f"decode, every column:    {decode(store, args.rounds, None):>12,.0f} rows/s")
    try:
        two = decode(store, args.rounds, ["queue_id", "body"])
        print(f"decode, queue_id + body: {two:>12,.0f} rows/s")
    except TypeError:
        print("decode, queue_id + body: (no column pruning in this version)")
    written = write(args.rows // 2, args.rounds, scratch / "write-test")
    print(f"write_batches:           {written:>12,.0f} rows/s")


if __name__ == "__main__":
    main()
