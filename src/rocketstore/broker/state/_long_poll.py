"""Long polling: pull requests that found nothing wait here until a message arrives in their
queue or their suspend timeout passes (RocketMQ's PullRequestHoldService, on an asyncio loop).

::

    store dispatch thread ─ notify_arriving(topic, qid, max_offset) ─┐  (any thread, O(1))
    store put path        ─ notify_arriving(...) ────────────────────┤
                                                                     ▼
                         pending {(topic, qid): highest max_offset}, one drain scheduled
                                                                     │ call_soon_threadsafe
                                                                     ▼ (once per loop iteration)
    event loop:  _drain → for each queue, wake() every hold whose offset < max_offset
                 hold timer (call_later)  → wake() at the deadline
                 optional sweep (max_offset_of, every check_interval_s) → wake() what is behind

A burst of puts costs one lock and one dict update each; they reach the loop as one callback per
loop iteration, whatever the number of queues. ``wake`` is called exactly once per hold, always on
the loop thread; the processor then runs the pull again (RocketMQ's executeRequestWhenWakeup),
which answers with messages, or with PULL_NOT_FOUND after the timeout.

Ordering: a processor that found no message must call ``hold`` in the same loop step as its read
(no ``await`` in between); then a message that arrived after the read is either seen by the drain
or was already visible to the read. With ``max_offset_of`` (the store's max offset in a queue),
``hold`` also checks the queue itself, which closes that gap for any caller, lets
``notify_arriving`` skip queues nobody waits on, and adds RocketMQ's periodic re-check as a safety
net.

Threads: ``notify_arriving`` from any thread; everything else on the loop's thread. Build the
service on its running loop, or pass the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class LongPollStats:
    """Counters of a PullRequestHoldService (a snapshot)."""

    held: int  # requests waiting now
    holds: int  # requests ever held
    woken_by_arrival: int
    woken_by_timeout: int
    woken_at_shutdown: int
    cancelled: int
    notifications: int  # notify_arriving calls that were not skipped
    drains: int  # loop callbacks that delivered notifications


class PullHold:
    """A held pull request; ``cancel`` it when its connection closes."""

    def __init__(
        self, service: PullRequestHoldService, key: QueueKey, offset: int, wake: Callable[[], None]
    ) -> None:
        self._service = service
        self.key = key
        self.offset = offset
        self.wake = wake
        self.done = False
        self._timer: asyncio.TimerHandle | None = None

    def cancel(self) -> bool:
        """Forget the request without waking it; False when it was already woken. Loop thread."""
        if self.done:
            return False
        self._service._remove(self)
        self.done = True
        self._service._cancelled += 1
        return True


class PullRequestHoldService:
    """Suspended pull requests by queue."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        max_offset_of: Callable[[str, int], int] | None = None,
        check_interval_s: float = 5.0,
    ) -> None:
        running: asyncio.AbstractEventLoop | None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None:
            if running is None:
                raise RuntimeError(
                    "PullRequestHoldService needs a loop: pass one or build it on it"
                )
            loop = running
        self._loop = loop
        # the loop's thread, once known: notifications from it skip the self-pipe write
        self._loop_thread: int | None = threading.get_ident() if running is loop else None
        self._max_offset_of = max_offset_of
        self._check_interval_s = check_interval_s
        self._held: dict[QueueKey, dict[PullHold, None]] = {}
        self._held_count = 0
        self._closed = False
        # filled from any thread under _pending_lock, emptied by the loop's drain
        self._pending_lock = threading.Lock()
        self._pending: dict[QueueKey, int] = {}
        self._drain_scheduled = False
        self._sweep_timer: asyncio.TimerHandle | None = None
        if max_offset_of is not None and check_interval_s > 0:
            self._sweep_timer = loop.call_later(check_interval_s, self._sweep)
        self._holds = 0
        self._by_arrival = 0
        self._by_timeout = 0
        self._at_shutdown = 0
        self._cancelled = 0
        self._notifications = 0
        self._drains = 0

    # -- loop thread -------------------------------------------------------------------------

    def hold(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout_s: float,
        wake: Callable[[], None],
    ) -> PullHold:
        """Suspend a pull of ``offset`` in the queue: ``wake()`` runs once, on this loop, when
        a message at or after ``offset`` arrives or after ``timeout_s``. Loop thread."""
        self._loop_thread = threading.get_ident()
        key = (topic, queue_id)
        h = PullHold(self, key, offset, wake)
        self._holds += 1
        if self._closed:
            h.done = True
            self._at_shutdown += 1
            self._loop.call_soon(self._call, h)
            return h
        holds = self._held.get(key)
        if holds is None:
            holds = self._held[key] = {}
        holds[h] = None
        self._held_count += 1
        h._timer = self._loop.call_later(max(0.0, timeout_s), self._expire, h)
        if self._max_offset_of is not None:
            current = self._max_offset_of(topic, queue_id)
            if current > offset:
                self._loop.call_soon(self._wake_queue, key, current)
        return h

    def _remove(self, h: PullHold) -> None:
        holds = self._held.get(h.key)
        if holds is not None and h in holds:
            del holds[h]
            self._held_count -= 1
            if not holds:
                del self._held[h.key]
        if h._timer is not None:
            h._timer.cancel()
            h._timer = None

    @staticmethod
    def _call(h: PullHold) -> None:
        try:
            h.wake()
        except Exception:
            log.exception("waking a held pull request of %s failed", h.key)

    def _expire(self, h: PullHold) -> None:
        if h.done:
            return
        h._timer = None
        self._remove(h)
        h.done = True
        self._by_timeout += 1
        self._call(h)

    def _wake_queue(self, key: QueueKey, max_offset: int) -> None:
        holds = self._held.get(key)
        if not holds:
            return
        ready = [h for h in holds if h.offset < max_offset]
        for h in ready:
            self._remove(h)
            h.done = True
        self._by_arrival += len(ready)
        for h in ready:
            self._call(h)

    def _drain(self) -> None:
        with self._pending_lock:
            pending = self._pending
            self._pending = {}
            self._drain_scheduled = False
        self._drains += 1
        for key, max_offset in pending.items():
            self._wake_queue(key, max_offset)

    def _sweep(self) -> None:
        self._sweep_timer = None
        if self._closed or self._max_offset_of is None:
            return
        for key in list(self._held):
            try:
                current = self._max_offset_of(*key)
            except Exception:
                log.exception("checking held pull requests of %s failed", key)
                continue
            self._wake_queue(key, current)
        self._sweep_timer = self._loop.call_later(self._check_interval_s, self._sweep)

    def wake_all(self) -> int:
        """Wake every held request now (shutdown); how many. Loop thread."""
        holds = [h for per_queue in self._held.values() for h in per_queue]
        for h in holds:
            self._remove(h)
            h.done = True
        self._at_shutdown += len(holds)
        for h in holds:
            self._call(h)
        return len(holds)

    def close(self) -> None:
        """Stop the sweep, wake every held request and wake later holds at once. Loop thread."""
        self._closed = True
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        self.wake_all()

    @property
    def held_count(self) -> int:
        return self._held_count

    def statistics(self) -> LongPollStats:
        return LongPollStats(
            held=self._held_count,
            holds=self._holds,
            woken_by_arrival=self._by_arrival,
            woken_by_timeout=self._by_timeout,
            woken_at_shutdown=self._at_shutdown,
            cancelled=self._cancelled,
            notifications=self._notifications,
            drains=self._drains,
        )

    # -- any thread --------------------------------------------------------------------------

    def notify_arriving(
        self,
        topic: str,
        queue_id: int,
        max_offset: int,
        tags_code: int | None = None,
        store_timestamp: int = 0,
    ) -> None:
        """Messages are in the queue up to ``max_offset`` (exclusive). Any thread; cheap.

        The signature is the store's MessageArrivingListener, so the service can be installed
        with ``store.set_message_arriving_listener(holds.notify_arriving)``; the tags code and
        store time are not used (a woken pull filters by itself).
        """
        key = (topic, queue_id)
        if self._max_offset_of is not None and key not in self._held:
            return  # nobody waits; a later hold() checks the store itself
        with self._pending_lock:
            old = self._pending.get(key)
            if old is None or max_offset > old:
                self._pending[key] = max_offset
            self._notifications += 1
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        try:
            if threading.get_ident() == self._loop_thread:
                self._loop.call_soon(self._drain)
            else:
                self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nothing left to wake
            with self._pending_lock:
                self._drain_scheduled = False
