"""TierService: the thread that keeps the tiered store up with the commit log.

Started with a store whose ``tiered_dir`` is set (the composition root wires it). When it
starts it deletes what a crash left (unlisted ``part-`` files, hidden temporaries); then, from
``covered`` on, it tiers each sealed commit-log file in order (``_writer.tier_range``). A file
is sealed once the flushed position of the commit log has passed its end; with
``tiered_seal_age_ms``, the flushed part of the last file is tiered too once nothing new has
been flushed for that long. Once a minute it applies the tier's retention.

The store's cleaner asks ``covered()`` before deleting a commit-log file, so no message leaves
the commit log before it is in the tier.

Low priority: each range is tiered in a child process at a lower CPU priority
(``_service_worker``), so the put path keeps the interpreter and its share of the CPU; the
thread only waits for the child. With ``in_process=True`` (tests, small stores) the range is
tiered in the thread itself, which then sleeps ``(1 - duty) / duty`` times as long as each
bounded step took (a scan window of the file, a row group).

Threads: its own thread; ``covered()`` from any thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from ..store._clock import SYSTEM_CLOCK, Clock
from ..store._config import StoreConfig
from ..store._service import ServiceThread
from ..store.read._reader import CommitLogView, _store_files
from ._manifest import MANIFEST, STATE, TierError, crash_leftovers, load_covered, save_covered
from ._retention import enforce_retention
from ._service_worker import run_child
from ._writer import DEFAULT_OPTIONS, RangeResult, WriterOptions, tier_range

log = logging.getLogger(__name__)

RETENTION_INTERVAL_S = 60.0
ERROR_RETRY_S = 30.0


class _Stopping(Exception):
    """The service stops: the range in progress is abandoned (it is tiered again later)."""


def remove_leftovers(root: str | Path) -> list[Path]:
    """Delete what a crash left in a tiered directory: unlisted ``part-`` files, hidden
    temporaries and half-written JSON files. Returns what was deleted."""
    base = Path(root)
    gone = crash_leftovers(base)
    for path in gone:
        path.unlink(missing_ok=True)
    if base.is_dir():
        for tmp in [base / f"{STATE}.tmp", *base.glob(f"*/{MANIFEST}.tmp")]:
            if tmp.exists():
                tmp.unlink()
                gone.append(tmp)
    for path in gone:
        log.info("tiered store: deleted %s, left over from an interrupted run", path)
    return gone


def first_range(view: CommitLogView, covered: int) -> int:
    """Where tiering goes on: ``covered``, or the commit log's first file when files above
    ``covered`` were deleted before they were tiered (tiering turned on for an old store)."""
    lowest = view.min_offset()
    return max(covered, lowest)


class TierService(ServiceThread):
    def __init__(
        self,
        config: StoreConfig,
        *,
        settled: Callable[[], int],
        clock: Clock = SYSTEM_CLOCK,
        options: WriterOptions = DEFAULT_OPTIONS,
        duty: float = 0.5,
        interval_s: float = 1.0,
        in_process: bool = False,
    ) -> None:
        super().__init__("TierService")
        if not config.tiered_dir:
            raise TierError("the tiered store is off (tiered_dir is empty)")
        self.root = Path(config.tiered_dir)
        self.commit_log_dir = Path(config.commit_log_dir)
        self.file_size = config.mapped_file_size_commit_log
        self.seal_age_ms = config.tiered_seal_age_ms
        self.retention_hours = config.tiered_retention_hours
        self.max_bytes = config.tiered_max_bytes
        self.settled = settled
        self.clock = clock
        self.options = options
        self.duty = duty
        self.in_process = in_process
        self.interval_s = interval_s
        self._covered = load_covered(self.root)
        self._last_settled = -1
        self._settled_since_ms = 0
        self._step_began = 0.0
        self.worker_pid: int | None = None  # the child tiering a range now
        self.results: list[RangeResult] = []
        self.last_error: str | None = None

    def covered(self) -> int:
        """The commit-log offset below which every message is in the tier."""
        return self._covered

    # ---- pacing -----------------------------------------------------------------------------

    def _pace(self) -> None:
        if self.stopped:
            raise _Stopping
        now = time.monotonic()
        worked = now - self._step_began
        if self.duty < 1.0 and worked > 0:
            self._stopped.wait(min(worked * (1 - self.duty) / self.duty, 1.0))
            if self.stopped:
                raise _Stopping
        self._step_began = time.monotonic()

    def _worker_started(self, pid: int) -> None:
        self.worker_pid = pid

    # ---- one step ---------------------------------------------------------------------------

    def _range_end(self, start: int) -> int | None:
        """Where the range from ``start`` ends when it can be tiered now; None: not yet."""
        settled = self.settled()
        file_end = start - start % self.file_size + self.file_size
        if settled >= file_end:
            return file_end
        if not self.seal_age_ms or settled <= start:
            return None
        now = self.clock.now_ms()
        if settled != self._last_settled:
            self._last_settled, self._settled_since_ms = settled, now
            return None
        return settled if now - self._settled_since_ms >= self.seal_age_ms else None

    def tier_once(self) -> RangeResult | None:
        """Tier the next range when there is one ready (the service's thread, or tests)."""
        view = CommitLogView(self.commit_log_dir, self.file_size)
        try:
            if not _store_files(self.commit_log_dir):
                return None
            start = first_range(view, self._covered)
            if start > self._covered:
                log.warning(
                    "tiered store: commit log %d..%d was deleted before it was tiered; "
                    "tiering starts at %d",
                    self._covered,
                    start,
                    start,
                )
                save_covered(self.root, start)
                self._covered = start
            end = self._range_end(start)
            if end is None:
                return None
            if self.in_process:
                self._step_began = time.monotonic()
                result = tier_range(
                    view, self.root, start, end, options=self.options, pace=self._pace
                )
            else:
                child = run_child(
                    self.commit_log_dir,
                    self.file_size,
                    self.root,
                    start,
                    end,
                    self.options,
                    stopping=lambda: self.stopped,
                    started=self._worker_started,
                )
                self.worker_pid = None
                if child is None:
                    raise _Stopping
                result = child
                for d in result.damaged:
                    log.error(
                        "damaged record not tiered: %s position %d: %s", d.path, d.position, d.why
                    )
        finally:
            view.close()
        self._covered = max(self._covered, result.end)
        self.results.append(result)
        del self.results[:-100]
        log.info(
            "tiered commit log %d..%d: %d file(s), %d rows, %d bytes of Parquet%s",
            result.start,
            result.end,
            result.files,
            result.rows,
            result.parquet_bytes,
            "" if result.complete else " (stopped at a damaged record)",
        )
        return result

    def run(self) -> None:
        try:
            remove_leftovers(self.root)
        except (OSError, TierError) as exc:
            log.error("tiered store: cannot clean up %s: %s", self.root, exc)
        next_retention = 0.0
        while not self.stopped:
            pause = self.interval_s
            try:
                result = self.tier_once()
                if result is not None and result.end > result.start:
                    pause = 0.0  # more may be ready
                elif result is not None:  # a damaged record it cannot step over
                    pause = ERROR_RETRY_S
                self.last_error = None
            except _Stopping:  # a range cut short: its files go now, it is tiered again later
                remove_leftovers(self.root)
                break
            except Exception as exc:  # logged, retried later
                if str(exc) != self.last_error:
                    log.exception("tiering failed; retrying every %.0f s", ERROR_RETRY_S)
                self.last_error = str(exc)
                pause = ERROR_RETRY_S
            if time.monotonic() >= next_retention:
                next_retention = time.monotonic() + RETENTION_INTERVAL_S
                try:
                    enforce_retention(
                        self.root,
                        retention_hours=self.retention_hours,
                        max_bytes=self.max_bytes,
                        now_ms=self.clock.now_ms(),
                    )
                except Exception:
                    log.exception("tier retention failed")
            if pause:
                self.wait_for_running(pause)


def _holds_data(path: Path) -> bool:
    """Whether a commit-log file's first record head is not zeroes (it was written to)."""
    with open(path, "rb") as f:
        return any(f.read(8))


def tier_store(
    commit_log_dir: str | Path,
    root: str | Path,
    *,
    file_size: int | None = None,
    options: WriterOptions = DEFAULT_OPTIONS,
    pace: Callable[[], None] | None = None,
) -> list[RangeResult]:
    """Tier every sealed file of a commit log no process writes (the caller holds the store's
    lock): every file before the last one written to. Leftovers of a crash go first."""
    from ..store.read._reader import detect_file_size

    cl_dir = Path(commit_log_dir)
    remove_leftovers(root)
    files = [p for p in _store_files(cl_dir) if _holds_data(p)]
    if not files:
        return []
    size = file_size or detect_file_size(cl_dir) or 1 << 30
    last = int(files[-1].name)
    view = CommitLogView(cl_dir, size)
    results: list[RangeResult] = []
    try:
        start = first_range(view, load_covered(root))
        if start > load_covered(root):
            save_covered(root, start)
        while start - start % size + size <= last:
            file_end = start - start % size + size
            if view.file_at(start) is None:  # a gap in the commit log: nothing to tier there
                raise TierError(f"no commit-log file holds offset {start} in {cl_dir}")
            kwargs = {"pace": pace} if pace is not None else {}
            result = tier_range(view, root, start, file_end, options=options, **kwargs)
            results.append(result)
            if result.end <= start:
                break
            start = result.end
    finally:
        view.close()
    return results
