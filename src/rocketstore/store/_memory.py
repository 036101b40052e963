"""Memory locking and syncing of mappings through the C library (mlock, msync, syncfs).

The OS helpers shared by mapped files and the transient store pool's write buffers. Every
function degrades to "not done" (False / None) where the C library or the call is unavailable,
which is never fatal for the store.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
from collections.abc import Callable
from typing import Any, cast


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    """The C library through ctypes (calls release the interpreter lock), or None."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def mapping_address(buf: mmap.mmap) -> int:
    """Where a writable mapping starts in memory (0 when it cannot be told)."""
    try:
        holder = ctypes.c_char.from_buffer(buf)
    except (TypeError, ValueError):
        return 0
    try:
        return ctypes.addressof(holder)
    finally:
        del holder  # the export would keep the mapping from being closed


def mlock(buf: mmap.mmap, size: int) -> bool:
    """Lock a mapping in memory; False when the OS refuses (limits), which is not fatal."""
    libc = _libc()
    address = mapping_address(buf)
    if libc is None or not address:
        return False
    try:
        rc = libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size))
    except (OSError, AttributeError):
        return False
    return bool(rc == 0)


MS_SYNC = getattr(mmap, "MS_SYNC", 4)  # Linux's value when the module does not export it


@functools.lru_cache(maxsize=1)
def msync_function() -> Callable[[int, int, int], int] | None:
    """libc's msync (the interpreter lock is released during the call), or None."""
    return _int_function("msync", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])


@functools.lru_cache(maxsize=1)
def syncfs_function() -> Callable[[int], int] | None:
    """libc's syncfs (Linux: every dirty page and inode of one file system written and its
    journal committed, in one call; the interpreter lock released during it), or None."""
    return _int_function("syncfs", [ctypes.c_int])


def _int_function(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """libc's function ``name`` returning an int, its arguments typed; None where libc or the
    function is missing."""
    libc = _libc()
    fn = getattr(libc, name, None) if libc is not None else None
    if fn is None:
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return cast("Callable[..., int]", fn)
