"""A commit log stand-in that records what the group commit service asks of it, and the service
over it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rocketstore.store._clock import SystemClock
from rocketstore.store._errors import StoreIOError
from rocketstore.store.log._flush import GroupCommitService


class FakeLog:
    """What GroupCommitService uses of a MappedFileQueue. ``write`` moves the end; ``flush``
    makes everything written durable (up to one 'file' of ``step`` bytes per call), after an
    optional delay or gate, or fails. It asserts that flushes never overlap and that the
    flushed position only grows."""

    def __init__(self, step: int = 1 << 40) -> None:
        self.end = 0
        self.flushed_where = 0
        self.store_timestamp = 0
        self.step = step
        self.gate = threading.Event()
        self.gate.set()
        self.in_flush = threading.Event()
        self.delay: Callable[[], float] = lambda: 0.0
        self.fail: Callable[[], bool] = lambda: False
        self._busy = threading.Lock()
        self.overlaps = 0
        self.backwards = 0

    def write(self, n: int) -> int:
        self.end += n
        return self.end

    def get_max_offset(self) -> int:
        return self.end

    def flush(self, least_pages: int) -> int:
        if not self._busy.acquire(blocking=False):
            self.overlaps += 1
            return self.flushed_where
        try:
            target = min(self.end, self.flushed_where + self.step)
            self.in_flush.set()
            self.gate.wait(10)
            d = self.delay()
            if d:
                time.sleep(d)
            if self.fail():
                raise StoreIOError(5, "injected flush failure")
            if target < self.flushed_where:
                self.backwards += 1
            self.flushed_where = max(self.flushed_where, target)
            return self.flushed_where
        finally:
            self._busy.release()

    def flush_all(self, least_pages: int = 0) -> int:
        while True:
            before = self.flushed_where
            self.flush(least_pages)
            if self.flushed_where == before:
                return before


def make_service(log: FakeLog, start: bool = True) -> GroupCommitService:
    svc = GroupCommitService(log, SystemClock())  # type: ignore[arg-type]
    if start:
        svc.start()
    return svc
