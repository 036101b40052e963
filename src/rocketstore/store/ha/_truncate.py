"""Cutting a running store's log back (controller mode): a replica that rejoins as a slave drops
what its new master never had, and a replica that becomes master drops a record it received
only in part.

``truncate_log(offset)`` cuts the commit log at ``offset`` (later files deleted, the rest of
the file holding it zeroed and synced, the flushed position moved back), drops the consume-queue
units and index entries of the records at or after it, moves dispatch back to it and rebuilds
the topic-queue table (the queues' ends, and past the dispatched end what the commit log still
holds). Dispatch is paused meanwhile (``ReputMessageService.dispatch_lock``) and puts wait
(the put lock), so nothing reads a half-cut log to extend it.

``valid_end()``: where the last whole record ends, from the dispatched end on.

Threads: the HA client's thread or the broker's role change; never a dispatch or put thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._errors import CorruptRecordError

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog
    from ..queue._consume_queue import ConsumeQueueTable
    from ..queue._index import IndexService
    from ..queue._reput import ReputMessageService

log = logging.getLogger(__name__)


class LogCutter:
    """The parts a cut touches, for one store."""

    def __init__(
        self,
        commit_log: CommitLog,
        reput: ReputMessageService,
        consume_queues: ConsumeQueueTable,
        index: IndexService,
        on_cut: Callable[[], None] | None = None,
    ) -> None:
        """``on_cut`` runs after each cut (the store forgets its per-queue checkpoint: the
        queues it recorded may hold records the cut removed)."""
        self.commit_log = commit_log
        self.on_cut = on_cut
        self.reput = reput
        self.consume_queues = consume_queues
        self.index = index
        self.cuts = 0
        self.bytes_cut = 0

    def valid_end(self) -> int:
        """The end of the last whole record (records are checked from the dispatched end on;
        BLANK records step to the next file)."""
        cl = self.commit_log
        offset = max(self.reput.reput_from_offset, cl.min_offset, 0)
        end = cl.max_offset
        while offset < end:
            try:
                r = cl.check_at(offset, check_crc=True)
            except CorruptRecordError:
                break
            if isinstance(r, int):
                if r > 0:
                    offset = cl.roll_next_file(offset)
                    continue
                break
            offset += r.msg_size
        return min(offset, end)

    def truncate_log(self, offset: int) -> int:
        """Cut everything at or after ``offset``; the bytes cut."""
        cl = self.commit_log
        reput = self.reput
        with reput.dispatch_lock:
            with cl.put_lock:
                end = cl.max_offset
                if offset >= end:
                    return 0
                q = cl.queue
                while (last := q.last_file()) is not None and last.from_offset > offset:
                    q.delete_last_mapped_file()
                last = q.last_file()
                if last is not None:
                    last.truncate_to(offset - last.from_offset)
                if q.flushed_where > offset or q.committed_where > offset:
                    q.set_flushed_where(min(q.flushed_where, offset))
                if cl.dispatch_handoff is not None:
                    cl.dispatch_handoff.clear()
            units = self.consume_queues.truncate_from(offset)
            entries = self.index.truncate_from(offset) if self.index.enabled else 0
            if reput.reput_from_offset > offset:
                reput.reput_from_offset = offset
            self._rebuild_queue_table_locked()
            if self.on_cut is not None:
                self.on_cut()
        self.cuts += 1
        self.bytes_cut += end - offset
        log.warning(
            "commit log cut from %d to %d: %d consume-queue units and %d index entries dropped",
            end,
            offset,
            units,
            entries,
        )
        return end - offset

    def rebuild_queue_table(self) -> None:
        """The topic-queue table from the consume queues and the records past the dispatched
        end (a new master assigns queue offsets after every record its log holds)."""
        with self.reput.dispatch_lock:
            self._rebuild_queue_table_locked()

    def _rebuild_queue_table_locked(self) -> None:
        table = self.consume_queues.offset_table()
        table.update(self.reput.queue_ends_ahead())
        with self.commit_log.put_lock:
            self.commit_log.rebuild_topic_queue_table(table)
