"""Storage-core benchmarks: the put path against a minimal pure-Python mmap writer (the floor)."""

from __future__ import annotations

import dataclasses
import gc
import mmap
import os
import shutil
import threading
import time
import zlib
from pathlib import Path

from .. import Message, MessageStore, PutMessageStatus, StoreConfig
from ..store.log._mapped_file import MappedFile
from ..store.log._record import MAGIC_V1
from . import Figures, scenario

BODY_SIZE = 1024
TOPIC = "BenchTopic"
DEFAULT_COUNT = 500_000
PAIRS = 3  # alternated pairs where a scenario compares two settings
FILE_SIZE = 1024 * 1024 * 1024


def _config(root: str, **kw: object) -> StoreConfig:
    base = StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=FILE_SIZE,
        flush_disk_type="ASYNC_FLUSH",
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def _messages(n: int, queues: int = 4) -> list[Message]:
    bodies = [os.urandom(BODY_SIZE) for _ in range(64)]
    return [Message(TOPIC, bodies[i & 63], i % queues) for i in range(n)]


def floor_rate(root: str, n: int, file_size: int = FILE_SIZE) -> float:
    """Messages per second of the minimal writer: header pack + CRC + body copy into mapped
    files made as the store makes commit-log files, rolling to the next file when full."""
    import struct

    head = struct.Struct(">iiiiiqqiq8sq8siqi")
    host = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    topic = TOPIC.encode()
    tail = bytes((len(topic),)) + topic + b"\x00\x00"
    bodies = [os.urandom(BODY_SIZE) for _ in range(64)]
    total = head.size + BODY_SIZE + len(tail)
    d = Path(root) / "floor"
    d.mkdir(parents=True, exist_ok=True)
    files: list[MappedFile] = []

    def new_file(offset: int) -> MappedFile:
        mf = MappedFile(d / f"{offset:020d}", file_size, preallocate=True)
        files.append(mf)
        return mf

    needed = (n * total) // file_size + 1
    for i in range(needed):
        new_file(i * file_size)
    os.sync()  # no writeback of the warm-up's zeroes during the timed loop
    start = time.perf_counter()
    idx = 0
    mm: mmap.mmap = files[0].mm
    pos = 0
    base = 0
    now = time.time_ns() // 1_000_000
    for i in range(n):
        if pos + total > file_size:
            idx += 1
            mm = files[idx].mm
            base += file_size
            pos = 0
        body = bodies[i & 63]
        head.pack_into(
            mm,
            pos,
            total,
            MAGIC_V1,
            zlib.crc32(body) & 0x7FFFFFFF,
            i & 3,
            0,
            i,
            base + pos,
            0,
            now,
            host,
            now,
            host,
            0,
            0,
            BODY_SIZE,
        )
        q = pos + head.size
        mm[q : q + BODY_SIZE] = body
        q += BODY_SIZE
        mm[q : q + len(tail)] = tail
        pos += total
    elapsed = time.perf_counter() - start
    for mf in files:
        mf.destroy(0)
    return n / elapsed


def _put_loop(store: MessageStore, msgs: list[Message]) -> tuple[float, float]:
    put = store.put_message
    start = time.perf_counter()
    worst = 0.0
    for m in msgs:
        t = time.perf_counter()
        r = put(m)
        dt = time.perf_counter() - t
        if dt > worst:
            worst = dt
        if r.status.name != "PUT_OK":
            raise RuntimeError(f"put failed: {r}")
    return time.perf_counter() - start, worst


def _rate_figures(n: int, elapsed: float, record: int, floor: float | None = None) -> Figures:
    rate = n / elapsed
    out: Figures = {
        "messages": n,
        "msgs_per_s": round(rate),
        "mb_per_s": round(rate * record / 1e6, 1),
    }
    if floor:
        out["floor_msgs_per_s"] = round(floor)
        out["ratio_to_floor"] = round(rate / floor, 3)
    return out


RECORD_SIZE = 91 + BODY_SIZE + len(TOPIC)


@scenario("floor", "storage", "minimal pure-Python mmap writer (pack + CRC + copy), 1 KiB bodies")
def bench_floor(root: str, count: int | None) -> Figures:
    n = count or DEFAULT_COUNT
    rate = floor_rate(root, n)
    return _rate_figures(n, n / rate, RECORD_SIZE)


@scenario(
    "put_async", "storage", "put_message, ASYNC_FLUSH, 1 KiB bodies, one thread, vs the floor"
)
def bench_put_async(root: str, count: int | None) -> Figures:
    """The put path against the floor, both writing into files prepared the same way
    (preallocated, not warmed), dirty pages synced before each timed round. Timing starts once
    the allocator has made the next file, and rounds of the floor and of the store alternate,
    the best of each counting, so a burst of load does not decide the ratio. The store runs as
    configured, dispatch to the consume queues included."""
    n = count or DEFAULT_COUNT
    rounds = 3
    per_round = max(n // rounds, 1)
    msgs = _messages(per_round * rounds)
    best_floor = best_put = 0.0
    gc.collect()
    gc.freeze()  # the benchmark's own messages are not the store's garbage to scan
    try:
        with MessageStore(_config(os.path.join(root, "s"))) as store:
            put = store.put_message
            ok = PutMessageStatus.PUT_OK
            put(msgs[0])
            if store.allocator is not None:
                store.allocator.wait_idle(120)
            for r in range(rounds):
                floor = floor_rate(os.path.join(root, f"f{r}"), per_round)
                best_floor = max(best_floor, floor)
                batch = msgs[r * per_round : (r + 1) * per_round]
                os.sync()  # as for the floor: no writeback left over from other files
                start = time.perf_counter()
                for m in batch:
                    if put(m).status is not ok:
                        raise RuntimeError("put failed")
                best_put = max(best_put, per_round / (time.perf_counter() - start))
            stats = store.statistics()
            lag = store.dispatch_behind_bytes()
    finally:
        gc.unfreeze()
    out = _rate_figures(per_round, per_round / best_put, RECORD_SIZE, best_floor)
    out["rounds"] = rounds
    out["max_put_latency_ms"] = stats.put_message_entire_time_max_ms
    out["dispatch_behind_bytes_at_end"] = lag
    return out


@scenario("put_batch", "storage", "put_messages, 32 x 1 KiB per batch, ASYNC_FLUSH, vs single puts")
def bench_put_batch(root: str, count: int | None) -> Figures:
    """Batches of 32 against single puts of the same messages. Rounds alternate between a
    store taking single puts and one taking batches, dirty pages synced before each, the best
    round of each counting (as put_async does)."""
    n = count or DEFAULT_COUNT
    rounds = 3
    per_round = max(n // rounds // 32 * 32, 32)
    msgs = _messages(per_round * rounds, queues=1)
    ok = PutMessageStatus.PUT_OK
    best_single = best_batch = 0.0
    gc.collect()
    gc.freeze()
    try:
        with (
            MessageStore(_config(os.path.join(root, "single"))) as single,
            MessageStore(_config(os.path.join(root, "batch"))) as batched,
        ):
            for r in range(rounds):
                part = msgs[r * per_round : (r + 1) * per_round]
                os.sync()
                start = time.perf_counter()
                for m in part:
                    if single.put_message(m).status is not ok:
                        raise RuntimeError("put failed")
                best_single = max(best_single, per_round / (time.perf_counter() - start))
                batches = [part[i : i + 32] for i in range(0, per_round, 32)]
                os.sync()
                start = time.perf_counter()
                for b in batches:
                    if batched.put_messages(b).status is not ok:
                        raise RuntimeError("batch put failed")
                best_batch = max(best_batch, per_round / (time.perf_counter() - start))
    finally:
        gc.unfreeze()
    out = _rate_figures(per_round, per_round / best_batch, RECORD_SIZE)
    out["single_msgs_per_s"] = round(best_single)
    out["batch_over_single"] = round(best_batch / best_single, 2)
    return out


def _sync_run(root: str, threads: int, per_thread: int) -> tuple[int, float, int]:
    """(messages, seconds, fdatasync calls) for ``threads`` producers under SYNC_FLUSH."""
    cfg = _config(root, flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=256 * 1024 * 1024)
    msgs = _messages(threads * per_thread)
    errors: list[str] = []
    with MessageStore(cfg) as store:
        flusher = store.commit_log.flush_service
        barrier = threading.Barrier(threads + 1)

        def producer(k: int) -> None:
            barrier.wait()
            for m in msgs[k * per_thread : (k + 1) * per_thread]:
                r = store.put_message(m)
                if r.status.name != "PUT_OK":
                    errors.append(str(r))

        ts = [threading.Thread(target=producer, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        barrier.wait()
        flushes_before = flusher.flush_count
        start = time.perf_counter()
        for t in ts:
            t.join()
        elapsed = time.perf_counter() - start
        flushes = flusher.flush_count - flushes_before
    if errors:
        raise RuntimeError(f"{len(errors)} puts failed, first: {errors[0]}")
    return threads * per_thread, elapsed, flushes


@scenario("put_sync", "storage", "SYNC_FLUSH: one producer vs 32 producers (group commit)")
def bench_put_sync(root: str, count: int | None) -> Figures:
    n = min(count or 20_000, 200_000)
    single_n, single_t, single_f = _sync_run(os.path.join(root, "one"), 1, max(n // 10, 500))
    multi_n, multi_t, multi_f = _sync_run(os.path.join(root, "many"), 32, max(n // 32, 50))
    single = single_n / single_t
    multi = multi_n / multi_t
    return {
        "single_thread_msgs_per_s": round(single),
        "threads_32_msgs_per_s": round(multi),
        "group_commit_speedup": round(multi / single, 1),
        "fdatasync_ms_single": round(single_t / max(single_f, 1) * 1000, 3),
        "msgs_per_fdatasync_32": round(multi_n / max(multi_f, 1), 1),
    }


@scenario("put_pool", "storage", "ASYNC_FLUSH with the transient store pool vs without, 3 pairs")
def bench_put_pool(root: str, count: int | None) -> Figures:
    """Plain and pooled puts alternate (plain, pool, plain, pool, ...), each into a fresh store,
    so a drift of the machine's speed hits both; the ratio is taken within each pair, and a
    ratio that is above 1 in one pair and below in another is no measurable difference."""
    n = count or DEFAULT_COUNT // 2
    msgs = _messages(n)
    plain_rates: list[float] = []
    pool_rates: list[float] = []
    for i in range(PAIRS):
        with MessageStore(_config(os.path.join(root, f"plain-{i}"))) as store:
            plain_rates.append(n / _put_loop(store, msgs)[0])
        cfg = _config(
            os.path.join(root, f"pool-{i}"),
            transient_store_pool_enable=True,
            transient_store_pool_size=3,
        )
        with MessageStore(cfg) as store:
            pool_rates.append(n / _put_loop(store, msgs)[0])
        shutil.rmtree(os.path.join(root, f"plain-{i}"), ignore_errors=True)
        shutil.rmtree(os.path.join(root, f"pool-{i}"), ignore_errors=True)
    ratios = [b / a for a, b in zip(plain_rates, pool_rates, strict=True)]
    return {
        "messages": n,
        "plain_msgs_per_s": " / ".join(f"{r:.0f}" for r in plain_rates),
        "pool_msgs_per_s": " / ".join(f"{r:.0f}" for r in pool_rates),
        "pool_over_plain": " / ".join(f"{r:.3f}" for r in ratios),
        "verdict": verdict(ratios),
    }


def verdict(ratios: list[float]) -> str:
    """What alternated pairs say: faster or slower only when every pair agrees."""
    if all(r > 1 for r in ratios):
        return f"faster in every pair ({min(ratios):.2f}-{max(ratios):.2f}x)"
    if all(r < 1 for r in ratios):
        return f"slower in every pair ({min(ratios):.2f}-{max(ratios):.2f}x)"
    return f"no measurable difference ({min(ratios):.2f}-{max(ratios):.2f}x)"


@scenario("roll_latency", "storage", "max put latency across file rolls, allocator on vs off")
def bench_roll(root: str, count: int | None) -> Figures:
    n = count or 200_000
    size = 16 * 1024 * 1024
    msgs = _messages(n + 1)
    out: Figures = {"file_size_mb": size // (1024 * 1024), "rolls": n * RECORD_SIZE // size}
    for name, alloc in (("allocator_on", True), ("allocator_off", False)):
        cfg = _config(
            os.path.join(root, name),
            mapped_file_size_commit_log=size,
            allocate_mapped_file_enable=alloc,
        )
        with MessageStore(cfg) as store:
            _put_loop(store, msgs[:1])  # the first file is made on the first put
            if store.allocator is not None:
                store.allocator.wait_idle(60)
                waits_before = store.allocator.waits
            elapsed, worst = _put_loop(store, msgs[1:])
            if store.allocator is not None:
                # rolls where a put found its file not made yet (0: no put waited)
                out["allocator_on_rolls_that_waited"] = store.allocator.waits - waits_before
        out[f"{name}_max_put_ms"] = round(worst * 1000, 2)
        out[f"{name}_msgs_per_s"] = round(n / elapsed)
    return out
