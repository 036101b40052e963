"""Tiered-store benchmarks: tiering a sealed commit-log file against filling it, the Parquet
size of text-like bodies, and the put rate with the tiering service running.

Bodies are text-like: JSON objects with a unique id and time and a few hundred bytes of words
drawn with Zipf-like frequencies from a vocabulary of 2,000 made-up words, from a pool of 65,536
such texts (so rows of a row group rarely repeat one another). Needs pyarrow.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import shutil
import time
from pathlib import Path

from .. import Message, MessageStore, StoreConfig
from . import Figures, scenario

TOPICS = ("orders", "payments", "shipments", "audit")
QUEUES = 8
POOL = 65_536
PAIRS = 3
DEFAULT_FILE_SIZE = 256 << 20


@functools.cache
def text_bodies(count: int = POOL, seed: int = 5) -> list[bytes]:
    """``count`` JSON-like texts of about 300-1,200 bytes (made once: a few seconds)."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "an", "ix", "pu", "es"]
    vocab = sorted({"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(4000)})[
        :2000
    ]
    weights = [1 / (r + 1) for r in range(len(vocab))]
    out = []
    for _ in range(count):
        words = " ".join(rng.choices(vocab, weights, k=rng.randint(40, 180)))
        status = rng.choice(["new", "paid", "shipped", "cancelled"])
        out.append(
            f'{{"status": "{status}", "customer": "c{rng.randrange(50_000)}", '
            f'"amount": {rng.randrange(100_000) / 100}, "note": "{words}"'.encode()
        )
    return out


def _config(root: Path, file_size: int, **kw: object) -> StoreConfig:
    base = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=file_size,
        flush_disk_type="ASYNC_FLUSH",
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def put_until(store: MessageStore, bodies: list[bytes], offset: int, start_id: int = 0) -> int:
    """Put text-like messages until the commit log reaches ``offset``; how many were put."""
    i = start_id
    n = len(bodies)
    stamp = time.time_ns() // 1_000_000
    while store.max_phy_offset < offset:
        for _ in range(1000):
            body = b'{"id": %d, "ts": %d, ' % (i, stamp + i) + bodies[i % n][1:]
            store.put_message(
                Message(TOPICS[i & 3], body, i % QUEUES, tags=TOPICS[i & 3][:3], keys=f"id{i}")
            )
            i += 1
    return i - start_id


def put_count(store: MessageStore, bodies: list[bytes], count: int, start_id: int) -> None:
    n = len(bodies)
    stamp = time.time_ns() // 1_000_000
    for i in range(start_id, start_id + count):
        body = b'{"id": %d, "ts": %d, ' % (i, stamp + i) + bodies[i % n][1:]
        store.put_message(
            Message(TOPICS[i & 3], body, i % QUEUES, tags=TOPICS[i & 3][:3], keys=f"id{i}")
        )


def tier_speed(workdir: str | Path, file_size: int = DEFAULT_FILE_SIZE, files: int = 2) -> Figures:
    """Fill ``files`` sealed commit-log files at the in-process put rate, then tier each one
    (unpaced) and compare the times and sizes."""
    from ..store.read._reader import CommitLogView
    from ..tier._manifest import load_covered
    from ..tier._writer import tier_range

    root = Path(workdir)
    bodies = text_bodies()
    config = _config(root / "store", file_size)
    with MessageStore(config) as store:
        began = time.perf_counter()
        messages = put_until(store, bodies, files * file_size)
        fill_s = time.perf_counter() - began
    tiered = root / "tier"
    view = CommitLogView(Path(config.commit_log_dir), file_size)
    tier_s: list[float] = []
    rows = written = 0
    try:
        for k in range(files):
            began = time.perf_counter()
            r = tier_range(view, tiered, k * file_size, (k + 1) * file_size)
            tier_s.append(time.perf_counter() - began)
            rows += r.rows
            written += r.parquet_bytes
    finally:
        view.close()
    assert load_covered(tiered) == files * file_size
    fill_per_file = fill_s * file_size / (files * file_size)
    return {
        "file_mib": file_size >> 20,
        "files": files,
        "messages_put": messages,
        "put_msgs_per_s": round(messages / fill_s),
        "fill_s_per_file": round(fill_per_file, 2),
        "tier_s_per_file": [round(t, 2) for t in tier_s],
        "tier_over_fill": [round(t / fill_per_file, 3) for t in tier_s],
        "tier_rows_per_s": round(rows / sum(tier_s)),
        "commitlog_bytes": files * file_size,
        "parquet_bytes": written,
        "parquet_over_commitlog": round(written / (files * file_size), 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _put_run(
    root: Path, file_size: int, bodies: list[bytes], backlog: int, count: int, tiering: bool
) -> tuple[float, int, bool]:
    """Puts per second of ``count`` puts into a store holding ``backlog`` untiered sealed files,
    with or without the tiering service running; how far the tier got by the end, and whether
    its worker was still at work when the puts ended."""
    from ..tier._service import TierService

    config = _config(root / "store", file_size, tiered_dir=str(root / "tier"))
    covered = 0
    busy = False
    with MessageStore(config) as store:
        done = put_until(store, bodies, backlog * file_size + 1)
        tier = TierService(config, settled=store.flushed_phy_offset) if tiering else None
        if tier is not None:
            store.set_tiered_below(tier.covered)
            tier.start()
        time.sleep(1.5)  # on: the worker is into its first range; off: the same pause
        began = time.perf_counter()
        put_count(store, bodies, count, done)
        rate = count / (time.perf_counter() - began)
        if tier is not None:
            busy = tier.worker_pid is not None
            tier.stop()
            covered = tier.covered()
    shutil.rmtree(root)
    return rate, covered, busy


def put_impact(
    workdir: str | Path,
    file_size: int = DEFAULT_FILE_SIZE,
    backlog: int = 2,
    count: int = 200_000,
    pairs: int = PAIRS,
) -> Figures:
    """Put rate with the tiering service at work (its default pacing) over without it, in
    ``pairs`` alternated pairs (off/on, on/off, ...)."""
    bodies = text_bodies()
    ratios: list[float] = []
    on_rates: list[float] = []
    off_rates: list[float] = []
    tiered_bytes: list[int] = []
    busy_at_end: list[bool] = []
    loads = [round(os.getloadavg()[0], 2)]
    for p in range(pairs):
        order = (False, True) if p % 2 == 0 else (True, False)
        got: dict[bool, float] = {}
        for tiering in order:
            rate, covered, busy = _put_run(
                Path(workdir) / f"run-{p}-{int(tiering)}",
                file_size,
                bodies,
                backlog,
                count,
                tiering,
            )
            got[tiering] = rate
            if tiering:
                tiered_bytes.append(covered)
                busy_at_end.append(busy)
        on_rates.append(round(got[True]))
        off_rates.append(round(got[False]))
        ratios.append(round(got[True] / got[False], 3))
        loads.append(round(os.getloadavg()[0], 2))
    return {
        "file_mib": file_size >> 20,
        "backlog_files": backlog,
        "puts_per_run": count,
        "puts_per_s_off": off_rates,
        "puts_per_s_on": on_rates,
        "on_over_off": ratios,
        "tiered_by_the_end_bytes": tiered_bytes,
        "worker_busy_when_puts_ended": busy_at_end,
        "load_average_1m": loads,
    }


@scenario("tier_file", "tier", "tier a sealed 64 MiB commit-log file vs filling it; Parquet size")
def _tier_file(workdir: str, count: int | None) -> Figures:
    return tier_speed(workdir, 64 << 20, files=count or 2)


@scenario("tier_put_impact", "tier", "put rate with the tiering service on / off (3 pairs)")
def _tier_put_impact(workdir: str, count: int | None) -> Figures:
    return put_impact(workdir, 64 << 20, backlog=2, count=count or 200_000)
