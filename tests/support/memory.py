"""This process's memory, as the budget tests measure it: its resident set size now, its peak
sampled by a thread while a load runs, and a baseline once it stopped growing."""

from __future__ import annotations

import threading
import time

MiB = 1024 * 1024


def rss() -> int:
    """This process's resident set size, bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class PeakRss:
    """The largest RSS of this process since it was made, sampled by a thread every
    ``interval`` seconds until ``stop``."""

    def __init__(self, interval: float = 0.005) -> None:
        self.peak = rss()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, rss())

    def stop(self) -> int:
        """Stop sampling; the peak."""
        self._stop.set()
        self._thread.join(10)
        return self.peak


def settled_rss(timeout: float = 60.0) -> int:
    """The process's RSS once it stopped growing (two samples half a second apart within 1 MiB):
    what a server does on its way up (mappings touched, threads started) is in the baseline,
    however slowly it ran."""
    deadline = time.monotonic() + timeout
    before = rss()
    while True:
        time.sleep(0.5)
        now = rss()
        if abs(now - before) < MiB or time.monotonic() > deadline:
            return max(now, before)
        before = now
