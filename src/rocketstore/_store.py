"""MessageStore: wires the components together and runs their lifecycle.

It owns the store directory (``lock``), builds the commit log and its services from one
StoreConfig, and exposes RocketMQ's store API. Work is done by the components; this class only
connects them.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from ._allocate import AllocateMappedFileService
from ._clock import SYSTEM_CLOCK, Clock
from ._commit_log import CommitLog
from ._config import StoreConfig
from ._consume_queue import ConsumeQueueTable, FlushConsumeQueueService
from ._errors import StoreClosedError, translate_os_errors
from ._filter import MessageFilter
from ._index import IndexService
from ._lock import StoreLock
from ._mapped_file_queue import MappedFileQueue
from ._message import (
    GetMessageResult,
    Message,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from ._read_api import ReadApi
from ._record import MessageExt
from ._reput import MessageArrivingListener, ReputMessageService
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
        # dispatch and the read side (consume queues, index, reput, reads)
        self.consume_queues = ConsumeQueueTable(
            self.root / "consumequeue", self.config.consume_queue_file_size, clock=clock
        )
        self.index = IndexService(
            self.root / "index",
            slot_num=self.config.max_hash_slot_num,
            index_num=self.config.max_index_num,
            enabled=self.config.message_index_enable,
            clock=clock,
        )
        sync_flush = self.config.flush_disk_type == "SYNC_FLUSH"
        self.reput = ReputMessageService(
            self.commit_log,
            self.consume_queues,
            self.index,
            limit=self._dispatch_limit,
            request_flush=self._request_flush if sync_flush else None,
        )
        self.flush_consume_queue = FlushConsumeQueueService(
            self.consume_queues,
            clock,
            interval_ms=self.config.flush_interval_consume_queue,
            least_pages=self.config.flush_consume_queue_least_pages,
            thorough_interval_ms=self.config.flush_consume_queue_thorough_interval,
        )
        self.reader = ReadApi(
            self.config, self.commit_log, self.consume_queues, self.index,
            known_queue=lambda t, q: (t, q) in self.commit_log.topic_queue_table,
        )
        self._loaded = False
        self._running = False

    def _dispatch_limit(self) -> int:
        """How far dispatch may go: under SYNC_FLUSH only what is flushed; else what readers
        can see (the committed position when write buffers are used)."""
        if self.config.flush_disk_type == "SYNC_FLUSH":
            return self.commit_log.queue.flushed_where
        return self.commit_log.queue.get_max_offset()

    def _request_flush(self, end: int) -> None:
        self.commit_log.flush_service.wait_flushed(end, 0)  # type: ignore[union-attr]

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
            self.consume_queues.load()
            self.consume_queues.recover()
            self._recover()
            dropped = self.consume_queues.truncate_dirty(self.commit_log.max_offset)
            if dropped:
                log.warning("dropped %d consume-queue units past the commit log's end", dropped)
            self.index.load(last_exit_ok=True)
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
        self._catch_up_dispatch()
        if self.allocator is not None:
            self.allocator.start()
        self.commit_log.dispatch_handoff = collections.deque()
        self.commit_log.on_append = self.reput.on_append
        self.commit_log.start()
        self.reput.start()
        self.flush_consume_queue.start()
        if self.config.broker_role == "SLAVE":
            self.commit_log.set_refusal(
                "slave", (PutMessageStatus.SERVICE_NOT_AVAILABLE, "a slave does not accept writes")
            )
        self._running = True

    def shutdown(self) -> None:
        """Stop the services, flush everything and release the directory."""
        if not self._loaded:
            return
        self._running = False
        self.commit_log.shutdown()
        self.reput.stop()  # dispatches what is left first
        self.commit_log.dispatch_handoff = None
        self.commit_log.on_append = None
        self.flush_consume_queue.stop()  # flushes every queue
        self.index.shutdown()
        self.consume_queues.shutdown()
        if self.allocator is not None:
            self.allocator.stop()
        self.commit_log.queue.shutdown(0)
        if self.pool is not None:
            self.pool.destroy()
        self._lock.release()
        self._loaded = False

    close = shutdown

    def _catch_up_dispatch(self) -> None:
        """Dispatch what the consume queues miss (from the end of their last unit), then take
        the topic-queue table from the queues and correct their minimums."""
        cl = self.commit_log
        self.reput.reput_from_offset = max(self.consume_queues.max_physic_offset(), cl.min_offset, 0)
        behind = self.reput.dispatch_behind_bytes()
        if behind:
            log.info("dispatching %d bytes of the commit log from %d", behind, self.reput.reput_from_offset)
        self.reput.catch_up()
        table = dict(cl.topic_queue_table)
        table.update(self.consume_queues.offset_table())
        cl.rebuild_topic_queue_table(table)
        self.consume_queues.correct_min_offset(max(cl.min_offset, 0))

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
        """Store one message. Any thread; statuses as RocketMQ's (see PutMessageStatus)."""
        return self.commit_log.put_message(msg)

    def put_messages(self, msgs: Sequence[Message]) -> PutMessageResult:
        """Store a batch (one topic and queue) in one append."""
        return self.commit_log.put_messages(msgs)

    # ---- reading ----------------------------------------------------------------------------

    def look_message_by_offset(self, phys_offset: int, size: int | None = None) -> MessageExt | None:
        """The message stored at ``phys_offset`` in the commit log, or None."""
        self._check_running()
        return self.commit_log.read_message(phys_offset, size)

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Up to ``max_msg_nums`` messages of a queue from logical ``offset`` (RocketMQ's
        statuses and next_begin_offset rules; see ReadApi). Any thread."""
        self._check_running()
        return self.reader.get_message(group, topic, queue_id, offset, max_msg_nums, message_filter)

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**63 - 1
    ) -> QueryMessageResult:
        """Messages of ``topic`` with KEYS token or UNIQ_KEY ``key`` stored within [begin, end]."""
        self._check_running()
        return self.reader.query_message(topic, key, max_num, begin, end)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        self._check_running()
        return self.reader.get_offset_in_queue_by_time(topic, queue_id, timestamp)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        self._check_running()
        return self.reader.get_message_store_timestamp(topic, queue_id, offset)

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int | None = None) -> int:
        self._check_running()
        return self.reader.get_earliest_message_time(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_min_offset_in_queue(topic, queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_max_offset_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reader.get_commit_log_offset_in_queue(topic, queue_id, offset)

    def dispatch_behind_bytes(self) -> int:
        return self.reput.dispatch_behind_bytes()

    def set_message_arriving_listener(self, listener: MessageArrivingListener | None) -> None:
        """Called by the dispatcher for every message entering a consume queue."""
        self.reput.listener = listener

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
