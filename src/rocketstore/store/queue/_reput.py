"""ReputMessageService: follows the commit log and dispatches every record.

From ``reput_from_offset`` to the dispatch limit (the flushed position under SYNC_FLUSH, the
committed position with write buffers, else the written end) each message goes to:

- its consume queue, when its transaction type is none or commit;
- the index (keys and UNIQ_KEY), unless index building is off;
- the MessageArrivingListener ``(topic, queue_id, next_offset, tags_code, store_timestamp)``,
  which wakes long polls.

The put path leaves a DispatchRequest per stored message in ``commit_log.dispatch_handoff``;
while those line up with ``reput_from_offset`` nothing is parsed. Otherwise (after a restart,
at a BLANK, when the handoff is off) records are read back from the file and checked.

The service works in batches: it drains everything there is, then sleeps about a millisecond,
so it competes with producers for the interpreter lock once per batch, not once per message.
When the commit log stays idle it sleeps longer and is woken by the next append.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._durable import is_disk_full, os_error_cause
from .._errors import CorruptRecordError, IndexWriteError, StoreError, StoreIOError
from .._service import ServiceThread
from ..log._record import (
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_COMMIT_TYPE,
    BatchDispatch,
    DispatchRequest,
)
from ._consume_queue import ConsumeQueueTable
from ._unit_write import put_next_unit

if TYPE_CHECKING:
    from .._checkpoint import StoreCheckpoint
    from ..log._commit_log import CommitLog
    from ._index import IndexService

log = logging.getLogger(__name__)

MessageArrivingListener = Callable[[str, int, int, int, int], None]
"""(topic, queue id, next logical offset, tags code, store timestamp)."""

BUSY_WAIT_S = 0.001
IDLE_WAIT_S = 0.1
IDLE_ROUNDS = 50
MAX_BATCH = 4096


def goes_to_queue(sys_flag: int) -> bool:
    """Whether a record with ``sys_flag`` is put in its consume queue: a transaction type of
    none or commit (a prepared or rolled-back transaction message is not)."""
    tran = sys_flag & SYSFLAG_TRANSACTION_MASK
    return tran == 0 or tran == TRANSACTION_COMMIT_TYPE


class ReputMessageService(ServiceThread):
    def __init__(
        self,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueTable,
        index: IndexService | None,
        *,
        listener: MessageArrivingListener | None = None,
        limit: Callable[[], int] | None = None,
        request_flush: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__("ReputMessageService")
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index
        self.listener = listener
        self.reput_from_offset = 0
        self.inline = False  # the put path dispatches (see dispatch_inline)
        # inline dispatch handed over to the thread for file work (a queue to make, open or
        # extend): the thread hands it back once it has caught up with the log
        self.handed_over = False
        self.handovers = 0
        self.hand_over_file_work = True  # False: the put path does the file work too
        self.rounds = 0  # the service thread's rounds (each one takes the interpreter lock)
        self._limit = limit or commit_log.queue.get_max_offset
        self._request_flush = request_flush
        self._idle = False
        self.dispatched = 0
        self.parsed = 0
        # checkpoint: the consume queues' dispatch time is kept in
        # consume_queues.last_store_timestamp (made durable by the queue flush); on a slave and
        # under SYNC_FLUSH (dispatch never passes the flushed position) dispatch also moves
        # the checkpoint's physic time, which no commit-log flush of a slave would
        self.checkpoint: StoreCheckpoint | None = None
        self.physic_at_dispatch = False
        # told when dispatch starts failing (the error) and when it works again (None): the
        # store stops taking writes meanwhile; reads of what was dispatched go on
        self.on_error: Callable[[BaseException | None], None] | None = None
        self.failing: BaseException | None = None
        # held while a batch is dispatched: a cut of the log (controller mode) takes it to
        # pause dispatch
        self.dispatch_lock = threading.Lock()
        # idle when dispatch reached its limit, not the log's end (controller mode: the
        # confirm offset; whoever moves the limit wakes the service)
        self.idle_at_limit = False

    # ---- progress ---------------------------------------------------------------------------

    def dispatch_behind_bytes(self) -> int:
        """Bytes written to the commit log and not dispatched yet."""
        return max(0, self.commit_log.max_offset - self.reput_from_offset)

    def on_append(self) -> None:
        """Set as ``commit_log.on_append``: wakes the service only when it sleeps long."""
        if self._idle:
            self._idle = False
            self.wakeup()

    # ---- dispatching ------------------------------------------------------------------------

    def dispatch(self, req: DispatchRequest | BatchDispatch) -> None:
        """Send one record (or a batch put's records) to its consume queue, the index and the
        listener. Dispatcher thread."""
        if isinstance(req, BatchDispatch):
            self._dispatch_batch(req)
            return
        # unpacking is cheaper than NamedTuple attribute access, and this runs per message
        (
            topic,
            queue_id,
            phys,
            size,
            tags_code,
            store_ts,
            queue_offset,
            keys,
            uniq,
            sys_flag,
            _prepared,
        ) = req
        in_queue = goes_to_queue(sys_flag)
        if in_queue:
            cq = self.consume_queues.find_or_create(topic, queue_id)
            if not cq.put_unit(phys, size, tags_code, queue_offset):
                raise CorruptRecordError(
                    f"could not write the consume-queue unit of {topic}/{queue_id} "
                    f"offset {queue_offset}"
                )
            self.consume_queues.last_store_timestamp = store_ts
            if self.physic_at_dispatch and self.checkpoint is not None:
                self.checkpoint.physic_msg_timestamp = store_ts
        index = self.index
        if index is not None and (keys or uniq or not index.files):
            try:
                index.build_index(req)
            except StoreIOError as exc:
                raise IndexWriteError(exc.errno, exc.strerror) from exc
        listener = self.listener
        if listener is not None and in_queue:
            try:
                listener(topic, queue_id, queue_offset + 1, tags_code, store_ts)
            except Exception:
                log.exception("message arriving listener failed")

    def _dispatch_batch(self, b: BatchDispatch) -> None:
        """A batch put: its units written in one go, keys indexed, the listener told once."""
        topic, queue_id, first_qoff, store_ts = (
            b.topic,
            b.queue_id,
            b.first_queue_offset,
            b.store_timestamp,
        )
        cq = self.consume_queues.find_or_create(topic, queue_id)
        if not cq.put_units(b.offsets, b.sizes, b.tags_codes, first_qoff):
            raise CorruptRecordError(
                f"could not write the consume-queue units of {topic}/{queue_id} "
                f"offsets {first_qoff}..{first_qoff + len(b.offsets) - 1}"
            )
        self.consume_queues.last_store_timestamp = store_ts
        if self.physic_at_dispatch and self.checkpoint is not None:
            self.checkpoint.physic_msg_timestamp = store_ts
        index = self.index
        if index is not None:
            try:
                self._index_batch(index, b)
            except StoreIOError as exc:
                raise IndexWriteError(exc.errno, exc.strerror) from exc
        listener = self.listener
        if listener is not None:
            try:
                listener(topic, queue_id, first_qoff + len(b.offsets), b.tags_codes[-1], store_ts)
            except Exception:
                log.exception("message arriving listener failed")

    @staticmethod
    def _index_batch(index: IndexService, b: BatchDispatch) -> None:
        if not b.indexed and not b.key_values and not index.files:  # makes the first file
            first = DispatchRequest(
                b.topic, b.queue_id, b.offsets[0], b.sizes[0], b.tags_codes[0],
                b.store_timestamp, b.first_queue_offset, None, None, 0, 0,
            )  # fmt: skip
            index.build_index(first)
        for r in b.indexed:
            index.build_index(r, write_header=False)
        if b.key_values:
            index.build_index_many(b.topic, b.key_offsets, b.key_values, b.store_timestamp)
        elif b.indexed:
            index.write_last_header()

    def dispatch_plain(
        self,
        topic: str,
        queue_id: int,
        phys: int,
        size: int,
        tags_code: int,
        store_ts: int,
        queue_offset: int,
    ) -> None:
        """``dispatch_inline`` of the commonest record, given field by field: no KEYS, no
        UNIQ_KEY, transaction type none (nothing for the index). Put lock held.

        The unit goes to its queue with ``put_unit``, as ``dispatch`` writes it; a queue not
        made yet or needing file work first (handed to the thread there), a record after a
        BLANK, the index's first file, or a unit ``put_unit`` refuses (which ``dispatch`` then
        reports) take the general path.
        """
        index = self.index
        # the general path is the short branch: a long jump (EXTENDED_ARG) after a comparison
        # keeps CPython 3.11 from specialising it, and every put pays for that
        if (
            phys != self.reput_from_offset
            or not self.inline
            or (index is not None and not index.files)
        ):
            self._dispatch_request(topic, queue_id, phys, size, tags_code, store_ts, queue_offset)
            return
        table = self.consume_queues
        by_id = table.queues.get(topic)  # table.find(topic, queue_id), without the call
        cq = by_id.get(queue_id) if by_id is not None else None
        try:
            done = cq is not None and (
                put_next_unit(cq, phys, size, tags_code, queue_offset)
                or (
                    (not self.hand_over_file_work or cq.takes_unit_in_place())
                    and cq.put_unit(phys, size, tags_code, queue_offset)
                )
            )
        except StoreError:
            done = False  # the general path reports it and hands over to the thread
        if not done or cq is None:
            self._dispatch_request(topic, queue_id, phys, size, tags_code, store_ts, queue_offset)
            return
        if not cq.flush_pending:
            cq.mark_written()
        table.last_store_timestamp = store_ts
        if self.physic_at_dispatch and self.checkpoint is not None:
            self.checkpoint.physic_msg_timestamp = store_ts
        self.reput_from_offset = phys + size
        self.dispatched += 1
        listener = self.listener
        if listener is not None:
            try:
                listener(topic, queue_id, queue_offset + 1, tags_code, store_ts)
            except Exception:
                log.exception("message arriving listener failed")

    def _dispatch_request(
        self,
        topic: str,
        queue_id: int,
        phys: int,
        size: int,
        tags_code: int,
        store_ts: int,
        queue_offset: int,
    ) -> None:
        """``dispatch_plain``'s general path: the record as a DispatchRequest."""
        req = DispatchRequest(
            topic, queue_id, phys, size, tags_code, store_ts, queue_offset, None, None, 0, 0
        )
        self.dispatch_inline(req)

    def dispatch_inline(self, req: DispatchRequest | BatchDispatch) -> None:
        """Dispatch a record (or batch) in the put path. Put lock held, the record readable.

        Used when nothing must be held back from consumers (ASYNC_FLUSH, no write buffers):
        the record goes to its consume queue at once, with no hand-off to another thread and
        no second thread taking the interpreter lock for it. Should a dispatch fail, inline
        dispatch is switched off and the service thread takes over from this record, reading
        it back from the file.
        """
        if not self.inline:
            return
        start = req[2]
        offset = self.reput_from_offset
        if start != offset:
            cl = self.commit_log
            if start % cl.file_size == 0 and cl.roll_next_file(offset) == start:
                offset = start  # the previous file ended with a BLANK record: step over it
            else:
                log.error(
                    "record at %d does not follow the dispatched end %d; the dispatch thread "
                    "takes over",
                    start,
                    offset,
                )
                self.inline = False
                self.wakeup()
                return
        if self.hand_over_file_work and self._needs_file_work(req):
            # making, opening or extending a queue's files (directories, a file, its mapping,
            # a check against the log after a restart) would keep the put's answer waiting:
            # the thread dispatches from this record, and hands dispatch back when caught up
            self.inline = False
            self.handed_over = True
            self.handovers += 1
            self.wakeup()
            return
        try:
            self.dispatch(req)
        except OSError as exc:  # a full disk, a limit: the thread retries and reports it
            log.info(
                "dispatch at %d failed: %s (%s); the dispatch thread takes over",
                start,
                os_error_cause(exc),
                exc,
            )
            self.inline = False
            self.wakeup()
            return
        except Exception:
            log.exception("dispatch at %d failed; the dispatch thread takes over", start)
            self.inline = False
            self.wakeup()
            return
        self.reput_from_offset = start + req[3]
        self.dispatched += 1

    def _needs_file_work(self, req: DispatchRequest | BatchDispatch) -> bool:
        """Whether dispatching ``req`` into its consume queue would first make, open or map a
        file (see ``ConsumeQueue.takes_unit_in_place``); never for a record that goes to no
        queue (a prepared or rolled-back transaction message)."""
        if isinstance(req, BatchDispatch):
            return not self.consume_queues.takes_unit_in_place(req.topic, req.queue_id)
        sys_flag = req[9]
        return goes_to_queue(sys_flag) and not self.consume_queues.takes_unit_in_place(
            req[0], req[1]
        )

    def _take_back(self) -> bool:
        """Give dispatch back to the put path after a hand-over, once everything written is
        dispatched: checked again under the put lock, so no put slips between the two. The
        put path must still be wired for it (not after shutdown began)."""
        cl = self.commit_log
        if self.reput_from_offset != cl.max_offset:
            return False
        with cl.put_lock:
            if (
                not self.handed_over
                or cl.inline_dispatch is None
                or self.reput_from_offset != cl.max_offset
            ):
                return False
            self.handed_over = False
            self.inline = True
        return True

    def do_reput(self, max_batch: int = MAX_BATCH) -> int:
        """Dispatch up to ``max_batch`` records that are ready; returns how many were handled.

        Nothing to do while the put path dispatches inline."""
        if self.inline:
            return 0
        cl = self.commit_log
        if self.reput_from_offset < cl.min_offset:
            log.warning(
                "reput offset %d is below the commit log's minimum %d; moving up",
                self.reput_from_offset,
                cl.min_offset,
            )
            self.reput_from_offset = cl.min_offset
        limit = self._limit()
        if self._request_flush is not None and cl.max_offset > limit:
            self._request_flush(cl.max_offset)
        handoff = cl.dispatch_handoff
        done = 0
        dispatch = self.dispatch
        offset = self.reput_from_offset
        try:
            while done < max_batch and offset < limit:
                if handoff:
                    req = handoff[0]
                    start = req[2]  # commitlog_offset
                    if start < offset:  # dispatched from the file already
                        handoff.popleft()
                        continue
                    if start == offset:
                        end = start + req[3]  # msg_size
                        if end > limit:
                            break
                        handoff.popleft()
                        dispatch(req)
                        offset = self.reput_from_offset = end
                        done += 1
                        continue
                if not self._from_file(offset, limit):
                    break
                offset = self.reput_from_offset
                done += 1
        finally:
            self.dispatched += done
        return done

    def _from_file(self, offset: int, limit: int) -> bool:
        """Dispatch the record at ``offset`` read back from the file; False to stop here."""
        cl = self.commit_log
        try:
            r = cl.check_at(offset, check_crc=False)
        except CorruptRecordError as exc:
            if cl.incomplete_at(offset):
                return False  # a slave holds part of the record: the rest is on its way
            try:  # the rest of it may have arrived since
                r = cl.check_at(offset, check_crc=False)
            except CorruptRecordError:
                log.error("dispatch stopped at %d: %s", offset, exc)
                return False
        if isinstance(r, int):
            if r > 0:  # BLANK: the rest of this file is empty, go on in the next one
                self.reput_from_offset = cl.roll_next_file(offset)
                return True
            return False
        if r.commitlog_offset != offset:
            log.error("record at %d says it is at %d; dispatch stops", offset, r.commitlog_offset)
            return False
        end = offset + r.msg_size
        if end > limit:
            return False
        self.dispatch(r)
        self.parsed += 1
        self.reput_from_offset = end
        return True

    def queue_ends_ahead(self) -> dict[tuple[str, int], int]:
        """The next logical offset of every queue with records in the commit log past the
        dispatched end (not in its consume queue yet): what the topic-queue table must hold
        while dispatch is paused. Reads those records; start-up only (caller's thread)."""
        cl = self.commit_log
        ends: dict[tuple[str, int], int] = {}
        offset = self.reput_from_offset
        end = cl.max_offset
        while offset < end:
            try:
                r = cl.check_at(offset, check_crc=False)
            except CorruptRecordError:
                break
            if isinstance(r, int):
                if r > 0:  # BLANK: the next file
                    offset = cl.roll_next_file(offset)
                    continue
                break
            if goes_to_queue(r.sys_flag):
                ends[(r.topic, r.queue_id)] = r.queue_offset + 1
            offset += r.msg_size
        return ends

    def catch_up(self) -> int:
        """Dispatch everything that is ready (start-up, tests). Caller's thread."""
        total = 0
        while (n := self.do_reput()) > 0:
            total += n
        return total

    # ---- the thread -------------------------------------------------------------------------

    def _failed(self, exc: BaseException | None) -> None:
        """Dispatch failed with ``exc`` (retried until it works: a full disk pauses it, it
        never crashes), or works again (None). The first failure is logged with its
        traceback, the rest of a run of failures not at all."""
        before = self.failing
        self.failing = exc
        if exc is not None and before is None:
            if is_disk_full(exc):
                log.error("dispatch paused at %d: %s; retrying", self.reput_from_offset, exc)
            elif isinstance(exc, OSError):  # a limit (open files, mappings): named, one line
                log.error(
                    "dispatch paused at %d: %s (%s); retrying",
                    self.reput_from_offset,
                    os_error_cause(exc),
                    exc,
                )
            else:
                log.exception("dispatch failed at %d; retrying", self.reput_from_offset)
        elif exc is None and before is not None:
            log.info("dispatch works again at %d", self.reput_from_offset)
        if type(exc) is not type(before) and self.on_error is not None:
            self.on_error(exc)

    def run(self) -> None:
        idle_rounds = 0
        while not self.stopped:
            self.rounds += 1
            try:
                with self.dispatch_lock:
                    n = self.do_reput()
            except Exception as exc:
                self._failed(exc)
                n = 0
                self.wait_for_running(IDLE_WAIT_S)
                continue
            if self.failing is not None:
                self._failed(None)
            if n >= MAX_BATCH:
                continue
            if self.handed_over and self._take_back():
                continue
            if self.inline:  # the put path dispatches; a failure there wakes this thread
                self.wait_for_running(IDLE_WAIT_S)
                continue
            if self.idle_at_limit and self._request_flush is None:
                # dispatch reached its limit: sleep until whoever moves it wakes this thread
                # (no polling every millisecond: each round takes the interpreter lock; under
                # SYNC_FLUSH the flush moves the limit too, and wakes nobody: polled)
                self._idle = True
                if self._limit() > self.reput_from_offset:
                    self._idle = False
                    continue
                self.wait_for_running(IDLE_WAIT_S)
                self._idle = False
                continue
            if n:
                idle_rounds = 0
            else:
                idle_rounds += 1
            if idle_rounds >= IDLE_ROUNDS:
                self._idle = True
                ahead = self._limit() if self.idle_at_limit else self.commit_log.max_offset
                if ahead > self.reput_from_offset:
                    self._idle = False  # raced with an append
                    continue
                self.wait_for_running(IDLE_WAIT_S)
                self._idle = False
                idle_rounds = 0
            else:
                self.wait_for_running(BUSY_WAIT_S)
        # let what was written before shutdown reach the queues
        try:
            with self.dispatch_lock:
                self.catch_up()
        except Exception as exc:
            if is_disk_full(exc):  # the next start goes on from here
                log.error("dispatch at shutdown stopped at %d: %s", self.reput_from_offset, exc)
            else:
                log.exception("dispatch at shutdown failed")
