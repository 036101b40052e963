"""Retention: deleting old commit-log files, then the consume-queue and index files they leave
behind, and the disk-full running flag.

Every ``clean_resource_interval`` ms the CleanService thread runs, in order:

1. CleanCommitLogService. It deletes commit-log files when one of these holds:
   - it is one of the ``delete_when`` hours (local time, e.g. "04" or "01;04") and a file is
     older than ``file_reserved_time`` hours (by modification time);
   - the disk holding the commit log or the consume queues is more than
     ``disk_max_used_space_ratio`` % used: files older than the reserved time go at any hour, and
     above ``disk_space_clean_forcibly_ratio`` (with ``clean_file_forcibly_enable``) the oldest go
     whatever their age;
   - ``execute_delete_files_manually()`` was called within the last 20 runs (files older than the
     reserved time, at any hour).
   With the tiered store on (``tiered_below``), never a file that ends above the tier's
   ``covered`` offset, whatever the age or the disk says.
   At most 10 files per run, never the newest, ``delete_commit_log_files_interval`` ms apart so
   writers do not stall. A file a reader still holds is unmapped when its last reader lets go, or
   forcibly once ``destroy_mapped_file_interval_forcibly`` ms have passed; a first file left
   half-deleted is retried every ``redelete_hanged_file_interval`` ms.
   Above ``disk_space_warning_level_ratio`` the store is marked disk-full and puts are refused
   (SERVICE_NOT_AVAILABLE, with the reason) until a run finds the disk below that level again.
2. CleanConsumeQueueService: once the commit log's minimum offset has moved, consume-queue files
   whose units all point below it are deleted (``delete_consume_queue_files_interval`` ms apart),
   every queue's minimum offset is corrected (reads below it get OFFSET_TOO_SMALL) and index files
   wholly below it are deleted.

Threads: the CleanService thread; ``check_disk`` from the store's start-up; manual requests from
any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._clock import Clock
from .._config import StoreConfig
from .._disk import DiskUsageProbe, RunningFlags
from .._service import ServiceThread
from ..log._mapped_file_queue import MappedFileQueue
from ..log._message import PutMessageStatus
from ..queue._consume_queue import ConsumeQueueTable

if TYPE_CHECKING:
    from ..queue._index import IndexService

log = logging.getLogger(__name__)

MANUAL_DELETE_RUNS = 20
DISK_FULL = "disk_full"

Refuse = Callable[[str, "tuple[PutMessageStatus, str] | None"], None]
Sleep = Callable[[float], None]


def _no_sleep(_seconds: float) -> None:
    pass


class CleanCommitLogService:
    """Deletes expired commit-log files and keeps the disk-full flag. CleanService thread."""

    def __init__(
        self,
        config: StoreConfig,
        queue: MappedFileQueue,
        *,
        logics_path: str,
        clock: Clock,
        disk_usage: DiskUsageProbe,
        flags: RunningFlags,
        refuse: Refuse,
        sleep: Sleep = _no_sleep,
    ) -> None:
        self.queue = queue
        self.commit_log_path = str(queue.store_path)
        self.logics_path = logics_path
        self.clock = clock
        self.disk_usage = disk_usage
        self.flags = flags
        self.refuse = refuse
        self.sleep = sleep
        self.delete_hours = config.delete_when_hours()
        self.reserved_ms = config.file_reserved_time * 3_600_000
        self.delete_interval_ms = config.delete_commit_log_files_interval
        self.forcibly_ms = config.destroy_mapped_file_interval_forcibly
        self.redelete_ms = config.redelete_hanged_file_interval
        self.max_used_ratio = config.disk_max_used_space_ratio / 100.0
        self.warning_ratio = config.disk_space_warning_level_ratio
        self.clean_forcibly_ratio = config.disk_space_clean_forcibly_ratio
        self.clean_forcibly_enable = config.clean_file_forcibly_enable
        self.manual_runs = 0
        self.clean_immediately = False
        self.last_redelete_ms = clock.now_ms()
        self.deleted_files = 0
        # with the tiered store on: the commit-log offset below which files are tiered (and
        # so may go); None: files go by age and space alone
        self.tiered_below: Callable[[], int] | None = None

    def execute_delete_files_manually(self) -> None:
        """Delete files older than the reserved time in the next 20 runs, at any hour."""
        self.manual_runs = MANUAL_DELETE_RUNS
        log.info(
            "manual deletion of expired commit-log files requested (%d runs)", MANUAL_DELETE_RUNS
        )

    def is_time_to_delete(self) -> bool:
        return time.localtime(self.clock.now_ms() / 1000).tm_hour in self.delete_hours

    def _ratios(self) -> list[tuple[str, float]]:
        return [
            ("commit log", self.disk_usage(self.commit_log_path)),
            ("consume queues", self.disk_usage(self.logics_path)),
        ]

    def check_disk(self) -> bool:
        """Update the disk-full flag from the commit log's partition; True when full."""
        where, ratio = self._ratios()[0]
        return self._apply_full(where, ratio, ratio > self.warning_ratio)

    def _apply_full(self, where: str, ratio: float, full: bool) -> bool:
        if full:
            if self.flags.make_disk_full():
                log.error(
                    "the disk of the %s is %.1f%% used; disk marked full, puts refused",
                    where,
                    ratio * 100,
                )
            self.refuse(
                DISK_FULL,
                (
                    PutMessageStatus.SERVICE_NOT_AVAILABLE,
                    f"the disk is full: the {where} partition is {ratio * 100:.1f}% used, above "
                    f"disk_space_warning_level_ratio {self.warning_ratio * 100:.0f}%; writes resume "
                    "when retention frees space",
                ),
            )
        else:
            if self.flags.make_disk_ok():
                log.info("disk space OK again (%.1f%% used); puts accepted", ratio * 100)
            self.refuse(DISK_FULL, None)
        return full

    def is_space_to_delete(self) -> bool:
        """Check both partitions: sets the disk-full flag and ``clean_immediately``; True when
        either is above ``disk_max_used_space_ratio`` (or cannot be measured)."""
        self.clean_immediately = False
        worst: tuple[str, float] | None = None
        to_delete = False
        ratios = self._ratios()
        for where, ratio in ratios:
            if ratio > self.warning_ratio and worst is None:
                worst = (where, ratio)
            if ratio > self.clean_forcibly_ratio:
                self.clean_immediately = True
            if ratio < 0 or ratio > self.max_used_ratio:
                log.info("the disk of the %s is %.1f%% used: reclaiming space", where, ratio * 100)
                to_delete = True
        if worst is not None:
            self._apply_full(worst[0], worst[1], True)
        else:
            self._apply_full(*ratios[0], False)
        return to_delete

    def run(self) -> int:
        """One pass; returns how many files were deleted."""
        deleted = 0
        timeup = self.is_time_to_delete()
        space_full = self.is_space_to_delete()
        manual = self.manual_runs > 0
        if timeup or space_full or manual:
            if manual:
                self.manual_runs -= 1
            at_once = self.clean_file_forcibly_enable_now()
            keep_from = self.tiered_below() if self.tiered_below is not None else None
            deleted = self.queue.delete_expired_files_by_time(
                self.reserved_ms,
                self.delete_interval_ms,
                self.forcibly_ms,
                at_once,
                self.sleep,
                keep_from=keep_from,
            )
            if deleted:
                self.deleted_files += deleted
                log.info(
                    "deleted %d commit-log file(s) (time %s, space %s, manual %s, at once %s)",
                    deleted,
                    timeup,
                    space_full,
                    manual,
                    at_once,
                )
            elif space_full:
                log.warning("the disk will be full soon, but no commit-log file could be deleted")
        self._redelete_hanged()
        return deleted

    def clean_file_forcibly_enable_now(self) -> bool:
        return self.clean_forcibly_enable and self.clean_immediately

    def _redelete_hanged(self) -> None:
        now = self.clock.now_ms()
        if now - self.last_redelete_ms > self.redelete_ms:
            self.last_redelete_ms = now
            if self.queue.retry_delete_first_file(self.forcibly_ms):
                self.deleted_files += 1


class CleanConsumeQueueService:
    """Deletes consume-queue and index files below the commit log's minimum. CleanService thread."""

    def __init__(
        self,
        consume_queues: ConsumeQueueTable,
        index: IndexService | None,
        min_phys_offset: Callable[[], int],
        *,
        delete_interval_ms: int,
        sleep: Sleep = _no_sleep,
    ) -> None:
        self.consume_queues = consume_queues
        self.index = index
        self.min_phys_offset = min_phys_offset
        self.delete_interval_ms = delete_interval_ms
        self.sleep = sleep
        self.last_min_phys_offset = 0
        self.deleted_files = 0

    def run(self) -> int:
        """One pass; returns how many consume-queue and index files were deleted."""
        min_phys = self.min_phys_offset()
        if min_phys <= self.last_min_phys_offset:
            return 0
        self.last_min_phys_offset = min_phys
        deleted = 0
        for cq in self.consume_queues:
            if cq.pending is not None and cq.max_physic_offset >= min_phys:
                continue  # not opened since the restart: cleaned when first used
            n = cq.delete_expired_files(min_phys)
            if not n:
                cq.correct_min_offset(min_phys)  # the first file stays, its head may be gone
            deleted += n
            if n and self.delete_interval_ms > 0:
                self.sleep(self.delete_interval_ms / 1000)
        if self.index is not None:
            deleted += self.index.delete_expired_files(min_phys)
        if deleted:
            log.info(
                "deleted %d consume-queue / index file(s) below commit-log offset %d",
                deleted,
                min_phys,
            )
        self.deleted_files += deleted
        return deleted


class CleanService(ServiceThread):
    """RocketMQ's cleanFilesPeriodically: the commit log, then the consume queues, every
    ``interval_ms``; ``after_clean`` (the schedule service's offset correction) follows a run
    that deleted something."""

    def __init__(
        self,
        commit_log: CleanCommitLogService,
        consume_queue: CleanConsumeQueueService,
        *,
        interval_ms: int,
        after_clean: Callable[[], None] | None = None,
    ) -> None:
        super().__init__("CleanService")
        self.commit_log = commit_log
        self.consume_queue = consume_queue
        self.interval = interval_ms / 1000
        self.after_clean = after_clean
        self._lock = threading.Lock()  # one pass at a time (the thread, manual callers)
        # pauses between deletions end early when the store shuts down
        commit_log.sleep = consume_queue.sleep = self._pause

    def _pause(self, seconds: float) -> None:
        self._stopped.wait(seconds)

    def run_once(self) -> int:
        """One cleaning pass (the thread, or tests); returns the files deleted."""
        with self._lock:
            return self._pass()

    def _pass(self) -> int:
        deleted = 0
        try:
            deleted += self.commit_log.run()
        except Exception:
            log.exception("commit-log cleaning failed")
        try:
            deleted += self.consume_queue.run()
        except Exception:
            log.exception("consume-queue cleaning failed")
        if deleted and self.after_clean is not None:
            try:
                self.after_clean()
            except Exception:
                log.exception("after-clean hook failed")
        return deleted

    def execute_delete_files_manually(self) -> None:
        self.commit_log.execute_delete_files_manually()
        self.wakeup()

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self.interval)
            if self.stopped:
                break
            self.run_once()
