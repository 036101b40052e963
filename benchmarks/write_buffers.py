"""The Spark writer with and without write buffers (option writeBuffers), run alternately.

    python benchmarks/write_buffers.py [--rows N] [--pairs K] [--spark] [--dir DIR]

Without ``--spark``: ``write_batches`` (a write task's work) on pre-built 10k-row Arrow
batches of 1 KiB bodies with TAGS and KEYS, outside Spark. With ``--spark``: a ``coalesce(1)``
write of the same rows, cached, in a local[2] session (the bench's). Each pair runs
writeBuffers=0, then writeBuffers=2; the machine's speed drifts, so compare within pairs.
The stores are made in a new temporary directory (or a new sub-directory of ``--dir``) and
removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from rocketstore.bench.storage import verdict


def outside_spark(root: str, rows: int, buffers: int) -> tuple[float, str]:
    import pyarrow as pa

    from rocketstore.spark._path_writer import WriteSettings, write_batches

    body = os.urandom(1024)
    batches = []
    for lo in range(0, rows, 10_000):
        n = min(10_000, rows - lo)
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "topic": pa.array(["T"] * n),
                    "body": pa.array([body] * n, pa.binary()),
                    "tags": pa.array(["TagA"] * n),
                    "keys": pa.array([f"k{lo + i}" for i in range(n)]),
                }
            )
        )
    store = f"{root}/store"
    columns = ("topic", "body", "tags", "keys")
    s = WriteSettings(store, None, None, {}, 4, 1000, columns, "ASYNC_FLUSH", buffers)
    start = time.perf_counter()
    report = write_batches(s, iter(batches))
    took = time.perf_counter() - start
    shutil.rmtree(store, ignore_errors=True)
    text = f"{rows / took:,.0f} rows/s (put {report.put_s:.2f} s, close {report.close_s:.2f} s)"
    return rows / took, text


def in_spark(root: str, rows: int, pairs: int) -> None:
    from rocketstore.bench.spark import BODY_SIZE, TOPIC, _session

    spark = _session()
    source = spark.range(rows, numPartitions=2).selectExpr(
        f"'{TOPIC}' AS topic",
        f"encode(lpad(CAST(id AS STRING), {BODY_SIZE}, 'x'), 'utf-8') AS body",
        "CONCAT('k', CAST(id AS STRING)) AS keys",
        "CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS tags",
    )
    source.cache().count()
    warm = source.limit(1000).coalesce(1).write.format("rocketstore")
    warm.option("path", f"{root}/warm").mode("append").save()
    ratios = []
    try:
        for _ in range(pairs):
            rates = []
            for buffers in ("0", "2"):
                shutil.rmtree(f"{root}/store", ignore_errors=True)
                start = time.perf_counter()
                w = source.coalesce(1).write.format("rocketstore").option("writeBuffers", buffers)
                w.option("path", f"{root}/store").mode("append").save()
                rate = rows / (time.perf_counter() - start)
                rates.append(rate)
                print(f"spark, writeBuffers={buffers}: {rate:,.0f} rows/s", flush=True)
            ratios.append(rates[1] / rates[0])
    finally:
        spark.stop()
    print(f"writeBuffers=2 over 0, by pair: {' / '.join(f'{r:.2f}' for r in ratios)}")
    print(f"{verdict(ratios)}; load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None, help="200k outside Spark, 300k in Spark")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--spark", action="store_true")
    ap.add_argument("--dir", default=None, help="where to make the scratch stores (default: temp)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="rocketstore-write-buffers-", dir=args.dir)
    try:
        if args.spark:
            in_spark(root, args.rows or 300_000, args.pairs)
            return
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        ratios = []
        for _ in range(args.pairs):
            rates = []
            for buffers in (0, 2):
                rate, text = outside_spark(root, args.rows or 200_000, buffers)
                rates.append(rate)
                print(f"writeBuffers={buffers}: {text}", flush=True)
            ratios.append(rates[1] / rates[0])
        print(f"writeBuffers=2 over 0, by pair: {' / '.join(f'{r:.2f}' for r in ratios)}")
        print(f"{verdict(ratios)}; load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
