"""Where ``rocketstore export`` writes: a target directory that is replaced only when it is
empty or a previous export, never one that holds anything else.

Spark writes into a temporary sibling of the target (``.<name>.export-XXXX/out``); only when the
job has finished is the output moved into place (the old target first moved aside into the
temporary directory, then removed), so a failing export leaves the target as it was. Both moves
are renames within one directory.

A previous export is a directory holding only regular files that Spark's file output writes
(``part-*``, ``_SUCCESS``, ``_committed_*``, ``_started_*`` and their hidden ``.crc`` twins)
and the marker file an export leaves (``MARKER``), with the marker or ``_SUCCESS`` among them.

Pure Python (no pyspark); called from the driver's thread.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..store._errors import StoreError

MARKER = "_rocketstore_export.json"
_SPARK_OUTPUT = re.compile(r"^\.?(part-.*|_SUCCESS|_committed_.*|_started_.*)(\.crc)?$")


class ExportTargetError(StoreError):
    """The export's target cannot be written without losing what it holds."""


def is_previous_export(directory: Path) -> bool:
    """Whether ``directory`` holds only what an export (Spark's file output) writes."""
    names = []
    for entry in os.scandir(directory):
        if not entry.is_file(follow_symlinks=False):
            return False
        if entry.name != MARKER and not _SPARK_OUTPUT.match(entry.name):
            return False
        names.append(entry.name)
    return MARKER in names or "_SUCCESS" in names


def local_path(to: str) -> str:
    """``to`` without a ``file:`` scheme; ExportTargetError for another URI scheme."""
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", to)
    if scheme and scheme.group(1).lower() == "file":
        return re.sub(r"^file:(//)?", "", to, flags=re.I)
    if scheme and len(scheme.group(1)) > 1:  # (not a Windows drive letter)
        raise ExportTargetError(
            f"export writes a local directory; {to!r} is a {scheme.group(1)} URI"
        )
    return to


def check_target(to: str, overwrite: bool) -> Path:
    """The absolute target path, after checking that an export may write it: absent, an
    empty directory, or (with ``overwrite``) a previous export. ExportTargetError otherwise."""
    to = local_path(to)
    target = Path(os.path.abspath(os.path.expanduser(to)))
    if target == Path(os.getcwd()) or target == Path(target.anchor):
        raise ExportTargetError(
            f"refusing to export into {to!r} (the current or root directory): give a new "
            "directory, e.g. --to out"
        )
    if target.is_symlink():
        raise ExportTargetError(f"{to} is a symbolic link: give the directory itself")
    if not target.exists():
        if not target.parent.is_dir():
            raise ExportTargetError(f"{target.parent} does not exist: create it first")
        return target
    if not target.is_dir():
        raise ExportTargetError(f"{to} exists and is not a directory: give a new directory")
    if not any(target.iterdir()):
        return target
    if not is_previous_export(target):
        raise ExportTargetError(
            f"{to} holds files that an export did not write: give a new or empty directory "
            "(--overwrite replaces only a previous export)"
        )
    if not overwrite:
        raise ExportTargetError(
            f"{to} holds a previous export: add --overwrite to replace it, or give a new directory"
        )
    return target


class StagedOutput:
    """A temporary sibling of ``target`` for Spark to write ``path`` into; ``commit`` moves the
    finished output into place, ``discard`` (also on leaving a ``with`` block without
    commit) removes it and leaves the target alone."""

    def __init__(self, target: Path, overwrite: bool) -> None:
        self.target = target
        self.overwrite = overwrite
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-", dir=target.parent))
        self.path = self.tmp / "out"

    def commit(self, marker: dict[str, object]) -> None:
        """Write the marker into the output and move it into place (the old target, an empty
        directory or a previous export as checked by ``check_target``, is removed)."""
        (self.path / MARKER).write_text(json.dumps(marker, ensure_ascii=False) + "\n")
        check_target(str(self.target), self.overwrite)  # again: the job took a while
        old = self.tmp / "old"
        moved = False
        if self.target.exists():
            os.rename(self.target, old)
            moved = True
        try:
            os.rename(self.path, self.target)
        except BaseException:
            if moved:
                os.rename(old, self.target)
            raise
        self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> StagedOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


FILE_SUFFIXES = {".parquet": "parquet", ".json": "json", ".jsonl": "json"}
"""A ``--to`` ending in one of these names one file of that format, not a directory."""


def single_file_format(to: str) -> str | None:
    """The format a ``--to`` named like a file asks for (None: a directory of parts)."""
    return FILE_SUFFIXES.get(Path(to).suffix.lower())
