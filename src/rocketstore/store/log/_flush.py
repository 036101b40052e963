"""Flush and commit services of the commit log.

- GroupCommitService (SYNC_FLUSH): producers wait until the flushed position passes the end of
  their message; one fdatasync serves every producer that arrived while the previous one ran.
  Non-blocking puts register a callback instead (``await_flush``), which the service thread
  runs once a flush covers them; FlushDeadlineService ends those whose time is up.
- FlushRealTimeService (ASYNC_FLUSH): flushes every ``flush_interval_commit_log`` ms when at
  least ``flush_commit_log_least_pages`` pages are dirty, everything every thorough interval.
- CommitRealTimeService (TransientStorePool): copies write buffers into the mapped files.

The fdatasync calls release the interpreter lock, so producers keep running while a flush waits
for the disk.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable
from typing import Any

from .._clock import Clock
from .._service import ServiceThread
from ._mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

RETRY_TIMES_OVER = 10
GATHER_MIN_S = 0.0005  # how long a group-commit leader may wait for its group (see
GATHER_MAX_S = 0.002  # GroupCommitService)
IDLE_WAIT_S = 1.0  # FlushDeadlineService's wait while nothing is pending (woken on arrival)
FlushedCallback = Callable[[int], None]
"""Called with the store timestamp of the last flushed message (checkpoint update)."""
FlushDone = Callable[[bool], None]
"""``await_flush``'s callback: True when the flush covered the offset, False when the wait
ended without it (timeout, or shutdown before the last flush reached it)."""
_Pending = tuple[int, float, FlushDone]  # end offset, deadline, done


def _noop(_ts: int) -> None:
    pass


class GroupCommitService(ServiceThread):
    """Sync flush with group commit, leader and followers.

    A producer that must wait for its message to be durable flushes the commit log itself
    when no flush is running (it leads); producers arriving while a flush runs wait. When a
    flush ends, exactly the waiters it covered are woken, plus the first one it did not cover,
    who leads the next flush. One fdatasync therefore covers everyone who wrote while the
    previous one ran, nobody is woken for nothing, and a lone producer pays no thread hand-off.
    The service thread serves ``request_flush`` (dispatch under SYNC_FLUSH, WAIT=false puts)
    and flushes what is left at shutdown.

    Non-blocking waits (``await_flush``, the non-blocking put): the caller registers a callback
    and returns. Whoever ends a flush (the service thread, or a producer that led one) takes
    every registration it covered and runs their callbacks after letting go of ``_lock``; the
    service thread flushes as long as registrations are pending, so one fdatasync completes
    every put that was appended while the previous one ran. A registration the flushes do not
    reach in time ends in ``done(False)`` from FlushDeadlineService, a thread of its own since
    this one may be the one stuck in an fdatasync. Registrations are kept in arrival order, so
    their deadlines only grow.

    Only one flush runs at a time (``_flushing``, under ``_lock``).

    Gathering: woken producers need the interpreter lock one after another to write their next
    message, so the first of them to wait would lead a flush covering little more than itself,
    the rest waiting a whole fdatasync for the next one. A leader therefore first waits until
    as many producers wait as the previous flush covered, or for a short while (twice the last
    fdatasync, between GATHER_MIN_S and GATHER_MAX_S). A lone producer never waits: its group
    is one.
    """

    def __init__(
        self, queue: MappedFileQueue, clock: Clock, on_flushed: FlushedCallback = _noop
    ) -> None:
        super().__init__("GroupCommitService")
        self.queue = queue
        self.clock = clock
        self.on_flushed = on_flushed
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._highest_request = 0
        self._flushing = False
        # waiting producers: [end offset, arrival number, wake-up lock], smallest end first
        self._waiters: list[list[Any]] = []
        self._arrivals = 0
        self.flush_count = 0
        self._gathered = threading.Condition(self._lock)
        self._group_target = 1  # producers the last flush covered
        self._gathering = False
        self._last_flush_s = 0.0
        # non-blocking waits, in arrival order: (end offset, deadline, done)
        self._pending: list[_Pending] = []
        self._closed = False  # after the shutdown flush: await_flush answers at once
        self.deadlines = FlushDeadlineService(self._expire_due)

    def start(self) -> None:
        with self._lock:
            self._closed = False
        super().start()
        self.deadlines.start()

    def stop(self, join: bool = True) -> None:
        """Stop the service thread (it flushes what is left and completes every wait), then
        the deadline thread. With ``join``, whatever a hung shutdown (or a service never
        started) left pending is completed here."""
        started = self._thread is not None
        super().stop(join)
        self.deadlines.stop(join)
        if started and not join:
            return  # the service thread completes them when it ends
        with self._lock:
            self._closed = True
            left, self._pending = self._pending, []
        self._finish(left)

    def await_flush(self, end_offset: int, timeout: float, done: FlushDone) -> None:
        """Call ``done(True)`` once everything below ``end_offset`` is durable, or
        ``done(False)`` when ``timeout`` seconds pass first; never blocks on a flush.

        Any thread (an event loop's too). ``done`` runs in the thread that ends the covering
        flush (the service thread, or a producer that led it), in FlushDeadlineService on a
        timeout, or here at once when the offset is flushed already or the service has shut
        down; never under ``_lock``. It must not block.
        """
        queue = self.queue
        if queue.flushed_where >= end_offset:
            done(True)
            return
        with self._lock:
            # checked again under the lock: a flush that ends from now on finds the entry
            covered = queue.flushed_where >= end_offset
            if not covered and not self._closed:
                pending = self._pending
                if not pending:
                    self.deadlines.wakeup()  # it sleeps while nothing is pending
                pending.append((end_offset, self.clock.monotonic() + timeout, done))
                if end_offset > self._highest_request:
                    self._highest_request = end_offset
                    self._work.notify()
                return
        done(covered)

    def _take_covered(self) -> list[_Pending]:
        """Remove and return the pending waits that the flushed position covers. Caller
        holds ``_lock``."""
        pending = self._pending
        if not pending:
            return []
        flushed = self.queue.flushed_where
        covered = [e for e in pending if e[0] <= flushed]
        if covered:
            self._pending = (
                [e for e in pending if e[0] > flushed] if len(covered) < len(pending) else []
            )
        return covered

    def _finish(self, entries: list[_Pending]) -> None:
        """Run the callbacks of waits that ended: True for those the flushed position covers.
        Without ``_lock``."""
        if not entries:
            return
        flushed = self.queue.flushed_where
        for end, _deadline, done in entries:
            try:
                done(end <= flushed)
            except Exception:  # a callback must not take the flusher down
                log.exception("%s: a flush callback failed", self.name)

    def _expire_due(self) -> float:
        """End the waits whose deadline has passed; seconds until the next deadline.
        FlushDeadlineService's thread."""
        now = self.clock.monotonic()
        with self._lock:
            pending = self._pending
            n = 0
            for _end, deadline, _done in pending:
                if deadline > now:
                    break
                n += 1
            due = pending[:n]
            if n:
                del pending[:n]
            wait = pending[0][1] - now if pending else IDLE_WAIT_S
        self._finish(due)
        return min(max(wait, 0.0), IDLE_WAIT_S)

    def request_flush(self, end_offset: int) -> None:
        """Ask the service thread to flush up to ``end_offset`` without waiting. Any thread."""
        if self.queue.flushed_where >= end_offset:
            return
        with self._lock:
            if end_offset > self._highest_request:
                self._highest_request = end_offset
                self._work.notify()

    def _take_token(self) -> bool:
        """Become the flusher if nobody is. Caller holds ``_lock``."""
        if self._flushing:
            return False
        self._flushing = True
        return True

    def _release_token(self) -> list[_Pending]:
        """End a flush: wake the waiters it covered and the next leader; returns the
        non-blocking waits it covered, for ``_finish`` once ``_lock`` is let go. Caller holds
        ``_lock``."""
        self._flushing = False
        flushed = self.queue.flushed_where
        waiters = self._waiters
        covered = 0
        while waiters and waiters[0][0] <= flushed:
            heapq.heappop(waiters)[2].release()
            covered += 1
        self._group_target = covered + 1
        if waiters:
            heapq.heappop(waiters)[2].release()  # not covered: it leads the next flush
        elif self._highest_request > flushed:
            self._work.notify()
        return self._take_covered()

    def _gather(self) -> None:
        """Leader, before its flush: let the producers of the last group write (see the
        class). Caller holds the flush token, not ``_lock``."""
        target = self._group_target
        if target <= 1:
            return
        clock = self.clock
        wait = min(GATHER_MAX_S, max(GATHER_MIN_S, 2 * self._last_flush_s))
        deadline = clock.monotonic() + wait
        with self._lock:
            self._gathering = True
            try:
                while len(self._waiters) + 1 < target and not self.stopped:
                    left = deadline - clock.monotonic()
                    if left <= 0 or not self._gathered.wait(left):
                        break
            finally:
                self._gathering = False

    def _flush_as_leader(self, gather: bool = False) -> None:
        try:
            if gather:
                self._gather()
            self._flush_once()
        finally:
            with self._lock:
                covered = self._release_token()
            self._finish(covered)

    def wait_flushed(self, end_offset: int, timeout: float) -> bool:
        """Block until everything below ``end_offset`` is durable; False on timeout.

        Producer threads. May run the flush in the calling thread (see the class).
        """
        queue = self.queue
        if queue.flushed_where >= end_offset:
            return True
        clock = self.clock
        deadline = clock.monotonic() + timeout
        while True:
            with self._lock:
                if queue.flushed_where >= end_offset:
                    return True
                lead = self._take_token()
                if not lead:
                    wake = threading.Lock()
                    wake.acquire()
                    self._arrivals += 1
                    entry = [end_offset, self._arrivals, wake]
                    heapq.heappush(self._waiters, entry)
                    if self._gathering and len(self._waiters) + 1 >= self._group_target:
                        self._gathered.notify()
            if lead:
                before = queue.flushed_where
                try:
                    self._flush_as_leader(gather=True)
                except OSError:  # the put ends in FLUSH_DISK_TIMEOUT unless a retry succeeds
                    log.exception("%s: sync flush failed; retrying until the timeout", self.name)
                if queue.flushed_where >= end_offset:
                    return True
                if clock.monotonic() >= deadline:
                    return False
                if queue.flushed_where == before:  # the disk made no progress: do not spin
                    threading.Event().wait(0.001)
                continue
            remaining = deadline - clock.monotonic()
            if remaining <= 0 or not wake.acquire(timeout=remaining):
                with self._lock:
                    if entry in self._waiters:
                        self._waiters.remove(entry)
                        heapq.heapify(self._waiters)
                    elif (
                        queue.flushed_where < end_offset and not self._flushing and self._waiters
                    ):  # woken to lead just as the wait ran out: pass the lead on
                        heapq.heappop(self._waiters)[2].release()
                return queue.flushed_where >= end_offset

    def _flush_once(self) -> None:
        """Flush to the current end of the log. Caller holds the flush token."""
        target = self.queue.get_max_offset()
        begin = self.clock.monotonic()
        for _ in range(2):
            if self.queue.flushed_where >= target:
                break
            self.queue.flush(0)
        self._last_flush_s = self.clock.monotonic() - begin
        ts = self.queue.store_timestamp
        if ts:
            self.on_flushed(ts)
        self.flush_count += 1

    def run(self) -> None:
        while not self.stopped:
            with self._lock:
                while not self.stopped and (
                    self._flushing or self._highest_request <= self.queue.flushed_where
                ):
                    self._work.wait(0.01)
                if self.stopped:
                    break
                self._flushing = True
            try:
                self._flush_as_leader()
            except OSError:  # the service must outlive a failing disk: dispatch needs it
                log.exception("%s: flush failed; retrying", self.name)
                self.wait_for_running(0.01)
        # shutdown: after any flush in progress, flush what is left and release every waiter
        while True:
            with self._lock:
                if self._take_token():
                    break
            threading.Event().wait(0.01)
        try:
            for _ in range(RETRY_TIMES_OVER):
                try:
                    self.queue.flush_all(0)
                    break
                except OSError:
                    log.exception("%s: final flush failed", self.name)
        finally:
            with self._lock:
                left = self._release_token()
                for entry in self._waiters:
                    entry[2].release()
                self._waiters.clear()
                self._closed = True
                left += self._pending
                self._pending = []
            self._finish(left)  # True for what the last flush reached, False for the rest


class FlushDeadlineService(ServiceThread):
    """Ends GroupCommitService's non-blocking waits whose time is up (FLUSH_DISK_TIMEOUT),
    even while the service thread is stuck in an fdatasync.

    ``expire`` ends what is due and says how long to sleep before the next deadline; a wait
    registered while nothing was pending wakes the thread.
    """

    def __init__(self, expire: Callable[[], float]) -> None:
        super().__init__("FlushDeadlineService")
        self.expire = expire

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self.expire())


class PeriodicPageService(ServiceThread):
    """The loop shared by the interval-driven flush and commit services.

    Every ``interval_ms`` it calls ``step(least_pages)``; once per ``thorough_interval_ms`` it
    passes 0 so that whatever is dirty goes out however little it is. At stop it calls
    ``step(0)`` until nothing moves (at most ``final_rounds`` times). Errors from the OS are
    logged and the next round tries again.
    """

    what = "flush"
    final_rounds = RETRY_TIMES_OVER

    def __init__(
        self,
        name: str,
        clock: Clock,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
    ) -> None:
        super().__init__(name)
        self.clock = clock
        self.interval = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough_interval = thorough_interval_ms / 1000
        self._last_thorough = clock.monotonic()

    def step(self, least_pages: int) -> bool:
        """One round; True when it moved anything."""
        raise NotImplementedError

    def _least_pages_now(self) -> int:
        now = self.clock.monotonic()
        if now - self._last_thorough >= self.thorough_interval:
            self._last_thorough = now
            return 0
        return self.least_pages

    timed = False  # sleep the whole interval, deaf to wakeups (flush_commit_log_timed)

    def run(self) -> None:
        while not self.stopped:
            if self.timed:
                self._stopped.wait(self.interval)
            else:
                self.wait_for_running(self.interval)
            try:
                self.step(self._least_pages_now())
            except OSError:
                log.exception(
                    "%s: %s failed; retrying in %.1f s", self.name, self.what, self.interval
                )
        for _ in range(self.final_rounds):
            try:
                if not self.step(0):
                    break
            except OSError:
                log.exception("%s: final %s failed", self.name, self.what)


class FlushRealTimeService(PeriodicPageService):
    """Async flush of the commit log on an interval."""

    def __init__(
        self,
        queue: MappedFileQueue,
        clock: Clock,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        on_flushed: FlushedCallback = _noop,
        timed: bool = True,
    ) -> None:
        """``timed`` (flush_commit_log_timed): each round sleeps the whole interval; otherwise
        it waits for a wakeup (every put wakes it, as RocketMQ's puts do) or the interval."""
        super().__init__(
            "FlushRealTimeService",
            clock,
            interval_ms=interval_ms,
            least_pages=least_pages,
            thorough_interval_ms=thorough_interval_ms,
        )
        self.queue = queue
        self.on_flushed = on_flushed
        self.flush_count = 0
        self.timed = timed

    def step(self, least_pages: int) -> bool:
        before = self.queue.flushed_where
        self.queue.flush_all(least_pages)  # every file up to the end, not one a round
        if self.queue.flushed_where == before:
            return False
        self.flush_count += 1
        ts = self.queue.store_timestamp
        if ts:
            self.on_flushed(ts)
        return True


class CommitRealTimeService(PeriodicPageService):
    """Moves data from write buffers into the mapped files, then wakes the flusher."""

    what = "commit"

    def __init__(
        self,
        queue: MappedFileQueue,
        clock: Clock,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        flusher: ServiceThread,
    ) -> None:
        super().__init__(
            "CommitRealTimeService",
            clock,
            interval_ms=interval_ms,
            least_pages=least_pages,
            thorough_interval_ms=thorough_interval_ms,
        )
        self.queue = queue
        self.flusher = flusher

    def step(self, least_pages: int) -> bool:
        before = self.queue.committed_where
        self.queue.commit_all(least_pages)
        if self.queue.committed_where == before:
            return False
        self.flusher.wakeup()
        return True
