"""One fixed-size memory-mapped store file, named by the offset of its first byte.

Positions, all relative to the start of the file::

    0 ........ flushed ........ committed ........ wrote ........ file_size
      durable  | in the file's pages | in the write buffer only | free

Without a write buffer (no TransientStorePool) committed is unused and data goes straight into
the mapped file, so the read position is ``wrote``; with a write buffer readers see only what has
been committed into the file.

Disk blocks: a file is created at its full size but sparse, as RocketMQ creates it, and gets
its blocks in steps as writes reach them (``ensure_allocated``: ``allocated`` bytes from the start
have blocks, ``allocate_ahead`` more are reserved at each step). A write through the mapping into
a hole on a full file system would kill the process with SIGBUS; a reservation that fails raises
StoreIOError (ENOSPC) instead, before anything is written. Writers call ``ensure_allocated``
before writing past ``allocated``; zeroing goes through the file descriptor (``zero_range``).

Reference counting: the file starts with one reference held by its queue. Readers ``hold()``
before touching the mapping and ``release()`` after; ``shutdown()`` drops the queue's reference
and makes ``hold()`` fail, and the mapping is closed when the last reference goes (or forcibly
after ``interval_forcibly`` ms, when a reader never came back).

Descriptors and mappings: a file keeps its descriptor open for its life (the commit log: its
writes, reservations and syncs go through it), or, with ``keep_fd=False``, closes it once
mapped (``_mapping.map_file``: the mapping holds none either) and opens one for the few calls
that need it (reserving blocks, zeroing, syncing without a mapping). A file given a
``MappingLRU`` (consume-queue files) is mapped on demand: a loaded one when first held, and
``hold()`` maps it again after the LRU unmapped it (``try_unmap``, only while nobody holds
it). Its ``mm`` is a closed mapping while it is unmapped: touching it without a hold raises
ValueError, never a fault.

Threads: one writer appends (under the commit log's put lock); flush and commit run in their
service threads; readers call ``select_mapped_buffer`` from any thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._clock import SYSTEM_CLOCK, Clock
from .._durable import data_ranges, reserve, write_zeroes, zero_range
from .._errors import CorruptFileError, StoreError, translate_os_errors
from .._memory import MS_SYNC, mapping_address, mlock, msync_function
from ._mapping import map_file

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ._mapping_lru import MappingLRU
    from ._transient_pool import TransientStorePool

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096
_ZERO_CHUNK = bytes(1 << 20)
DEFAULT_ALLOCATE_AHEAD = 4 << 20

_counter_lock = threading.Lock()
_total_mapped_files = 0
_total_mapped_bytes = 0


def mapped_counters() -> tuple[int, int]:
    """Process-wide (mapped files, mapped bytes)."""
    with _counter_lock:
        return _total_mapped_files, _total_mapped_bytes


def _count(files: int, size: int) -> None:
    global _total_mapped_files, _total_mapped_bytes
    with _counter_lock:
        _total_mapped_files += files
        _total_mapped_bytes += size


def _closed_mapping() -> mmap.mmap:
    mm = mmap.mmap(-1, 1)
    mm.close()
    return mm


UNMAPPED = _closed_mapping()  # ``mm`` of a file not mapped now: any access raises ValueError


def file_name_for(offset: int) -> str:
    return f"{offset:020d}"


@dataclass(slots=True)
class SelectMappedBufferResult:
    """A read-only view of ``size`` bytes starting at store offset ``start_offset``.

    The file stays mapped until ``release()``; use it as a context manager.
    """

    start_offset: int
    buffer: memoryview
    size: int
    mapped_file: MappedFile | None

    def release(self) -> None:
        mf = self.mapped_file
        if mf is not None:
            self.mapped_file = None
            self.buffer.release()
            mf.release()

    def __enter__(self) -> SelectMappedBufferResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class MappedFile:
    """A store file of exactly ``file_size`` bytes, mapped read-write (or read-only)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        file_size: int,
        *,
        pool: TransientStorePool | None = None,
        clock: Clock = SYSTEM_CLOCK,
        read_only: bool = False,
        create: bool = True,
        preallocate: bool = False,
        allocate_ahead: int = DEFAULT_ALLOCATE_AHEAD,
        keep_fd: bool = True,
        lru: MappingLRU | None = None,
    ) -> None:
        """``preallocate``: reserve all of the file's disk blocks when creating it (a full disk
        then fails the creation). Otherwise the file is sparse and ``ensure_allocated``
        reserves blocks ``allocate_ahead`` bytes at a time (at least a page).
        ``keep_fd=False``: no descriptor kept once mapped; ``lru``: mapped on demand, within
        that LRU's bound (implies ``keep_fd=False``)."""
        self.path = Path(path)
        self.file_size = file_size
        self.clock = clock
        self.read_only = read_only
        self._lru = lru
        self._keep_fd = keep_fd and lru is None
        self.mm = UNMAPPED
        self.mapped = False
        self._used = True  # held since the LRU last looked (a new file: not evicted at once)
        # the writer may write without a hold (the LRU's writer holds; always for files
        # that are never unmapped)
        self.writer_held = lru is None
        self._address = -1  # of the mapping in memory, looked up at the first flush
        try:
            self.from_offset = int(self.path.name)
        except ValueError:
            raise CorruptFileError(
                f"{self.path}: a store file must be named by its offset"
            ) from None
        with translate_os_errors(f"open {self.path}"):
            exists = self.path.exists()
            if not exists and (read_only or not create):
                raise CorruptFileError(f"{self.path}: no such store file")
            flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
            self._fd = os.open(self.path, flags, 0o644)
            try:
                actual = os.fstat(self._fd).st_size
                if exists and actual != file_size:
                    raise CorruptFileError(
                        f"{self.path}: size {actual} differs from the configured {file_size}"
                    )
                if not exists:
                    os.ftruncate(self._fd, file_size)
                if not exists and preallocate:
                    try:
                        reserve(self._fd, 0, file_size)
                    except OSError:
                        os.unlink(self.path)
                        raise
                # a loaded file with an LRU is mapped when first held; a new one at once (its
                # writer comes next)
                if lru is None or not exists:
                    self._map(self._fd)
            except BaseException:
                os.close(self._fd)
                raise
        self.created = not exists
        self.allocate_ahead = max(OS_PAGE_SIZE, allocate_ahead)
        # bytes from the start known to have disk blocks (writes below it cannot fault)
        self.allocated = file_size
        if not (self.created and preallocate):
            # a loaded file: up to the end of its last data (what it holds is written there,
            # from the start, by appends); past it only holes, which are never read through
            # the mapping (on tmpfs even a read fault there needs a page, SIGBUS when full)
            ranges = [] if self.created else data_ranges(self._fd, 0, file_size)
            end = ranges[-1][1] if ranges else 0
            self.allocated = min(file_size, -(-end // OS_PAGE_SIZE) * OS_PAGE_SIZE)
        if not self._keep_fd:
            os.close(self._fd)
            self._fd = -1
        # positions
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last message appended
        self.first_create_in_queue = False
        # write buffer from the TransientStorePool (None: write straight into the mapping)
        self._pool = pool
        self.write_buffer: mmap.mmap | None = None
        if pool is not None:
            try:
                self.write_buffer = pool.borrow_buffer()
            except StoreError:
                # as RocketMQ: with no buffer left the file is written directly
                log.warning("%s: no write buffer free in the transient store pool", self.path)
        # where appends go: the write buffer if there is one, else the mapping (an attribute,
        # not a property: the put path reads it for every message)
        self.write_target: mmap.mmap = (
            self.write_buffer if self.write_buffer is not None else self.mm
        )
        # reference counting
        self._ref_lock = threading.Lock()
        self._refs = 1
        self._available = True
        self._cleanup_over = False
        self._first_shutdown_ms = 0
        self._closed = False
        if lru is not None and self.mapped:
            lru.mapped(self)

    # ---- mapping ----------------------------------------------------------------------------

    def _map(self, fd: int) -> None:
        """Map the file through ``fd`` (which the caller closes). Raises OSError."""
        access = mmap.ACCESS_READ if self.read_only else mmap.ACCESS_WRITE
        self.mm, _detached = map_file(fd, self.file_size, access)
        self._address = -1
        self.mapped = True
        _count(1, self.file_size)

    def _map_again(self) -> None:
        """Map an unmapped file (``_ref_lock`` held). Raises StoreIOError."""
        with translate_os_errors(f"map {self.path}"):
            fd = os.open(self.path, os.O_RDONLY if self.read_only else os.O_RDWR)
            try:
                actual = os.fstat(fd).st_size
                if actual != self.file_size:
                    raise CorruptFileError(
                        f"{self.path}: size {actual} differs from the configured {self.file_size}"
                    )
                self._map(fd)
            finally:
                os.close(fd)
        if self.write_buffer is None:
            self.write_target = self.mm

    def take_used(self) -> bool:
        """Whether the file was held since the last call (and forget it). The LRU's lock."""
        used = self._used
        self._used = False
        return used

    def try_unmap(self) -> bool:
        """Unmap the file when nobody holds it (only its queue's reference, no writer hold,
        no buffer exported); False otherwise, or when its lock is busy. The LRU's lock."""
        if not self._ref_lock.acquire(blocking=False):
            return False
        try:
            if not self.mapped or not self._available or self._refs != 1 or self.writer_held:
                return False
            try:
                self.mm.close()
            except BufferError:  # a view of it is still out
                return False
            self.mm = self.write_target = UNMAPPED
            self.mapped = False
            self._address = -1
        finally:
            self._ref_lock.release()
        _count(-1, -self.file_size)
        return True

    @contextlib.contextmanager
    def _descriptor(self) -> Iterator[int]:
        """The file's descriptor: its own, or one opened for the block (``keep_fd=False``).
        Raises OSError."""
        if self._fd >= 0:
            yield self._fd
            return
        fd = os.open(self.path, os.O_RDONLY if self.read_only else os.O_RDWR)
        try:
            yield fd
        finally:
            os.close(fd)

    # ---- state ------------------------------------------------------------------------------

    @property
    def file_name(self) -> str:
        return self.path.name

    @property
    def read_position(self) -> int:
        return self.committed_position if self.write_buffer is not None else self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, position: int) -> None:
        """Set wrote, committed and flushed positions at once (after loading or recovery)."""
        self.wrote_position = self.committed_position = self.flushed_position = position

    @property
    def available(self) -> bool:
        return self._available

    @property
    def cleanup_over(self) -> bool:
        return self._cleanup_over

    @property
    def ref_count(self) -> int:
        return self._refs

    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except OSError:
            return 0

    # ---- writing ----------------------------------------------------------------------------

    def ensure_allocated(self, end: int) -> None:
        """Make sure bytes [0, end) have disk blocks before they are written: when ``end`` is
        past ``allocated``, reserve up to ``allocate_ahead`` bytes beyond it (only what ``end``
        needs when the disk has no room for more). Raises StoreIOError (errno ENOSPC when the
        disk is full), with nothing written. The file's writer only."""
        have = self.allocated
        if end <= have:
            return
        size = self.file_size
        need = min(size, -(-end // OS_PAGE_SIZE) * OS_PAGE_SIZE)
        ahead = min(size, max(need, have + self.allocate_ahead))
        ahead = min(size, -(-ahead // OS_PAGE_SIZE) * OS_PAGE_SIZE)
        with translate_os_errors(f"allocate disk blocks for {self.path}"), self._descriptor() as fd:
            if have == 0:
                # a new file's first page: written as zeroes through the descriptor, so the
                # first write through the mapping takes no block allocation in its page fault
                # (about a millisecond on ext4: a new consume queue's first unit)
                write_zeroes(fd, 0, min(size, OS_PAGE_SIZE))
            try:
                ok = reserve(fd, have, ahead)
            except OSError:
                if ahead <= need:
                    raise
                ok = reserve(fd, have, need)
                ahead = need
        self.allocated = ahead if ok else size

    def allocate_range(self, start: int, end: int) -> None:
        """Give bytes [start, end) disk blocks (pages written out of order: index slots).
        Raises StoreIOError as ``ensure_allocated``.

        The range is always reserved, even below ``allocated``: a loaded file's ``allocated``
        is where its last data ends, and a file written out of order has holes below it (an
        index file's slot pages never written). Blocks already there cost nothing."""
        lo = start - start % OS_PAGE_SIZE
        hi = min(self.file_size, -(-end // OS_PAGE_SIZE) * OS_PAGE_SIZE)
        if hi <= lo:
            return
        with translate_os_errors(f"allocate disk blocks for {self.path}"), self._descriptor() as fd:
            ok = reserve(fd, lo, hi)
        if not ok:
            self.allocated = self.file_size
        elif lo <= self.allocated < hi:
            self.allocated = hi

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """The ranges of bytes [start, end) with disk blocks (see ``_durable.data_ranges``)."""
        with self._descriptor() as fd:
            return data_ranges(fd, start, end)

    def zero_range(self, start: int, end: int) -> None:
        """Zero bytes [start, end) of the file (and of the write buffer) through the file
        descriptor, skipping holes: nothing is allocated, nothing can fault. Raises
        StoreIOError."""
        if self.write_buffer is not None:
            self.write_buffer[start:end] = bytes(end - start)
        with translate_os_errors(f"zero {self.path}"), self._descriptor() as fd:
            zero_range(fd, start, end)

    def append(
        self, data: bytes | bytearray | memoryview, offset: int = 0, length: int = -1
    ) -> bool:
        """Append raw bytes (replication, tests); False when they do not fit. Raises
        StoreIOError when the disk has no room for them."""
        view = memoryview(data)
        if length < 0:
            length = len(view) - offset
        pos = self.wrote_position
        if pos + length > self.file_size:
            return False
        if pos + length > self.allocated:
            self.ensure_allocated(pos + length)
        self.write_target[pos : pos + length] = view[offset : offset + length]
        self.wrote_position = pos + length
        return True

    def _dirty_pages_enough(self, base: int, target: int, least_pages: int) -> bool:
        if self.is_full():
            return target > base
        if least_pages > 0:
            return target // OS_PAGE_SIZE - base // OS_PAGE_SIZE >= least_pages
        return target > base

    def commit(self, least_pages: int) -> int:
        """Copy buffered data into the mapping when ``least_pages`` are waiting (0: any).

        Called by the commit service only. Returns the committed position.
        """
        wb = self.write_buffer
        if wb is None:
            return self.wrote_position
        committed = self.committed_position
        wrote = self.wrote_position
        if self._dirty_pages_enough(committed, wrote, least_pages) and self.hold():
            try:
                # a file write, as RocketMQ commits its write buffers: no temporary copy, no
                # page faults in the mapping, and the interpreter lock is released meanwhile
                with (
                    memoryview(wb) as view,
                    translate_os_errors(f"commit {self.path}"),
                    self._descriptor() as fd,
                ):
                    pos = committed
                    while pos < wrote:
                        pos += os.pwrite(fd, view[pos:wrote], pos)
                self.committed_position = wrote
            finally:
                self.release()
        if self.committed_position >= self.file_size and self._pool is not None:
            self.write_buffer = None
            self.write_target = self.mm
            self._pool.return_buffer(wb)
        return self.committed_position

    def flush(self, least_pages: int) -> int:
        """Make the readable data durable when ``least_pages`` are dirty (0: any).

        Called by one flush thread at a time. Returns the flushed position.
        """
        target = self.read_position
        if not self._dirty_pages_enough(self.flushed_position, target, least_pages):
            return self.flushed_position
        if not self.mapped and self._lru is not None:
            # unmapped by the LRU: its pages are the kernel's; synced without mapping it again
            if self._available:
                with translate_os_errors(f"flush {self.path}"), self._descriptor() as fd:
                    os.fdatasync(fd)
                self.flushed_position = target
        elif self.hold():
            try:
                with translate_os_errors(f"flush {self.path}"):
                    self._sync(self.flushed_position, target)
                self.flushed_position = target
            finally:
                self.release()
        return self.flushed_position

    def sync_range(self, start: int, end: int) -> None:
        """Make bytes [start, end) durable now, whatever the flushed position: for writes
        below it (truncation zeroes data that was flushed). Raises StoreIOError."""
        if self.hold():
            try:
                with translate_os_errors(f"sync {self.path}"):
                    self._sync(start, end)
            finally:
                self.release()

    def _sync(self, start: int, end: int) -> None:
        """Make bytes [start, end) of the file durable, and nothing else.

        ``msync(MS_SYNC)`` of those pages of the mapping, which on Linux is an fdatasync of
        that range of the file (pages written through the mapping or with ``pwrite`` alike);
        an fdatasync of the whole file writes every dirty page of it. Where msync cannot be
        called, fdatasync. Raises OSError."""
        msync = msync_function()
        if msync is not None and self._address < 0:
            self._address = mapping_address(self.mm)
        if msync is None or not self._address:
            with self._descriptor() as fd:
                os.fdatasync(fd)
            return
        lo = start - start % mmap.PAGESIZE
        if end <= lo:
            return
        if msync(self._address + lo, end - lo, MS_SYNC) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"msync: {os.strerror(err)}")

    # ---- reading ----------------------------------------------------------------------------

    def select_mapped_buffer(
        self, pos: int, size: int | None = None
    ) -> SelectMappedBufferResult | None:
        """A held view from ``pos`` (to the read position, or ``size`` bytes); None if unreadable."""
        readable = self.read_position
        if readable > self.allocated:  # a loaded file: nothing past its data is read
            readable = self.allocated
        if pos < 0 or pos > readable:
            return None
        end = readable if size is None else pos + size
        if end > readable or (size is not None and size < 0):
            return None
        if not self.hold():
            return None
        return SelectMappedBufferResult(
            self.from_offset + pos, memoryview(self.mm)[pos:end], end - pos, self
        )

    # ---- warm-up ----------------------------------------------------------------------------

    def warm(
        self, *, lock_memory: bool = False, sync_flush: bool = False, flush_least_pages: int = 0
    ) -> None:
        """Bring every page into the page cache before the first write (RocketMQ's
        warmMappedFile, the explicit opt-in to touch every page: the whole file gets its disk
        blocks).

        The blocks are reserved first (StoreIOError, ENOSPC, on a full disk), then zeroes are
        written through the file descriptor (the interpreter lock is released during each
        write, so producers keep running). Under SYNC_FLUSH (``sync_flush``) what was touched is
        made durable every ``flush_least_pages`` pages and at the end, as RocketMQ forces the
        mapping while it warms it. Then the kernel is told the pages will be needed;
        optionally they are locked in memory.
        """
        size = self.file_size
        step = len(_ZERO_CHUNK)
        every = max(1, flush_least_pages) * OS_PAGE_SIZE if sync_flush else 0
        if every:
            step = min(step, every)
        with translate_os_errors(f"warm {self.path}"), self._descriptor() as fd:
            if reserve(fd, 0, size):
                self.allocated = size
            flushed = 0
            for off in range(0, size, step):
                n = min(step, size - off)
                os.pwrite(fd, memoryview(_ZERO_CHUNK)[:n], off)
                if every and off + n - flushed >= every:
                    self._sync(flushed, off + n)
                    flushed = off + n
            if sync_flush and flushed < size:
                self._sync(flushed, size)
            self.allocated = size
        with contextlib.suppress(OSError, AttributeError):
            self.mm.madvise(mmap.MADV_WILLNEED)
        if lock_memory:
            mlock(self.mm, self.file_size)

    # ---- reference counting -----------------------------------------------------------------

    def hold(self) -> bool:
        """Take a reference (mapping the file when the LRU unmapped it); False once the file
        is shut down. Raises StoreIOError when it cannot be mapped again (open-file or
        mapping limits)."""
        with self._ref_lock:
            if not self._available or self._refs <= 0:
                return False
            mapped_now = not self.mapped
            if mapped_now:
                self._map_again()
            self._refs += 1
            self._used = True
        if mapped_now and self._lru is not None:
            self._lru.mapped(self)
        return True

    def release(self) -> None:
        with self._ref_lock:
            self._refs -= 1
            if self._refs > 0:
                return
        self._cleanup()

    def shutdown(self, interval_forcibly_ms: int) -> None:
        """Stop new holds and drop the queue's reference; past the interval, force it."""
        now = self.clock.now_ms()
        with self._ref_lock:
            if self._available:
                self._available = False
                self._first_shutdown_ms = now
                drop = True
            elif self._refs > 0 and now - self._first_shutdown_ms >= interval_forcibly_ms:
                self._refs = 1 - self._refs - 1000  # forcibly below zero
                drop = True
            else:
                drop = False
        if drop:
            self.release()

    def _cleanup(self) -> None:
        with self._ref_lock:
            if self._closed:
                return
            self._closed = True
        if self.write_buffer is not None and self._pool is not None:
            self._pool.return_buffer(self.write_buffer)
            self.write_buffer = None
        try:
            self.mm.close()
        except BufferError:
            log.warning(
                "%s: a reader still holds a view; the mapping is left to the collector", self.path
            )
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        if self.mapped:
            self.mapped = False
            _count(-1, -self.file_size)
        if self._lru is not None:
            self._lru.forget(self)
        self._cleanup_over = True

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        """Shut down and delete the file; False while readers still hold it."""
        self.shutdown(interval_forcibly_ms)
        if not self._cleanup_over:
            return False
        # a file already gone is deleted; any other failure is the store's I/O error
        with translate_os_errors(f"delete {self.path}"), contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        return True

    def close(self) -> None:
        """Shut down without deleting (store shutdown)."""
        self.shutdown(0)
        if not self._cleanup_over:
            self.shutdown(0)

    def truncate_to(self, position: int) -> None:
        """Zero everything from ``position`` to the end and move the positions back there."""
        if self.read_only:
            raise StoreError(f"{self.path}: read-only")
        self.zero_range(position, self.file_size)
        self.set_positions(position)
        # flushes sync only what they add: the zeroes must not wait for them, or a crash
        # could bring the cut records back behind newer ones
        self.sync_range(position, self.file_size)

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.file_name}, wrote={self.wrote_position}, "
            f"committed={self.committed_position}, flushed={self.flushed_position})"
        )
