"""MappingLRU: a bound on how many files that map on demand (consume-queue and index files) are
mapped.

A store with many queues has many consume-queue files, and a mapped file costs one of the
kernel's mappings of the process (``vm.max_map_count``, 65,530 by default), and one open
file where the mapping keeps a descriptor (``_mapping``). Such files are mapped when first
held and stay mapped while they are used; when more of them are mapped than the bound, the
least recently used idle ones are unmapped::

    mapped, least recently used first          hold(): mapped again on demand
    ┌────┬────┬────┬─────────────────┬────┐
    │ f7 │ f2 │ f9 │ ...             │ f4 │  ◄── mapped (a new file, or hold() of an
    └────┴────┴────┴─────────────────┴────┘       unmapped one); over the bound: unmap
      ▲ unmapped when idle: only the queue's        from the left
        own reference (no reader's hold, no
        writer's hold), and nothing exported

A file used since the evictor last passed it gets a second chance (moved to the end) instead
of an LRU reordering on every hold: ``hold()`` only sets a flag. A file that is held is never
unmapped, whatever the pressure; the bound can then be passed for as long as the holds last.

The writer (the dispatcher) writes a queue's last file without a hold per unit: it takes a
*writer hold* on each file it writes to (``hold_for_writer``), and keeps at most
``writer_holds`` of them, giving up the oldest. A file under a writer hold has
``writer_held`` set, which the unit writers check; without it they take the slow path,
which takes the hold. A file that is full, or about to be deleted, is let go at once.

What an unmapped file keeps: its name, size, positions and reference count; no descriptor,
no mapping. Its units are in the page cache and on disk, and read back byte for byte when it
is mapped again. Its dirty pages stay the kernel's (an unmapped file is flushed through a
descriptor opened for the call).

The bound (``default_bound``): half of ``vm.max_map_count`` (the other half is the
interpreter's, its libraries', thread stacks', the commit log's); where mappings keep a
descriptor, also at most a quarter of the open-file limit (half of it is the servers'
connections, ``remoting/_allowance``). ``max_mapped_queue_files`` in the store's config
overrides it.

Threads: ``mapped`` / ``forget`` / ``release_writer_hold`` from any thread (no file's lock
held); ``hold_for_writer`` from the writer only. One lock for the table; a file's own lock is
only tried (never waited for) while the table's is held.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from ._mapping import descriptors_kept

log = logging.getLogger(__name__)

DEFAULT_MAX_MAP_COUNT = 65_530  # Linux's default vm.max_map_count
MIN_BOUND = 16
MAX_MAP_COUNT_PATH = "/proc/sys/vm/max_map_count"


class MappedFile(Protocol):
    """What the LRU uses of a file it bounds (``_mapped_file.MappedFile``)."""

    writer_held: bool

    def hold(self) -> bool: ...

    def release(self) -> None: ...

    def take_used(self) -> bool: ...

    def try_unmap(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class MappingStatistics:
    """A snapshot of a MappingLRU."""

    mapped: int  # files of the table mapped now
    bound: int
    evictions: int  # files unmapped for the bound since start
    writer_held: int


def max_map_count() -> int:
    """The kernel's limit of mappings a process may have (``vm.max_map_count``)."""
    try:
        with open(MAX_MAP_COUNT_PATH, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return DEFAULT_MAX_MAP_COUNT


def open_files_limits() -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE of this process; -1 for unlimited or unknown."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not a Unix
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return (-1 if soft == unlimited else int(soft)), (-1 if hard == unlimited else int(hard))


def default_bound() -> int:
    """The mapped consume-queue files the process's limits allow (see the module's text)."""
    bound = max_map_count() // 2
    soft, _hard = open_files_limits()
    if descriptors_kept() and soft > 0:
        bound = min(bound, soft // 4)
    return max(MIN_BOUND, bound)


class MappingLRU:
    """The mapped files of one table (a store's consume queues), at most ``bound`` of them
    unless held."""

    def __init__(self, bound: int, *, writer_holds: int | None = None) -> None:
        if bound < 1:
            raise ValueError(f"a mapping bound must be positive, not {bound}")
        self.bound = bound
        self.writer_holds = writer_holds if writer_holds is not None else max(1, bound // 4)
        self.evictions = 0
        self._lock = threading.Lock()
        self._files: OrderedDict[int, MappedFile] = OrderedDict()
        self._writer: OrderedDict[int, MappedFile] = OrderedDict()  # the writer's thread only

    # ---- the table ----------------------------------------------------------------------------

    def mapped(self, mf: MappedFile) -> None:
        """``mf`` was just mapped (and is held by whoever mapped it); unmaps idle files while
        more than the bound are mapped. Any thread, no file's lock held."""
        with self._lock:
            self._files[id(mf)] = mf
            if len(self._files) > self.bound:
                self._evict_locked(len(self._files) - self.bound + self.bound // 16)

    def forget(self, mf: MappedFile) -> None:
        """``mf`` was unmapped for good (shut down, deleted). Any thread."""
        with self._lock:
            self._files.pop(id(mf), None)

    def _evict_locked(self, want: int) -> None:
        files = self._files
        done = 0
        # two turns at most: every file used since the last pass gets its second chance in
        # the first, and is a candidate in the second
        for _ in range(2 * len(files)):
            if done >= want:
                break
            key, mf = files.popitem(last=False)
            if mf.take_used():
                files[key] = mf  # used since the last pass: a second chance
            elif mf.try_unmap():
                done += 1
            else:
                files[key] = mf  # held, or busy right now
        self.evictions += done

    def __len__(self) -> int:
        return len(self._files)

    # ---- the writer's holds ---------------------------------------------------------------

    def hold_for_writer(self, mf: MappedFile) -> None:
        """Hold ``mf`` for the writer (mapping it when it is not), giving up the oldest writer
        hold beyond ``writer_holds``. Writer's thread. Raises StoreIOError when it cannot be
        mapped (StoreClosedError-like False from hold: a file being deleted is not held)."""
        key = id(mf)
        with self._lock:
            if key in self._writer:
                self._writer.move_to_end(key)
                return
        if not mf.hold():
            return
        gone: list[MappedFile] = []
        with self._lock:
            mf.writer_held = True
            self._writer[key] = mf
            while len(self._writer) > self.writer_holds:
                gone.append(self._writer.popitem(last=False)[1])
        for old in gone:
            old.writer_held = False
            old.release()

    def release_writer_hold(self, mf: MappedFile) -> None:
        """Give up the writer's hold of ``mf`` (it is full, or about to be deleted). Any
        thread."""
        with self._lock:
            held = self._writer.pop(id(mf), None) is not None
        if held:
            mf.writer_held = False
            mf.release()

    def release_writer_holds(self) -> None:
        """Give up every writer hold (shutdown, once the writer stopped)."""
        with self._lock:
            gone = list(self._writer.values())
            self._writer.clear()
        for mf in gone:
            mf.writer_held = False
            mf.release()

    def statistics(self) -> MappingStatistics:
        return MappingStatistics(len(self._files), self.bound, self.evictions, len(self._writer))


# ---- the process's files, for operators --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileStatistics:
    """A store's files against the process's limits (``MessageStore.file_statistics()``)."""

    queue_files: int  # consume-queue files of the store
    mapped_queue_files: int  # files of the LRU mapped now (consume-queue and index files)
    mapped_queue_files_bound: int  # the LRU's bound (0: no LRU)
    queue_file_evictions: int  # unmapped for the bound since start
    mapped_files: int  # store files mapped by this process (commit log, queues, index)
    mappings: int  # the process's mappings (/proc/self/maps lines; -1 unknown)
    max_map_count: int  # vm.max_map_count
    open_files: int  # the process's open descriptors (/proc/self/fd; -1 unknown)
    open_files_limit: int  # RLIMIT_NOFILE soft (-1 unlimited)
    open_files_hard_limit: int  # RLIMIT_NOFILE hard (-1 unlimited)
    descriptors_per_mapping: int  # 0, or 1 where a mapping keeps its descriptor


def open_file_count() -> int:
    """Descriptors this process has open (-1 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listing the directory
    except OSError:
        return -1


def mapping_count() -> int:
    """Mappings this process has (lines of /proc/self/maps; -1 where it cannot be read)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return -1
