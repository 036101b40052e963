"""The non-blocking put: put_message_async / put_messages_async and the put stages.

Stores run for real; the flush is slowed, stalled or broken by replacing the commit-log queue's
``flush`` (which ``flush_all`` calls too), so group commit, timeouts and shutdown are set up on
purpose. Every test is bounded to a few seconds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

import pytest

from rocketstore import Message, MessageStore, PutMessageResult, PutMessageStatus
from rocketstore.store._errors import StoreIOError
from rocketstore.store.log._flush import GroupCommitService
from rocketstore.store.log._record import PROPERTY_WAIT
from support.group_commit import FakeLog, make_service
from support.waits import wait_until

OK = PutMessageStatus.PUT_OK
TIMEOUT = PutMessageStatus.FLUSH_DISK_TIMEOUT

OpenStore = Callable[..., MessageStore]


def sync_store(open_store: OpenStore, **kw: Any) -> MessageStore:
    kw.setdefault("sync_flush_timeout", 5000)
    return open_store(flush_disk_type="SYNC_FLUSH", **kw)


def end_of(r: PutMessageResult) -> int:
    return r.wrote_offset + r.wrote_bytes


class FlushControl:
    """Replaces a store's commit-log ``queue.flush``: ``delay`` before each flush, ``fail``
    raises, ``stall`` makes no progress (without an error), ``gate`` blocks until set."""

    def __init__(self, store: MessageStore) -> None:
        self.queue = store.commit_log.queue
        self.real = self.queue.flush
        self.delay = 0.0
        self.fail = False
        self.stall = False
        self.gate = threading.Event()
        self.gate.set()
        self.in_flush = threading.Event()
        self.calls = 0

    def flush(self, least_pages: int) -> int:
        self.calls += 1
        self.in_flush.set()
        self.gate.wait(10)
        if self.delay:
            time.sleep(self.delay)
        if self.fail:
            raise StoreIOError(5, "injected fdatasync failure")
        if self.stall:
            time.sleep(0.001)
            return self.queue.flushed_where
        return self.real(least_pages)


@pytest.fixture
def flush_control(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[MessageStore], FlushControl]]:
    made: list[FlushControl] = []

    def control(store: MessageStore) -> FlushControl:
        c = FlushControl(store)
        monkeypatch.setattr(c.queue, "flush", c.flush)
        made.append(c)
        return c

    yield control
    for c in made:  # let a blocked service thread go before the stores shut down
        c.fail = c.stall = False
        c.gate.set()


# ---- results ---------------------------------------------------------------------------------


def test_sync_flush_future_completes_once_durable(open_store: OpenStore) -> None:
    store = sync_store(open_store)
    msgs = [Message("A", f"m{i}".encode() * 50, i % 2, tags="t", keys=[f"k{i}"]) for i in range(20)]
    futs = [store.put_message_async(m) for m in msgs]
    results = [f.result(timeout=60) for f in futs]
    assert all(r.status is OK for r in results)
    assert [r.queue_offset for r in results] == [i // 2 for i in range(20)]
    offsets = [r.wrote_offset for r in results]
    assert offsets == sorted(offsets) and offsets[0] == 0
    for r, m in zip(results, msgs, strict=True):
        assert store.flushed_phy_offset() >= end_of(r)
        got = store.look_message_by_offset(r.wrote_offset)
        assert got is not None and got.body == m.body and got.store_timestamp == r.store_timestamp
        assert got.msg_id == r.msg_id
    assert wait_until(lambda: store.get_max_offset_in_queue("A", 1) == 10)


def test_async_flush_future_is_complete_on_return(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    store = open_store(flush_disk_type="ASYNC_FLUSH")
    control = flush_control(store)
    control.gate.clear()  # no flush can happen: the future must not need one
    fut = store.put_message_async(Message("A", b"x" * 100, 0))
    assert fut.done()
    r = fut.result()
    assert r.status is OK and r.wrote_offset == 0 and r.queue_offset == 0
    batch = store.put_messages_async([Message("A", bytes([i]) * 10, 0) for i in range(5)])
    assert batch.done() and batch.result().status is OK
    assert batch.result().queue_offset == 1 and batch.result().msg_count == 5


def test_wait_false_completes_at_once_under_sync_flush(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    store = sync_store(open_store)
    control = flush_control(store)
    control.gate.clear()
    m = Message("W", b"no wait", 0)
    m.properties[PROPERTY_WAIT] = "false"
    fut = store.put_message_async(m)
    assert fut.done() and fut.result().status is OK
    assert store.flushed_phy_offset() < end_of(fut.result())  # not durable, as asked
    batch = [Message("W", b"b", 0, properties={PROPERTY_WAIT: "false"}) for _ in range(3)]
    bf = store.put_messages_async(batch)
    assert bf.done() and bf.result().status is OK and bf.result().msg_count == 3


def test_a_message_not_waiting_for_the_store_completes_at_once(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    """wait_store_msg_ok=False is WAIT=false without the property in the record (the broker
    keeps WAIT out of what it stores, as RocketMQ's does)."""
    store = sync_store(open_store)
    control = flush_control(store)
    control.gate.clear()
    fut = store.put_message_async(Message("W", b"no wait", 0, wait_store_msg_ok=False))
    assert fut.done() and fut.result().status is OK
    assert store.flushed_phy_offset() < end_of(fut.result())
    got = store.look_message_by_offset(fut.result().wrote_offset)
    assert got is not None and PROPERTY_WAIT not in got.properties
    waiting = store.put_message_async(Message("W", b"waits", 0))
    assert not waiting.done()  # the default still waits for the flush
    control.gate.set()
    assert waiting.result(timeout=10).status is OK


def test_batch_waits_unless_every_message_says_wait_false(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    """One message's WAIT=false does not drop the durability the others of its batch asked
    for: the batch waits for the group commit."""
    store = sync_store(open_store)
    control = flush_control(store)
    control.gate.clear()
    batch = [Message("W", b"b", 0) for _ in range(3)]
    batch[1].properties[PROPERTY_WAIT] = "false"
    bf = store.put_messages_async(batch)
    assert not bf.done()  # held by the gated flush
    control.gate.set()
    r = bf.result(timeout=10)
    assert r.status is OK and r.msg_count == 3
    assert store.flushed_phy_offset() >= end_of(r)


@pytest.mark.parametrize("flush_disk_type", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_refused_puts_complete_at_once_with_their_status(
    open_store: OpenStore, flush_disk_type: str
) -> None:
    store = open_store(flush_disk_type=flush_disk_type, max_message_size=1024)
    cases = [
        (store.put_message_async(Message("bad topic", b"x")), PutMessageStatus.MESSAGE_ILLEGAL),
        (store.put_message_async(Message("T", b"x" * 2000)), PutMessageStatus.MESSAGE_ILLEGAL),
        (
            store.put_message_async(Message("T", b"x", properties={"p": "v" * 40_000})),
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
        ),
        (store.put_messages_async([]), PutMessageStatus.MESSAGE_ILLEGAL),
        (
            store.put_messages_async([Message("T", b"x", 0), Message("U", b"x", 0)]),
            PutMessageStatus.MESSAGE_ILLEGAL,
        ),
    ]
    for fut, status in cases:
        assert fut.done()
        r = fut.result()
        assert r.status is status and r.error and not r.ok
    assert store.commit_log.max_offset == 0
    store.shutdown()
    after = store.put_message_async(Message("T", b"x"))
    assert after.done() and after.result().status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_an_exception_in_the_append_goes_to_the_future(open_store: OpenStore) -> None:
    store = sync_store(open_store)
    fut = store.put_message_async(None)  # type: ignore[arg-type]
    assert fut.done() and isinstance(fut.exception(), AttributeError)


# ---- group commit ------------------------------------------------------------------------------


def test_many_async_puts_from_one_thread_share_few_flushes(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    """500 puts wait while one flush hangs; when it ends, one or two more complete them all.
    Then 500 more against a disk slower than the producer: tens of puts per fdatasync."""
    store = sync_store(open_store)
    control = flush_control(store)
    service = store.commit_log.flush_service
    n = 500
    control.gate.clear()
    first = store.put_message_async(Message("G", b"y" * 512, 0))
    assert wait_until(control.in_flush.is_set)
    before = service.flush_count
    futs = [store.put_message_async(Message("G", b"y" * 512, i % 4)) for i in range(1, n)]
    control.gate.set()
    _, not_done = wait_futures([first, *futs], timeout=10)
    assert not not_done
    assert service.flush_count - before <= 3  # the hung one and one or two for the rest

    control.delay = 0.005
    before = service.flush_count
    futs += [store.put_message_async(Message("G", b"y" * 512, i % 4)) for i in range(n)]
    _, not_done = wait_futures(futs, timeout=10)
    assert not not_done
    flushes = service.flush_count - before
    assert flushes * 5 <= n, flushes
    results = [first.result(), *(f.result() for f in futs)]
    assert all(r.status is OK for r in results)
    assert max(end_of(r) for r in results) <= store.flushed_phy_offset()
    for q in range(4):
        assert [r.queue_offset for r in results[q::4]] == list(range(2 * n // 4))


def test_async_puts_and_blocking_producers_share_the_flushes(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    """Blocking producers lead flushes in their own threads; the async puts they cover
    complete from those flushes too. Every acknowledgement is durable."""
    store = sync_store(open_store)
    control = flush_control(store)
    control.delay = 0.001
    failures: list[str] = []
    flushed = store.flushed_phy_offset

    def blocking(k: int) -> None:
        for i in range(40):
            r = store.put_message(Message("S", f"{k}-{i}".encode() * 20, k))
            if r.status is not OK or flushed() < end_of(r):
                failures.append(f"sync {r}")

    def on_done(f: Future[PutMessageResult]) -> None:
        r = f.result()
        if r.status is not OK or flushed() < end_of(r):
            failures.append(f"async {r}")

    threads = [threading.Thread(target=blocking, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    futs = []
    for i in range(300):
        f = store.put_message_async(Message("S", f"a{i}".encode() * 20, 3))
        f.add_done_callback(on_done)
        futs.append(f)
    for t in threads:
        t.join(10)
    _, not_done = wait_futures(futs, timeout=10)
    assert not not_done and not failures, failures[:3]


# ---- timeouts ----------------------------------------------------------------------------------


def test_flush_disk_timeout_when_the_flush_fails(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    store = sync_store(open_store, sync_flush_timeout=200)
    control = flush_control(store)
    control.fail = True
    t0 = time.monotonic()
    fut = store.put_message_async(Message("F", b"z" * 100, 0))
    r = fut.result(timeout=60)
    took = time.monotonic() - t0
    assert r.status is TIMEOUT and r.ok  # stored, not durable in time
    assert took >= 0.15  # ended by its 200 ms deadline, not at once
    assert store.look_message_by_offset(r.wrote_offset) is not None
    control.fail = False
    again = store.put_message_async(Message("F", b"z" * 100, 0)).result(timeout=60)
    assert again.status is OK and again.queue_offset == 1


def test_flush_disk_timeout_while_the_flusher_is_stuck_in_a_flush(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    """The service thread hangs in an fdatasync: the deadlines still end on time, and a put
    call never waits for the stuck flush."""
    store = sync_store(open_store, sync_flush_timeout=200)
    control = flush_control(store)
    control.gate.clear()
    first = store.put_message_async(Message("H", b"1", 0))
    assert wait_until(control.in_flush.is_set)
    t0 = time.monotonic()
    second = store.put_message_async(Message("H", b"2", 0))  # returns though the flush hangs
    assert first.result(timeout=60).status is TIMEOUT
    assert second.result(timeout=60).status is TIMEOUT
    assert time.monotonic() - t0 >= 0.15  # the second waited for its deadline
    assert not control.gate.is_set()  # ended by their deadlines, not by the flush
    control.gate.set()
    assert store.put_message_async(Message("H", b"3", 0)).result(timeout=60).status is OK


def test_blocking_put_times_out_as_before(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    store = sync_store(open_store, sync_flush_timeout=100)
    control = flush_control(store)
    control.fail = True
    assert store.put_message(Message("B", b"x", 0)).status is TIMEOUT
    control.fail = False
    assert store.put_message(Message("B", b"x", 0)).status is OK


# ---- shutdown ----------------------------------------------------------------------------------


def test_shutdown_completes_pending_futures_with_put_ok_after_the_last_flush(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    store = sync_store(open_store)
    control = flush_control(store)
    control.stall = True  # flushes make no progress: the futures wait
    futs = [store.put_message_async(Message("D", b"q" * 200, 0)) for _ in range(50)]
    time.sleep(0.05)
    assert not any(f.done() for f in futs)
    control.stall = False
    store.shutdown()  # the last flush makes everything durable
    results = [f.result(timeout=0) for f in futs]
    assert all(r.status is OK for r in results)
    reopened = MessageStore(store.config)
    reopened.load()
    try:
        assert reopened.load_result is not None and reopened.load_result.mode == "clean"
        assert reopened.commit_log.max_offset == end_of(results[-1])
    finally:
        reopened.shutdown()


def test_shutdown_with_a_failing_disk_completes_futures_with_an_error(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    store = sync_store(open_store)
    control = flush_control(store)
    control.fail = True
    futs = [store.put_message_async(Message("D", b"q" * 200, 0)) for _ in range(10)]
    store.commit_log.shutdown()  # returns (the test's timeout would end a hang)
    assert all(f.result(timeout=0).status is TIMEOUT for f in futs)
    control.fail = False


def test_service_shutdown_answers_waits_registered_after_it() -> None:
    log = FakeLog()
    svc = make_service(log)
    end = log.write(100)
    got: list[bool] = []
    svc.await_flush(end, 5.0, got.append)
    svc.stop()
    assert got == [True]  # the shutdown flush reached it
    log.fail = lambda: True
    later = log.write(100)
    svc.await_flush(later, 5.0, got.append)  # after shutdown: answered at once
    assert got == [True, False]


def test_service_stop_backstop_when_never_started() -> None:
    log = FakeLog()
    svc = make_service(log, start=False)
    got: list[bool] = []
    svc.await_flush(log.write(10), 5.0, got.append)
    assert got == []
    svc.stop()
    assert got == [False]


def test_flush_callbacks_run_without_the_service_lock() -> None:
    """A callback may register the next wait (a stage chaining on): no deadlock."""
    log = FakeLog()
    svc = make_service(log)
    try:
        got: list[int] = []

        def chain(ok: bool) -> None:
            got.append(1)
            if len(got) < 5:
                svc.await_flush(log.write(10), 5.0, chain)

        svc.await_flush(log.write(10), 5.0, chain)
        assert wait_until(lambda: len(got) == 5)
    finally:
        svc.stop()


def test_deadlines_end_in_arrival_order_while_a_flush_hangs() -> None:
    log = FakeLog()
    log.gate.clear()
    svc = make_service(log)
    try:
        order: list[int] = []
        ends = [log.write(10) for _ in range(3)]
        for i, end in enumerate(ends):
            svc.await_flush(end, 0.05 * (i + 1), lambda ok, i=i: order.append(i if not ok else -1))
        assert wait_until(lambda: len(order) == 3)
        assert order == [0, 1, 2]
        assert not svc._pending
    finally:
        log.gate.set()
        svc.stop()


# ---- asyncio -----------------------------------------------------------------------------------


def test_used_from_an_event_loop_never_blocks_it(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    """An event loop issues 200 puts and a batch while the fdatasync hangs: every call
    returns and the loop keeps running (a ticker ticks); once the disk answers, the awaited
    futures (asyncio.wrap_future) complete with PUT_OK. No timing bounds: the hanging flush
    would hold a blocking call forever."""
    store = sync_store(open_store)
    control = flush_control(store)
    control.gate.clear()  # every flush hangs until the gate opens

    async def main() -> list[PutMessageResult]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        tick = asyncio.create_task(ticker())

        async def issue(i: int) -> asyncio.Future[PutMessageResult]:
            await asyncio.sleep(0.001 * (i % 10))
            return asyncio.wrap_future(
                store.put_message_async(Message("L", f"e{i}".encode(), i % 2))
            )

        waits = await asyncio.gather(*(issue(i) for i in range(200)))
        waits.append(asyncio.wrap_future(store.put_messages_async([Message("L", b"b", 0)] * 8)))
        deadline = time.monotonic() + 60
        while not control.in_flush.is_set():  # the flusher reaches the hanging fdatasync
            assert time.monotonic() < deadline, "no flush began"
            await asyncio.sleep(0.001)
        before = ticks
        while ticks <= before:  # the loop runs while the flush hangs: the ticker ticks
            await asyncio.sleep(0.001)
        assert not control.gate.is_set()
        assert not any(w.done() for w in waits)
        control.gate.set()  # the disk answers
        results = await asyncio.wait_for(asyncio.gather(*waits), 120)
        tick.cancel()
        return results

    results = asyncio.run(main())
    assert all(r.status is OK for r in results)
    assert results[-1].msg_count == 8
    assert max(end_of(r) for r in results) <= store.flushed_phy_offset()


# ---- batches and statistics --------------------------------------------------------------------


def test_batch_async_put_under_sync_flush(open_store: OpenStore) -> None:
    store = sync_store(open_store)
    store.put_message_async(Message("B", b"first", 2)).result(timeout=60)
    fut = store.put_messages_async([Message("B", bytes([i]) * 30, 2) for i in range(10)])
    r = fut.result(timeout=60)
    assert r.status is OK and r.msg_count == 10 and r.queue_offset == 1
    assert len(r.offsets) == 10 and r.offsets[0] == r.wrote_offset
    assert store.flushed_phy_offset() >= end_of(r)
    assert len(set(r.msg_ids)) == 10
    assert wait_until(lambda: store.get_max_offset_in_queue("B", 2) == 11)
    got = store.get_message("g", "B", 2, 1, 32)
    assert [m.body for m in got.messages] == [bytes([i]) * 30 for i in range(10)]


def test_statistics_count_async_puts_like_blocking_ones(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    store = sync_store(open_store)
    control = flush_control(store)
    control.delay = 0.02
    store.put_message_async(Message("S", b"x" * 10, 0)).result(timeout=60)
    store.put_messages_async([Message("S", b"y", 0) for _ in range(10)]).result(timeout=60)
    # the done callback that notes statistics runs right after the result is set
    assert wait_until(lambda: sum(store.statistics().put_message_distribute_time) == 2)
    stats = store.statistics()
    assert stats.put_message_times_total == 11
    assert stats.topics["S"].messages == 11
    assert stats.put_message_entire_time_max_ms >= 15  # the whole wait, as put_message's


# ---- put stages --------------------------------------------------------------------------------


class ReplicaStub:
    """A put stage standing in for a SYNC_MASTER's replication wait: it answers with a future
    that ``ack`` completes, recording the flushed position when it was asked."""

    def __init__(self, store: MessageStore, status: PutMessageStatus = OK) -> None:
        self.store = store
        self.status = status
        self.asked: list[tuple[int, int]] = []  # (end offset, flushed position then)
        self.futures: list[tuple[Future[PutMessageResult], PutMessageResult]] = []

    def __call__(self, end: int, result: PutMessageResult) -> Future[PutMessageResult]:
        self.asked.append((end, self.store.flushed_phy_offset()))
        f: Future[PutMessageResult] = Future()
        self.futures.append((f, result))
        return f

    def ack(self) -> None:
        for f, result in self.futures:
            f.set_result(result._replace(status=self.status))
        self.futures.clear()


def test_a_stage_chains_after_the_flush_wait(open_store: OpenStore) -> None:
    store = sync_store(open_store)
    replica = ReplicaStub(store, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
    store.commit_log.add_put_stage(replica)
    fut = store.put_message_async(Message("R", b"r" * 64, 0))
    assert wait_until(lambda: len(replica.asked) == 1)
    end, flushed_then = replica.asked[0]
    assert flushed_then >= end  # asked only once durable
    assert not fut.done()
    replica.ack()
    r = fut.result(timeout=60)
    assert r.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and end_of(r) == end


def test_stages_run_in_order_and_stop_at_the_first_failure(open_store: OpenStore) -> None:
    store = open_store(flush_disk_type="ASYNC_FLUSH")
    calls: list[str] = []

    def at_once(end: int, r: PutMessageResult) -> PutMessageResult:
        calls.append("first")
        return r

    def no_slave(end: int, r: PutMessageResult) -> PutMessageResult:
        calls.append("second")
        return r._replace(status=PutMessageStatus.SLAVE_NOT_AVAILABLE)

    def never(end: int, r: PutMessageResult) -> PutMessageResult:
        calls.append("third")
        return r

    for stage in (at_once, no_slave, never):
        store.commit_log.add_put_stage(stage)
    fut = store.put_message_async(Message("R", b"x", 0))
    assert fut.done()  # every stage answered at once, in the calling thread
    assert fut.result().status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    assert calls == ["first", "second"]
    # the blocking put goes through the same chain
    assert store.put_message(Message("R", b"x", 0)).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    # WAIT=false skips the stages as it skips the flush
    m = Message("R", b"x", 0)
    m.properties[PROPERTY_WAIT] = "false"
    assert store.put_message_async(m).result(timeout=0).status is OK
    assert calls == ["first", "second", "first", "second"]


def test_a_flush_timeout_is_not_overwritten_by_a_stage(
    open_store: OpenStore, flush_control: Callable[[MessageStore], FlushControl]
) -> None:
    store = sync_store(open_store, sync_flush_timeout=100)
    replica = ReplicaStub(store)
    store.commit_log.add_put_stage(replica)
    flush_control(store).fail = True
    assert store.put_message_async(Message("R", b"x", 0)).result(timeout=60).status is TIMEOUT
    assert replica.asked == []


def test_a_blocking_put_waits_for_a_stage_future(open_store: OpenStore) -> None:
    store = sync_store(open_store)
    replica = ReplicaStub(store)
    store.commit_log.add_put_stage(replica)
    out: list[PutMessageResult] = []
    t = threading.Thread(target=lambda: out.append(store.put_message(Message("R", b"x", 0))))
    t.start()
    assert wait_until(lambda: len(replica.futures) == 1)
    assert not out
    replica.ack()
    t.join(60)
    assert out and out[0].status is OK


def test_a_failing_stage_ends_the_put_in_unknown_error(
    open_store: OpenStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = sync_store(open_store)

    def broken(end: int, r: PutMessageResult) -> PutMessageResult:
        raise RuntimeError("replication bug")

    store.commit_log.add_put_stage(broken)
    r = store.put_message_async(Message("R", b"x", 0)).result(timeout=60)
    assert r.status is PutMessageStatus.UNKNOWN_ERROR and "replication bug" in (r.error or "")
    assert store.put_message(Message("R", b"x", 0)).status is PutMessageStatus.UNKNOWN_ERROR


def test_a_cancelled_future_does_not_break_the_flusher(open_store: OpenStore) -> None:
    """asyncio cancels the concurrent future when the awaiting task is cancelled; the put is
    stored all the same and later puts still complete."""
    store = sync_store(open_store)
    service = store.commit_log.flush_service
    assert isinstance(service, GroupCommitService)
    futs = [store.put_message_async(Message("C", b"x", 0)) for _ in range(20)]
    for f in futs[::2]:
        f.cancel()
    assert wait_until(lambda: all(f.done() for f in futs))
    assert all(f.result().status is OK for f in futs[1::2])
    assert store.put_message_async(Message("C", b"x", 0)).result(timeout=60).status is OK
    assert service.error is None and service.running
