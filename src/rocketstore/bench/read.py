"""Read-side benchmarks: get_message, query_message by key, and dispatch lag under put load."""

from __future__ import annotations

import dataclasses
import os
import random
import threading
import time

from .. import Message, MessageStore, StoreConfig
from . import Figures, scenario

BODY_SIZE = 1024
TOPIC = "BenchTopic"


def _config(root: str, **kw: object) -> StoreConfig:
    base = StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=256 * 1024 * 1024,
        warm_mapped_file_enable=True,
        flush_disk_type="ASYNC_FLUSH",
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def _wait_dispatched(store: MessageStore, timeout: float = 600.0) -> float:
    start = time.perf_counter()
    while store.dispatch_behind_bytes() > 0:
        if time.perf_counter() - start > timeout:
            raise RuntimeError("dispatch did not catch up")
        time.sleep(0.001)
    return time.perf_counter() - start


def _fill(store: MessageStore, n: int, queues: int, body_size: int, keys: bool) -> float:
    bodies = [os.urandom(body_size) for _ in range(64)]
    put = store.put_message
    start = time.perf_counter()
    for i in range(n):
        msg = Message(
            TOPIC,
            bodies[i & 63],
            i % queues,
            tags="TagA",
            keys=f"key-{i}" if keys else None,
            properties={"UNIQ_KEY": f"{i:032X}"} if keys else None,
        )
        r = put(msg)
        if r.status.name != "PUT_OK":
            raise RuntimeError(f"put failed: {r}")
    return time.perf_counter() - start


@scenario("get_message", "read", "get_message, 32 per call, 1 KiB bodies, decoded (msgs/s)")
def bench_get_message(root: str, count: int | None) -> Figures:
    n = count or 200_000
    queues = 4
    with MessageStore(_config(os.path.join(root, "get"))) as store:
        _fill(store, n, queues, BODY_SIZE, keys=False)
        _wait_dispatched(store)
        best = 0.0
        for _ in range(5):  # best of five passes over every queue (the machine is shared)
            got = 0
            start = time.perf_counter()
            for q in range(queues):
                offset = 0
                while True:
                    r = store.get_message("bench", TOPIC, q, offset, 32)
                    if not r.messages:
                        break
                    got += len(r.messages)
                    offset = r.next_begin_offset
            elapsed = time.perf_counter() - start
            if got != n:
                raise RuntimeError(f"read {got} of {n} messages")
            best = max(best, n / elapsed)
    return {
        "messages": n,
        "msgs_per_s": round(best),
        "MB_per_s": round(best * BODY_SIZE / 1e6, 1),
        "target_msgs_per_s": 500_000,
        "goal_msgs_per_s": 1_000_000,
    }


@scenario("query_message", "read", "query_message by key with 1M keys indexed (p50/p99 latency)")
def bench_query_message(root: str, count: int | None) -> Figures:
    keys_wanted = count or 1_000_000
    n = keys_wanted // 2  # each message has one KEYS key and a UNIQ_KEY
    with MessageStore(_config(os.path.join(root, "query"))) as store:
        put_s = _fill(store, n, 4, 64, keys=True)
        drain_s = _wait_dispatched(store)
        rng = random.Random(7)
        picks = [rng.randrange(n) for _ in range(20_000)]
        lat = []
        found = 0
        for i in picks:
            key = f"key-{i}" if i & 1 else f"{i:032X}"
            t = time.perf_counter()
            r = store.query_message(TOPIC, key, 32, 0, 2**63 - 1)
            lat.append(time.perf_counter() - t)
            found += len(r.messages)
        if found != len(picks):
            raise RuntimeError(f"found {found} messages for {len(picks)} unique keys")
    lat.sort()
    return {
        "keys_indexed": 2 * n,
        "queries": len(picks),
        "p50_ms": round(lat[len(lat) // 2] * 1000, 3),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3),
        "max_ms": round(lat[-1] * 1000, 3),
        "target_p99_ms": 1.0,
        "index_msgs_per_s": round(n / (put_s + drain_s)),
    }


@scenario(
    "dispatch_lag", "read", "dispatch lag while one producer puts 1 KiB messages (ASYNC_FLUSH)"
)
def bench_dispatch_lag(root: str, count: int | None) -> Figures:
    n = count or 500_000
    samples: list[int] = []
    stop = threading.Event()
    with MessageStore(_config(os.path.join(root, "lag"))) as store:

        def sample() -> None:
            while not stop.is_set():
                samples.append(store.dispatch_behind_bytes())
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        put_s = _fill(store, n, 4, BODY_SIZE, keys=True)
        drain_s = _wait_dispatched(store)
        stop.set()
        sampler.join()
        record = store.commit_log.max_offset / n
    samples.sort()
    return {
        "messages": n,
        "put_msgs_per_s": round(n / put_s),
        "dispatch_msgs_per_s": round(n / (put_s + drain_s)),
        "lag_p50_msgs": round(samples[len(samples) // 2] / record) if samples else 0,
        "lag_p99_msgs": round(samples[int(len(samples) * 0.99)] / record) if samples else 0,
        "lag_max_msgs": round(samples[-1] / record) if samples else 0,
        "drain_after_last_put_ms": round(drain_s * 1000, 1),
    }
