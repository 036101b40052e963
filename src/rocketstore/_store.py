"""MessageStore: wires the components together and runs their lifecycle.

It owns the store directory (``lock``), builds the commit log and its services from one
StoreConfig, and exposes RocketMQ's store API. Work is done by the components; this class only
connects them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from ._allocate import AllocateMappedFileService
from ._clock import SYSTEM_CLOCK, Clock
from ._commit_log import CommitLog
from ._config import StoreConfig
from ._errors import StoreClosedError, translate_os_errors
from ._lock import StoreLock
from ._mapped_file_queue import MappedFileQueue
from ._message import Message, PutMessageResult, PutMessageStatus
from ._record import MessageExt
from ._transient_pool import TransientStorePool

log = logging.getLogger(__name__)


class MessageStore:
    """RocketMQ's DefaultMessageStore. ``with MessageStore(config) as store:`` loads, recovers
    and starts it, and shuts it down cleanly on exit.

    Thread-safe: puts and reads from any thread.
    """

    def __init__(self, config: StoreConfig | None = None, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config or StoreConfig()
        self.clock = clock
        self.root = Path(self.config.store_path_root_dir)
        self._lock = StoreLock(self.root)
        self.pool: TransientStorePool | None = None
        if self.config.transient_store_pool_active:
            self.pool = TransientStorePool(
                self.config.transient_store_pool_size,
                self.config.mapped_file_size_commit_log,
                lock_memory=self.config.mlock_write_buffers,
            )
        self.allocator: AllocateMappedFileService | None = None
        if self.config.allocate_mapped_file_enable:
            self.allocator = AllocateMappedFileService(
                pool=self.pool,
                warm=self.config.warm_mapped_file_enable,
                warm_min_size=self.config.mapped_file_size_commit_log,
                fast_fail_if_no_buffer=self.config.fast_fail_if_no_buffer_in_store_pool,
                clock=clock,
            )
        self.commit_log = CommitLog(
            self.config,
            clock,
            MappedFileQueue(
                self.config.commit_log_dir,
                self.config.mapped_file_size_commit_log,
                allocator=self.allocator,
                pool=self.pool,
                clock=clock,
            ),
        )
        self._loaded = False
        self._running = False

    # ---- lifecycle --------------------------------------------------------------------------

    def load(self) -> bool:
        """Take ownership of the directory, map the files and recover. Idempotent."""
        if self._loaded:
            return True
        with translate_os_errors(f"create {self.root}"):
            self.root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            if self.pool is not None:
                self.pool.init()
            self.commit_log.queue.load()
            self._recover()
        except BaseException:
            self._lock.release()
            raise
        self._loaded = True
        return True

    def _recover(self) -> None:
        """Find the end of the commit log (CRC-checked) and rebuild the queue offset table."""
        queue = self.commit_log.queue
        table: dict[tuple[str, int], int] = {}
        end = 0
        for mf in queue.files:
            pos, requests, _blank = self.commit_log.scan_file(
                mf, 0, self.config.check_crc_on_recover
            )
            for r in requests:
                if r.sys_flag & 0xC in (0, 0x8):
                    table[(r.topic, r.queue_id)] = r.queue_offset + 1
            end = mf.from_offset + pos
            if pos < mf.file_size:
                break
        queue.set_flushed_where(end)
        for mf in queue.files:
            if mf.from_offset <= end < mf.from_offset + mf.file_size:
                mf.set_positions(end - mf.from_offset)
        removed = queue.truncate_dirty_files(end)
        if removed:
            log.warning("recovery removed commit-log files past %d: %s", end, removed)
        self.commit_log.rebuild_topic_queue_table(table)

    def start(self) -> None:
        if self._running:
            return
        if not self._loaded:
            self.load()
        if self.allocator is not None:
            self.allocator.start()
        self.commit_log.start()
        self._running = True

    def shutdown(self) -> None:
        """Stop the services, flush everything and release the directory."""
        if not self._loaded:
            return
        self._running = False
        self.commit_log.shutdown()
        if self.allocator is not None:
            self.allocator.stop()
        self.commit_log.queue.shutdown(0)
        if self.pool is not None:
            self.pool.destroy()
        self._lock.release()
        self._loaded = False

    close = shutdown

    def __enter__(self) -> MessageStore:
        self.load()
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._running

    def _check_running(self) -> None:
        if not self._running:
            raise StoreClosedError("the message store is not running")

    # ---- writing ----------------------------------------------------------------------------

    def put_message(self, msg: Message) -> PutMessageResult:
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="store not running")
        if self.config.broker_role == "SLAVE":
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, error="a slave does not accept writes"
            )
        return self.commit_log.put_message(msg)

    def put_messages(self, msgs: Sequence[Message]) -> PutMessageResult:
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="store not running")
        if self.config.broker_role == "SLAVE":
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, error="a slave does not accept writes"
            )
        return self.commit_log.put_messages(msgs)

    # ---- reading ----------------------------------------------------------------------------

    def look_message_by_offset(self, phys_offset: int, size: int | None = None) -> MessageExt | None:
        """The message stored at ``phys_offset`` in the commit log, or None."""
        self._check_running()
        return self.commit_log.read_message(phys_offset, size)

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    def get_min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    def get_max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    def flushed_phy_offset(self) -> int:
        return self.commit_log.queue.flushed_where

    def __repr__(self) -> str:
        return f"MessageStore({os.fspath(self.root)!r}, running={self._running})"
