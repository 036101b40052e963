"""AllocateMappedFileService: creates the next commit-log file (and the one after it) ahead.

A roll asks for file N and N+1; N is usually ready already, N+1 is made in the background while
the producer writes into N. Requests are de-duplicated by path and served largest file first,
then lowest offset. The caller waits at most ``wait_timeout`` seconds.
"""

from __future__ import annotations

import heapq
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .._clock import SYSTEM_CLOCK, Clock
from .._durable import fsync_dir, make_dirs_synced
from .._errors import StoreError, translate_os_errors
from .._service import ServiceThread
from ._mapped_file import DEFAULT_ALLOCATE_AHEAD, MappedFile

if TYPE_CHECKING:
    from ._transient_pool import TransientStorePool

log = logging.getLogger(__name__)


@dataclass(order=True)
class _Request:
    sort_key: tuple[int, int]
    path: Path = field(compare=False)
    size: int = field(compare=False)
    done: threading.Event = field(default_factory=threading.Event, compare=False)
    mapped_file: MappedFile | None = field(default=None, compare=False)
    error: BaseException | None = field(default=None, compare=False)


class AllocateMappedFileService(ServiceThread):
    def __init__(
        self,
        *,
        pool: TransientStorePool | None = None,
        warm: bool = False,
        warm_min_size: int = 0,
        lock_memory: bool = False,
        fast_fail_if_no_buffer: bool = False,
        wait_timeout: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        allocate_ahead: int = DEFAULT_ALLOCATE_AHEAD,
        sync_flush: bool = False,
        flush_least_pages_when_warm: int = 4096,
    ) -> None:
        """Files are made sparse (their disk blocks are reserved ``allocate_ahead`` bytes
        ahead of the writes, see MappedFile); with ``warm`` a file of at least
        ``warm_min_size`` is touched throughout (all its blocks), flushed every
        ``flush_least_pages_when_warm`` pages under SYNC_FLUSH (``sync_flush``)."""
        super().__init__("AllocateMappedFileService")
        self.pool = pool
        self.warm = warm
        self.warm_min_size = warm_min_size
        self.lock_memory = lock_memory
        self.fast_fail_if_no_buffer = fast_fail_if_no_buffer
        self.wait_timeout = wait_timeout
        self.clock = clock
        self.allocate_ahead = allocate_ahead
        self.sync_flush = sync_flush
        self.flush_least_pages_when_warm = flush_least_pages_when_warm
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._table: dict[Path, _Request] = {}
        self._heap: list[_Request] = []
        self._making = 0
        self.waits = 0  # requests that found their file not ready yet
        self.created = 0

    def _submit(self, path: Path, size: int) -> _Request | None:
        """Queue a request unless one for the path exists. Caller holds the lock."""
        req = self._table.get(path)
        if req is not None:
            return req
        if self.pool is not None:
            # each pending file takes a write buffer when created
            if self.pool.available_count() - len(self._heap) <= 0:
                return None
        req = _Request((-size, int(path.name)), path, size)
        self._table[path] = req
        heapq.heappush(self._heap, req)
        self._cond.notify()
        return req

    def request(self, path: Path, next_path: Path, size: int) -> MappedFile | None:
        """Return the file at ``path`` (made now or earlier) and ask for ``next_path`` ahead.

        None when it could not be made in time (CREATE_MAPPED_FILE_FAILED).
        """
        if not self.running:
            # not started (or stopped): create in the caller's thread
            try:
                return self._make(path, size)
            except (OSError, StoreError) as exc:
                log.error("creating %s failed: %s", path, exc)
                return None
        with self._lock:
            req = self._submit(path, size)
            if req is None:
                if self.fast_fail_if_no_buffer:
                    log.warning("no write buffer left in the transient store pool for %s", path)
                    return None
                req = self._submit_unchecked(path, size)
            self._submit(next_path, size)
        if not req.done.is_set():
            self.waits += 1  # the caller waits for a file that was not made ahead
        if not req.done.wait(self.wait_timeout):
            log.warning("creating %s took longer than %.1f s", path, self.wait_timeout)
            return None
        with self._lock:
            self._table.pop(path, None)
        if req.error is not None:
            log.error("creating %s failed: %s", path, req.error)
            return None
        return req.mapped_file

    def _submit_unchecked(self, path: Path, size: int) -> _Request:
        req = _Request((-size, int(path.name)), path, size)
        self._table[path] = req
        heapq.heappush(self._heap, req)
        self._cond.notify()
        return req

    def _make(self, path: Path, size: int) -> MappedFile:
        """Create (or map) the file; a new file's directory entry is made durable. Raises
        StoreError (StoreIOError on a full disk) with no file left behind."""
        with translate_os_errors(f"create {path.parent}"):
            make_dirs_synced(path.parent)
        mf = MappedFile(
            path, size, pool=self.pool, clock=self.clock, allocate_ahead=self.allocate_ahead
        )
        if mf.created:
            try:
                if self.warm and size >= self.warm_min_size:
                    mf.warm(
                        lock_memory=self.lock_memory,
                        sync_flush=self.sync_flush,
                        flush_least_pages=self.flush_least_pages_when_warm,
                    )
                with translate_os_errors(f"sync {path.parent}"):
                    fsync_dir(path.parent)
            except BaseException:
                mf.destroy(0)
                raise
        self.created += 1
        return mf

    def run(self) -> None:
        while not self.stopped:
            with self._lock:
                while not self._heap and not self.stopped:
                    self._cond.wait(0.5)
                if self.stopped:
                    break
                req = heapq.heappop(self._heap)
                if self._table.get(req.path) is not req:
                    continue
                self._making += 1
            try:
                req.mapped_file = self._make(req.path, req.size)
            except (OSError, StoreError) as exc:
                req.error = exc
            finally:
                with self._lock:
                    self._making -= 1
            req.done.set()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no file is being made or waits to be (benchmarks, tests)."""
        deadline = self.clock.monotonic() + timeout
        while True:
            with self._lock:
                if not self._heap and not self._making:
                    return True
            if self.clock.monotonic() >= deadline:
                return False
            threading.Event().wait(0.01)

    def stop(self, join: bool = True) -> None:
        self._stopped.set()
        with self._lock:
            self._cond.notify_all()
        super().stop(join)
        # files made ahead and never handed out: close and delete them
        with self._lock:
            pending = list(self._table.values())
            self._table.clear()
            self._heap.clear()
        for req in pending:
            if req.mapped_file is not None:
                log.info("deleting the pre-allocated file %s", req.path)
                req.mapped_file.destroy(0)
