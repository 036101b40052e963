"""Mapping a store file without keeping a descriptor open for it.

``mmap.mmap(fd, ...)`` duplicates the descriptor it is given and keeps the duplicate until the
mapping is closed, although the kernel needs no descriptor to keep a mapping: a mapped file
whose own descriptor is closed still costs one open file, so a store with N mapped files holds
N (or 2N, with its own) of the process's open-file limit. ``map_file`` answers a mapping that
holds none:

- Python 3.13 and later: ``mmap.mmap(..., trackfd=False)``, which keeps no duplicate;
- Python 3.11 / 3.12 (no ``trackfd``): the duplicate is handed back by the mapping object.
  The object's fields are read through ctypes at the place CPython's ``mmap_object`` keeps
  them (data pointer, size, position, offset, exports, fd, ..., access mode), and only when
  every one of them reads as this mapping's own (the size, offset 0, no exports, the access
  mode, a descriptor naming the same file, not the caller's, and for a writable mapping its
  data address) is the fd field set to -1, the value CPython keeps for an anonymous mapping
  (it then closes nothing, as with ``trackfd=False``), and the duplicate closed. Where any
  field does not read as expected (another interpreter's layout) the mapping keeps its
  duplicate: one descriptor a file, never a descriptor closed under an object that owns it.

A mapping without a descriptor serves everything the store asks of it (slices, buffers,
``madvise``, ``flush``, ``close``); only ``size()`` and ``resize()``, which the store never
calls, need the descriptor.

``descriptors_kept()`` tells which case applies in this process (0 or 1 descriptor a mapped
file), for the mapping bound and for the operators' metrics.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys

from .._memory import mapping_address

_TRACKFD = sys.version_info >= (3, 13)

# CPython's mmap_object on 64-bit Unix, in machine words after the object header (refcount,
# type): data, size, pos, offset, exports, fd (an int in a word), weakreflist, access
_WORD = ctypes.sizeof(ctypes.c_ssize_t)
_DATA, _SIZE, _POS, _OFFSET, _EXPORTS, _FD, _ACCESS = (2, 3, 4, 5, 6, 7, 9)
_FIELDS = 10
_ACCESS_CODES = {mmap.ACCESS_READ: 1, mmap.ACCESS_WRITE: 2, mmap.ACCESS_COPY: 3}


def map_file(fd: int, size: int, access: int) -> tuple[mmap.mmap, bool]:
    """Map ``size`` bytes of the open file ``fd`` from its start; (the mapping, whether it
    holds no descriptor of its own). The caller's ``fd`` is left open: closing it afterwards
    leaves the mapping with no descriptor at all. Raises OSError as ``mmap.mmap``."""
    if _TRACKFD:
        return mmap.mmap(fd, size, access=access, trackfd=False), True  # type: ignore[call-arg]
    mm = mmap.mmap(fd, size, access=access)
    return mm, _detach(mm, fd, size, access)


def _detach(mm: mmap.mmap, fd: int, size: int, access: int) -> bool:
    """Take the duplicate descriptor away from ``mm`` and close it (see the module's text);
    False, with nothing changed, where the object does not read as a mapping of ``fd``."""
    if not _layout_known():
        return False
    words = (ctypes.c_ssize_t * _FIELDS).from_address(id(mm))
    if (
        words[_SIZE] != size
        or words[_POS] != 0
        or words[_OFFSET] != 0
        or words[_EXPORTS] != 0
        or words[_ACCESS] & 0xFFFFFFFF != _ACCESS_CODES.get(access, -1)
    ):
        return False
    fd_field = ctypes.c_int.from_address(id(mm) + _FD * _WORD)
    dup = fd_field.value
    if dup < 0 or dup == fd or not _same_file(dup, fd):
        return False
    if access != mmap.ACCESS_READ:
        address = mapping_address(mm)
        if not address or words[_DATA] != address:
            return False
    fd_field.value = -1  # the object closes nothing now (as an anonymous mapping)
    os.close(dup)
    return True


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


@functools.lru_cache(maxsize=1)
def _layout_known() -> bool:
    """The layout above applies: CPython 3.11 / 3.12 on a 64-bit Unix."""
    return (
        sys.implementation.name == "cpython"
        and sys.version_info[:2] in ((3, 11), (3, 12))
        and _WORD == 8
        and os.name == "posix"
    )


@functools.lru_cache(maxsize=1)
def descriptors_kept() -> int:
    """Descriptors a mapping made by ``map_file`` keeps in this process: 0, or 1 where the
    duplicate cannot be handed back. Found once, on an anonymous file."""
    try:
        fd = os.memfd_create("rocketstore-probe") if hasattr(os, "memfd_create") else -1
    except OSError:
        fd = -1
    if fd < 0:
        return 0 if _TRACKFD else 1
    try:
        os.ftruncate(fd, mmap.PAGESIZE)
        mm, detached = map_file(fd, mmap.PAGESIZE, mmap.ACCESS_WRITE)
        mm.close()
        return 0 if detached else 1
    except OSError:
        return 1
    finally:
        os.close(fd)
