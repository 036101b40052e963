"""Recovery benchmarks: a clean restart of a store with a 1 GiB commit log, and abnormal
recovery (CRC check of every record) over page-cached data."""

from __future__ import annotations

import os
import time

from .. import Message, MessageStore, StoreConfig
from ..store.recovery._scan import scan_records
from . import Figures, scenario

BODY_SIZE = 1024
TOPIC = "BenchTopic"
GIB = 1 << 30


def _config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=GIB,
        flush_disk_type="ASYNC_FLUSH",
        max_hash_slot_num=100_000,
        max_index_num=400_000,
    )


def _fill(root: str, target_bytes: int) -> tuple[int, int]:
    """Write 1 KiB messages (4 queues, TAGS, a key on every 16th) until the commit log holds
    ``target_bytes``; shut down cleanly. Returns (messages, bytes)."""
    bodies = [os.urandom(BODY_SIZE) for _ in range(64)]
    n = 0
    with MessageStore(_config(root)) as store:
        batch = 32
        while store.max_phy_offset < target_bytes - 64 * 1024:
            q = n // batch % 4
            r = store.put_messages(
                [
                    Message(
                        TOPIC,
                        bodies[(n + k) & 63],
                        q,
                        tags="TagA",
                        keys=[f"k{n + k}"] if (n + k) % 16 == 0 else None,
                    )
                    for k in range(batch)
                ]
            )
            if not r.ok:
                break
            n += batch
        while store.dispatch_behind_bytes():
            time.sleep(0.01)
        size = store.max_phy_offset
    return n, size


def _open_close(root: str) -> tuple[float, MessageStore]:
    start = time.perf_counter()
    store = MessageStore(_config(root))
    store.load()
    store.start()
    elapsed = time.perf_counter() - start
    store.shutdown()
    return elapsed, store


@scenario("clean_restart", "recovery", "open a cleanly shut down store with a 1 GiB commit log (s)")
def bench_clean_restart(root: str, count: int | None) -> Figures:
    target = count * (BODY_SIZE + 150) if count else GIB - (1 << 20)
    n, size = _fill(root, target)
    times = []
    modes = set()
    for _ in range(3):
        t, store = _open_close(root)
        times.append(t)
        assert store.load_result is not None
        modes.add(store.load_result.mode)
    # RocketMQ's normal recovery (no clean-shutdown record: CRC scan of the last 3 files)
    from ..store._checkpoint import StoreCheckpoint

    cp = StoreCheckpoint(os.path.join(root, "checkpoint"))
    cp.clear_clean()
    cp.shutdown()
    t_normal, store = _open_close(root)
    assert store.load_result is not None
    return {
        "messages": n,
        "commit_log_bytes": size,
        "clean_restart_s": round(min(times), 3),
        "modes": ",".join(sorted(modes)),
        "normal_recovery_s": round(t_normal, 3),
        "normal_recovery_mode": store.load_result.mode,
        "target_s": 1.0,
    }


@scenario(
    "abnormal_recovery", "recovery", "abnormal recovery with CRC check of page-cached data (MB/s)"
)
def bench_abnormal_recovery(root: str, count: int | None) -> Figures:
    target = count * (BODY_SIZE + 150) if count else GIB - (1 << 20)
    n, size = _fill(root, target)
    files = sorted(os.listdir(os.path.join(root, "commitlog")))
    with open(os.path.join(root, "commitlog", files[0]), "rb") as f:  # page-cache it
        while f.read(1 << 24):
            pass
    best_load = 0.0
    best_scan = 0.0
    for _ in range(3):
        # a crash: the abort file is present; the checkpoint is older than every record of
        # the only file, so the whole file is scanned and checked against the queues
        open(os.path.join(root, "abort"), "w").close()
        start = time.perf_counter()
        store = MessageStore(_config(root))
        store.load()
        elapsed = time.perf_counter() - start
        r = store.load_result
        assert r is not None and r.mode == "abnormal" and r.scan_from == 0
        store.start()
        store.shutdown()
        best_load = max(best_load, r.scanned_bytes / elapsed / 1e6)
        # the scan loop alone, the same bytes
        import mmap

        with open(os.path.join(root, "commitlog", files[0]), "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            t0 = time.perf_counter()
            s = scan_records(mm, 0, len(mm), 0, check_crc=True)
            best_scan = max(best_scan, s.end / (time.perf_counter() - t0) / 1e6)
            mm.close()
    return {
        "messages": n,
        "commit_log_bytes": size,
        "recovery_MB_per_s": round(best_load, 1),
        "scan_loop_MB_per_s": round(best_scan, 1),
        "target_MB_per_s": 300,
    }
