"""Ownership of a store directory: an exclusive lock on ``<root>/lock`` held while open."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ._errors import StoreLockedError, translate_os_errors


def lock_owner(root: str | os.PathLike[str]) -> int | None:
    """The pid recorded by the process that owns the store, or None when nobody holds it."""
    path = Path(root) / "lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip("\x00 \n")
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class StoreLock:
    """Held by the one process that writes a store directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = Path(root) / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        with translate_os_errors(f"open {self.path}"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip("\x00 \n")
            os.close(fd)
            owner = f"process {text}" if text.isdigit() else "another process"
            raise StoreLockedError(
                f"store {self.path.parent.absolute()} is owned by {owner} (one process writes "
                "a store): stop that process, or give this one another store directory; "
                "get, query, stats and inspect read it as it is"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None
