"""TransientStorePool: pre-allocated write buffers, each the size of a commit-log file.

With the pool on (async flush on a master only), appends go into a buffer in anonymous memory,
locked so it is never swapped; CommitRealTimeService copies them into the mapped file and
FlushRealTimeService makes them durable. Buffers come back to the pool when their file is full
and committed, or when the file is closed.
"""

from __future__ import annotations

import collections
import logging
import mmap
import threading

from .._errors import StoreError
from .._memory import mlock

log = logging.getLogger(__name__)


class TransientStorePool:
    def __init__(self, pool_size: int, file_size: int, *, lock_memory: bool = True) -> None:
        self.pool_size = pool_size
        self.file_size = file_size
        self.lock_memory = lock_memory
        self._lock = threading.Lock()
        self._available: collections.deque[mmap.mmap] = collections.deque()
        self.locked = 0

    def init(self) -> None:
        """Allocate every buffer (and lock it in memory where the OS allows)."""
        for _ in range(self.pool_size):
            buf = mmap.mmap(-1, self.file_size)
            if self.lock_memory and mlock(buf, self.file_size):
                self.locked += 1
            self._available.append(buf)
        if self.lock_memory and self.locked < self.pool_size:
            log.info("write buffers: %d of %d locked in memory", self.locked, self.pool_size)

    def borrow_buffer(self) -> mmap.mmap:
        with self._lock:
            if not self._available:
                raise StoreError("transient store pool: no write buffer available")
            buf = self._available.popleft()
        return buf

    def return_buffer(self, buf: mmap.mmap) -> None:
        with self._lock:
            self._available.append(buf)

    def available_count(self) -> int:
        with self._lock:
            return len(self._available)

    def destroy(self) -> None:
        with self._lock:
            while self._available:
                buf = self._available.popleft()
                try:
                    buf.close()
                except BufferError:
                    pass
