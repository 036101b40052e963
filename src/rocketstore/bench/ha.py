"""Replication benchmarks: the master in this process, each slave a process of its own (as a
slave broker is), on loopback.

- ha_lag: the non-blocking put (ASYNC_MASTER, ASYNC_FLUSH, 1 KiB bodies) with a slave
  attached; the slave's lag in bytes sampled every 5 ms: its maximum, at the end of the puts,
  and how long it took to catch up after them.
- ha_sync_master: SYNC_MASTER against ASYNC_MASTER (both with a slave) in the same run, with
  32 producer threads (blocking puts) and with 32 non-blocking puts in flight (the broker's
  way), next to the interpreter's ceiling for producers that wait on another thread.
- ha_catch_up: a slave started on an empty directory against a master holding a 1 GiB file
  (a request of 0 starts at the master's last file, here its only one): the rate at which the
  slave acknowledges it, from its request on (and with the slave process's start counted).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from .. import Message, MessageStore, PutMessageStatus, StoreConfig
from . import Figures, scenario
from .broker import _body, _create_topic, _many_round, _raw_round, broker_server

BODY_SIZE = 1024
TOPIC = "BenchHA"
FILE_SIZE = 1024 * 1024 * 1024
_SLAVE = r"""
import json, sys, time
from rocketstore import MessageStore, StoreConfig
over = json.loads(sys.argv[1])
with MessageStore(StoreConfig(**over)) as store:
    client = store.ha.client
    deadline = time.monotonic() + 30
    while client is not None and client.reported_offset < 0 and time.monotonic() < deadline:
        time.sleep(0.005)  # until it has told the master where it stands
    print("ready", flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
"""


def _config(root: str, **kw: Any) -> StoreConfig:
    base = StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=FILE_SIZE,
        flush_disk_type="ASYNC_FLUSH",
        ha_listen_port=0,
    )
    return dataclasses.replace(base, **kw)


@contextmanager
def _slave(root: str, master: MessageStore, **kw: Any) -> Iterator[subprocess.Popen[str]]:
    """A slave process replicating ``master``; stopped (cleanly) on exit."""
    with _slave_of(
        root,
        f"127.0.0.1:{master.ha.listen_port}",
        master.config.mapped_file_size_commit_log,
        **kw,
    ) as proc:
        yield proc


@contextmanager
def _slave_of(
    root: str, ha_address: str, file_size: int, **kw: Any
) -> Iterator[subprocess.Popen[str]]:
    """A slave process replicating the master at ``ha_address`` (its commit-log files
    ``file_size`` bytes), ready once it has reported its offset; stopped (cleanly) on exit."""
    over = {
        "store_path_root_dir": root,
        "mapped_file_size_commit_log": file_size,
        "broker_role": "SLAVE",
        "ha_master_address": ha_address,
        **kw,
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLAVE, json.dumps(over)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the slave process did not start")
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _wait_connected(master: MessageStore, n: int = 1, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len([c for c in master.ha.connections if c.ack_offset >= 0]) < n:
        if time.monotonic() > deadline:
            raise RuntimeError("no slave connected")
        time.sleep(0.005)


def _acked(master: MessageStore) -> int:
    return max((c.ack_offset for c in master.ha.connections), default=-1)


def _messages(n: int, queues: int = 4) -> list[Message]:
    bodies = [os.urandom(BODY_SIZE) for _ in range(64)]
    return [Message(TOPIC, bodies[i & 63], i % queues) for i in range(n)]


class _LagSampler(threading.Thread):
    """Samples master max offset minus the slave's acknowledgement every ``interval`` s."""

    def __init__(self, master: MessageStore, interval: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.master = master
        self.interval = interval
        self.stop_event = threading.Event()
        self.samples: list[int] = []

    def run(self) -> None:
        m = self.master
        while not self.stop_event.wait(self.interval):
            self.samples.append(max(0, m.max_phy_offset - _acked(m)))


@scenario("ha_lag", "ha", "replication lag under put_message_async (ASYNC_MASTER, 1 KiB bodies)")
def bench_ha_lag(root: str, count: int | None) -> Figures:
    n = count or 300_000
    msgs = _messages(n)
    cfg = _config(os.path.join(root, "m"), broker_role="ASYNC_MASTER", ha_enable=True)
    with MessageStore(cfg) as master:
        # the same puts with no slave, for the put rate the slave has to keep up with
        start = time.perf_counter()
        for m in msgs[: n // 3]:
            master.put_message_async(m)
        alone = (n // 3) / (time.perf_counter() - start)
        with _slave(os.path.join(root, "s"), master):
            _wait_connected(master)
            while _acked(master) < master.max_phy_offset:
                time.sleep(0.005)
            sampler = _LagSampler(master)
            sampler.start()
            begin_offset = master.max_phy_offset
            start = time.perf_counter()
            ok = PutMessageStatus.PUT_OK
            for m in msgs:
                f = master.put_message_async(m)
                if f.done() and f.result().status is not ok:
                    raise RuntimeError(f"put failed: {f.result()}")
            elapsed = time.perf_counter() - start
            end_offset = master.max_phy_offset
            at_end = end_offset - _acked(master)
            t_end = time.perf_counter()
            while _acked(master) < end_offset:
                time.sleep(0.001)
            catch_up = time.perf_counter() - t_end
            sampler.stop_event.set()
            sampler.join()
    samples = sampler.samples or [0]
    put_bytes = end_offset - begin_offset
    ordered = sorted(samples)
    return {
        "messages": n,
        "put_msgs_per_s": round(n / elapsed),
        "put_mb_per_s": round(put_bytes / elapsed / 1e6, 1),
        "put_msgs_per_s_no_slave": round(alone),
        "lag_bytes_max": max(samples),
        "lag_bytes_p50": ordered[len(ordered) // 2],
        "lag_bytes_p99": ordered[min(len(ordered) - 1, len(ordered) * 99 // 100)],
        "lag_bytes_at_end": at_end,
        "catch_up_after_end_ms": round(catch_up * 1000, 1),
        "replicated_mb_per_s": round(put_bytes / (elapsed + catch_up) / 1e6, 1),
    }


def _producers(master: MessageStore, threads: int, per_thread: int) -> tuple[int, float, int]:
    """``threads`` producers each putting ``per_thread`` messages (blocking puts); returns
    (messages, seconds, puts that were not PUT_OK)."""
    body = os.urandom(BODY_SIZE)
    failed = [0]
    barrier = threading.Barrier(threads + 1)

    def work(k: int) -> None:
        put = master.put_message
        msg = Message(TOPIC, body, k % 4)
        barrier.wait()
        bad = 0
        for _ in range(per_thread):
            if put(msg).status is not PutMessageStatus.PUT_OK:
                bad += 1
        failed[0] += bad

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in ts:
        t.join()
    return threads * per_thread, time.perf_counter() - start, failed[0]


def _handoff_ceiling(root: str, threads: int, per_thread: int) -> float:
    """What the interpreter allows for producers that wait for another thread: ``threads``
    producers each putting (ASYNC_MASTER, no slave) and then waiting on a lock that one
    completer thread releases, every waiter it finds at once. Messages per second."""
    body = os.urandom(BODY_SIZE)
    pending: list[threading.Lock] = []
    guard = threading.Lock()
    wake = threading.Event()
    stop = threading.Event()

    def completer() -> None:
        while not stop.is_set():
            wake.wait(0.01)
            wake.clear()
            with guard:
                ready = pending[:]
                pending.clear()
            for w in ready:
                w.release()

    with MessageStore(_config(root)) as store:
        barrier = threading.Barrier(threads + 1)

        def work(k: int) -> None:
            msg = Message(TOPIC, body, k % 4)
            barrier.wait()
            for _ in range(per_thread):
                store.put_message(msg)
                w = threading.Lock()
                w.acquire()
                with guard:
                    pending.append(w)
                wake.set()
                w.acquire()

        c = threading.Thread(target=completer, daemon=True)
        c.start()
        ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in ts:
            t.join()
        seconds = time.perf_counter() - start
        stop.set()
        wake.set()
        c.join()
    return threads * per_thread / seconds


def _window(master: MessageStore, n: int, window: int) -> float:
    """Non-blocking puts with ``window`` in flight, as the broker's event loop keeps one per
    waiting producer: the next put goes out when one completes. Messages per second."""
    body = os.urandom(BODY_SIZE)
    done: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
    msgs = [Message(TOPIC, body, k % 4) for k in range(window)]
    for k in range(window):
        master.put_message_async(msgs[k]).add_done_callback(done.put)
    start = time.perf_counter()
    issued, finished = window, 0
    while finished < n:
        f = done.get()
        finished += 1
        if f.result().status is not PutMessageStatus.PUT_OK:
            raise RuntimeError(f"put failed: {f.result()}")
        if issued < n:
            master.put_message_async(msgs[issued % window]).add_done_callback(done.put)
            issued += 1
    return n / (time.perf_counter() - start)


@scenario("ha_sync_master", "ha", "32 producers: SYNC_MASTER vs ASYNC_MASTER, a slave each")
def bench_ha_sync_master(root: str, count: int | None) -> Figures:
    """32 producer threads with blocking puts, and 32 non-blocking puts in flight from one
    thread (the broker's way), under each role with a slave process attached; and the
    interpreter's ceiling for producers that wait on another thread at all."""
    n = count or 100_000
    threads = 32
    per = max(n // threads, 10)
    out: Figures = {"producers": threads}
    rates: dict[str, float] = {}
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        cfg = _config(os.path.join(root, role), broker_role=role, ha_enable=True)
        with MessageStore(cfg) as master, _slave(os.path.join(root, role + "-slave"), master):
            _wait_connected(master)
            total, seconds, failed = _producers(master, threads, per)
            if failed:
                raise RuntimeError(f"{role}: {failed} puts failed")
            windowed = _window(master, n, threads)
            conn = master.ha.connections[0]
            frames = conn.frames_sent
        rates[role] = total / seconds
        rates[role + "_window"] = windowed
        out[f"{role.lower()}_threads_msgs_per_s"] = round(total / seconds)
        out[f"{role.lower()}_window_msgs_per_s"] = round(windowed)
        if role == "SYNC_MASTER":
            out["sync_msgs_per_frame"] = round((total + n) / max(frames, 1), 1)
    out["sync_over_async_threads"] = round(rates["SYNC_MASTER"] / rates["ASYNC_MASTER"], 3)
    out["sync_over_async_window"] = round(
        rates["SYNC_MASTER_window"] / rates["ASYNC_MASTER_window"], 3
    )
    ceiling = _handoff_ceiling(os.path.join(root, "ceiling"), threads, per)
    out["handoff_ceiling_msgs_per_s"] = round(ceiling)
    out["sync_threads_over_ceiling"] = round(rates["SYNC_MASTER"] / ceiling, 3)
    return out


@scenario("ha_catch_up", "ha", "a new slave replicating an existing 1 GiB commit-log file")
def bench_ha_catch_up(root: str, count: int | None) -> Figures:
    size = (count or 1) * FILE_SIZE if count and count <= 8 else FILE_SIZE
    body = os.urandom(4000)
    cfg = _config(os.path.join(root, "m"), mapped_file_size_commit_log=size, ha_enable=True)
    with MessageStore(cfg) as master:
        per_batch = 256
        record = 91 + len(body) + len(TOPIC)
        # fill the first file, stopping short of its end (no second file: a request of 0
        # starts at the last file)
        target = size - per_batch * record - 1024
        bodies = [body] * per_batch
        props = [b""] * per_batch
        none: list[str | None] = [None] * per_batch
        q = 0
        while master.max_phy_offset < target:
            r = master.put_plain_batch(TOPIC, q % 4, bodies, props, none, none)
            if r.status is not PutMessageStatus.PUT_OK:
                raise RuntimeError(f"fill failed: {r}")
            q += 1
        master.commit_log.queue.flush_all(0)
        total = master.max_phy_offset
        start = time.perf_counter()
        with _slave(os.path.join(root, "s"), master):
            _wait_connected(master)  # its first report: the request for offset 0
            connected = time.perf_counter()
            while _acked(master) < total:
                time.sleep(0.002)
            done = time.perf_counter()
    seconds = done - connected
    return {
        "log_mb": round(total / 1e6, 1),
        "replication_seconds": round(seconds, 2),
        "catch_up_mb_per_s": round(total / seconds / 1e6, 1),
        "with_slave_start_mb_per_s": round(total / (done - start) / 1e6, 1),
    }


@scenario(
    "ha_broker_sync_master",
    "ha",
    "through the broker: SYNC_MASTER vs ASYNC_MASTER serve, a slave each, 32 pipelined producers",
)
def bench_ha_broker_sync_master(root: str, count: int | None) -> Figures:
    """``rocketstore serve`` as ASYNC_MASTER, then as SYNC_MASTER, each with a slave process
    attached, sent to by 32 connections of pre-encoded SEND_MESSAGE_V2 frames with 8
    outstanding on each (``raw``), and by 32 AsyncProducers with 8 sends in flight each
    (``producers``); each answer must be SUCCESS (a SYNC_MASTER's only once the slave holds
    the message). The broker's CPU a message is its whole process's."""
    n = count or 64_000
    producers = 32
    window = 8
    body = _body()
    file_size = StoreConfig().mapped_file_size_commit_log
    out: Figures = {"producers": producers, "window": window, "messages": n}
    rates: dict[str, float] = {}
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        tag = role.split("_")[0].lower()
        store = os.path.join(root, role)
        with (
            broker_server(store, role=role, want_ha=True) as server,
            _slave_of(os.path.join(root, role + "-slave"), server.ha_address, file_size),
        ):
            _create_topic(server)
            _raw_round(server, producers, min(n, 6400), body, window)  # warm-up
            raw, raw_cpu = _raw_round(server, producers, n, body, window)
            many, many_cpu, client_cpu = _many_round(server, producers, n, body, window)
        rates[f"{tag}_raw"] = raw
        rates[f"{tag}_producers"] = many
        out[f"{tag}_raw_msgs_per_s"] = round(raw)
        out[f"{tag}_raw_broker_cpu_us_per_msg"] = raw_cpu
        out[f"{tag}_producers_msgs_per_s"] = round(many)
        out[f"{tag}_producers_broker_cpu_us_per_msg"] = many_cpu
        out[f"{tag}_producers_client_cpu_us_per_msg"] = client_cpu
    out["sync_over_async_raw"] = round(rates["sync_raw"] / rates["async_raw"], 3)
    out["sync_over_async_producers"] = round(rates["sync_producers"] / rates["async_producers"], 3)
    return out
