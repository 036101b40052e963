"""Adversarial tests of the leader/follower GroupCommitService (SYNC_FLUSH).

Part one drives the service against a fake log whose flush blocks, sleeps and fails on command,
so races (a waiter timing out while it is being woken, shutdown with waiters, a failing disk)
are set up deterministically. Part two runs a real SYNC_FLUSH store with many producers, WAIT=false
puts, batches and a slow, sometimes failing disk, checking after every put that what was
acknowledged is durable, that the flushed position never moves back, and that dispatch never
shows a unit past the flushed position. Seeded; each test is bounded to a few seconds.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store._errors import StoreIOError
from rocketstore.store.log import _flush as flush_module
from rocketstore.store.log._flush import FlushRealTimeService, GroupCommitService
from rocketstore.store.log._record import PROPERTY_WAIT
from support.group_commit import FakeLog, make_service
from support.waits import wait_until

SEEDS = [11, 12, 13]


def run_waiter(
    svc: GroupCommitService, log: FakeLog, end: int, timeout: float, out: dict[str, Any]
) -> threading.Thread:
    def body() -> None:
        t0 = time.monotonic()
        ok = svc.wait_flushed(end, timeout)
        out["ok"] = ok
        out["durable"] = log.flushed_where >= end
        out["took"] = time.monotonic() - t0

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


# ---- part one: the service against a fake log ------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_many_producers_every_ack_is_durable(seed: int) -> None:
    """Producers write and wait at random; every wait ends durable (none runs out of its
    generous time), flushes never overlap, and one flush serves many producers."""
    rng = random.Random(seed)
    log = FakeLog(step=rng.choice([100, 1000, 1 << 40]))  # small steps: many 'files'
    log.delay = lambda: rng.random() * 0.002
    svc = make_service(log)
    write_lock = threading.Lock()
    failures: list[str] = []
    calls = 0

    def producer(pseed: int) -> None:
        nonlocal calls
        prng = random.Random(pseed)
        for _ in range(150):
            with write_lock:
                end = log.write(prng.randint(1, 300))
                calls += 1
            ok = svc.wait_flushed(end, 60.0)
            if not ok or log.flushed_where < end:
                failures.append(f"end {end}: ok={ok} flushed={log.flushed_where}")

    threads = [threading.Thread(target=producer, args=(seed * 100 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    svc.stop()
    assert not failures, failures[:5]
    assert log.overlaps == 0 and log.backwards == 0
    assert svc.error is None
    assert svc.flush_count < calls  # group commit: fewer flushes than waits
    assert not svc._waiters


def test_a_leader_gathers_the_producers_of_the_last_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader whose last flush covered four producers waits until three more wait before it
    flushes, so one flush covers the four again. Without gathering, the first producer back from
    a flush would lead the next one alone and groups would alternate between one and three. The
    gathering time is made long, so the machine's speed cannot end it: the flush starts when the
    group is there, and not before."""
    monkeypatch.setattr(flush_module, "GATHER_MIN_S", 30.0)
    monkeypatch.setattr(flush_module, "GATHER_MAX_S", 30.0)
    log = FakeLog()
    svc = make_service(log, start=False)  # producers lead every flush

    # a first flush covering four producers: its leader is held in the flush until the
    # three others wait (they wrote before it began, so it covers them)
    log.gate.clear()
    ends = [log.write(10) for _ in range(4)]
    results: list[dict[str, Any]] = [{} for _ in ends]
    threads = [run_waiter(svc, log, ends[0], 30.0, results[0])]
    assert wait_until(log.in_flush.is_set)
    threads += [
        run_waiter(svc, log, e, 30.0, r) for e, r in zip(ends[1:], results[1:], strict=True)
    ]
    assert wait_until(lambda: len(svc._waiters) == 3)
    log.gate.set()
    for th in threads:
        th.join(30)
    assert all(r["ok"] and r["durable"] for r in results), results
    assert svc.flush_count == 1

    # the next leader gathers: no flush while two of the three others wait, one for all four
    log.in_flush.clear()
    ends = [log.write(10) for _ in range(4)]
    results = [{} for _ in ends]
    threads = [run_waiter(svc, log, ends[0], 30.0, results[0])]
    assert wait_until(lambda: svc._gathering)
    threads += [
        run_waiter(svc, log, e, 30.0, r) for e, r in zip(ends[1:3], results[1:3], strict=True)
    ]
    assert wait_until(lambda: len(svc._waiters) == 2)
    assert not log.in_flush.is_set() and svc.flush_count == 1  # still gathering
    threads.append(run_waiter(svc, log, ends[3], 30.0, results[3]))
    for th in threads:
        th.join(30)
    assert all(r["ok"] and r["durable"] for r in results), results
    assert svc.flush_count == 2 and log.overlaps == 0


def test_waiter_timing_out_while_woken_as_next_leader_passes_the_lead_on() -> None:
    """A waiter whose timeout expires just as a finishing flush picks it as the next leader
    must not take the lead with it: the waiters behind it would hang until their timeouts."""
    log = FakeLog()
    svc = make_service(log, start=False)
    svc._flushing = True  # a leader is flushing (it never covers A or B)
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    end_a = log.write(100)
    end_b = log.write(100)
    ta = run_waiter(svc, log, end_a, 0.2, a)
    assert wait_until(lambda: len(svc._waiters) == 1)
    tb = run_waiter(svc, log, end_b, 60.0, b)
    assert wait_until(lambda: len(svc._waiters) == 2)
    with svc._lock:
        time.sleep(0.4)  # A times out and now waits for the lock to leave the heap
        svc._release_token()  # the leader ends: A (not covered) is woken to lead next
    ta.join(60)
    tb.join(60)
    # B left without a leader would wait out its minute and end not durable
    assert not tb.is_alive() and b["ok"] and b["durable"], "B was left without a leader"
    assert not svc._flushing and not svc._waiters


@pytest.mark.parametrize("seed", SEEDS)
def test_short_timeouts_never_strand_other_waiters(seed: int) -> None:
    """Random mix of tiny and long timeouts over a slow disk: a long waiter never ends by
    timeout while the disk keeps up."""
    rng = random.Random(seed)
    log = FakeLog()
    log.delay = lambda: 0.002 + rng.random() * 0.004
    svc = make_service(log, start=False)  # no service thread to rescue anyone
    write_lock = threading.Lock()
    failures: list[str] = []

    def producer(pseed: int) -> None:
        prng = random.Random(pseed)
        for _ in range(60):
            with write_lock:
                end = log.write(10)
            short = prng.random() < 0.5
            timeout = prng.uniform(0.0005, 0.004) if short else 60.0
            ok = svc.wait_flushed(end, timeout)
            if ok and log.flushed_where < end:
                failures.append(f"acknowledged {end} above flushed {log.flushed_where}")
            if not short and not ok:
                failures.append(f"long waiter for {end} timed out")

    threads = [threading.Thread(target=producer, args=(seed * 10 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures[:5]
    assert not svc._flushing and not svc._waiters
    assert log.overlaps == 0 and log.backwards == 0


def test_shutdown_releases_waiters_after_the_last_flush() -> None:
    log = FakeLog()
    log.gate.clear()  # the first flush blocks
    svc = make_service(log)
    results = [dict[str, Any]() for _ in range(6)]
    threads = [run_waiter(svc, log, log.write(50), 60.0, r) for r in results]
    assert wait_until(lambda: log.in_flush.is_set() and len(svc._waiters) == 5)
    stopper = threading.Thread(target=svc.stop)
    stopper.start()
    time.sleep(0.05)
    log.write(50)  # written after the stop request: the shutdown flush takes it too
    log.gate.set()
    stopper.join(60)
    for t in threads:
        t.join(60)
    assert all(r["ok"] and r["durable"] for r in results), results
    assert log.flushed_where == log.end
    assert not svc._waiters and not svc._flushing


def test_request_flush_is_served_and_never_overlaps_a_leader() -> None:
    log = FakeLog(step=64)
    log.delay = lambda: 0.001
    svc = make_service(log)
    for _ in range(50):
        svc.request_flush(log.write(37))
        res: dict[str, Any] = {}
        run_waiter(svc, log, log.write(11), 60.0, res).join(60)
        assert res["ok"] and res["durable"]
    end = log.write(500)
    svc.request_flush(end)
    assert wait_until(lambda: log.flushed_where >= end)
    svc.stop()
    assert log.overlaps == 0 and log.backwards == 0


def test_service_thread_survives_a_failing_disk() -> None:
    """A flush error in the service thread must not end it: later requests (dispatch under
    SYNC_FLUSH, WAIT=false puts) still need it."""
    log = FakeLog()
    failing = [True]
    log.fail = lambda: failing[0]
    svc = make_service(log)
    try:
        svc.request_flush(log.write(100))
        assert wait_until(log.in_flush.is_set)
        time.sleep(0.05)  # a few failed rounds
        failing[0] = False
        end = log.write(100)
        svc.request_flush(end)
        assert wait_until(lambda: log.flushed_where >= end), svc.error
        assert svc.running and svc.error is None
    finally:
        failing[0] = False
        svc.stop()


def test_a_failing_flush_in_a_producer_ends_in_a_timeout_not_an_exception() -> None:
    log = FakeLog()
    failures = [3]

    def fail() -> bool:
        failures[0] -= 1
        return failures[0] >= 0

    log.fail = fail
    svc = make_service(log, start=False)
    end = log.write(100)
    assert svc.wait_flushed(end, 2.0)  # recovers once the disk does
    log.fail = lambda: True
    end = log.write(100)
    assert not svc.wait_flushed(end, 0.1)  # returns (not raises) once its time is up
    assert not svc._flushing


# ---- part two: a real SYNC_FLUSH store --------------------------------------------------------


def sync_config(root: Path, **kw: Any) -> StoreConfig:
    kw.setdefault("mapped_file_size_commit_log", 64 * 1024)
    kw.setdefault("mapped_file_size_consume_queue", 20 * 64)
    kw.setdefault("sync_flush_timeout", 5000)
    return StoreConfig(store_path_root_dir=str(root), flush_disk_type="SYNC_FLUSH", **kw)


@pytest.mark.parametrize("seed", SEEDS)
def test_sync_flush_store_under_concurrent_puts(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Single, batch and WAIT=false puts from many threads over a slow, flaky disk: every
    PUT_OK is durable when it returns, the flushed position never moves back, and no consume
    queue ever holds a unit past the flushed position."""
    store = MessageStore(sync_config(tmp_path / "s"))
    store.load()
    store.start()
    q = store.commit_log.queue
    real_flush = q.flush
    flaky = random.Random(seed + 1)
    flaky_lock = threading.Lock()

    def slow_flush(least_pages: int) -> int:
        with flaky_lock:
            delay, fail = flaky.random() * 0.002, flaky.random() < 0.03
        time.sleep(delay)
        if fail:
            raise StoreIOError(5, "injected fdatasync failure")
        return real_flush(least_pages)

    monkeypatch.setattr(q, "flush", slow_flush)
    stop = threading.Event()
    failures: list[str] = []
    counts = {"ok": 0, "timeout": 0}

    def watcher() -> None:
        last = 0
        while not stop.is_set():
            f = q.flushed_where
            if f < last:
                failures.append(f"flushed moved back {last} -> {f}")
            last = f
            for qid in range(4):
                cq = store.consume_queues.find_or_create("GC", qid)
                n = cq.max_offset
                if n:
                    unit = cq.get_unit(n - 1)
                    flushed = q.flushed_where
                    if unit is not None and unit[0] + unit[1] > flushed:
                        failures.append(
                            f"unit {qid}/{n - 1} ends at {unit[0] + unit[1]} > {flushed}"
                        )
            time.sleep(0.0005)

    def producer(pseed: int) -> None:
        prng = random.Random(pseed)
        for i in range(80):
            qid = prng.randrange(4)
            body = f"p{pseed}-{i}-".encode() * prng.randint(1, 30)
            kind = prng.random()
            if kind < 0.2:
                m = Message("GC", body, qid)
                m.properties[PROPERTY_WAIT] = "false"
                res = store.put_message(m)
                assert res.status is PutMessageStatus.PUT_OK
                continue
            if kind < 0.45:
                res = store.put_messages(
                    [Message("GC", body + bytes([k]), qid) for k in range(prng.randint(1, 12))]
                )
            else:
                res = store.put_message(Message("GC", body, qid))
            end = res.wrote_offset + res.wrote_bytes
            if res.status is PutMessageStatus.PUT_OK:
                counts["ok"] += 1
                if q.flushed_where < end:
                    failures.append(f"PUT_OK at {end} above flushed {q.flushed_where}")
            elif res.status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
                counts["timeout"] += 1
            else:
                failures.append(f"unexpected {res.status}")

    w = threading.Thread(target=watcher, daemon=True)
    w.start()
    threads = [threading.Thread(target=producer, args=(seed * 100 + i,)) for i in range(6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        # WAIT=false puts and dispatch get everything out through request_flush
        end = store.commit_log.max_offset
        assert wait_until(lambda: q.flushed_where >= end)
        assert wait_until(lambda: store.reput.reput_from_offset >= end)
    finally:
        stop.set()
        w.join(60)
        monkeypatch.setattr(q, "flush", real_flush)
        store.shutdown()
    assert not failures, failures[:5]
    assert counts["timeout"] == 0, counts
    assert store.commit_log.flush_service.error is None


def test_wait_false_puts_alone_become_durable_and_visible(tmp_path: Path) -> None:
    store = MessageStore(sync_config(tmp_path / "s"))
    store.load()
    store.start()
    try:
        for i in range(200):
            m = Message("NW", f"m{i}".encode() * 20, i % 2)
            m.properties[PROPERTY_WAIT] = "false"
            assert store.put_message(m).status is PutMessageStatus.PUT_OK
        end = store.commit_log.max_offset
        assert wait_until(lambda: store.get_max_offset_in_queue("NW", 0) == 100)
        assert wait_until(lambda: store.get_max_offset_in_queue("NW", 1) == 100)
        assert store.flushed_phy_offset() >= end
    finally:
        store.shutdown()
    reopened = MessageStore(sync_config(tmp_path / "s"))
    reopened.load()
    try:
        assert reopened.load_result.mode == "clean"
        assert reopened.commit_log.max_offset == end
    finally:
        reopened.shutdown()


# ---- the interval flushers go file after file -------------------------------------------------


@pytest.mark.parametrize("pool", [False, True], ids=["mapped", "write-buffer"])
def test_one_flush_round_covers_every_full_file(tmp_path: Path, pool: bool) -> None:
    """ASYNC_FLUSH with intervals too long to matter: one commit round and one flush round
    with ``least_pages`` take every full file; the short last file waits for enough pages or
    the thorough round; flushed never passes what readers can see."""
    hour = 3_600_000
    cfg = StoreConfig(
        store_path_root_dir=str(tmp_path / "s"),
        mapped_file_size_commit_log=64 * 1024,
        flush_disk_type="ASYNC_FLUSH",
        flush_interval_commit_log=hour,
        flush_commit_log_thorough_interval=hour,
        flush_commit_log_least_pages=4,
        commit_interval_commit_log=hour,
        commit_commit_log_thorough_interval=hour,
        commit_commit_log_least_pages=4,
        transient_store_pool_enable=pool,
        transient_store_pool_size=8,
    )
    store = MessageStore(cfg)
    store.load()
    store.start()
    try:
        cl = store.commit_log
        q = cl.queue
        while len(q.files) < 5 or q.files[-1].wrote_position < 4096:
            assert store.put_message(Message("F", b"x" * 1500, 0)).ok
        assert len(q.files) == 5
        last = q.files[-1]
        if pool:
            assert cl.commit_service is not None
            assert cl.commit_service.step(4)
            want = last.from_offset + last.wrote_position
            if last.wrote_position // 4096 < 4:
                want = last.from_offset
            assert q.committed_where == want
            cl.commit_service.step(0)
            assert q.committed_where == cl.max_offset
        flusher = cl.flush_service
        assert isinstance(flusher, FlushRealTimeService)
        flusher.step(4)
        assert q.flushed_where >= last.from_offset  # every full file in one round
        assert q.flushed_where <= q.get_max_offset()
        flusher.step(0)
        assert q.flushed_where == cl.max_offset
        assert not flusher.step(0)  # nothing left: no progress reported
    finally:
        store.shutdown()
    again = MessageStore(cfg)
    again.load()
    try:
        assert again.load_result.mode == "clean"
    finally:
        again.shutdown()
