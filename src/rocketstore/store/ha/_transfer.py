"""GroupTransferService: a SYNC_MASTER's put waits until a slave holds it.

The service is a put stage (see ``_put_stages``): calling it answers at once when a
slave has acknowledged ``end`` already (PUT_OK) or when no slave is in reach
(SLAVE_NOT_AVAILABLE: none connected, or the nearest more than ``ha_slave_fallbehind_max`` bytes
behind), else with a future. Every acknowledgement a connection reads
(``notify_transfer_some``) completes the futures it covers, in the reader's thread, so one
acknowledgement answers every put it covers — the replication wait is shared as group commit
shares an fdatasync. The service thread ends the waits that no acknowledgement covered within
``sync_flush_timeout`` (FLUSH_SLAVE_TIMEOUT); shutdown ends the rest the same way.

``acked`` is RocketMQ's push2SlaveMaxOffset: the highest offset any slave acknowledged. It only
grows.

Threads: ``stage`` from any putting thread (an event loop's, the group-commit thread, a
producer's); ``notify_transfer_some`` from the connections' reader threads; the deadline loop in
its own thread. Futures are completed outside ``_lock``.
"""

from __future__ import annotations

import collections
import functools
import heapq
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from .._clock import Clock
from .._service import ServiceThread
from ..log._message import PutMessageResult, PutMessageStatus
from ..log._put_stages import settle

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0
# while puts are answered SLAVE_NOT_AVAILABLE, a warning at most this often (seconds)
NOT_AVAILABLE_WARN_INTERVAL_S = 60.0
_PUT_OK = PutMessageStatus.PUT_OK

# a waiting put: [end offset, arrival number, deadline, wake, result, done]; wake is the
# continuation of a non-blocking put, called with the answer, or for a blocking put (result
# None) the lock its thread waits on
_Entry = list[Any]


class GroupTransferService(ServiceThread):
    def __init__(
        self,
        clock: Clock,
        *,
        timeout_s: float,
        fallbehind_max: int,
        connection_count: Callable[[], int],
        wake_writers: Callable[[], None],
    ) -> None:
        super().__init__("GroupTransferService")
        self.clock = clock
        self.timeout_s = timeout_s
        self.fallbehind_max = fallbehind_max
        self.connection_count = connection_count
        self.wake_writers = wake_writers
        self.acked = 0  # push2SlaveMaxOffset
        self._lock = threading.Lock()
        self._by_end: list[_Entry] = []  # heap: smallest end first
        self._by_arrival: collections.deque[_Entry] = collections.deque()  # deadlines grow
        self._arrivals = 0
        self._blocked = 0  # blocking puts waiting (their entries are in _by_end only)
        self._closed = False
        # counters (statistics)
        self.waits = 0
        self.timeouts = 0
        self.not_available = 0
        self._not_available_warned_at: float | None = None
        self._not_available_unwarned = 0

    # ---- the put stage ----------------------------------------------------------------------

    def is_slave_ok(self, end: int) -> bool:
        """A slave is connected and the nearest is less than ``fallbehind_max`` bytes behind
        ``end`` (RocketMQ's isSlaveOK)."""
        return self.connection_count() > 0 and end - self.acked < self.fallbehind_max

    def __call__(
        self, end: int, result: PutMessageResult
    ) -> Future[PutMessageResult] | PutMessageResult:
        """The put stage with a future (see ``_put_stages``). Any thread; never blocks."""
        fut: Future[PutMessageResult] = Future()
        r = self.attach(end, result, functools.partial(settle, fut))
        return fut if r is None else r

    def at_once(self, end: int, result: PutMessageResult) -> PutMessageResult | None:
        """The answer to a put that ends at ``end`` when it need not wait (a slave holds it
        already, or none is in reach: SLAVE_NOT_AVAILABLE), else None. Any thread; never
        blocks. For a caller that keeps its waits itself, in the order it stored them (the
        broker's event loop, ``broker/messaging/_slave_waits.py``): it asks this of every
        put and ``attach``es only the first one waiting, whose completion tells it how far
        the slaves hold the log."""
        return self._at_once(end, result)

    def _at_once(self, end: int, result: PutMessageResult) -> PutMessageResult | None:
        """The answer when there is nothing to wait for, else None."""
        if self.acked >= end:
            return result
        if not self.is_slave_ok(end):
            self.not_available += 1
            self._maybe_warn_not_available()
            return result._replace(status=PutMessageStatus.SLAVE_NOT_AVAILABLE)
        return None

    def _maybe_warn_not_available(self) -> None:
        """A warning at the first put answered SLAVE_NOT_AVAILABLE, then at most one every
        NOT_AVAILABLE_WARN_INTERVAL_S with the number answered so since the last. Any thread;
        takes ``_lock``."""
        with self._lock:
            self._not_available_unwarned += 1
            now = self.clock.monotonic()
            last = self._not_available_warned_at
            if last is not None and now - last < NOT_AVAILABLE_WARN_INTERVAL_S:
                return
            count, self._not_available_unwarned = self._not_available_unwarned, 0
            self._not_available_warned_at = now
        log.warning(
            "SYNC_MASTER without a slave in reach (none connected, or more than %d bytes "
            "behind): %d put(s) since the last warning were stored and answered "
            "SLAVE_NOT_AVAILABLE",
            self.fallbehind_max,
            count,
        )

    def attach(
        self, end: int, result: PutMessageResult, done: Callable[[PutMessageResult], None]
    ) -> PutMessageResult | None:
        """The stage for a non-blocking put (``PutCompletion``): the answer at once, or None
        and ``done(answer)`` later, from the reader thread whose acknowledgement covers
        ``end`` or from the deadline loop (FLUSH_SLAVE_TIMEOUT). Any thread; never blocks."""
        r = self._at_once(end, result)
        if r is not None:
            return r
        with self._lock:
            if self.acked >= end:
                return result
            if self._closed:
                return result._replace(status=PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            self._arrivals += 1
            entry = [end, self._arrivals, self.clock.monotonic() + self.timeout_s, done, result, 0]
            heapq.heappush(self._by_end, entry)
            arrival = self._by_arrival
            if not arrival:
                self.wakeup()  # the deadline loop sleeps while nothing waits
            arrival.append(entry)
            self.waits += 1
        self.wake_writers()
        return None

    def blocking(self, end: int, result: PutMessageResult) -> PutMessageResult:
        """The stage for a blocking put: waits in the calling thread (producer threads) until
        a slave acknowledged ``end``, at most ``timeout_s``. The waiter is a lock the
        acknowledging reader releases: no future, no deadline loop."""
        r = self._at_once(end, result)
        if r is not None:
            return r
        waiter = threading.Lock()
        waiter.acquire()
        with self._lock:
            if self.acked >= end:
                return result
            if self._closed:
                return result._replace(status=PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            self._arrivals += 1
            entry = [end, self._arrivals, 0.0, waiter, None, 0]
            heapq.heappush(self._by_end, entry)
            self._blocked += 1
            self.waits += 1
        self.wake_writers()
        if not waiter.acquire(timeout=self.timeout_s):
            with self._lock:
                if not entry[5]:
                    entry[5] = 1  # from now on nobody releases it
                    self._blocked -= 1
        if self.acked >= end:
            return result
        self.timeouts += 1
        return result._replace(status=PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def notify_transfer_some(self, offset: int) -> None:
        """A slave acknowledged ``offset``: complete every wait it covers. Reader threads."""
        if offset <= self.acked:
            return
        done: list[_Entry] = []
        with self._lock:
            if offset <= self.acked:
                return
            self.acked = offset
            heap = self._by_end
            while heap and heap[0][0] <= offset:
                entry = heapq.heappop(heap)
                if not entry[5]:
                    entry[5] = 1
                    if entry[4] is None:  # a blocking put: its thread waits on the lock
                        self._blocked -= 1
                        entry[3].release()
                    else:
                        done.append(entry)
        for entry in done:
            _call_back(entry[3], entry[4])

    def pending(self) -> int:
        """Puts waiting for a slave now."""
        with self._lock:
            return sum(1 for e in self._by_end if not e[5])

    # ---- deadlines --------------------------------------------------------------------------

    def _expire_due(self) -> float:
        """End the waits whose deadline passed; seconds to the next deadline."""
        now = self.clock.monotonic()
        due: list[_Entry] = []
        with self._lock:
            arrival = self._by_arrival
            while arrival and (arrival[0][5] or arrival[0][2] <= now):
                entry = arrival.popleft()
                if not entry[5]:
                    entry[5] = 1
                    due.append(entry)
            heap = self._by_end
            if len(heap) > 2 * (len(arrival) + self._blocked) + 64:  # drop expired entries
                self._by_end = [e for e in heap if not e[5]]
                heapq.heapify(self._by_end)
            wait = arrival[0][2] - now if arrival else IDLE_WAIT_S
        self._time_out(due)
        return min(max(wait, 0.0), IDLE_WAIT_S)

    def _time_out(self, entries: list[_Entry]) -> None:
        for entry in entries:
            status = _PUT_OK
            if entry[0] > self.acked:
                status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
                self.timeouts += 1
            _call_back(entry[3], entry[4]._replace(status=status))

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self._expire_due())

    def start(self) -> None:
        with self._lock:
            self._closed = False
        super().start()

    def stop(self, join: bool = True) -> None:
        """Stop the deadline loop; every wait still pending ends (FLUSH_SLAVE_TIMEOUT unless
        covered), and later stages answer FLUSH_SLAVE_TIMEOUT at once."""
        super().stop(join)
        with self._lock:
            self._closed = True
            left = [e for e in self._by_arrival if not e[5]]
            for e in left:
                e[5] = 1
            for e in self._by_end:
                if not e[5] and e[4] is None:  # blocking puts: let them go (they time out)
                    e[5] = 1
                    e[3].release()
            self._blocked = 0
            self._by_arrival.clear()
            self._by_end = []
        self._time_out(left)


def _call_back(done: Callable[[PutMessageResult], None], result: PutMessageResult) -> None:
    try:
        done(result)
    except Exception:  # a put's continuation must not take the reader thread down
        log.exception("a replication wait's callback failed")
