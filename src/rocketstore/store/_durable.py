"""Durability helpers of the store's files.

- Small files written so that a crash leaves either the old or the new content: write and
  fsync, rename over the old file, fsync the directory (the store's and the broker's config
  files).
- New directories and files whose entries are made durable in their parent (``fsync_dir``
  after each creation: a power cut must not lose a whole new commit-log or queue file), or,
  for files made in the put path (consume queues), all at once before the first flush of
  anything written in them (``DeferredDirSync``).
- Many files made durable at once (``sync_file_system``): a directory or file fsync commits the
  file system's journal, so making thousands of new queues durable one by one costs a commit
  each (minutes for 100,000 queues); one ``syncfs`` writes them all with one commit.
- Disk blocks behind mapped files (``reserve``, ``zero_range``; see below).

The caller serialises writers of one file. Raise OSError.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from pathlib import Path


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the directory's entries (renames, new files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MANY_AT_ONCE = 64
"""From this many directories (or queue files) to make durable in one round on, one
``sync_file_system`` of their file system does it instead of one fsync each."""


def sync_file_system(path: str | os.PathLike[str]) -> bool:
    """Write every dirty page and inode of the file system holding ``path`` and commit its
    journal (``syncfs``): everything written on it before the call is durable when it returns.
    False where the call does not exist (the caller syncs file by file); OSError when it
    fails (since Linux 5.8 it reports any write-back error of the file system)."""
    from ._memory import syncfs_function

    fn = syncfs_function()
    if fn is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if fn(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(path))
    finally:
        os.close(fd)
    return True


def make_dirs(directory: str | os.PathLike[str]) -> list[Path]:
    """``mkdir -p``; the directories it made, outermost first (one made meanwhile by another
    thread is left to its maker)."""
    path = Path(directory)
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    made: list[Path] = []
    for new in reversed(missing):
        try:
            new.mkdir()
        except FileExistsError:
            if not new.is_dir():
                raise
            continue  # made meanwhile by another thread: its maker syncs it
        made.append(new)
    return made


def make_dirs_synced(directory: str | os.PathLike[str]) -> None:
    """``mkdir -p``, with every directory it creates made durable in its parent (a topic's
    or queue's new directory survives a power cut along with the files put in it)."""
    for new in make_dirs(directory):
        fsync_dir(new.parent)


class DeferredDirSync:
    """Directories whose new entries (directories and files made in them) are made durable
    later, all together: before the first flush of data written in those files. For files
    made in the put path, where an fsync of a directory or two for every new queue would cost
    many times the put itself; a crash of the process loses no entry (the kernel has them),
    and after a power cut nothing flushed is missing its entry, since every flush syncs the
    pending directories first. ``note`` from any thread; ``sync`` from the flushing ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirs: dict[Path, None] = {}  # in the order noted: parents before children

    @property
    def pending(self) -> bool:
        return bool(self._dirs)

    def make_dirs(self, directory: str | os.PathLike[str]) -> None:
        """``mkdir -p``, each directory made noted in its parent."""
        made = make_dirs(directory)
        if made:
            with self._lock:
                for new in made:
                    self._dirs[new.parent] = None

    def note(self, directory: str | os.PathLike[str]) -> None:
        """A file was made in ``directory``."""
        with self._lock:
            self._dirs[Path(directory)] = None

    def sync(self) -> None:
        """fsync every directory noted (``MANY_AT_ONCE`` or more: one ``sync_file_system`` of
        each file system they are on); on an error the ones not synced stay noted."""
        with self._lock:
            dirs = list(self._dirs)
            self._dirs.clear()
        if len(dirs) >= MANY_AT_ONCE:
            try:
                if self._sync_file_systems(dirs):
                    return
            except BaseException:
                with self._lock:
                    for rest in dirs:
                        self._dirs[rest] = None
                raise
        for i, directory in enumerate(dirs):
            try:
                fsync_dir(directory)
            except BaseException:
                with self._lock:
                    for rest in dirs[i:]:
                        self._dirs[rest] = None
                raise

    @staticmethod
    def _sync_file_systems(dirs: list[Path]) -> bool:
        """One ``sync_file_system`` for each file system ``dirs`` are on; False when that call
        does not exist here."""
        devices: dict[int, Path] = {}
        for directory in dirs:
            try:
                devices.setdefault(os.stat(directory).st_dev, directory)
            except FileNotFoundError:
                continue  # deleted since (a topic's queues removed): nothing to keep
        return all([sync_file_system(d) for d in devices.values()])


def write_synced(path: str | os.PathLike[str], data: bytes) -> None:
    """Create or truncate ``path``, write all of ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path.tmp`` and fsync it, then rename it to ``path`` (the directory
    is not fsynced: call :func:`fsync_dir` after the last of a set of files)."""
    tmp = path.with_name(path.name + ".tmp")
    write_synced(tmp, data)
    os.replace(tmp, path)


# ---- disk blocks behind mapped files ---------------------------------------------------------
#
# Store files are created sparse (their full size, no blocks), as RocketMQ creates them. A write
# through a mapping into a hole needs a block at that moment; on a full file system the kernel
# can only answer with SIGBUS, which kills the process. So every range of a mapped file is given
# its blocks (``reserve``) before the first write into it; a full disk then surfaces as an
# OSError (ENOSPC) of that call, which the store turns into a refused put or a paused dispatch.

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException) -> bool:
    """True for an OSError saying there is no space (or quota) left."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def os_error_cause(exc: BaseException) -> str:
    """What stopped a write, in the words an operator acts on: the limit an OSError ran
    into (open files, mappings, space), else its own text."""
    if not isinstance(exc, OSError):
        return str(exc)
    code = exc.errno
    if code == errno.EMFILE:
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            limit = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
        except (ImportError, OSError, ValueError):  # pragma: no cover - not a Unix
            limit = "unknown"
        return f"too many open files: the process's open-file limit ({limit}) is reached"
    if code == errno.ENFILE:
        return "too many open files in the system: the kernel's limit (fs.file-max) is reached"
    if code == errno.ENOMEM:
        return "no memory for another mapping: the mapping limit (vm.max_map_count) or memory"
    if code in DISK_FULL_ERRNOS:
        return "the disk is full"
    return exc.strerror or str(exc)


def first_hole(fd: int, start: int, end: int) -> int:
    """Offset of the first hole at or after ``start`` (``end`` when [start, end) has blocks
    throughout, or when the file system cannot tell: then it is taken to be allocated)."""
    if start >= end:
        return end
    try:
        return min(end, os.lseek(fd, start, os.SEEK_HOLE))
    except (OSError, AttributeError):
        return end


def data_ranges(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The ranges of [start, end) that have blocks (``SEEK_DATA`` / ``SEEK_HOLE``); all of it
    when the file system cannot tell."""
    out: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        try:
            lo = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                break
            return [(start, end)]
        except AttributeError:
            return [(start, end)]
        if lo >= end:
            break
        hi = first_hole(fd, lo, end)
        if hi <= lo:
            return [(start, end)]
        out.append((lo, hi))
        pos = hi
    return out


def reserve(fd: int, start: int, end: int) -> bool:
    """Give bytes [start, end) of the file disk blocks (``posix_fallocate``; the file's size
    does not change when the range lies inside it). Blocks already there cost nothing.

    Raises OSError: ENOSPC/EDQUOT when the file system is full and the range has a hole, or
    another error of the call. Returns False where the platform or file system cannot
    reserve blocks at all (nothing to do about it then; writes go ahead unprotected)."""
    if start >= end:
        return True
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None:
        return False
    try:
        fallocate(fd, start, end - start)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
            return False
        if exc.errno in DISK_FULL_ERRNOS and first_hole(fd, start, end) >= end:
            return True  # the range had its blocks already
        raise
    return True


def zero_range(fd: int, start: int, end: int) -> None:
    """Zero bytes [start, end) of the file through the descriptor, skipping holes (which read
    as zeroes already): no block is allocated, so a full disk cannot fail it for want of
    space, and no write goes through a mapping into a hole. Raises OSError."""
    pos = start
    while pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return  # only holes from pos on
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                data = pos  # cannot tell: zero everything
            else:
                raise
        except AttributeError:
            data = pos
        if data >= end:
            return
        hole = first_hole(fd, data, end)
        if hole <= data:
            hole = end
        write_zeroes(fd, data, hole)
        pos = hole


_ZEROES = bytes(1 << 20)


def write_zeroes(fd: int, start: int, end: int) -> None:
    """Write zeroes over bytes [start, end) through the descriptor (blocks allocated the way a
    write allocates them: on ext4 a later write through a mapping then costs no block
    conversion under its page fault, as it does in a hole or a ``reserve``d range). Raises
    OSError (ENOSPC when the file system is full)."""
    pos = start
    while pos < end:
        n = min(len(_ZEROES), end - pos)
        pos += os.pwrite(fd, memoryview(_ZEROES)[:n], pos)
