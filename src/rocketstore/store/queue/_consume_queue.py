"""Consume queues: per topic and queue id, the commit-log position of every message, in order.

One queue is a MappedFileQueue under ``consumequeue/<topic>/<queueId>/``; files are named by
the byte offset of their first unit (20 digits). A unit, every integer big-endian::

     0 COMMITLOG OFFSET  int64   where the record starts in the commit log
     8 SIZE              int32   the record's TOTALSIZE
    12 TAGS CODE         int64   Java String.hashCode of TAGS (0: none); for
                                 SCHEDULE_TOPIC_XXXX the delivery time in ms

Unit ``n`` (logical offset n) sits at byte ``n * 20``. A unit is valid when offset >= 0 and
size > 0. When a queue's first file is created for a logical offset past the start of that file,
the file is filled up to it with BLANK_UNIT (0, 0x7FFFFFFF, 0).

Files are sparse and get their disk blocks ahead of the units written (``ensure_allocated``): a
full disk makes a write raise StoreIOError (ENOSPC) before anything is written, so dispatch can
pause and retry, and never a write into a hole (SIGBUS).

Files keep no descriptor once mapped, and a store's queues share one ``MappingLRU``: a file
is mapped when first held, and an idle one is unmapped when more than the LRU's bound are
mapped. So every read of a file's units holds it for the read (``_held``), and the dispatcher
writes a file under the LRU's writer hold (``_hold_for_writer``), which it gives up when the
file is full or deleted.

Threads: units are written by the dispatcher only (ReputMessageService); flushes by
FlushConsumeQueueService; readers from any thread (files are held while read).

Flushing visits only the queues written since the last flush, so an idle store's flush costs
nothing however many queues it has. After writing units the dispatcher marks the queue
(``mark_written``: a flag tested, and the queue appended to the table's ``written`` deque
when the flag was down); the flush service takes the queues off the deque, lowers each one's
flag, then flushes it (a unit written after the flag went down marks the queue again, one
written before is covered by the flush), and marks again a queue it left with units to flush
(fewer dirty pages than a round asks for). The deque's append and popleft are atomic, so
neither side takes a lock. A thorough round with ``MANY_AT_ONCE`` queues or more to flush (a
burst of new queues: each one's new files and directories) makes them durable with one
``sync_file_system`` instead of one fsync each (a journal commit each: minutes for 100,000
new queues, where the sync takes a second), then moves their flushed positions to what each
held before the sync (``MappedFileQueue.flush_marks`` / ``flushed_to``).

A queue may be loaded from the per-queue checkpoint (``_queue_checkpoint``) instead of its
files: made with a ``state``, it takes its offsets from there and opens no file. The first use
of ``queue``, from any thread (the others wait for it), opens the files and checks them against
the state (the ``first_use`` hook the loader installs, else ``open_with_state``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .._clock import SYSTEM_CLOCK, Clock
from .._durable import MANY_AT_ONCE, DeferredDirSync, sync_file_system
from .._errors import CorruptFileError, StoreClosedError, StoreError, translate_os_errors
from ..log._flush import PeriodicPageService
from ..log._mapped_file import MappedFile, SelectMappedBufferResult
from ..log._mapped_file_queue import MappedFileQueue
from ..log._mapping_lru import MappingLRU, MappingStatistics
from ._queue_checkpoint import QueueCheckpointWriter, QueueState
from ._unit_write import UNIT as UNIT
from ._unit_write import UNIT_SIZE as UNIT_SIZE
from ._unit_write import pack_units, put_next_unit

log = logging.getLogger(__name__)

UNIT_WITHOUT_TAGS = struct.Struct(">qi8x")  # (commit-log offset, size): reads that need no tags
TAGS_CODE = struct.Struct(">q")
OFFSET_TAGS_CODE = 12
BLANK_SIZE = 0x7FFFFFFF
BLANK_UNIT = UNIT.pack(0, BLANK_SIZE, 0)
RECOVER_FROM_LAST_FILES = 3
ALLOCATE_AHEAD = 64 * 1024  # disk blocks reserved ahead of the units written (3,276 units)
_DELETE_INTERVAL_FORCIBLY_MS = 60_000
_OPEN_LOCK = threading.RLock()  # opens a checkpointed queue's files (rare: once a queue)


def is_valid_unit(phys_offset: int, size: int) -> bool:
    return phys_offset >= 0 and size > 0


def is_blank_unit(phys_offset: int, size: int, tags_code: int) -> bool:
    return phys_offset == 0 and size == BLANK_SIZE and tags_code == 0


@contextlib.contextmanager
def _held(mf: MappedFile) -> Iterator[MappedFile]:
    """``mf`` held (mapped) for the block. StoreClosedError when it is shut down."""
    if not mf.hold():
        raise StoreClosedError(f"{mf.path}: the file is shut down")
    try:
        yield mf
    finally:
        mf.release()


class ConsumeQueue:
    """The consume queue of one (topic, queue id). Offsets in the API are logical (unit numbers)."""

    def __init__(
        self,
        topic: str,
        queue_id: int,
        root_dir: str | os.PathLike[str],
        file_size: int,
        *,
        clock: Clock = SYSTEM_CLOCK,
        read_only: bool = False,
        lru: MappingLRU | None = None,
        state: QueueState | None = None,
        first_use: Callable[[ConsumeQueue, QueueState], None] | None = None,
        written: deque[ConsumeQueue] | None = None,
        dir_sync: DeferredDirSync | None = None,
    ) -> None:
        """``lru``: the files are mapped on demand, within its bound (None: mapped while
        the queue is open). ``state``: adopted from the per-queue checkpoint, the files opened
        (with ``first_use(self, state)``; None: ``open_with_state``) when ``queue`` is first
        used. ``written``: the table's queues written since their last flush, where
        ``mark_written`` puts this one (None: a deque of its own). ``dir_sync``: the table's
        new directory entries, made durable before the next flush (None: at once)."""
        if file_size % UNIT_SIZE:
            raise CorruptFileError(f"consume-queue file size {file_size} is not a multiple of 20")
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self._root = root_dir
        self._clock = clock
        self._read_only = read_only
        self._lru = lru
        self._dir_sync = dir_sync
        self.min_logic_offset = 0  # bytes
        self.max_physic_offset = -1  # end of the last dispatched record in the commit log
        self.last_store_timestamp = 0
        # in ``_written`` waiting for a flush (see the module's text)
        self.flush_pending = False
        self._written: deque[ConsumeQueue] = written if written is not None else deque()
        # moved whenever units are taken away (truncation, destruction): a cached state keyed
        # on the offsets alone could otherwise survive a cut and a rewrite to the same end
        self._cuts = 0
        self._state_key: tuple[int, int, int, int] | None = None
        self._state: QueueState | None = None
        # taken from the per-queue checkpoint, files not opened yet (no object made for them:
        # a restart adopts every queue of the store)
        self.pending = state
        self.first_use = first_use
        self._ready = state is None  # False while adopted and not opened
        self._opening = False
        if state is None:
            self._files = self._new_files()
        else:
            self.min_logic_offset = state.min_offset * UNIT_SIZE
            self.max_physic_offset = state.max_phys

    @property
    def path(self) -> Path:
        """The queue's directory: ``<root>/<topic>/<queue id>``."""
        return Path(self._root, self.topic, str(self.queue_id))

    def _new_files(self) -> MappedFileQueue:
        return MappedFileQueue(
            self.path,
            self.file_size,
            clock=self._clock,
            read_only=self._read_only,
            allocate_ahead=ALLOCATE_AHEAD,
            keep_fd=False,
            lru=self._lru,
            dir_sync=self._dir_sync,
        )

    @property
    def queue(self) -> MappedFileQueue:
        """The queue's files; a queue adopted from the checkpoint opens them here first."""
        if not self._ready:
            self._open_pending()
        return self._files

    def takes_unit_in_place(self) -> bool:
        """Whether the next unit goes into a file that is open, mapped for the writer and not
        full: no file to make, open, check or map first (the work a put path leaves to the
        dispatch thread)."""
        if not self._ready:
            return False
        files = self._files.files
        if not files:
            return False
        last = files[-1]
        return last.writer_held and last.wrote_position < self.file_size

    # ---- loading and recovery ---------------------------------------------------------------

    def _open_pending(self) -> None:
        with _OPEN_LOCK:
            state = self.pending
            if self._ready or self._opening or state is None:
                return  # opened meanwhile, or the hook itself uses ``queue``
            self._opening = True
            try:
                self._files = self._new_files()
                hook = self.first_use
                if hook is None:
                    self.open_with_state(state)
                else:
                    hook(self, state)
                self.pending = None
                self.first_use = None
                self._ready = True
            finally:
                self._opening = False

    def open_with_state(self, state: QueueState) -> str | None:
        """Map the files and take ``state`` when they agree with it; otherwise find the end in
        the files (``recover``). Returns what disagreed, None when nothing did."""
        self.load()
        problem = self.apply_state(state)
        if problem is not None:
            self.recover()
        return problem

    def apply_state(self, state: QueueState) -> str | None:
        """Files mapped (``load``): take the checkpointed positions when the files agree (the
        last file holds the end, the unit before it is the recorded one, none follows it);
        otherwise change nothing and say what disagreed."""
        files = self._files.files
        end = state.max_offset * UNIT_SIZE
        if not files:
            return None if end == 0 else f"no files, the checkpoint says {state.max_offset} units"
        last = files[-1]
        if not last.from_offset <= end <= last.from_offset + self.file_size:
            return (
                f"the files end at file {last.file_name}, the checkpoint's end is unit "
                f"{state.max_offset}"
            )
        pos = end - last.from_offset
        if pos + UNIT_SIZE <= min(self.file_size, last.allocated):
            with _held(last):
                off, size, _tags = UNIT.unpack_from(last.mm, pos)
            if is_valid_unit(off, size):
                return f"the files hold units past the checkpoint's end {state.max_offset}"
        if end > state.min_offset * UNIT_SIZE and end > 0:
            mf = self._files.find_mapped_file_by_offset(end - UNIT_SIZE)
            where = end - UNIT_SIZE - (mf.from_offset if mf is not None else 0)
            unit = None
            if mf is not None:
                with _held(mf):
                    unit = UNIT.unpack_from(mf.mm, where)
            if unit != (state.last_phys, state.last_size, state.last_tags):
                return (
                    f"unit {state.max_offset - 1} is {unit}, the checkpoint has "
                    f"{(state.last_phys, state.last_size, state.last_tags)}"
                )
        last.set_positions(pos)
        self._files.set_flushed_where(end)
        self.min_logic_offset = state.min_offset * UNIT_SIZE
        self.max_physic_offset = state.max_phys
        if end == 0 or end > self.min_logic_offset:
            # the state as ``state`` would read it (its last unit checked above): the next
            # checkpoint need not map the last file again to read that unit (every queue of
            # a store read through after a restart, most of them unmapped again by the LRU)
            self._state = state
            self._state_key = self._state_key_now()
        return None

    def file_count(self) -> int:
        """The queue's files; one not opened yet: the files its checkpointed units span."""
        pending = self.pending
        if pending is None:
            return len(self._files.files)
        if pending.max_offset <= pending.min_offset:
            return 0 if pending.max_offset == 0 else 1
        first = pending.min_offset * UNIT_SIZE // self.file_size
        last = (pending.max_offset * UNIT_SIZE - 1) // self.file_size
        return last - first + 1

    def state(self) -> QueueState:
        """This queue's state for the checkpoint (a queue not opened yet: as adopted). Any
        thread; read while dispatch may write: the end first, then the unit before it."""
        pending = self.pending
        if pending is not None:
            return pending
        key = self._state_key_now()
        end_bytes, _, max_phys, _ = key
        cached = self._state
        if cached is not None and key == self._state_key:
            return cached  # unchanged since the last call: its last file is not mapped again
        end = end_bytes // UNIT_SIZE
        min_offset = self.min_logic_offset // UNIT_SIZE
        unit = self.get_unit(end - 1) if end > 0 else None
        last = unit if unit is not None else (-1, 0, 0)
        state = QueueState(
            self.topic, self.queue_id, min_offset, end, last[0], last[1], last[2], max_phys
        )
        self._state, self._state_key = state, key
        return state

    def _state_key_now(self) -> tuple[int, int, int, int]:
        """What ``state`` depends on: the end in bytes, the first readable offset, the end of
        the last unit's record (read before the end: dispatch may write meanwhile) and the
        cuts."""
        max_phys = self.max_physic_offset
        return (self._files.get_max_offset(), self.min_logic_offset, max_phys, self._cuts)

    def load(self) -> None:
        """Map the files. A last file that is short (empty, a partial unit, or shorter than
        the queue's other files: a crash while creating it) is extended, ``recover`` then finds
        its units; any other size mismatch is an error (settings that do not fit the files)."""
        if self.path.is_dir() and not self.queue.read_only:
            names = sorted(
                e.name for e in os.scandir(self.path) if e.is_file() and e.name.isdigit()
            )
            if names:
                last = self.path / names[-1]
                with translate_os_errors(f"stat {last}"):
                    actual = last.stat().st_size
                    confirmed = (
                        len(names) > 1 and (self.path / names[0]).stat().st_size == self.file_size
                    )
                    partial = actual == 0 or actual % UNIT_SIZE or confirmed
                    if actual < self.file_size and partial:
                        log.warning(
                            "%s: size %d, expected %d; resizing it (recovery finds its units)",
                            last,
                            actual,
                            self.file_size,
                        )
                        os.truncate(last, self.file_size)
        self._files.load()

    def recover(self) -> int:
        """Find the last valid unit (scanning the last three files) and cut the queue there.

        Returns the logical end offset in bytes. Called before dispatch starts.
        """
        files = self.queue.files
        if not files:
            return 0
        index = max(0, len(files) - RECOVER_FROM_LAST_FILES)
        mf = files[index]
        end = mf.from_offset
        max_phys = -1
        while True:
            with _held(mf):
                pos, last = _scan_units(mf, self.file_size)
            if last is not None:
                max_phys = last
            end = mf.from_offset + pos
            if pos == self.file_size and index + 1 < len(files):
                index += 1
                mf = files[index]
                continue
            break
        if max_phys >= 0:
            self.max_physic_offset = max_phys
        self._cut_at(end)
        return end

    def _cut_at(self, end: int) -> None:
        """Set the write position to ``end`` and delete the files past it (no zeroing: the unit
        at ``end`` is already invalid, and later writes go in order)."""
        self._cuts += 1
        while (last := self.queue.last_file()) is not None and last.from_offset > end:
            log.warning(
                "%s: removing consume-queue file %s past the end", self.path, last.file_name
            )
            self._delete_last_file()
        last = self.queue.last_file()
        if last is not None:
            last.set_positions(end - last.from_offset)
        self.queue.set_flushed_where(end)

    def truncate_dirty(self, phys_offset: int) -> int:
        """Drop the units of records at or past ``phys_offset`` (the commit log was cut there).

        Returns how many units were removed. Called before dispatch starts.
        """
        self._cuts += 1
        removed = 0
        while True:
            mf = self.queue.last_file()
            if mf is None:
                self.max_physic_offset = -1
                return removed
            wrote = mf.wrote_position
            keep = 0
            last_end = -1
            with _held(mf):
                for pos in range(0, wrote, UNIT_SIZE):
                    off, size, _tags = UNIT.unpack_from(mf.mm, pos)
                    if not is_valid_unit(off, size) or off >= phys_offset:
                        break
                    keep = pos + UNIT_SIZE
                    if size != BLANK_SIZE:
                        last_end = off + size
            removed += (wrote - keep) // UNIT_SIZE
            if keep == 0 and len(self.queue.files) > 1:
                self._delete_last_file()
                continue
            if keep < wrote:
                mf.zero_range(keep, wrote)
                mf.sync_range(keep, wrote)  # below the flushed position: flushes skip it
            mf.set_positions(keep)
            self.queue.set_flushed_where(mf.from_offset + keep)
            self.max_physic_offset = last_end if last_end >= 0 else self._last_end_before(mf)
            return removed

    def truncate_to(self, offset: int) -> int:
        """Drop the units from logical ``offset`` on (a unit there did not match the commit
        log): later files are deleted, the rest of the file holding it is zeroed.

        Returns how many units were removed. Before dispatch starts (loader thread).
        """
        where = offset * UNIT_SIZE
        end = self.queue.get_max_offset()
        if where >= end or offset < 0:
            return 0
        self._cuts += 1
        removed = (end - where) // UNIT_SIZE
        while (last := self.queue.last_file()) is not None and last.from_offset > where:
            self._delete_last_file()
        mf = self.queue.last_file()
        if mf is None:
            self.max_physic_offset = -1
            return removed
        pos = where - mf.from_offset
        wrote = mf.wrote_position
        if pos < wrote:
            mf.zero_range(pos, wrote)
            mf.sync_range(pos, wrote)  # below the flushed position: flushes skip it
        mf.set_positions(pos)
        self.queue.set_flushed_where(where)
        self.max_physic_offset = self._end_of_last_unit()
        return removed

    def _end_of_last_unit(self) -> int:
        """Commit-log end of the last real (non-blank) unit, -1 when there is none."""
        for mf in reversed(self.queue.files):
            with _held(mf):
                for pos in range(mf.wrote_position - UNIT_SIZE, -1, -UNIT_SIZE):
                    off, size, _tags = UNIT.unpack_from(mf.mm, pos)
                    if is_valid_unit(off, size) and size != BLANK_SIZE:
                        return int(off + size)
        return -1

    def _last_end_before(self, mf: MappedFile) -> int:
        files = self.queue.files
        i = files.index(mf)
        if i == 0:
            return -1
        prev = files[i - 1]
        with _held(prev):
            off, size, _ = UNIT.unpack_from(prev.mm, self.file_size - UNIT_SIZE)
        return off + size if is_valid_unit(off, size) and size != BLANK_SIZE else -1

    # ---- mapping lifetime -------------------------------------------------------------------

    def _hold_for_writer(self, mf: MappedFile) -> None:
        """Let the dispatcher write ``mf`` without a hold per unit (the LRU's writer hold)."""
        lru = self.queue.lru
        if lru is not None and not mf.writer_held:
            lru.hold_for_writer(mf)

    def _next_file(self, full: MappedFile | None, start_offset: int) -> MappedFile | None:
        """The file after ``full`` (created now), the writer's hold of ``full`` given up."""
        mf = self.queue.get_last_mapped_file(start_offset)
        lru = self.queue.lru
        if full is not None and lru is not None and mf is not full:
            lru.release_writer_hold(full)
        return mf

    def _delete_last_file(self) -> None:
        last = self.queue.last_file()
        lru = self.queue.lru
        if last is not None and lru is not None:
            lru.release_writer_hold(last)
        self.queue.delete_last_mapped_file()

    def correct_min_offset(self, min_phys_offset: int) -> None:
        """Move the minimum to the first unit whose record is still in the commit log."""
        mf = self.queue.first_file()
        if mf is None or not mf.hold():
            return
        try:
            readable = mf.read_position
            for pos in range(0, readable, UNIT_SIZE):
                off, size, tags = UNIT.unpack_from(mf.mm, pos)
                if is_blank_unit(off, size, tags):
                    continue
                if off >= min_phys_offset:
                    self.min_logic_offset = mf.from_offset + pos
                    return
            self.min_logic_offset = mf.from_offset + readable
        finally:
            mf.release()

    # ---- writing ----------------------------------------------------------------------------

    def put_units(
        self,
        phys_offsets: Sequence[int],
        sizes: Sequence[int],
        tags_codes: Sequence[int],
        first_offset: int,
    ) -> bool:
        """Write the units of consecutive logical offsets from ``first_offset`` (a batch put).

        One pack and one copy when they all go at the end of the current file; unit by unit
        (with everything ``put_unit`` handles) otherwise. Dispatcher thread only.
        """
        n = len(phys_offsets)
        files = self.queue.files
        mf = files[-1] if files else None
        if mf is not None and n and phys_offsets[0] + sizes[0] > self.max_physic_offset:
            pos = mf.wrote_position
            end = pos + n * UNIT_SIZE
            if pos and end <= self.file_size and mf.from_offset + pos == first_offset * UNIT_SIZE:
                self._hold_for_writer(mf)
                if end > mf.allocated:
                    mf.ensure_allocated(end)
                pack_units(mf.mm, pos, phys_offsets, sizes, tags_codes)
                mf.wrote_position = end
                self.max_physic_offset = phys_offsets[-1] + sizes[-1]
                if not self.flush_pending:
                    self.mark_written()
                return True
        for i in range(n):
            if not self.put_unit(phys_offsets[i], sizes[i], tags_codes[i], first_offset + i):
                return False
        return True

    def mark_written(self) -> None:
        """Units were written: flush the queue at the next round (see the module's text).
        The dispatcher, after writing (a caller that wrote through ``put_next_unit`` itself
        calls it when ``flush_pending`` is down)."""
        self.flush_pending = True
        self._written.append(self)

    def put_unit(self, phys_offset: int, size: int, tags_code: int, offset: int) -> bool:
        """Write the unit of logical ``offset``; a record already in the queue is skipped.

        Dispatcher thread only. False when no file could be created.
        """
        if put_next_unit(self, phys_offset, size, tags_code, offset):
            # the usual case, or a record dispatched before (after a restart)
            if not self.flush_pending:
                self.mark_written()
            return True
        expect = offset * UNIT_SIZE
        files = self.queue.files
        mf = files[-1] if files else None
        if mf is None or mf.wrote_position >= self.file_size:
            mf = self._next_file(mf, expect)
            if mf is None:
                return False
        self._hold_for_writer(mf)
        if mf.first_create_in_queue and mf.wrote_position == 0 and expect > mf.from_offset:
            self._fill_blank(mf, expect - mf.from_offset)
            self.min_logic_offset = expect
            self.queue.set_flushed_where(mf.from_offset)
        current = mf.from_offset + mf.wrote_position
        if expect < current:
            log.debug("%s: unit %d is in the queue already", self.path, offset)
            if not self.flush_pending:
                self.mark_written()  # blank units may have been written above
            return True
        if expect != current:
            log.error(
                "%s: unit %d does not follow the queue end %d; blank units fill the gap",
                self.path,
                offset,
                current // UNIT_SIZE,
            )
            while current < expect:
                if mf.wrote_position >= self.file_size:
                    mf = self._next_file(mf, current)
                    if mf is None:
                        return False
                    self._hold_for_writer(mf)
                self._fill_blank(mf, min(self.file_size, expect - mf.from_offset))
                current = mf.from_offset + mf.wrote_position
            if mf.wrote_position >= self.file_size:
                mf = self._next_file(mf, expect)
                if mf is None:
                    return False
                self._hold_for_writer(mf)
        pos = mf.wrote_position
        if pos + UNIT_SIZE > mf.allocated:
            mf.ensure_allocated(pos + UNIT_SIZE)
        UNIT.pack_into(mf.mm, pos, phys_offset, size, tags_code)
        mf.wrote_position = pos + UNIT_SIZE
        self.max_physic_offset = phys_offset + size
        if not self.flush_pending:
            self.mark_written()
        return True

    def _fill_blank(self, mf: MappedFile, until: int) -> None:
        pos = mf.wrote_position
        count = (until - pos) // UNIT_SIZE
        if count > 0:
            mf.ensure_allocated(pos + count * UNIT_SIZE)
            mf.mm[pos : pos + count * UNIT_SIZE] = BLANK_UNIT * count
            mf.wrote_position = pos + count * UNIT_SIZE

    def flush(self, least_pages: int) -> int:
        """Every file up to the end (the checkpoint's logics time counts on a thorough flush
        covering the whole queue). Nothing for a queue whose files are not open yet."""
        if self.pending is not None:
            return self.pending.max_offset * UNIT_SIZE
        return self.queue.flush_all(least_pages)

    def unflushed(self) -> bool:
        """Units written and not flushed yet (a queue not opened: none)."""
        if self.pending is not None:
            return False
        files = self._files
        return files.flushed_where < files.get_max_offset()

    # ---- reading ----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """Smallest logical offset still readable."""
        return self.min_logic_offset // UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """One past the last unit (the next logical offset)."""
        pending = self.pending
        if pending is not None and not self._opening:
            return pending.max_offset
        return self.queue.get_max_offset() // UNIT_SIZE

    def get_unit(self, offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tags code) of the unit at logical ``offset``, or None."""
        found = self._file_at(offset)
        if found is None:
            return None
        mf, pos = found
        if pos + UNIT_SIZE > mf.read_position or not mf.hold():
            return None
        try:
            return UNIT.unpack_from(mf.mm, pos)  # type: ignore[return-value]
        finally:
            mf.release()

    def select_units(self, offset: int) -> SelectMappedBufferResult | None:
        """A held view of the units from logical ``offset`` to the end of their file's data,
        or None when the offset is not readable. The caller must ``release()`` it."""
        found = self._file_at(offset)
        if found is None:
            return None
        mf, pos = found
        return mf.select_mapped_buffer(pos)

    def _file_at(self, offset: int) -> tuple[MappedFile, int] | None:
        """The file holding logical ``offset`` and the unit's position in it; None when the
        offset is below the queue's minimum or past its files."""
        where = offset * UNIT_SIZE
        if offset < 0 or where < self.min_logic_offset:
            return None
        mf = self.queue.find_mapped_file_by_offset(where)
        if mf is None:
            return None
        return mf, where - mf.from_offset

    @contextlib.contextmanager
    def units_from(self, offset: int) -> Iterator[tuple[memoryview, int] | None]:
        """``select_units`` as a context manager: yields (view, unit count) or None. The view
        is valid only inside the ``with`` block."""
        result = self.select_units(offset)
        if result is None:
            yield None
            return
        try:
            yield result.buffer, result.size // UNIT_SIZE
        finally:
            result.release()

    def roll_next_file(self, offset: int) -> int:
        """The logical offset that starts the file after the one holding ``offset``."""
        per_file = self.file_size // UNIT_SIZE
        return offset + per_file - offset % per_file

    def last_unit(self) -> tuple[int, int, int] | None:
        end = self.max_offset
        return self.get_unit(end - 1) if end > self.min_offset else None

    def get_offset_in_queue_by_time(
        self, timestamp: int, store_time: Callable[[int, int], int], min_phys_offset: int
    ) -> int:
        """The logical offset whose message was stored closest to ``timestamp``.

        A binary search over the queue (by store time): an exact match gives the first unit
        with that time; otherwise the nearer neighbour (the earlier one on a tie), the first
        unit when every message is later, the last unit when every message is earlier.
        Units whose record is below ``min_phys_offset`` are skipped. 0 for an empty queue.
        """
        low, high = self.min_offset, self.max_offset - 1
        # skip units whose records were deleted with their commit-log files
        while low <= high:
            unit = self.get_unit(low)
            if unit is None or (unit[0] >= min_phys_offset and unit[1] != BLANK_SIZE):
                break
            low += 1
        if low > high:
            return 0
        left = right = -1
        left_time = right_time = -1
        while low <= high:
            mid = (low + high) // 2
            unit = self.get_unit(mid)
            if unit is None:
                return 0
            t = store_time(unit[0], unit[1])
            if t < 0:
                return 0
            if t >= timestamp:
                high = mid - 1
                right, right_time = mid, t
            else:
                low = mid + 1
                left, left_time = mid, t
        if right_time == timestamp:
            return right
        if left < 0:
            return right
        if right < 0:
            return left
        return right if abs(timestamp - left_time) > abs(timestamp - right_time) else left

    # ---- cleaning ---------------------------------------------------------------------------

    def delete_expired_files(self, min_phys_offset: int) -> int:
        """Delete files (never the last) whose units all point below ``min_phys_offset``."""

        def last_phys(mf: MappedFile) -> int:
            if not mf.hold():
                return -1
            try:
                off, size, _ = UNIT.unpack_from(mf.mm, self.file_size - UNIT_SIZE)
            finally:
                mf.release()
            return off if is_valid_unit(off, size) else -1

        count = self.queue.delete_expired_files_by_offset(min_phys_offset, UNIT_SIZE, last_phys)
        if count:
            self.correct_min_offset(min_phys_offset)
        return count

    def shutdown(self) -> None:
        if self._ready:
            self._files.shutdown(0)

    def destroy(self) -> None:
        """Delete every file of the queue (and its directory when empty)."""
        lru = self.queue.lru
        if lru is not None:
            for mf in self.queue.files:
                lru.release_writer_hold(mf)
        self.queue.destroy()
        self._cuts += 1
        self.min_logic_offset = 0
        self.max_physic_offset = -1

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.min_offset}, "
            f"max={self.max_offset})"
        )


def _scan_units(mf: MappedFile, file_size: int) -> tuple[int, int | None]:
    """(end of the valid units, commit-log end of the last real one) of one file."""
    buf = mf.mm
    last: int | None = None
    # past the file's data only holes: no unit there, and no read through the mapping either
    limit = min(file_size, mf.allocated - mf.allocated % UNIT_SIZE)
    for pos in range(0, limit, UNIT_SIZE):
        off, size, _ = UNIT.unpack_from(buf, pos)
        if not is_valid_unit(off, size):
            return pos, last
        if size != BLANK_SIZE:
            last = off + size
    return limit, last


class ConsumeQueueTable:
    """Every consume queue of a store, by topic and queue id (``consumequeue/`` directory).

    Queues are created by the dispatcher on first use; readers never create one. With ``lru``
    their files are mapped on demand within its bound (see ``MappingLRU``).
    """

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        file_size: int,
        *,
        clock: Clock = SYSTEM_CLOCK,
        read_only: bool = False,
        lru: MappingLRU | None = None,
    ) -> None:
        self.root = Path(root_dir)
        self.file_size = file_size
        self.clock = clock
        self.read_only = read_only
        self.lru = lru
        self.queues: dict[str, dict[int, ConsumeQueue]] = {}
        self.last_store_timestamp = 0  # store time of the last dispatched message
        # queues written since their last flush (``ConsumeQueue.mark_written``)
        self.written: deque[ConsumeQueue] = deque()
        # queues are made in the put path (inline dispatch): their new directories and files
        # are made durable in their parents before the next flush, not one fsync at a time
        self.dir_sync = DeferredDirSync()
        self.made = 0  # queues made since the table was opened (``find_or_create``)

    def load(
        self,
        on_corrupt: Callable[[ConsumeQueue, CorruptFileError], None] | None = None,
        *,
        states: dict[tuple[str, int], QueueState] | None = None,
        first_use: Callable[[ConsumeQueue, QueueState], None] | None = None,
    ) -> list[ConsumeQueue]:
        """Map every queue found on disk (directory names that are not queue ids are skipped).

        A queue whose files do not load (wrong sizes, names) raises CorruptFileError, or, with
        ``on_corrupt``, is handed to it and left out (the loader deletes it and rebuilds it).
        A queue with an entry in ``states`` (the per-queue checkpoint) opens no file: it adopts
        the state (``ConsumeQueue(state=...)``, with ``first_use``). Returns the queues whose
        files were mapped (those that were not in ``states``).
        """
        mapped: list[ConsumeQueue] = []
        if not self.root.is_dir():
            return mapped
        with translate_os_errors(f"list {self.root}"):
            topics = sorted((e for e in os.scandir(self.root) if e.is_dir()), key=lambda e: e.name)
            for topic_entry in topics:
                by_id = self.queues.setdefault(topic_entry.name, {})
                for qdir in sorted(os.scandir(topic_entry.path), key=lambda e: e.name):
                    if not qdir.is_dir() or not qdir.name.isdigit():
                        log.warning("%s: not a queue directory, skipped", qdir.path)
                        continue
                    qid = int(qdir.name)
                    state = states.get((topic_entry.name, qid)) if states is not None else None
                    if state is not None:
                        by_id[qid] = ConsumeQueue(
                            topic_entry.name,
                            qid,
                            self.root,
                            self.file_size,
                            clock=self.clock,
                            read_only=self.read_only,
                            lru=self.lru,
                            state=state,
                            first_use=first_use,
                            written=self.written,
                            dir_sync=self.dir_sync,
                        )
                        continue
                    cq = self._new(topic_entry.name, qid)
                    try:
                        cq.load()
                    except CorruptFileError as exc:
                        if on_corrupt is None:
                            raise
                        on_corrupt(cq, exc)
                        continue
                    by_id[qid] = cq
                    mapped.append(cq)
                if not by_id:
                    del self.queues[topic_entry.name]
        return mapped

    def pending(self) -> list[ConsumeQueue]:
        """The queues adopted from the checkpoint whose files are not open yet."""
        return [cq for cq in self if cq.pending is not None]

    def open_all(self) -> None:
        """Open every queue adopted from the checkpoint (each through its ``first_use``)."""
        for cq in self.pending():
            cq.queue  # noqa: B018  (opening is the point)

    def states(self) -> list[QueueState]:
        """Every queue's state for the per-queue checkpoint (``ConsumeQueue.state``)."""
        return [cq.state() for cq in self]

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(
            topic,
            queue_id,
            self.root,
            self.file_size,
            clock=self.clock,
            read_only=self.read_only,
            lru=self.lru,
            written=self.written,
            dir_sync=self.dir_sync,
        )

    def recover(self) -> int:
        """Recover every queue; returns the highest commit-log end among their units (or -1)."""
        highest = -1
        for cq in self:
            cq.recover()
            highest = max(highest, cq.max_physic_offset)
        return highest

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        by_id = self.queues.get(topic)
        return by_id.get(queue_id) if by_id is not None else None

    def takes_unit_in_place(self, topic: str, queue_id: int) -> bool:
        """``ConsumeQueue.takes_unit_in_place`` of the queue; False for a queue not made yet."""
        by_id = self.queues.get(topic)
        cq = by_id.get(queue_id) if by_id is not None else None
        return cq is not None and cq.takes_unit_in_place()

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """Dispatcher thread only."""
        by_id = self.queues.get(topic)
        if by_id is None:
            by_id = self.queues[topic] = {}
        cq = by_id.get(queue_id)
        if cq is None:
            cq = by_id[queue_id] = self._new(topic, queue_id)
            self.made += 1
        return cq

    def __iter__(self) -> Iterator[ConsumeQueue]:
        for by_id in list(self.queues.values()):
            yield from list(by_id.values())

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self), default=-1)

    def offset_table(self) -> dict[tuple[str, int], int]:
        """(topic, queue id) → next logical offset: the commit log's topic-queue table."""
        return {(cq.topic, cq.queue_id): cq.max_offset for cq in self}

    def truncate_dirty(self, phys_offset: int) -> int:
        """Every queue with units of records at or past ``phys_offset`` (a queue not open yet
        only when its checkpointed end reaches past it)."""
        return sum(
            cq.truncate_dirty(phys_offset)
            for cq in self
            if cq.pending is None or cq.max_physic_offset > phys_offset
        )

    def truncate_from(self, phys_offset: int) -> int:
        """``truncate_dirty`` on a running store: only the queues whose last unit reaches
        ``phys_offset`` are read (dispatch paused by the caller)."""
        return sum(
            cq.truncate_dirty(phys_offset) for cq in self if cq.max_physic_offset > phys_offset
        )

    def correct_min_offset(self, min_phys_offset: int) -> None:
        """Every open queue (one not open yet is corrected when its files are opened)."""
        for cq in self:
            if cq.pending is None:
                cq.correct_min_offset(min_phys_offset)

    def delete_expired_files(self, min_phys_offset: int) -> int:
        """Every open queue's expired files (one not open yet: when its files are opened)."""
        return sum(cq.delete_expired_files(min_phys_offset) for cq in self if cq.pending is None)

    def flush(self, least_pages: int) -> int:
        """Flush the queues written since their last flush (``ConsumeQueue.mark_written``;
        a queue left with fewer dirty pages than ``least_pages`` stays marked for a later
        round). Returns how many were flushed. The flush service's thread."""
        written = self.written
        if least_pages == 0 and len(written) >= MANY_AT_ONCE:
            batch: list[ConsumeQueue] = []
            for _ in range(len(written)):
                try:
                    cq = written.popleft()
                except IndexError:
                    break
                cq.flush_pending = False
                batch.append(cq)
            try:
                done = self._flush_together(batch)
            except BaseException:
                for cq in batch:
                    if not cq.flush_pending:
                        cq.mark_written()
                raise
            if done:
                return len(batch)
            for cq in batch:  # no ``sync_file_system`` here: one by one below
                if not cq.flush_pending:
                    cq.mark_written()
        flushed = 0
        for _ in range(len(written)):  # not those marked meanwhile: the next round's
            try:
                cq = written.popleft()
            except IndexError:
                break
            cq.flush_pending = False
            try:
                cq.flush(least_pages)
            except BaseException:
                if not cq.flush_pending:
                    cq.mark_written()
                raise
            flushed += 1
            if least_pages and not cq.flush_pending and cq.unflushed():
                cq.mark_written()
        return flushed

    def flush_every(self) -> None:
        """Flush every open queue, written or not (once, when the flush service starts: a
        queue the loader left with units to flush). The flush service's thread."""
        queues = [cq for cq in self if cq.pending is None and cq.unflushed()]
        if len(queues) >= MANY_AT_ONCE and self._flush_together(queues):
            return
        for cq in queues:
            cq.flush(0)

    def _flush_together(self, queues: list[ConsumeQueue]) -> bool:
        """A thorough flush of ``queues`` with one ``sync_file_system`` (their files' new
        directory entries too); False, nothing done, where that call does not exist."""
        marks = [(cq, cq.queue.flush_marks()) for cq in queues if cq.pending is None]
        with translate_os_errors(f"sync {self.root}"):
            if self.dir_sync.pending:
                self.dir_sync.sync()
            if not sync_file_system(self.root):
                return False
        for cq, held in marks:
            cq.queue.flushed_to(held)
        return True

    def shutdown(self) -> None:
        """Once dispatch stopped: the writer's holds given up, every file unmapped."""
        if self.lru is not None:
            self.lru.release_writer_holds()
        for cq in self:
            cq.shutdown()

    def destroy(self) -> None:
        for cq in self:
            cq.destroy()
        self.queues = {}

    def file_count(self) -> int:
        """Files of every queue (mapped or not; a queue not opened yet counted from its
        checkpointed offsets, so counting opens nothing)."""
        return sum(cq.file_count() for cq in self)

    def mapping_statistics(self) -> MappingStatistics | None:
        """The LRU's figures (None without one)."""
        return self.lru.statistics() if self.lru is not None else None


class FlushConsumeQueueService(PeriodicPageService):
    """Flushes the consume queues written since their last flush each ``interval_ms`` when
    ``least_pages`` are dirty, and whatever they have every ``thorough_interval_ms``; after
    a thorough flush ``on_flushed`` gets the store time of the last message dispatched before
    it (the checkpoint's logics time). Its first round flushes every open queue once."""

    final_rounds = 1  # one thorough flush at stop covers every queue

    def __init__(
        self,
        table: ConsumeQueueTable,
        clock: Clock,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        on_flushed: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(
            "FlushConsumeQueueService",
            clock,
            interval_ms=interval_ms,
            least_pages=least_pages,
            thorough_interval_ms=thorough_interval_ms,
        )
        self.table = table
        self.on_flushed = on_flushed
        self._swept = False

    checkpoint: QueueCheckpointWriter | None = None  # the per-queue checkpoint, if kept
    burst_queues = 1000
    """This many queues made since the last per-queue checkpoint bring the next thorough
    round (and its checkpoint) forward, at most every ``burst_gap_s``: a crash soon after a
    burst of new queues then finds most of them in the checkpoint (a queue made after the
    last one is opened and checked at the next start: minutes for 100,000)."""
    burst_gap_s = 10.0
    _made_at_checkpoint = 0

    def _least_pages_now(self) -> int:
        least = super()._least_pages_now()
        if (
            least
            and self.checkpoint is not None
            and self.table.made - self._made_at_checkpoint >= self.burst_queues
        ):
            now = self.clock.monotonic()
            if now - self._last_thorough >= self.burst_gap_s:
                self._last_thorough = now
                return 0
        return least

    def step(self, least_pages: int) -> bool:
        """A thorough round (``least_pages`` 0) also writes the per-queue checkpoint: the
        states are taken before the flush, written after it (what they record is durable).
        Not at stop: the shutdown writes its own."""
        ts = self.table.last_store_timestamp
        writer = self.checkpoint if least_pages == 0 and not self.stopped else None
        if writer is not None:
            self._made_at_checkpoint = self.table.made
        taken = writer.take() if writer is not None else None
        if not self._swept:
            self.table.flush_every()
            self._swept = True
        self.table.flush(least_pages)
        if least_pages == 0 and ts and self.on_flushed is not None:
            self.on_flushed(ts)
        if writer is not None and taken is not None:
            try:
                writer.save(taken)
            except StoreError:
                log.exception("%s: the per-queue checkpoint was not written", self.name)
        return False
