"""MessageStore: wires the components together and runs their lifecycle.

It owns the store directory (``lock``), builds the commit log and its services from one
StoreConfig, and exposes RocketMQ's store API. Work is done by the components; this class only
connects them.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from ._checkpoint import StoreCheckpoint
from ._clock import SYSTEM_CLOCK, Clock
from ._config import StoreConfig
from ._disk import (
    WRITE_FAILED_PREFIX,
    WRITE_INDEX_FILE_ERROR_BIT,
    WRITE_LOGICS_QUEUE_ERROR_BIT,
    DiskUsageProbe,
    RunningFlags,
    disk_used_ratio,
)
from ._durable import fsync_dir, is_disk_full, os_error_cause
from ._errors import (
    IndexWriteError,
    StoreClosedError,
    StoreError,
    StoreIOError,
    translate_os_errors,
)
from ._lock import StoreLock
from .ha import HAService
from .ha._api import Replication
from .ha._auth import OPEN, HAGuard
from .ha._auto_service import AutoSwitchHAService
from .ha._truncate import LogCutter
from .log._allocate import AllocateMappedFileService
from .log._commit_log import CommitLog, InvalidTopicError, deferred_put, validate_topic
from .log._mapped_file import mapped_counters
from .log._mapped_file_queue import MappedFileQueue
from .log._mapping import descriptors_kept
from .log._mapping_lru import (
    FileStatistics,
    MappingLRU,
    default_bound,
    mapping_count,
    max_map_count,
    open_file_count,
    open_files_limits,
)
from .log._message import (
    GetMessageResult,
    Message,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from .log._record import MessageExt, string_to_properties
from .log._transient_pool import TransientStorePool
from .queue._consume_queue import ConsumeQueueTable, FlushConsumeQueueService
from .queue._filter import MessageFilter
from .queue._index import IndexService
from .queue._queue_checkpoint import QueueCheckpointWriter
from .queue._reput import MessageArrivingListener, ReputMessageService
from .read._read_api import ReadApi
from .recovery._loader import CLEAN_VERIFY_BYTES, LoadResult, StoreLoader
from .services._clean import CleanCommitLogService, CleanConsumeQueueService, CleanService
from .services._delay_offset import DelayOffsetFile
from .services._schedule import ScheduleMessageService
from .services._stats import StoreStatistics, StoreStatsService

if TYPE_CHECKING:
    from .log._batch_encode import EncodedBatch

_PUT_OK = PutMessageStatus.PUT_OK
DISPATCH_WAIT_S = 30.0
log = logging.getLogger(__name__)


class MessageStore:
    """RocketMQ's DefaultMessageStore. ``with MessageStore(config) as store:`` loads, recovers
    and starts it, and shuts it down cleanly on exit.

    Thread-safe: puts and reads from any thread.
    """

    def __init__(
        self,
        config: StoreConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        disk_usage: DiskUsageProbe | None = None,
        maintenance: bool = True,
        ha_guard: HAGuard = OPEN,
    ) -> None:
        """``disk_usage``: how full a path's partition is (tests simulate a full disk);
        ``maintenance=False`` runs neither delayed delivery nor retention cleaning (inspection
        tools that must not change a store); ``ha_guard``: who may replicate from it, and who
        it is to its master (authentication of the HA port, see ``ha._auth``)."""
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
                allocate_ahead=self.config.mapped_file_allocate_ahead,
                sync_flush=self.config.flush_disk_type == "SYNC_FLUSH",
                flush_least_pages_when_warm=self.config.flush_least_pages_when_warm_mapped_file,
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
                allocate_ahead=self.config.mapped_file_allocate_ahead,
            ),
            on_flushed=self._on_commit_log_flushed,
        )
        # crash safety: the checkpoint (opened at load) and what the last load found
        self.checkpoint: StoreCheckpoint | None = None
        self.load_result: LoadResult | None = None
        # dispatch and the read side (consume queues, index, reput, reads)
        # consume-queue and index files are mapped on demand, at most this many at once
        self.queue_mappings = MappingLRU(self.config.max_mapped_queue_files or default_bound())
        self.consume_queues = ConsumeQueueTable(
            self.root / "consumequeue",
            self.config.consume_queue_file_size,
            clock=clock,
            lru=self.queue_mappings,
        )
        self.index = IndexService(
            self.root / "index",
            slot_num=self.config.max_hash_slot_num,
            index_num=self.config.max_index_num,
            enabled=self.config.message_index_enable,
            clock=clock,
            on_flushed=self._on_index_flushed,
            lru=self.queue_mappings,
        )
        sync_flush = self.config.flush_disk_type == "SYNC_FLUSH"
        self.reput = ReputMessageService(
            self.commit_log,
            self.consume_queues,
            self.index,
            limit=self._dispatch_limit,
            request_flush=self._request_flush if sync_flush else None,
        )
        self.reput.on_error = self._on_dispatch_error
        self.flush_consume_queue = FlushConsumeQueueService(
            self.consume_queues,
            clock,
            interval_ms=self.config.flush_interval_consume_queue,
            least_pages=self.config.flush_consume_queue_least_pages,
            thorough_interval_ms=self.config.flush_consume_queue_thorough_interval,
            on_flushed=self._on_queues_flushed,
        )
        self.queue_checkpoint = QueueCheckpointWriter(
            self.root,
            self.config.consume_queue_file_size,
            dispatched=lambda: self.reput.reput_from_offset,
            states=self.consume_queues.states,
            log_end=lambda: self.commit_log.max_offset,
            timestamps=self._checkpoint_timestamps,
            record_time=self._record_time,
            verify_bytes=CLEAN_VERIFY_BYTES,
        )
        self.flush_consume_queue.checkpoint = self.queue_checkpoint
        self.reader = ReadApi(
            self.config,
            self.commit_log,
            self.consume_queues,
            self.index,
            known_queue=lambda t, q: (t, q) in self.commit_log.topic_queue_table,
        )
        # delayed delivery, retention, statistics
        self.maintenance = maintenance
        self.running_flags = RunningFlags()
        probe = disk_usage or disk_used_ratio
        logics_path = str(self.root / "consumequeue")
        self.schedule = ScheduleMessageService(
            levels_ms=self.config.delay_levels_ms(),
            consume_queues=self.consume_queues,
            read_message=self.commit_log.read_message,
            put_message=self.put_message,
            flushed_offset=lambda: self.commit_log.queue.flushed_where,
            offset_file=DelayOffsetFile(self.root / "config"),
            clock=clock,
            persist_interval_ms=self.config.flush_delay_offset_interval,
        )
        self.clean_commit_log = CleanCommitLogService(
            self.config,
            self.commit_log.queue,
            logics_path=logics_path,
            clock=clock,
            disk_usage=probe,
            flags=self.running_flags,
            refuse=self.commit_log.set_refusal,
        )
        self.clean_consume_queue = CleanConsumeQueueService(
            self.consume_queues,
            self.index,
            lambda: self.commit_log.min_offset,
            delete_interval_ms=self.config.delete_consume_queue_files_interval,
        )
        self.cleaner = CleanService(
            self.clean_commit_log,
            self.clean_consume_queue,
            interval_ms=self.config.clean_resource_interval,
            after_clean=self.schedule.correct_offsets,
        )
        self.stats = StoreStatsService(
            clock,
            self.commit_log,
            self.reader,
            dispatch_behind=self.reput.dispatch_behind_bytes,
            disk_usage=probe,
            logics_path=logics_path,
            flags=self.running_flags,
            schedule_progress=self.schedule.progress,
        )
        # replication: the master's HA port and SYNC_MASTER waits, or the slave's client; in
        # controller mode AutoSwitch HA, the role given at run time (see on_master, on_slave)
        self.controller_mode = self.config.enable_controller_mode
        self.ha: Replication
        self._switch: AutoSwitchHAService | None = None
        if self.controller_mode:
            self.ha = self._switch = AutoSwitchHAService(
                self.config,
                self.commit_log,
                clock,
                LogCutter(
                    self.commit_log,
                    self.reput,
                    self.consume_queues,
                    self.index,
                    on_cut=self.queue_checkpoint.invalidate,
                ),
                on_append=self._dispatch_confirmed,
                set_refusal=self.commit_log.set_refusal,
                guard=ha_guard,
            )
            self._switch.hooks = self
        else:
            self.ha = HAService(self.config, self.commit_log, clock, ha_guard)
        self._is_master = self.config.broker_role != "SLAVE" and not self.controller_mode
        self._monotonic = clock.monotonic
        self._loaded = False
        self._running = False

    def _dispatch_inline(self) -> bool:
        """Dispatch in the put path when consumers may see a record as soon as it is written:
        ASYNC_FLUSH without write buffers on a master (``dispatch_in_put_path``)."""
        return (
            self.config.dispatch_in_put_path
            and not self.controller_mode
            and self.config.flush_disk_type == "ASYNC_FLUSH"
            and self.pool is None
            and self.config.broker_role != "SLAVE"
        )

    def _dispatch_limit(self) -> int:
        """How far dispatch may go: under SYNC_FLUSH only what is flushed; else what readers
        can see (the committed position when write buffers are used); in controller mode no
        further than the confirm offset (what the SyncStateSet holds: consumers see only what
        survives a failover)."""
        if self.config.flush_disk_type == "SYNC_FLUSH":
            limit = self.commit_log.queue.flushed_where
        else:
            limit = self.commit_log.queue.get_max_offset()
        switch = self._switch
        if switch is not None:
            return min(limit, switch.confirm_offset())
        return limit

    def _request_flush(self, end: int) -> None:
        self.commit_log.flush_service.request_flush(end)  # type: ignore[union-attr]

    def _on_dispatch_error(self, exc: BaseException | None) -> None:
        """Dispatch thread: dispatch into the consume queues and index failed (a full disk
        gives their files no blocks) or works again (None). Meanwhile the store is not
        writable (RunningFlags WRITE_LOGICS_QUEUE_ERROR, or WRITE_INDEX_FILE_ERROR when the
        index failed; puts answered SERVICE_NOT_AVAILABLE); reads of what was dispatched go on."""
        if exc is None:
            self.running_flags.set_bit(WRITE_LOGICS_QUEUE_ERROR_BIT, False)
            self.running_flags.set_bit(WRITE_INDEX_FILE_ERROR_BIT, False)
        elif isinstance(exc, IndexWriteError):
            self.running_flags.set_bit(WRITE_INDEX_FILE_ERROR_BIT, True)
        else:
            self.running_flags.set_bit(WRITE_LOGICS_QUEUE_ERROR_BIT, True)
        if exc is None:
            refusal = None
        elif is_disk_full(exc):
            refusal = (
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                f"the store is not writable: dispatch into the consume queues and index failed "
                f"({exc}); writes resume when it works again",
            )
        else:  # another cause than space: named as it is (open files, mappings, ...)
            refusal = (
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                f"{WRITE_FAILED_PREFIX}{os_error_cause(exc)} (dispatch into the consume queues "
                f"and index failed: {exc}); writes resume when it works again",
            )
        self.commit_log.set_refusal("dispatch", refusal)

    # ---- checkpoint updates (flush and dispatch threads) -----------------------------------

    def _on_commit_log_flushed(self, store_timestamp: int) -> None:
        """The commit log is durable up to a message stored at ``store_timestamp``."""
        cp = self.checkpoint
        if cp is not None and store_timestamp > cp.physic_msg_timestamp:
            cp.physic_msg_timestamp = store_timestamp

    def _on_queues_flushed(self, store_timestamp: int) -> None:
        """Every consume queue is durable up to a message stored at ``store_timestamp``."""
        cp = self.checkpoint
        if cp is not None:
            if store_timestamp > cp.logics_msg_timestamp:
                cp.logics_msg_timestamp = store_timestamp
            cp.flush()

    def _checkpoint_timestamps(self) -> tuple[int, int]:
        cp = self.checkpoint
        return (cp.physic_msg_timestamp, cp.logics_msg_timestamp) if cp is not None else (0, 0)

    def _record_time(self, phys_offset: int) -> int:
        """Store timestamp of the record at ``phys_offset``, -1 when none is there."""
        try:
            r = self.commit_log.check_at(phys_offset, check_crc=False)
        except StoreError:
            return -1
        return -1 if isinstance(r, int) else r.store_timestamp

    def _on_index_flushed(self, store_timestamp: int) -> None:
        cp = self.checkpoint
        if cp is not None:
            if store_timestamp > cp.index_msg_timestamp:
                cp.index_msg_timestamp = store_timestamp
            cp.flush()

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
            self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
            self.reput.checkpoint = self.checkpoint
            self.reput.physic_at_dispatch = (
                self.config.broker_role == "SLAVE"
                or self.controller_mode
                or self.config.flush_disk_type == "SYNC_FLUSH"
            )
            self.load_result = StoreLoader(
                self.config,
                self.root,
                commit_log=self.commit_log,
                consume_queues=self.consume_queues,
                index=self.index,
                reput=self.reput,
                checkpoint=self.checkpoint,
                clock=self.clock,
            ).load()
            # record starts the next clean restart's tail check may start from
            self.queue_checkpoint.boundary(self.load_result.scan_from)
            self.queue_checkpoint.boundary(self.load_result.max_phys_offset)
            self.schedule.load()
            self._note_mapping_limits()
        except BaseException:
            if self.checkpoint is not None:
                self.checkpoint.shutdown()
                self.checkpoint = None
            self._lock.release()
            raise
        self._loaded = True
        return True

    def _note_mapping_limits(self) -> None:
        """One line when the store has more consume-queue files than may be mapped at once
        (informational: idle ones are unmapped and mapped again when read)."""
        files = self.consume_queues.file_count()
        bound = self.queue_mappings.bound
        if files > bound:
            soft, _hard = open_files_limits()
            log.warning(
                "%d consume-queue files, at most %d mapped at once (vm.max_map_count %d, open "
                "files %s, max_mapped_queue_files %d): idle ones are unmapped and mapped again "
                "when read",
                files,
                bound,
                max_map_count(),
                "unlimited" if soft < 0 else soft,
                self.config.max_mapped_queue_files,
            )

    def start(self) -> None:
        if self._running:
            return
        if not self._loaded:
            self.load()
        self._catch_up_dispatch()
        self._create_abort_file()
        if self.allocator is not None:
            self.allocator.start()
        wake = self._flush_wakeup()
        if self._dispatch_inline():
            self.reput.inline = True
            self.reput.hand_over_file_work = not self.config.queue_files_in_put_path
            self.commit_log.inline_dispatch = self.reput.dispatch_inline
            self.commit_log.inline_plain = self.reput.dispatch_plain
            self.commit_log.on_append = wake
        else:
            self.commit_log.dispatch_handoff = collections.deque()
            on_append = self.reput.on_append
            if wake is not None:
                dispatch_wake = on_append

                def on_append() -> None:
                    dispatch_wake()
                    wake()

            self.commit_log.on_append = on_append
        self.commit_log.wire_dispatch(self.reput)
        self.commit_log.start()
        self.reput.start()
        self.flush_consume_queue.start()
        self.clean_commit_log.check_disk()  # a full disk refuses puts from the first one
        self.stats.start()
        if self.maintenance:
            self.cleaner.start()
            if self._is_master:
                self.schedule.start()
        if self.controller_mode:
            self.reput.idle_at_limit = True
            self.reader.slave = True
        elif self.config.broker_role == "SLAVE":
            self.commit_log.set_refusal(
                "slave", (PutMessageStatus.SERVICE_NOT_AVAILABLE, "a slave does not accept writes")
            )
        self._running = True
        if self.maintenance:
            self._start_replication()

    # ---- controller mode: the role given at run time (AutoSwitchHAService calls these) -------

    def on_master(self) -> None:
        """This store became the master: reads answer as a master's, delayed delivery runs.
        The HA service's role-change thread."""
        self._is_master = True
        self.reader.slave = False
        self.reput.physic_at_dispatch = self.config.flush_disk_type == "SYNC_FLUSH"
        self._wait_dispatched(DISPATCH_WAIT_S)
        if self.maintenance and self._running:
            self.schedule.start()

    def on_slave(self) -> None:
        """This store became a slave: delayed delivery stops (its progress saved), reads
        answer as a slave's. The HA service's role-change thread."""
        was_master, self._is_master = self._is_master, False
        self.reader.slave = True
        self.reput.physic_at_dispatch = True
        if self.maintenance and was_master:
            self.schedule.stop()
            self.schedule.persist()

    def _wait_dispatched(self, timeout: float) -> None:
        """Let dispatch reach its limit (a new master's consume queues hold everything its
        confirm offset covers before consumers are sent to it). Bounded by ``timeout``."""
        deadline = self._monotonic() + timeout
        reput = self.reput
        while reput.reput_from_offset < self._dispatch_limit() and reput.running:
            if self._monotonic() > deadline:
                log.warning(
                    "%s: dispatch at %d has not reached %d; going on",
                    self.root,
                    reput.reput_from_offset,
                    self._dispatch_limit(),
                )
                return
            reput.wakeup()
            time.sleep(0.005)

    def _dispatch_confirmed(self) -> None:
        """The confirm offset moved (controller mode; an HA thread): dispatch what it now
        covers in this thread, which holds the interpreter lock already, rather than wake the
        dispatch thread for it; when that thread is dispatching, make sure it goes on."""
        reput = self.reput
        if not reput.dispatch_lock.acquire(blocking=False):
            reput.wakeup()
            return
        try:
            if reput.failing is None and not reput.inline:
                reput.do_reput()
        except Exception:
            reput.wakeup()  # the dispatch thread retries and reports it
        finally:
            reput.dispatch_lock.release()
        if reput.reput_from_offset < self._dispatch_limit():
            reput.on_append()

    @property
    def is_master(self) -> bool:
        """Whether this store takes writes as a master (its configured role, or in controller
        mode the role the controller gave it)."""
        return self._is_master

    def _flush_wakeup(self) -> Callable[[], None] | None:
        """What a put wakes under ASYNC_FLUSH when ``flush_commit_log_timed`` is off (as
        RocketMQ's puts wake it): the commit service with write buffers, else the flusher."""
        if self.config.flush_disk_type != "ASYNC_FLUSH" or self.config.flush_commit_log_timed:
            return None
        cl = self.commit_log
        return (
            cl.commit_service.wakeup if cl.commit_service is not None else cl.flush_service.wakeup
        )

    def _start_replication(self) -> None:
        """Start HA; a SYNC_MASTER's puts wait for a slave from now on. Shuts the store down
        again when the HA port cannot be bound."""
        stage = self.ha.transfer
        sync = self.config.broker_role == "SYNC_MASTER" or self.controller_mode
        if sync and stage not in self.commit_log.put_stages:
            self.commit_log.add_put_stage(stage)
        try:
            self.ha.start()
        except BaseException:
            self.shutdown()
            raise

    def shutdown(self) -> None:
        """Stop the services, flush everything and release the directory."""
        if not self._loaded:
            return
        self._running = False
        self.ha.shutdown()  # first: a slave stops appending, a master stops sending
        self.schedule.stop()
        self.cleaner.stop()
        self.stats.stop()
        self.commit_log.shutdown()
        if self.maintenance and self._is_master:
            self.schedule.persist()  # after the commit log's last flush: all progress is safe
        with self.commit_log.put_lock:  # under which the dispatch thread takes dispatch back
            self.commit_log.inline_dispatch = None
            self.commit_log.inline_plain = None
            self.reput.inline = False
            self.reput.handed_over = False
        self.reput.stop()  # dispatches what is left first
        self.commit_log.dispatch_handoff = None
        self.commit_log.on_append = None
        self.commit_log.wire_dispatch(None)
        self.flush_consume_queue.stop()  # flushes every queue
        try:
            self.index.shutdown()
        except StoreError:  # derived data: the next load checks the index files anyway
            log.exception("%s: shutting the index down failed", self.root)
        self._finish_checkpoint()
        self.consume_queues.shutdown()
        if self.allocator is not None:
            self.allocator.stop()
        self.commit_log.queue.shutdown(0)
        if self.pool is not None:
            self.pool.destroy()
        self._lock.release()
        self._loaded = False

    def close(self) -> None:
        """``shutdown``."""
        self.shutdown()

    def _catch_up_dispatch(self) -> None:
        """Dispatch whatever the loader left behind (nothing, unless something was written
        between load and start, or a full disk stopped recovery's dispatch), so start returns
        only when dispatch has caught up. On a full disk the store starts not writable and the
        dispatch service goes on when there is space."""
        if self.reput.dispatch_behind_bytes():
            try:
                self.reput.catch_up()
            except StoreIOError as exc:
                if not is_disk_full(exc):
                    raise
                self.reput._failed(exc)
            # the queues' ends, and beyond them what the commit log holds (not dispatched yet)
            table = self.consume_queues.offset_table()
            if self.reput.failing is not None:
                table.update(self.reput.queue_ends_ahead())
            self.commit_log.rebuild_topic_queue_table(table)

    @property
    def _abort_path(self) -> Path:
        return self.root / "abort"

    def _create_abort_file(self) -> None:
        """Present while the store runs: its presence at the next load means a crash."""
        with translate_os_errors(f"create {self._abort_path}"):
            fd = os.open(self._abort_path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)
            fsync_dir(self.root)

    def _finish_checkpoint(self) -> None:
        """Shutdown, after the last flushes: flush the checkpoint; when everything written
        was flushed and dispatched, record the clean end and remove the abort file."""
        cp = self.checkpoint
        if cp is None:
            return
        cl = self.commit_log
        end = cl.max_offset
        # clean when the commit log is durable to its end and nothing writes the queues any
        # more: a dispatch that stopped behind (a failing disk, a full one, too many open
        # files) is caught up by the next load from the queues' ends. Not in controller mode,
        # where dispatch waits for the confirm offset on purpose: abnormal recovery keeps
        # what it had not confirmed out of the queues
        stopped = not (self.reput.join_timed_out or self.flush_consume_queue.join_timed_out)
        dispatched = self.reput.reput_from_offset >= end or not self.controller_mode
        clean = cl.queue.flushed_where >= end and stopped and dispatched
        if clean:
            self._write_queue_checkpoint(end)
            cp.mark_clean(end)
            try:
                with translate_os_errors(f"remove {self._abort_path}"):
                    try:
                        os.unlink(self._abort_path)
                    except FileNotFoundError:
                        pass
                    fsync_dir(self.root)
            except StoreError:  # the rest of the shutdown still runs (the lock released)
                log.exception("%s: removing the abort file failed", self.root)
        else:
            cp.flush()
            log.warning(
                "%s: shut down with the commit log flushed to %d of %d%s; the abort file "
                "stays, the next load recovers abnormally",
                self.root,
                cl.queue.flushed_where,
                end,
                ""
                if stopped and dispatched
                else f", dispatch at {self.reput.reput_from_offset}"
                + ("" if stopped else " (dispatch or the queues' flush still running)"),
            )
        cp.shutdown()
        self.checkpoint = None
        self.reput.checkpoint = None

    def _write_queue_checkpoint(self, end: int) -> None:
        """The per-queue checkpoint of a clean shutdown (queues flushed, dispatch stopped);
        without it the next load reads the queue files (slower, as safe)."""
        try:
            taken = self.queue_checkpoint.take(clean=True)
            self.queue_checkpoint.save(taken._replace(log_end=end))
        except StoreError:
            log.exception("%s: the per-queue checkpoint was not written", self.root)

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
        begin = self._monotonic()
        r = self.commit_log.put_message(msg)
        elapsed = self._monotonic() - begin
        if elapsed >= 0.001:  # faster calls are counted as "[<=0ms]" without more work
            self.stats.note_slow_put(elapsed)
        if r.status is not _PUT_OK and not r.status.ok:
            self.stats.put_failed += 1
        return r

    def put_fields(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: bytes,
        tags_code: int,
        keys: str | None,
        uniq: str | None,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: str | None,
        reconsume_times: int,
        wait: bool,
        deferred: list[Future[PutMessageResult]] | None = None,
    ) -> PutMessageResult:
        """Store one message given as its record's fields (``CommitLog.put_fields`` says what
        the caller guarantees): a broker's plain send, without a ``Message``. Without
        ``deferred`` as ``put_message``; with it as ``put_message_async``, the future of the
        put's waits put into ``deferred`` (nothing when the put is complete) and the append's
        result returned. Any thread."""
        begin = self._monotonic()
        r = self.commit_log.put_fields(
            topic, queue_id, body, properties, tags_code, keys, uniq, flag, sys_flag,
            born_timestamp, born_host, reconsume_times, wait, deferred,
        )  # fmt: skip
        if deferred:
            self._noted_async(deferred[0], begin)
            return r
        return self._noted_batch(r, begin)

    def put_messages(self, msgs: Sequence[Message]) -> PutMessageResult:
        """Store a batch (one topic and queue) in one append."""
        begin = self._monotonic()
        return self._noted_batch(self.commit_log.put_messages(msgs), begin)

    def put_message_async(self, msg: Message) -> Future[PutMessageResult]:
        """Store one message without waiting for the disk (RocketMQ's asyncPutMessage).

        The message is appended at once in the calling thread, exactly as ``put_message``
        appends it; the returned future then completes with what ``put_message`` would have
        returned: under SYNC_FLUSH once a group commit has made it durable (PUT_OK) or
        ``sync_flush_timeout`` has passed (FLUSH_DISK_TIMEOUT), after any put stages (see
        ``CommitLog.add_put_stage``). It is complete on return under ASYNC_FLUSH, with WAIT=false
        and for a refused put (MESSAGE_ILLEGAL, SERVICE_NOT_AVAILABLE, ...). Shutdown completes
        every pending future.

        Any thread, an event loop's included: it never blocks on an fsync (it takes the put
        lock for the append only). From asyncio: ``await asyncio.wrap_future(fut)``. The
        future's callbacks run in the thread that completes it (the group-commit thread, most
        often); they must not block.
        """
        begin = self._monotonic()
        return self._noted_async(deferred_put(self.commit_log.put_message, msg), begin)

    def put_messages_async(self, msgs: Sequence[Message]) -> Future[PutMessageResult]:
        """``put_messages`` as ``put_message_async``: the batch is appended at once (one
        append), the future completes when the batch is durable (SYNC_FLUSH)."""
        begin = self._monotonic()
        return self._noted_async(deferred_put(self.commit_log.put_messages, msgs), begin, len(msgs))

    def _noted_async(
        self, fut: Future[PutMessageResult], begin: float, count: int = 1
    ) -> Future[PutMessageResult]:
        """Statistics of a non-blocking put of ``count`` messages: the batch at once (a
        pending future means the append happened), the latency when the future completes (the
        whole wait, as ``put_message``'s)."""
        if fut.done():
            if fut.exception() is None:
                self._noted_batch(fut.result(), begin)
            return fut
        if count > 1:
            self.stats.note_batch(count)
        fut.add_done_callback(lambda f: self._note_async_latency(f, begin))
        return fut

    def _note_async_latency(self, fut: Future[PutMessageResult], begin: float) -> None:
        """The thread completing a non-blocking put's future."""
        if fut.exception() is None and not fut.result().status.ok:
            self.stats.put_failed += 1
        elapsed = self._monotonic() - begin
        if elapsed >= 0.001:
            self.stats.note_slow_put(elapsed)

    def put_plain_batch(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        tags: Sequence[str | None],
        keys: Sequence[str | None],
    ) -> PutMessageResult:
        """Store plain messages of one topic and queue given column-wise, in one append.

        Row ``i`` is ``bodies[i]`` with the encoded PROPERTIES field ``properties[i]``
        (``name\x01value`` pairs joined by ``\x02``, UTF-8, may be empty) whose TAGS and KEYS
        values are ``tags[i]`` / ``keys[i]`` (None when absent). The caller guarantees that
        they hold no DELAY, UNIQ_KEY or WAIT and that no name or value contains a separator;
        everything else is checked as ``put_messages`` checks it, and the rows are stored as
        ``put_messages`` stores them as Messages (flag, sys flag, reconsume times 0, the
        default born host, born when stored). Encoded column-wise, then appended by
        ``CommitLog.put_encoded_batch``; an IPv6 store host takes ``put_messages``. Needs
        numpy and pyarrow (the spark extra)."""
        begin = self._monotonic()
        return self._noted_batch(
            self._put_plain_batch(topic, queue_id, bodies, properties, tags, keys), begin
        )

    def _put_plain_batch(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        tags: Sequence[str | None],
        keys: Sequence[str | None],
    ) -> PutMessageResult:
        log = self.commit_log
        n = len(bodies)
        if not n or len(properties) != n or len(tags) != n or len(keys) != n:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                error="empty batch or columns of different lengths",
            )
        if len(log.store_host) != 8 or any(b.__class__ is not bytes for b in bodies):
            # an IPv6 store host, or bodies of other types: the Message batch
            return log.put_messages(
                [
                    Message(topic, bytes(b), queue_id, properties=string_to_properties(p.decode()))
                    for b, p in zip(bodies, properties, strict=True)
                ]
            )
        try:
            validate_topic(topic)
        except InvalidTopicError as exc:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=str(exc))
        from .log._batch_encode import encode_plain_rows

        batch = encode_plain_rows(topic, queue_id, bodies, properties, tags, keys, log.store_host)
        return log.put_encoded_batch(batch)

    def put_encoded_batch(self, batch: EncodedBatch) -> PutMessageResult:
        """Store records encoded ahead of the put lock (``_batch_encode.encode_plain_batch``,
        the Spark writer's path). Any thread."""
        begin = self._monotonic()
        return self._noted_batch(self.commit_log.put_encoded_batch(batch), begin)

    def _noted_batch(self, r: PutMessageResult, begin: float) -> PutMessageResult:
        """Statistics of a put (a batch or one message) that started at ``begin``."""
        elapsed = self._monotonic() - begin
        if r.status is not _PUT_OK and not r.status.ok:
            self.stats.put_failed += 1
        if r.msg_count > 1:
            self.stats.note_batch(r.msg_count)
        if elapsed >= 0.001:  # faster calls are counted as "[<=0ms]" without more work
            self.stats.note_slow_put(elapsed)
        return r

    # ---- reading ----------------------------------------------------------------------------

    def recall_timer_message(self, topic: str, uniq_key: str, deliver_ms: int) -> None:
        """Cancel a timer message (RocketMQ 5's recall) before its delivery time: ValueError
        once its time has come. See ScheduleMessageService.recall. Any thread."""
        self._check_running()
        self.schedule.recall(topic, uniq_key, deliver_ms)

    def look_message_by_offset(
        self, phys_offset: int, size: int | None = None
    ) -> MessageExt | None:
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
        begin = self._monotonic()
        r = self.reader.get_message(group, topic, queue_id, offset, max_msg_nums, message_filter)
        elapsed = self._monotonic() - begin
        if elapsed >= 0.001:
            self.stats.note_get(elapsed)
        return r

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

    def get_earliest_message_time(
        self, topic: str | None = None, queue_id: int | None = None
    ) -> int:
        self._check_running()
        return self.reader.get_earliest_message_time(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_min_offset_in_queue(topic, queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_max_offset_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reader.get_commit_log_offset_in_queue(topic, queue_id, offset)

    def is_os_page_cache_busy(self) -> bool:
        """RocketMQ's isOSPageCacheBusy: a put has held the put lock longer than
        ``os_page_cache_busy_timeout_mills`` (puts meanwhile get OS_PAGECACHE_BUSY)."""
        return self.commit_log.is_os_page_cache_busy()

    def dispatch_behind_bytes(self) -> int:
        return self.reput.dispatch_behind_bytes()

    # ---- statistics and maintenance ---------------------------------------------------------

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ's runtime info of the store (string values, RocketMQ's keys), with the
        replication figures (``ha*`` keys: role, slave connections, the lag of each slave in
        bytes; on a slave its master and client state)."""
        info = self.stats.runtime_info()
        info.update(self.ha.runtime_info())
        # free write buffers; Java's Integer.MAX_VALUE when the store writes without them
        free = self.pool.available_count() if self.pool is not None else 2**31 - 1
        info["remainTransientStoreBufferNumbs"] = str(free)
        return info

    def statistics(self) -> StoreStatistics:
        """A frozen, typed snapshot of the store's statistics (``ha``: replication)."""
        return dataclasses.replace(self.stats.statistics(), ha=self.ha.statistics())

    def file_statistics(self) -> FileStatistics:
        """The store's mapped files and the process's open files and mappings, against their
        limits. Any thread (reads /proc: for a scrape, not a hot path)."""
        lru = self.queue_mappings.statistics()
        soft, hard = open_files_limits()
        return FileStatistics(
            queue_files=self.consume_queues.file_count(),
            mapped_queue_files=lru.mapped,
            mapped_queue_files_bound=lru.bound,
            queue_file_evictions=lru.evictions,
            mapped_files=mapped_counters()[0],
            mappings=mapping_count(),
            max_map_count=max_map_count(),
            open_files=open_file_count(),
            open_files_limit=soft,
            open_files_hard_limit=hard,
            descriptors_per_mapping=descriptors_kept(),
        )

    def delete_topic(self, topic: str) -> int:
        """Forget ``topic`` (RocketMQ's cleanUnusedTopic for one topic): its entries leave the
        commit log's topic-queue table (under the put lock), each of its consume queues is
        destroyed (files deleted) and leaves the queue table. Its records stay in the commit log
        until retention deletes them. Returns how many queues were destroyed.

        Any thread (the broker's admin handler, through a thread). Messages of the topic
        dispatched after this start its queues again."""
        with self.commit_log.put_lock:
            table = self.commit_log.topic_queue_table
            for key in [k for k in table if k[0] == topic]:
                del table[key]
            by_id = self.consume_queues.queues.pop(topic, None)
        destroyed = 0
        for cq in (by_id or {}).values():
            cq.destroy()
            destroyed += 1
        return destroyed

    def execute_delete_files_manually(self) -> None:
        """Delete commit-log files older than file_reserved_time in the next 20 cleaning runs,
        whatever the hour (RocketMQ's executeDeleteFilesManually)."""
        self.cleaner.execute_delete_files_manually()

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

    def set_tiered_below(self, covered: Callable[[], int] | None) -> None:
        """Retention deletes only commit-log files that end at or below ``covered()`` (the
        tiered store's offset); None: by age and space alone. Before ``start``."""
        self.clean_commit_log.tiered_below = covered

    def __repr__(self) -> str:
        return f"MessageStore({os.fspath(self.root)!r}, running={self._running})"
