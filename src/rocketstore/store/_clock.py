"""Clocks: every component takes one instead of calling ``time`` directly.

``SystemClock`` is the real one; ``ManualClock`` only moves when told to, so tests drive time
without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (store timestamps)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (intervals, timeouts)."""


def ns_reader(clock: Clock) -> Callable[[], int]:
    """Wall-clock nanoseconds of ``clock``: its ``now_ns`` when it has one (the system clock's
    is ``time.time_ns`` itself, no Python frame on the put path), else from ``now_ms``."""
    now_ns = getattr(clock, "now_ns", None)
    if now_ns is not None:
        return now_ns  # type: ignore[no-any-return]
    return lambda: clock.now_ms() * 1_000_000


class SystemClock:
    """The operating system's clocks."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    # the C functions themselves: no Python frame on hot paths
    now_ns = staticmethod(time.time_ns)
    monotonic = staticmethod(time.monotonic)


class ManualClock:
    """A clock for tests: it stands still until ``advance`` is called.

    Thread-safe; both readings move together.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._lock = threading.Lock()
        self._ms = start_ms
        self._mono = 1000.0

    def now_ms(self) -> int:
        with self._lock:
            return self._ms

    def now_ns(self) -> int:
        with self._lock:
            return self._ms * 1_000_000

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ms += int(seconds * 1000)
            self._mono += seconds


SYSTEM_CLOCK: Clock = SystemClock()
