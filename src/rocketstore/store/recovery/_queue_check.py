"""Checking a consume queue against the commit log: its last units, and the queues adopted from
the per-queue checkpoint when they are first used.

``check_tail`` walks back from a queue's last unit to the last one whose record is where the
unit says (same topic, queue, queue offset, size, tags, a committed or plain message) and cuts
the queue there; the loader runs it over every queue whose files it opened, and ``FirstUse``
over a checkpointed queue whose files disagree with its state.

``FirstUse`` is the hook a checkpointed queue calls when its files are first needed (a read,
a dispatch, a truncation; any thread, under the queue-opening lock): the files are mapped and
must agree with the state (``ConsumeQueue.apply_state``), and the recorded last unit's record
must be in the commit log. When anything disagrees the queue is recovered from its files as a
restart without a checkpoint does it: the end found by scanning its last files, units past the
dispatched end dropped, the tail checked against the log, the records of the queue the log
holds past its last good unit dispatched again (up to the dispatch position), the minimum
corrected; the commit log's next offset for the queue is moved forward to the queue's end when
that is further.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._errors import CorruptFileError, CorruptRecordError
from ..log._record import SYSFLAG_TRANSACTION_MASK, TRANSACTION_COMMIT_TYPE
from ..queue._consume_queue import BLANK_SIZE, UNIT, UNIT_SIZE, ConsumeQueue

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog
    from ..queue._queue_checkpoint import QueueState

log = logging.getLogger(__name__)

TAIL_CHECK_MAX_UNITS = 100_000  # units walked back per queue before giving the queue up


def unit_matches(
    cl: CommitLog, cq: ConsumeQueue, offset: int, unit: tuple[int, int, int], end: int
) -> bool:
    """Whether the record ``unit`` (commit-log offset, size, tags) of logical ``offset`` points
    at is in the commit log below ``end`` and belongs there."""
    phys, size, tags = unit
    if phys < 0 or size <= 0 or phys + size > end:
        return False
    try:
        r = cl.check_at(phys, check_crc=False)
    except CorruptRecordError:
        return False
    if isinstance(r, int):
        return False
    tran = r.sys_flag & SYSFLAG_TRANSACTION_MASK
    return (
        r.msg_size == size
        and r.topic == cq.topic
        and r.queue_id == cq.queue_id
        and r.queue_offset == offset
        and r.tags_code == tags
        and (tran == 0 or tran == TRANSACTION_COMMIT_TYPE)
    )


def unit_at(cq: ConsumeQueue, offset: int) -> tuple[int, int, int] | None:
    """The unit of logical ``offset`` as its file holds it (None past the written units)."""
    where = offset * UNIT_SIZE
    mf = cq.queue.find_mapped_file_by_offset(where)
    if mf is None:
        return None
    pos = where - mf.from_offset
    if pos + UNIT_SIZE > mf.wrote_position:
        return None
    if not mf.hold():  # mapped on demand (the queues' LRU); None once it is shut down
        return None
    try:
        return UNIT.unpack_from(mf.mm, pos)  # type: ignore[return-value]
    finally:
        mf.release()


def check_tail(cl: CommitLog, cq: ConsumeQueue, end: int) -> tuple[int, int]:
    """Walk back from the queue's last unit to the last one that matches its record and cut
    the queue after it. Returns (units dropped, the offset cut at; -1 when nothing was)."""
    lo, n = cq.min_offset, cq.max_offset
    min_phys = max(cl.min_offset, 0)
    bad_from = None
    k = n - 1
    walked = 0
    while k >= lo:
        unit = unit_at(cq, k)
        if unit is None:
            break
        phys, size, _tags = unit
        if phys == 0 and size == BLANK_SIZE:
            break  # filler at the start of a queue
        if phys < min_phys:
            break  # its file was deleted: nothing to check against
        if unit_matches(cl, cq, k, unit, end):
            break
        bad_from = k
        k -= 1
        walked += 1
        if walked >= TAIL_CHECK_MAX_UNITS:
            bad_from = lo
            break
    if bad_from is None:
        return 0, -1
    return cq.truncate_to(bad_from), bad_from


class FirstUse:
    """The ``first_use`` hook of the queues adopted from the per-queue checkpoint (see the
    module docstring). ``end()`` is the commit log's recovered end during the load (None while
    the loader has not found it yet: it then checks what this opened in its later passes), the
    dispatch position once the store runs."""

    def __init__(self, cl: CommitLog, end: Callable[[], int | None]) -> None:
        self.cl = cl
        self.end = end
        self.opened = 0
        self.rebuilt: list[str] = []  # files that did not load: deleted, dispatched again
        self.recovered: list[str] = []  # "topic/queue" recovered from their files

    def __call__(self, cq: ConsumeQueue, state: QueueState) -> None:
        self.opened += 1
        end = self.end()
        try:
            cq.load()
        except CorruptFileError as exc:
            self._rebuild(cq, str(exc), end)
            return
        problem = cq.apply_state(state)
        if problem is None and state.max_offset > state.min_offset:
            last = (state.last_phys, state.last_size, state.last_tags)
            limit = end if end is not None else self.cl.queue.get_max_offset()
            if (
                state.last_size != BLANK_SIZE
                and state.last_phys >= max(self.cl.min_offset, 0)
                and not unit_matches(self.cl, cq, state.max_offset - 1, last, limit)
            ):
                problem = f"unit {state.max_offset - 1}'s record is not in the commit log"
        if problem is None:
            if end is not None and cq.max_physic_offset > end:
                cq.truncate_dirty(end)
            if end is not None and self.cl.min_offset > 0:
                # what retention deleted while the queue was not open
                if not cq.delete_expired_files(self.cl.min_offset):
                    cq.correct_min_offset(self.cl.min_offset)
            return
        name = f"{cq.topic}/{cq.queue_id}"
        self.recovered.append(name)
        # expected after a crash for a queue the log's tail touched (its files are ahead of
        # the periodic checkpoint); a surprise once the store runs
        log.log(
            logging.INFO if end is None else logging.WARNING,
            "consume queue %s disagrees with the per-queue checkpoint (%s); recovered from its "
            "files",
            name,
            problem,
        )
        cq.recover()
        if end is None:
            return  # the loader truncates and checks it with the others
        cq.truncate_dirty(end)
        check_tail(self.cl, cq, end)
        self._redispatch(cq, end)
        cq.correct_min_offset(max(self.cl.min_offset, 0))
        self._move_next_offset(cq)

    def _rebuild(self, cq: ConsumeQueue, problem: str, end: int | None) -> None:
        """The queue's files do not load: deleted, the queue rebuilt from the commit log (by
        the loader's dispatch when ``end`` is None)."""
        name = f"{cq.topic}/{cq.queue_id}"
        log.warning("consume queue %s does not load (%s); rebuilt", name, problem)
        self.rebuilt.append(name)
        shutil.rmtree(cq.path, ignore_errors=True)
        cq.min_logic_offset = 0
        cq.max_physic_offset = -1
        if end is not None:
            self._redispatch(cq, end)
            cq.correct_min_offset(max(self.cl.min_offset, 0))
            self._move_next_offset(cq)

    def _redispatch(self, cq: ConsumeQueue, end: int) -> None:
        """Write the units of the queue's records in the commit log from its last good unit to
        ``end`` (a walk over the records between: one damaged queue, rare)."""
        cl = self.cl
        pos = max(cq.max_physic_offset, cl.min_offset, 0)
        written = 0
        while pos < end:
            try:
                r = cl.check_at(pos, check_crc=False)
            except CorruptRecordError:
                break
            if isinstance(r, int):
                if r <= 0:
                    break
                pos += r  # a BLANK record: the next file
                continue
            tran = r.sys_flag & SYSFLAG_TRANSACTION_MASK
            if (
                r.topic == cq.topic
                and r.queue_id == cq.queue_id
                and (tran == 0 or tran == TRANSACTION_COMMIT_TYPE)
                and r.queue_offset >= cq.max_offset
            ):
                cq.put_unit(r.commitlog_offset, r.msg_size, r.tags_code, r.queue_offset)
                written += 1
            pos += r.msg_size
        if written:
            log.warning(
                "consume queue %s/%d: %d units dispatched again", cq.topic, cq.queue_id, written
            )

    def _move_next_offset(self, cq: ConsumeQueue) -> None:
        """The commit log hands out queue offsets from its table: never one the queue holds."""
        cl = self.cl
        key = (cq.topic, cq.queue_id)
        # the put path may be the one opening the queue (dispatch inside a put): it holds the
        # put lock then, and nothing else is putting
        locked = cl.put_lock.acquire(blocking=False)
        try:
            if cl.topic_queue_table.get(key, 0) < cq.max_offset:
                log.warning(
                    "%s/%d: next queue offset moved to %d, the queue's end", *key, cq.max_offset
                )
                cl.topic_queue_table[key] = cq.max_offset
        finally:
            if locked:
                cl.put_lock.release()
