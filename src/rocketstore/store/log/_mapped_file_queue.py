"""MappedFileQueue: the ordered files of one log (the commit log, or one consume queue).

File n starts at ``first.from_offset + n * file_size``; the first files may have been deleted
by retention, so a lookup by offset subtracts the first file's index. The list is replaced, not
mutated (copy on write), so readers take ``files`` without a lock.

Threads: one writer (the owner of the log's put lock) creates and appends; flush/commit from one
service thread each; deletion from the clean service; readers from anywhere.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .._clock import SYSTEM_CLOCK, Clock
from .._durable import DeferredDirSync, fsync_dir, make_dirs_synced
from .._errors import CorruptFileError, StoreError, translate_os_errors
from ._mapped_file import DEFAULT_ALLOCATE_AHEAD, MappedFile, file_name_for

if TYPE_CHECKING:
    from ._allocate import AllocateMappedFileService
    from ._mapping_lru import MappingLRU
    from ._transient_pool import TransientStorePool

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10


class MappedFileQueue:
    def __init__(
        self,
        store_path: str | os.PathLike[str],
        file_size: int,
        *,
        allocator: AllocateMappedFileService | None = None,
        pool: TransientStorePool | None = None,
        clock: Clock = SYSTEM_CLOCK,
        read_only: bool = False,
        preallocate: bool = False,
        allocate_ahead: int = DEFAULT_ALLOCATE_AHEAD,
        keep_fd: bool = True,
        lru: MappingLRU | None = None,
        dir_sync: DeferredDirSync | None = None,
    ) -> None:
        """``preallocate``: new files get all their disk blocks at once; otherwise they are
        sparse and get blocks ``allocate_ahead`` bytes ahead of the writes (see MappedFile).
        New files and directories are made durable in their parent directory: at once, or
        with ``dir_sync`` before the next flush. ``keep_fd`` and ``lru``: how long the files
        keep a descriptor and a mapping (see MappedFile)."""
        self.store_path = Path(store_path)
        self.preallocate = preallocate
        self.allocate_ahead = allocate_ahead
        self.file_size = file_size
        self.allocator = allocator
        self.pool = pool
        self.clock = clock
        self.read_only = read_only
        self.keep_fd = keep_fd
        self.lru = lru
        self.dir_sync = dir_sync
        self.files: list[MappedFile] = []
        self._lock = threading.Lock()
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0  # store time of the last flushed message

    # ---- loading ----------------------------------------------------------------------------

    def load(self) -> None:
        """Open every existing file (mapped now, or when first held with an LRU); a file of
        another size is an error (names must be offsets), except a last file shorter than the
        others in a read-only queue, which is left out."""
        if not self.store_path.is_dir():
            return
        names = []
        with translate_os_errors(f"list {self.store_path}"):
            for entry in os.scandir(self.store_path):
                if not entry.is_file():
                    continue
                if not entry.name.isdigit() or len(entry.name) != 20:
                    if entry.name.endswith((".tmp", ".bak")):
                        continue
                    raise CorruptFileError(f"{entry.path}: not a store file name (20 digits)")
                names.append(entry.name)
        names.sort()
        files: list[MappedFile] = []
        for i, name in enumerate(names):
            offset = int(name)
            if offset % self.file_size:
                raise CorruptFileError(
                    f"{self.store_path / name}: offset is not a multiple of the file size "
                    f"{self.file_size}"
                )
            if i and offset != files[-1].from_offset + self.file_size:
                raise CorruptFileError(
                    f"{self.store_path}: file {name} does not follow {files[-1].file_name}"
                )
            if self.read_only and i == len(names) - 1:
                with translate_os_errors(f"stat {self.store_path / name}"):
                    size = (self.store_path / name).stat().st_size
                if size < self.file_size:
                    # the last file is being created (or a crash left it so): it holds nothing
                    # yet; a reader's queue ends before it
                    break
            mf = MappedFile(
                self.store_path / name,
                self.file_size,
                clock=self.clock,
                read_only=self.read_only,
                create=False,
                allocate_ahead=self.allocate_ahead,
                keep_fd=self.keep_fd,
                lru=self.lru,
            )
            mf.set_positions(self.file_size)
            files.append(mf)
        self.files = files

    # ---- creating ---------------------------------------------------------------------------

    def get_last_mapped_file(
        self, start_offset: int = 0, need_create: bool = True
    ) -> MappedFile | None:
        """The file appends go to; a new one when there is none or the last is full."""
        files = self.files
        last = files[-1] if files else None
        if last is not None and not last.is_full():
            return last
        if not need_create or self.read_only:
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.file_size
        else:
            create_offset = last.from_offset + self.file_size
        return self._create(create_offset, first=not files)

    def _create(self, offset: int, first: bool) -> MappedFile | None:
        path = self.store_path / file_name_for(offset)
        if self.allocator is not None:
            next_path = self.store_path / file_name_for(offset + self.file_size)
            mf = self.allocator.request(path, next_path, self.file_size)
            if mf is None:
                return None
        else:
            dir_sync = self.dir_sync
            with translate_os_errors(f"create {self.store_path}"):
                if dir_sync is None:
                    make_dirs_synced(self.store_path)
                else:
                    dir_sync.make_dirs(self.store_path)
            mf = MappedFile(
                path,
                self.file_size,
                pool=self.pool,
                clock=self.clock,
                preallocate=self.preallocate,
                allocate_ahead=self.allocate_ahead,
                keep_fd=self.keep_fd,
                lru=self.lru,
            )
            if mf.created and dir_sync is not None:
                dir_sync.note(self.store_path)
            elif mf.created:
                try:
                    with translate_os_errors(f"sync {self.store_path}"):
                        fsync_dir(self.store_path)
                except StoreError:
                    mf.destroy(0)
                    raise
        mf.first_create_in_queue = first
        with self._lock:
            self.files = [*self.files, mf]
        return mf

    # ---- lookups ----------------------------------------------------------------------------

    def first_file(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def find_mapped_file_by_offset(
        self, offset: int, return_first_on_not_found: bool = False
    ) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        first, last = files[0], files[-1]
        size = self.file_size
        if offset < first.from_offset or offset >= last.from_offset + size:
            return first if return_first_on_not_found else None
        index = offset // size - first.from_offset // size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.from_offset <= offset < mf.from_offset + size:
                return mf
        for mf in files:
            if mf.from_offset <= offset < mf.from_offset + size:
                return mf
        return first if return_first_on_not_found else None

    def get_mapped_file_by_time(self, timestamp_ms: int) -> MappedFile | None:
        """The first file last modified at or after the time, else the last file."""
        files = self.files
        for mf in files:
            if mf.last_modified_ms() >= timestamp_ms:
                return mf
        return files[-1] if files else None

    def get_min_offset(self) -> int:
        files = self.files
        return files[0].from_offset if files else -1

    def get_max_offset(self) -> int:
        """End of the readable data."""
        files = self.files
        return files[-1].from_offset + files[-1].read_position if files else 0

    def get_max_wrote_position(self) -> int:
        files = self.files
        return files[-1].from_offset + files[-1].wrote_position if files else 0

    def remaining_to_commit(self) -> int:
        return self.get_max_wrote_position() - self.committed_where

    def remaining_to_flush(self) -> int:
        return self.get_max_offset() - self.flushed_where

    def total_file_size(self) -> int:
        return self.file_size * len(self.files)

    # ---- flush and commit -------------------------------------------------------------------

    def flush(self, least_pages: int) -> int:
        """Flush the file holding ``flushed_where``; returns the new flushed_where. The new
        files' directory entries still waiting (``dir_sync``) are made durable first."""
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return self.flushed_where
        dir_sync = self.dir_sync
        if dir_sync is not None and dir_sync.pending:
            with translate_os_errors(f"sync {self.store_path}"):
                dir_sync.sync()
        ts = mf.store_timestamp
        where = mf.from_offset + mf.flush(least_pages)
        if where > self.flushed_where:
            self.flushed_where = where
            if least_pages == 0 or ts:
                self.store_timestamp = ts
        return self.flushed_where

    def flush_marks(self) -> list[tuple[MappedFile, int, int]]:
        """What a flush of everything would make durable now: (file, its readable end, its
        store time) from the file holding ``flushed_where`` on. For ``flushed_to`` once
        something else made the files durable (``sync_file_system``): what is written after
        this call is not covered."""
        start = self.flushed_where
        marks = []
        for mf in self.files:
            if mf.from_offset + self.file_size > start:
                ts = mf.store_timestamp  # first, as ``flush``: not newer than the end read
                marks.append((mf, mf.read_position, ts))
        return marks

    def flushed_to(self, marks: list[tuple[MappedFile, int, int]]) -> int:
        """The files are durable up to ``marks`` (taken by ``flush_marks`` before the sync):
        move the flushed positions as a thorough flush would. Returns the new flushed_where."""
        for mf, position, ts in marks:
            if position > mf.flushed_position:
                mf.flushed_position = position
            where = mf.from_offset + position
            if where > self.flushed_where:
                self.flushed_where = where
                self.store_timestamp = ts
        return self.flushed_where

    def commit(self, least_pages: int) -> int:
        mf = self.find_mapped_file_by_offset(self.committed_where, self.committed_where == 0)
        if mf is None:
            return self.committed_where
        where = mf.from_offset + mf.commit(least_pages)
        if where > self.committed_where:
            self.committed_where = where
        return self.committed_where

    def flush_all(self, least_pages: int = 0) -> int:
        """Flush file after file while each one has ``least_pages`` dirty (0: anything), so a
        flusher never falls behind by whole files."""
        while True:
            before = self.flushed_where
            self.flush(least_pages)
            if self.flushed_where == before:
                return before

    def commit_all(self, least_pages: int = 0) -> int:
        """Commit file after file, as ``flush_all`` flushes."""
        while True:
            before = self.committed_where
            self.commit(least_pages)
            if self.committed_where == before:
                return before

    def set_flushed_where(self, offset: int) -> None:
        self.flushed_where = offset
        self.committed_where = offset

    # ---- truncating and deleting ------------------------------------------------------------

    def truncate_dirty_files(self, offset: int) -> list[str]:
        """Cut the log at ``offset``: later files are deleted, the file holding it is zeroed past it."""
        removed = []
        keep: list[MappedFile] = []
        for mf in self.files:
            end = mf.from_offset + self.file_size
            if end > offset:
                if offset >= mf.from_offset:
                    mf.truncate_to(offset - mf.from_offset)
                    keep.append(mf)
                else:
                    mf.destroy(1000)
                    removed.append(mf.file_name)
            else:
                keep.append(mf)
        with self._lock:
            self.files = keep
        return removed

    def delete_last_mapped_file(self) -> None:
        last = self.last_file()
        if last is not None:
            last.destroy(1000)
            with self._lock:
                self.files = self.files[:-1]

    def _remove(self, gone: list[MappedFile]) -> None:
        if not gone:
            return
        ids = {id(mf) for mf in gone}
        with self._lock:
            self.files = [mf for mf in self.files if id(mf) not in ids]

    def delete_expired_files_by_time(
        self,
        expired_ms: int,
        delete_files_interval_ms: int,
        interval_forcibly_ms: int,
        clean_immediately: bool,
        sleep: Callable[[float], None] | None = None,
        keep_from: int | None = None,
    ) -> int:
        """Delete up to 10 files (never the last) older than ``expired_ms`` (or any, when forced),
        and with ``keep_from`` none that ends above it (the tiered store's ``covered``)."""
        files = self.files
        now = self.clock.now_ms()
        gone: list[MappedFile] = []
        for mf in files[:-1]:
            if now < mf.last_modified_ms() + expired_ms and not clean_immediately:
                break
            if keep_from is not None and mf.from_offset + mf.file_size > keep_from:
                break
            if not mf.destroy(interval_forcibly_ms):
                break
            gone.append(mf)
            if len(gone) >= DELETE_FILES_BATCH_MAX:
                break
            if sleep is not None and delete_files_interval_ms > 0:
                sleep(delete_files_interval_ms / 1000)
        self._remove(gone)
        return len(gone)

    def delete_expired_files_by_offset(
        self, min_phy_offset: int, unit_size: int, last_phy_offset_in: Callable[[MappedFile], int]
    ) -> int:
        """Consume queues: delete files whose last unit points below ``min_phy_offset``."""
        gone: list[MappedFile] = []
        for mf in self.files[:-1]:
            if last_phy_offset_in(mf) >= min_phy_offset:
                break
            if not mf.destroy(60_000):
                break
            gone.append(mf)
        self._remove(gone)
        return len(gone)

    def retry_delete_first_file(self, interval_forcibly_ms: int) -> bool:
        first = self.first_file()
        if first is None or first.available:
            return False
        log.warning("retrying the deletion of %s", first.path)
        if first.destroy(interval_forcibly_ms):
            self._remove([first])
            return True
        return False

    # ---- lifecycle --------------------------------------------------------------------------

    def shutdown(self, interval_forcibly_ms: int = 0) -> None:
        for mf in self.files:
            mf.shutdown(interval_forcibly_ms)

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy(3000)
        with self._lock:
            self.files = []
        self.flushed_where = self.committed_where = 0
        if self.store_path.is_dir() and not any(self.store_path.iterdir()):
            self.store_path.rmdir()
