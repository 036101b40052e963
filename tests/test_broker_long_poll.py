"""Long polling on a real asyncio loop: held pulls woken by arrivals from other threads, by their
timeout, at shutdown; coalescing of notification bursts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from rocketstore.broker.state._long_poll import PullRequestHoldService


def run(coro_fn: Callable[[], object]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), timeout=120))  # type: ignore[arg-type]


def in_thread(fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


class Waker:
    """A wake callback that records when (and how often) it ran, on which thread."""

    def __init__(self) -> None:
        self.calls = 0
        self.at = 0.0
        self.thread = 0
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.at = time.perf_counter()
        self.thread = threading.get_ident()
        self.event.set()


def test_arrival_from_another_thread_wakes_the_hold() -> None:
    async def main() -> None:
        holds = PullRequestHoldService()
        w, other_queue, not_yet = Waker(), Waker(), Waker()
        holds.hold("T", 0, 5, 30.0, w)
        holds.hold("T", 1, 5, 30.0, other_queue)
        holds.hold("T", 0, 9, 30.0, not_yet)  # wants offset 9: 6 is not enough
        assert holds.held_count == 3
        sent = 0.0

        def producer() -> None:
            nonlocal sent
            sent = time.perf_counter()
            holds.notify_arriving("T", 0, 6, 12345, 0)

        in_thread(producer).join()
        await w.event.wait()
        assert w.calls == 1 and w.thread == threading.get_ident()  # on the loop's thread
        assert w.at >= sent  # woken by the arrival (its 30 s timeout is far off)
        await asyncio.sleep(0.01)
        assert other_queue.calls == 0 and not_yet.calls == 0
        stats = holds.statistics()
        assert stats.held == 2 and stats.woken_by_arrival == 1 and stats.holds == 3
        in_thread(lambda: holds.notify_arriving("T", 0, 10)).join()
        await not_yet.event.wait()
        assert other_queue.calls == 0
        holds.close()
        assert other_queue.calls == 1 and holds.held_count == 0

    run(main)


def test_timeout_wakes_the_hold_once() -> None:
    async def main() -> None:
        holds = PullRequestHoldService()
        w = Waker()
        start = time.perf_counter()
        h = holds.hold("T", 0, 0, 0.05, w)
        await w.event.wait()
        assert time.perf_counter() - start >= 0.045
        assert h.done and not h.cancel()
        holds.notify_arriving("T", 0, 100)  # too late: no second call
        await asyncio.sleep(0.02)
        assert w.calls == 1
        stats = holds.statistics()
        assert stats.woken_by_timeout == 1 and stats.woken_by_arrival == 0 and stats.held == 0

    run(main)


def test_arrival_racing_the_timeout_wakes_once() -> None:
    async def main() -> None:
        holds = PullRequestHoldService()
        wakers = [Waker() for _ in range(50)]
        for w in wakers:
            holds.hold("T", 0, 0, 0.005, w)

        def notify() -> None:
            for _ in range(200):
                holds.notify_arriving("T", 0, 1)

        t = in_thread(notify)
        await asyncio.sleep(0.05)
        t.join()
        await asyncio.sleep(0.01)
        assert [w.calls for w in wakers] == [1] * 50
        stats = holds.statistics()
        assert stats.woken_by_arrival + stats.woken_by_timeout == 50 and stats.held == 0

    run(main)


def test_burst_of_notifications_is_coalesced() -> None:
    async def main() -> None:
        holds = PullRequestHoldService()
        wakers = {(q, i): Waker() for q in range(4) for i in range(3)}
        for (q, _), w in wakers.items():
            holds.hold("T", q, 0, 30.0, w)

        def burst() -> None:
            for n in range(1, 20_001):
                holds.notify_arriving("T", n % 4, n)

        in_thread(burst).join()
        for w in wakers.values():
            await asyncio.wait_for(w.event.wait(), 2)
        await asyncio.sleep(0.01)
        assert all(w.calls == 1 for w in wakers.values())
        stats = holds.statistics()
        assert stats.notifications == 20_000
        assert stats.drains < stats.notifications / 10  # one loop callback per many puts
        assert stats.woken_by_arrival == 12

    run(main)


def test_cancel_wake_all_and_close() -> None:
    async def main() -> None:
        holds = PullRequestHoldService()
        cancelled, a, b = Waker(), Waker(), Waker()
        h = holds.hold("T", 0, 0, 30.0, cancelled)
        holds.hold("T", 0, 0, 30.0, a)
        holds.hold("U", 3, 7, 30.0, b)
        assert h.cancel() and not h.cancel()
        assert holds.wake_all() == 2
        assert (a.calls, b.calls, cancelled.calls) == (1, 1, 0)
        holds.notify_arriving("T", 0, 5)
        await asyncio.sleep(0.01)
        assert cancelled.calls == 0
        holds.close()
        late = Waker()
        holds.hold("T", 0, 0, 30.0, late)  # after close: answered at once
        await asyncio.wait_for(late.event.wait(), 1)
        stats = holds.statistics()
        assert stats.cancelled == 1 and stats.woken_at_shutdown == 3 and stats.held == 0

    run(main)


def test_wake_errors_do_not_stop_other_wakes() -> None:
    async def main() -> None:
        holds = PullRequestHoldService()

        def broken() -> None:
            raise RuntimeError("boom")

        w = Waker()
        holds.hold("T", 0, 0, 30.0, broken)
        holds.hold("T", 0, 0, 30.0, w)
        holds.notify_arriving("T", 0, 1)  # from the loop's own thread
        await asyncio.wait_for(w.event.wait(), 1)
        assert holds.held_count == 0

    run(main)


def test_store_check_at_hold_and_periodic_sweep() -> None:
    async def main() -> None:
        max_offsets = {("T", 0): 10, ("T", 1): 0}
        holds = PullRequestHoldService(
            max_offset_of=lambda t, q: max_offsets[(t, q)], check_interval_s=0.05
        )
        # a message arrived between the pull's read and its hold: woken at once
        early = Waker()
        holds.hold("T", 0, 3, 30.0, early)
        await asyncio.wait_for(early.event.wait(), 1)
        # notifications for queues nobody waits on are dropped before any locking
        in_thread(lambda: holds.notify_arriving("T", 0, 11)).join()
        assert holds.statistics().notifications == 0
        # a lost notification is caught by the sweep
        lost = Waker()
        holds.hold("T", 1, 0, 30.0, lost)
        await asyncio.sleep(0.01)
        assert lost.calls == 0
        max_offsets[("T", 1)] = 1
        await asyncio.wait_for(lost.event.wait(), 1)
        holds.close()

    run(main)


def test_every_arrival_wakes_its_hold_not_its_timeout() -> None:
    """The arrival path wakes a held request by itself: 200 holds, each woken by a notification
    from another thread, none by its (hour-long) timeout, each after its notification."""

    async def main() -> None:
        holds = PullRequestHoldService()
        loop = asyncio.get_running_loop()
        for i in range(200):
            w = Waker()
            holds.hold("T", 0, i, 3600.0, w)
            sent = 0.0

            def producer(i: int = i) -> None:
                nonlocal sent
                sent = time.perf_counter()
                holds.notify_arriving("T", 0, i + 1)

            await loop.run_in_executor(None, producer)
            await w.event.wait()
            assert w.calls == 1 and w.at >= sent
        stats = holds.statistics()
        assert (stats.woken_by_arrival, stats.woken_by_timeout, stats.held) == (200, 0, 0)
        holds.close()

    run(main)
