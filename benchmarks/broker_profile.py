"""Where the broker's time goes under a load: CPU by thread, and py-spy samples of its loop
thread grouped by part (store put, index, codec, send processing, system calls, collector).

    python benchmarks/broker_profile.py [--load send|raw|pull] [--flush ASYNC_FLUSH|SYNC_FLUSH]
        [--role ASYNC_MASTER|SYNC_MASTER] [--slave] [--messages N] [--rate 200] [--keep FILE]

Loads (the broker is a ``rocketstore serve`` subprocess, as in ``rocketstore bench``):

- ``send``: one blocking client, one SEND_MESSAGE_V2 per round trip;
- ``raw``: pre-encoded sends on 64 connections, 8 outstanding on each (the broker's ceiling);
- ``pull``: a fill, then one consumer draining the topic (the drain is profiled).

``--role`` sets the broker's role; ``--slave`` attaches a slave process (a store replicating
from the broker's HA port, as in ``rocketstore bench --scenario ha_broker_sync_master``), which
a SYNC_MASTER needs to answer SUCCESS.

Needs py-spy (``pip install py-spy``) and permission to attach to a child process. A sample
is put in the group of the deepest frame that matches one (so a store call made from the send
processor counts as the store's). py-spy pauses the process for each sample with
``--native``: rates drop while it runs, the shares do not depend on that.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rocketstore import StoreConfig
from rocketstore.bench import broker as b
from rocketstore.bench.ha import _slave_of

GROUPS = [
    ("collector (gc)", ["gc_collect"]),
    # the socket module's own frames too: py-spy often cannot name the libc frame below them
    (
        "kernel send",
        ["send (libc", "sendto (libc", "writev (libc", "write (libc", "sock_send_impl"],
    ),
    ("kernel recv", ["recv (libc", "recvfrom (libc", "read (libc", "sock_recv_impl"]),
    ("epoll_wait", ["epoll_wait"]),
    ("remoting decode", ["decode_frame"]),
    ("remoting encode", ["RemotingCommand.encode", "encode_parts", "_encode_json_header"]),
    ("store index (keys, UNIQ_KEY)", ["build_index", "IndexService", "put_key"]),
    ("store dispatch", ["_reput.py"]),
    ("store put", ["put_message_async", "CommitLog.put_message", "put_messages"]),
    ("pull read (get_raw)", ["get_raw", "_raw_read.py"]),
    ("long poll", ["_long_poll.py"]),
    ("send processing", ["_send.py"]),
    ("pull processing", ["_pull.py"]),
    ("connection", ["_connection.py"]),
    ("broker stats", ["broker/state/_stats.py"]),
]


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds by thread id (user + system)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[task.name] = (int(fields[11]) + int(fields[12])) / tick
    return out


def thread_names(pid: int) -> dict[str, str]:
    dump = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True)
    names = {}
    for line in dump.stdout.splitlines():
        if line.startswith("Thread ") and '"' in line:
            tid = line.split()[1]
            names[tid] = line.split('"')[1]
    return names


def group_samples(path: str) -> tuple[int, collections.Counter[str]]:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if "MainThread" not in frames[0]:
            continue
        total += int(n)
        group = "asyncio loop / other"
        for frame in reversed(frames[1:]):
            hit = next((g for g, keys in GROUPS if any(k in frame for k in keys)), None)
            if hit is not None:
                group = hit
                break
        counts[group] += int(n)
    return total, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", choices=("send", "raw", "pull"), default="raw")
    ap.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    ap.add_argument("--role", choices=("ASYNC_MASTER", "SYNC_MASTER"), default="ASYNC_MASTER")
    ap.add_argument("--slave", action="store_true", help="attach a slave process")
    ap.add_argument("--messages", type=int, default=64_000)
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples a second")
    ap.add_argument("--keep", default=None, help="keep py-spy's raw output in FILE")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="broker-profile-")
    out = args.keep or os.path.join(root, "samples.txt")
    n = args.messages
    load_before = _load()
    try:
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(
                b.broker_server(
                    os.path.join(root, "store"),
                    flush=args.flush,
                    role=args.role,
                    want_ha=args.slave,
                )
            )
            if args.slave:
                size = StoreConfig().mapped_file_size_commit_log
                stack.enter_context(_slave_of(os.path.join(root, "slave"), server.ha_address, size))
            b._create_topic(server)
            body = b._body()
            frames = b.send_frames(n, body) if args.load == "raw" else []
            with b._client_runner() as runner:
                if args.load == "pull":
                    runner.run(b.fill(server.namesrv, n, body))
                names = thread_names(server.proc.pid)
                record = ["py-spy", "record", "-o", out, "-f", "raw", "--native", "--threads"]
                spy = subprocess.Popen(
                    [*record, "--pid", str(server.proc.pid), "-r", str(args.rate)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)  # py-spy attached
                before = thread_cpu(server.proc.pid)
                start = time.perf_counter()
                if args.load == "send":
                    b.send_one_by_one(server.address, n, body)
                elif args.load == "raw":
                    runner.run(b.send_raw(server.address, 64, 8, frames))
                else:
                    runner.run(b.drain(server.address, 4))
                took = time.perf_counter() - start
                after = thread_cpu(server.proc.pid)
                spy.send_signal(2)
                spy.wait(60)
        print(
            f"{args.load}, {args.flush}, {args.role}{' with a slave' if args.slave else ''}: "
            f"{n / took:,.0f} msgs/s while sampled "
            f"(load average {load_before} before, {_load()} after)"
        )
        print("broker CPU a message by thread (µs):")
        for tid, cpu in sorted(after.items(), key=lambda kv: -(kv[1] - before.get(kv[0], 0))):
            used = cpu - before.get(tid, 0.0)
            if used > 0:
                print(f"  {names.get(tid, tid):28} {used / n * 1e6:7.1f}")
        total, counts = group_samples(out)
        print(f"loop thread, {total} samples:")
        for group, c in counts.most_common():
            print(f"  {c / max(total, 1) * 100:5.1f} %  {group}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
