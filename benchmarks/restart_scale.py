"""Restart time against the number of consume queues: a store of N queues (topics of 8 queues),
each holding one message, restarted after a clean shutdown and after a kill -9.

    python benchmarks/restart_scale.py --queues 1000 --queues 10000 [--rounds 2]
        [--dir DIR] [--this-src SRC] --other-src OTHER_CHECKOUT/src [--sample 1000]
        [--touch 100] [--serve]

The store is built once per N (by the tree this script runs from, in sessions of 4,000 new
queues: a process holds a descriptor per mapped queue file), then copied, one copy per tree,
so that neither tree reads a store the other last shut down. Each measurement is a fresh
process (``PYTHONPATH`` = that tree's ``src``) timing ``MessageStore.load()`` + ``start()``:

  clean   after a clean shutdown
  kill    after a process that opened the store, put one message to each of ``--touch``
          queues and was killed -9 (the log's tail touches those queues)

then checking ``--sample`` queues (spread over the store) read back their messages and every
queue's max offset. Trees alternate within each round (this tree, the other, this, ...).
``--serve`` also times ``rocketstore serve`` on the store: from its start to the line saying
the broker listens. Consume-queue files are 200 units (4,000 bytes) so that 100,000 queues
fit on a benchmark disk (a queue file gets its disk blocks ahead of its units; the restart
reads no more of a file than its blocks). Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE_SRC = str(Path(__file__).resolve().parents[1] / "src")
CQ_BYTES = 200 * 20
CHUNK = 4000


def _config(root: str) -> Any:
    from rocketstore import StoreConfig

    return StoreConfig(store_path_root_dir=root, mapped_file_size_consume_queue=CQ_BYTES)


def _queue(q: int) -> tuple[str, int]:
    return f"Scale{q // 8:05d}", q % 8


def build(root: str, queues: int) -> None:
    """One message in each of ``queues`` queues, in sessions of CHUNK new queues."""
    from rocketstore import Message, MessageStore

    for start in range(0, queues, CHUNK):
        with MessageStore(_config(root)) as store:
            for q in range(start, min(queues, start + CHUNK)):
                topic, qid = _queue(q)
                r = store.put_message(Message(topic, f"m{q}".encode() * 10, qid))
                assert r.status.name == "PUT_OK", r
            deadline = time.monotonic() + 600
            while store.dispatch_behind_bytes() and time.monotonic() < deadline:
                time.sleep(0.01)


def touch_and_die(root: str, touch: int, seed: int) -> None:
    """Open the store, put a message to ``touch`` random queues, wait until dispatched, then
    kill -9 this process."""
    from rocketstore import Message, MessageStore

    store = MessageStore(_config(root))
    store.load()
    store.start()
    n = sum(1 for _ in store.consume_queues)
    for q in random.Random(seed).sample(range(n), min(touch, n)):
        topic, qid = _queue(q)
        store.put_message(Message(topic, f"again{q}".encode(), qid))
    deadline = time.monotonic() + 600
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)


def open_and_check(root: str, queues: int, sample: int, touched: int) -> dict[str, Any]:
    """Time load + start, then check a sample of queues and every queue's max offset."""
    from rocketstore import MessageStore

    t0 = time.perf_counter()
    store = MessageStore(_config(root))
    store.load()
    t1 = time.perf_counter()
    store.start()
    t2 = time.perf_counter()
    r = store.load_result
    assert r is not None
    try:
        step = max(1, queues // sample)
        checked = 0
        for q in range(0, queues, step):
            topic, qid = _queue(q)
            g = store.get_message("bench", topic, qid, 0, 4)
            assert g.messages and g.messages[0].body == f"m{q}".encode() * 10, (q, g.status)
            checked += 1
        t3 = time.perf_counter()
        total = 0
        for q in range(queues):
            total += store.get_max_offset_in_queue(*_queue(q))
        assert total == queues + touched, (total, queues, touched)
        rss = _rss_mib()
    finally:
        store.shutdown()
    return {
        "mode": r.mode,
        "load_s": round(t1 - t0, 3),
        "start_s": round(t2 - t1, 3),
        "restart_s": round(t2 - t0, 3),
        "read_sample_s": round(t3 - t2, 3),
        "sampled_queues": checked,
        "queues_opened": getattr(r, "queues_opened", None),
        "queue_checkpoint": getattr(r, "queue_checkpoint", None),
        "rss_mib": rss,
    }


def _rss_mib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


def _run(src: str, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=src)
    return subprocess.run(
        [sys.executable, __file__, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _copy_sparse(src: Path, dst: Path) -> None:
    """Copy a store keeping its files sparse (a copy that fills a 1 GiB commit-log file with
    zeroes makes recovery read all of it)."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)


def _serve_time(src: str, root: str) -> float | str:
    """Seconds from starting ``rocketstore serve`` on ``root`` to its broker listening."""
    env = dict(os.environ, PYTHONPATH=src)
    conf = Path(root).parent / f"{Path(root).name}.conf"
    conf.write_text(f"mappedFileSizeConsumeQueue={CQ_BYTES}\n")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", root, "-c", str(conf)),
            *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
            *("--metrics-listen", "", "--console-listen", ""),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if re.search(r"broker .* listening on", line):
                took = time.perf_counter() - t0
                break
        else:
            return "serve ended before listening"
        proc.send_signal(signal.SIGTERM)
        proc.wait(600)
        return round(took, 3)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        cmd, args = sys.argv[1], sys.argv[2:]
        if cmd == "_build":
            build(args[0], int(args[1]))
        elif cmd == "_die":
            touch_and_die(args[0], int(args[1]), int(args[2]))
        elif cmd == "_open":
            print(json.dumps(open_and_check(args[0], int(args[1]), int(args[2]), int(args[3]))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", type=int, action="append")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--this-src", default=HERE_SRC, help="a copy of this tree's src to run")
    ap.add_argument("--other-src", required=True, help="another checkout's src to compare with")
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--touch", type=int, default=100)
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()
    base = Path(a.dir or tempfile.mkdtemp(prefix="restart-scale-"))
    trees = {"this": a.this_src, "other": a.other_src}
    print(json.dumps({"load_average": os.getloadavg(), "trees": trees}), flush=True)
    for n in a.queues or [1000, 10000]:
        built = base / f"built-{n}"
        if not built.exists():
            t0 = time.perf_counter()
            p = _run(a.this_src, "_build", str(built), str(n))
            assert p.returncode == 0, p.stderr[-3000:]
            print(json.dumps({"queues": n, "built_s": round(time.perf_counter() - t0, 1)}))
        for rnd in range(a.rounds):
            for name, src in trees.items():
                for kind in ("clean", "kill"):
                    root = base / f"run-{n}-{name}"
                    if root.exists():
                        shutil.rmtree(root)
                    _copy_sparse(built, root)
                    touched = 0
                    if kind == "kill":
                        p = _run(src, "_die", str(root), str(a.touch), str(rnd))
                        if p.returncode != -signal.SIGKILL:
                            print(
                                json.dumps(
                                    {
                                        "queues": n,
                                        "tree": name,
                                        "kind": kind,
                                        "error": p.stderr.strip()[-400:],
                                    }
                                ),
                                flush=True,
                            )
                            continue
                        touched = min(a.touch, n)
                    la = os.getloadavg()[0]
                    p = _run(src, "_open", str(root), str(n), str(a.sample), str(touched))
                    out: dict[str, Any] = {
                        "queues": n,
                        "tree": name,
                        "kind": kind,
                        "round": rnd,
                        "load_average": la,
                    }
                    if p.returncode == 0:
                        out.update(json.loads(p.stdout.strip().splitlines()[-1]))
                    else:
                        out["error"] = p.stderr.strip()[-400:]
                    if a.serve and kind == "clean" and p.returncode == 0:
                        out["serve_listening_s"] = _serve_time(src, str(root))
                    print(json.dumps(out), flush=True)
                    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
