"""Small files written so that a crash leaves either the old or the new content: write and
fsync, rename over the old file, fsync the directory (the store's and the broker's config files).

Functions only; the caller serialises writers of one file. Raise OSError.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the directory's entries (renames, new files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
