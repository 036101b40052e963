"""A tiered topic read through read_topic, against Parquet alone and the source alone.

    python benchmarks/tier_read.py [--rows N] [--tiered-share 0.9] [--rounds K]
        [--store DIR] [--tiered DIR] [--scratch DIR] [--file-size BYTES]

Writes N messages of 1 KiB (TAGS + KEYS, the Spark bench's rows, 4 queues) into ``--store``
with the writer outside Spark unless it already holds a store, with commit-log files of
``--file-size`` bytes; tiers the first commit-log files holding ``--tiered-share`` of the
messages into ``--tiered`` as the tiered store's contract says (the data source's rows sorted
by queue id and queue offset, one Parquet file per commit-log file, manifests, the covered
offset) unless it already holds a tier. Without ``--store`` / ``--tiered`` both go into a
temporary directory under ``--scratch``, removed afterwards.

Then, in alternating rounds, reads every column of every row (a sum, length or size of each
column) three ways:

- ``read_topic``: the tier's Parquet files and the rest through the ``rocketstore`` source;
- ``parquet``: ``spark.read.parquet`` of the same rows, all as Parquet (the tier's files and
  one more of the rows past the tier, ``<tiered>-tail.parquet``): the ceiling;
- ``source``: every row through the ``rocketstore`` source (the store is not truncated).

It prints each run's rows a second, the CPU time a row of this process and everything under it
(Spark's JVM and Python workers: far less disturbed by other load on the machine than wall
time), the load average before it, the best of each, and the ratios read_topic ÷ parquet and
read_topic ÷ source of both.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rocketstore.columns._arrow import ARROW_SCHEMA, QueueRange, RangeDecoder
from rocketstore.store.read._reader import StoreReader
from rocketstore.tier._manifest import (
    TierFile,
    TopicManifest,
    part_name,
    save_covered,
    save_manifest,
    tiered_topics,
    topic_dir,
)

TOPIC = "TierBench"
BODY_SIZE = 1024
QUEUES = 4
ROW_GROUP_ROWS = 64 * 1024


def make_store(path: Path, rows: int, file_size: int) -> None:
    from rocketstore.spark._path_writer import WriteSettings, write_batches

    def batches() -> Any:
        for lo in range(0, rows, 10_000):
            ids = range(lo, min(lo + 10_000, rows))
            yield pa.RecordBatch.from_pydict(
                {
                    "topic": pa.array([TOPIC] * len(ids)),
                    "body": pa.array(
                        [str(i).rjust(BODY_SIZE, "x").encode() for i in ids], pa.binary()
                    ),
                    "tags": pa.array(["even" if i % 2 == 0 else "odd" for i in ids]),
                    "keys": pa.array([f"k{i}" for i in ids]),
                }
            )

    columns = ("topic", "body", "tags", "keys")
    settings = WriteSettings(
        str(path), file_size, None, {TOPIC: QUEUES}, QUEUES, 1000, columns, "ASYNC_FLUSH"
    )
    write_batches(settings, batches())


class _Part:
    """One Parquet file of the tier being written: a commit-log file's rows of the topic."""

    def __init__(self, directory: Path, start: int, end: int, compression: str) -> None:
        self.name = part_name(start)
        self.range = (start, end)
        self.hidden = directory / f".{self.name}.tmp"
        self.writer = pq.ParquetWriter(self.hidden, ARROW_SCHEMA, compression=compression)
        self.rows = 0
        self.queues: dict[int, tuple[int, int]] = {}
        self.times: tuple[int, int] | None = None

    def write(self, table: pa.Table) -> None:
        import pyarrow.compute as pc

        self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows
        qid = table.column("queue_id")[0].as_py()
        offsets = table.column("queue_offset")
        lo, hi = pc.min(offsets).as_py(), pc.max(offsets).as_py()
        old = self.queues.get(qid, (lo, hi))
        self.queues[qid] = (min(old[0], lo), max(old[1], hi))
        ms = pc.divide(table.column("store_timestamp").cast(pa.int64()), 1000)
        t = (pc.min(ms).as_py(), pc.max(ms).as_py())
        self.times = (
            t if self.times is None else (min(self.times[0], t[0]), max(self.times[1], t[1]))
        )

    def close(self, directory: Path) -> TierFile:
        self.writer.close()
        final = directory / self.name
        os.replace(self.hidden, final)
        assert self.times is not None
        return TierFile(
            self.name, self.range, self.rows, final.stat().st_size, self.queues, self.times
        )


def tier(store: Path, tiered: Path, share: float, tail: Path, compression: str) -> int:
    """Tier the first commit-log files holding ``share`` of the topic's messages; the rows
    past them go to ``tail`` (one Parquet file: with the tier's, all the rows as Parquet).
    Returns the covered commit-log offset."""
    with StoreReader(store) as reader:
        size = reader.commit_log_file_size
        total = sum(reader.max_offset(TOPIC, q) for q in reader.queue_ids(TOPIC))
        # the commit-log files below ``share`` of the log (the messages are all of one size)
        end = 0
        for q in reader.queue_ids(TOPIC):
            unit = reader.queue(TOPIC, q).unit(reader.max_offset(TOPIC, q) - 1)
            assert unit is not None
            end = max(end, unit[0] + unit[1])
        covered = max(size, int(end * share) // size * size)
        directory = topic_dir(tiered, TOPIC)
        directory.mkdir(parents=True, exist_ok=True)
        parts: dict[int, _Part] = {}
        rest = pq.ParquetWriter(tail, ARROW_SCHEMA, compression=compression)
        decoder = RangeDecoder(reader, batch_rows=ROW_GROUP_ROWS)
        for qid in reader.queue_ids(TOPIC):
            r = QueueRange(TOPIC, qid, 0, reader.max_offset(TOPIC, qid))
            for batch in decoder.batches(r):
                table = pa.Table.from_batches([batch])
                phys = table.column("commitlog_offset").to_numpy()
                starts = phys - phys % size
                for start in sorted(set(starts.tolist())):
                    rows = table.filter(pa.array(starts == start))
                    if start >= covered:
                        rest.write_table(rows, row_group_size=ROW_GROUP_ROWS)
                        continue
                    part = parts.get(start)
                    if part is None:
                        part = parts[start] = _Part(directory, start, start + size, compression)
                    part.write(rows)
        rest.close()
    manifest = TopicManifest(TOPIC, [parts[s].close(directory) for s in sorted(parts)])
    save_manifest(tiered, manifest)
    save_covered(tiered, covered)
    tiered_rows = sum(f.rows for f in manifest.files)
    print(
        f"tiered {tiered_rows:,} of {total:,} rows ({tiered_rows / total:.0%}) in "
        f"{len(manifest.files)} files below commit-log offset {covered:,}",
        flush=True,
    )
    return covered


def every_column(df: Any) -> tuple[float, int]:
    """Seconds to aggregate every column of ``df``, and its rows."""
    from pyspark.sql import functions as F

    sizes = {"keys", "properties"}
    lengths = {"topic", "msg_id", "body", "tags", "born_host", "store_host"}
    times = {"born_timestamp", "store_timestamp"}
    aggs = [F.count(F.lit(1))]
    for c in ARROW_SCHEMA.names:
        if c in sizes:
            aggs.append(F.sum(F.size(c)))
        elif c in lengths:
            aggs.append(F.sum(F.length(c)))
        elif c in times:
            aggs.append(F.max(c))
        else:
            aggs.append(F.sum(c))
    started = time.perf_counter()
    row = df.agg(*aggs).collect()[0]
    return time.perf_counter() - started, int(row[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--tiered-share", type=float, default=0.9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store", default=None, help="the store (default: a temporary one)")
    ap.add_argument("--tiered", default=None, help="its tier (default: a temporary one)")
    ap.add_argument("--scratch", default=None, help="where temporary directories go")
    ap.add_argument("--file-size", type=int, default=64 << 20, help="commit-log file size")
    ap.add_argument("--compression", default="snappy", help="of the tier's Parquet files")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocketstore-tier-", dir=args.scratch) as tmp:
        scratch = Path(tmp)
        store = Path(args.store) if args.store else scratch / "store"
        tiered = Path(args.tiered) if args.tiered else scratch / "tiered"
        tail = tiered.with_name(tiered.name + "-tail.parquet")  # the rows past the tier
        if not (store / "commitlog").is_dir():
            started = time.perf_counter()
            make_store(store, args.rows, args.file_size)
            print(f"wrote {args.rows:,} messages in {time.perf_counter() - started:.1f} s")
        if TOPIC not in tiered_topics(tiered) or not tail.exists():
            for old in topic_dir(tiered, TOPIC).glob("*") if tiered.is_dir() else []:
                old.unlink()
            tier(store, tiered, args.tiered_share, tail, args.compression)
        reads(store, tiered, tail, args.rounds)


def reads(store: Path, tiered: Path, tail: Path, rounds: int) -> None:
    from rocketstore.bench.spark import _session, tree_cpu_seconds
    from rocketstore.spark import read_topic, tier_files

    spark = _session()
    files = tier_files(str(tiered), TOPIC)
    frames = {
        "read_topic": read_topic(spark, str(store), TOPIC, tiered_dir=str(tiered)),
        "parquet": spark.read.parquet(*files, str(tail)),
        "source": spark.read.format("rocketstore")
        .option("path", str(store))
        .option("topics", TOPIC)
        .load(),
    }
    counts = {name: every_column(df)[1] for name, df in frames.items()}  # warm, and check
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the reads disagree on the rows: {counts}")
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    try:
        for _ in range(rounds):
            for name, df in frames.items():
                load = os.getloadavg()[0]
                own = tree_cpu_seconds()
                seconds, rows = every_column(df)
                used = (tree_cpu_seconds() - own) / rows * 1e6
                best[name] = max(best.get(name, 0.0), rows / seconds)
                cpu[name] = min(cpu.get(name, 1e9), used)
                print(
                    f"{name:10s} {rows / seconds:>10,.0f} rows/s  {seconds:6.2f} s  "
                    f"Spark's cpu {used:5.2f} µs/row  load {load:.2f}",
                    flush=True,
                )
    finally:
        spark.stop()
    for name, rate in best.items():
        print(f"best {name:10s} {rate:>10,.0f} rows/s  {cpu[name]:5.2f} µs CPU a row")
    for other in ("parquet", "source"):
        print(
            f"read_topic ÷ {other}: {best['read_topic'] / best[other]:.2f} "
            f"(CPU a row: {cpu[other] / cpu['read_topic']:.2f})"
        )
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
