"""Flush and commit services of the commit log.

- GroupCommitService (SYNC_FLUSH): producers wait until the flushed position passes the end of
  their message; one fdatasync serves every producer that arrived while the previous one ran.
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

from ._clock import Clock
from ._mapped_file_queue import MappedFileQueue
from ._service import ServiceThread

log = logging.getLogger(__name__)

RETRY_TIMES_OVER = 10
GATHER_MIN_S = 0.0005  # how long a group-commit leader may wait for its group (see
GATHER_MAX_S = 0.002  # GroupCommitService)
FlushedCallback = Callable[[int], None]
"""Called with the store timestamp of the last flushed message (checkpoint update)."""


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

    def _release_token(self) -> None:
        """End a flush: wake the waiters it covered and the next leader. Caller holds ``_lock``."""
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
                self._release_token()

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
                self._release_token()
                for entry in self._waiters:
                    entry[2].release()
                self._waiters.clear()


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

    def run(self) -> None:
        while not self.stopped:
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
    ) -> None:
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
