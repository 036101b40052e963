"""EpochFile: where each master epoch began in the commit log (RocketMQ 5's
``epochFileCheckpoint``, beside the commit log in the store's root).

Controller mode numbers the masters of a broker group: each election gives the new master the
next epoch. Every replica records, for each epoch its log holds data of, the commit-log offset
where that epoch's data starts; an epoch ends where the next one starts (the last one at the end
of the log). Two replicas' logs are the same up to the end of the newest epoch they both record
with the same start (``consistent_point``): a replica that rejoins as a slave cuts its log there
and takes the rest from its master (AutoSwitch HA).

The file, as RocketMQ's CheckpointFile writes it (text, ``\\n`` line ends)::

    2                 number of entries
    773307083         CRC-32 of the entry lines (with their line ends) & 0x7FFFFFFF; 0: unchecked
    1-0               epoch "-" start offset, one line each, ascending
    2-4718

Writing: the previous file is kept as ``epochFileCheckpoint.bak``, the new text goes to a
temporary file that is fsynced and renamed over the file, then the directory is fsynced. A
reader takes the file, or the ``.bak`` when the file is missing, empty or fails its count or CRC.
A file of no entries is never written (as RocketMQ).

Threads: the HA threads and the role changes call it; one lock guards the entries.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .._durable import fsync_dir, replace_synced
from .._errors import CorruptFileError, translate_os_errors

log = logging.getLogger(__name__)

EPOCH_FILE_NAME = "epochFileCheckpoint"
NO_EPOCH = -1
OPEN_END = (1 << 63) - 1  # RocketMQ's Long.MAX_VALUE: the end of the newest epoch


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def entries_text(entries: Sequence[EpochEntry]) -> str:
    return "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)


def java_crc32(data: bytes) -> int:
    """RocketMQ's UtilAll.crc32: CRC-32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF


def encode(entries: Sequence[EpochEntry]) -> bytes:
    body = entries_text(entries).encode("ascii")
    return f"{len(entries)}\n{java_crc32(body)}\n".encode("ascii") + body


def decode(data: bytes, what: str) -> list[EpochEntry]:
    """The entries of a file's bytes; CorruptFileError when the count, a line or the CRC is
    wrong."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CorruptFileError(f"{what}: not text") from None
    lines = text.split("\n")
    if len(lines) < 2:
        raise CorruptFileError(f"{what}: no count and CRC lines")
    try:
        count = int(lines[0])
        crc = int(lines[1])
    except ValueError:
        raise CorruptFileError(f"{what}: the count or CRC line is not a number") from None
    entries: list[EpochEntry] = []
    body = ""
    for line in lines[2:]:
        if not line:
            continue
        body += line + "\n"
        epoch, sep, start = line.partition("-")
        try:
            if not sep:
                raise ValueError
            entries.append(EpochEntry(int(epoch), int(start)))
        except ValueError:
            raise CorruptFileError(f"{what}: not an epoch entry: {line!r}") from None
    if len(entries) != count:
        raise CorruptFileError(f"{what}: says {count} entries, holds {len(entries)}")
    if crc != 0 and java_crc32(body.encode("ascii")) != crc:
        raise CorruptFileError(f"{what}: CRC mismatch")
    for a, b in itertools.pairwise(entries):
        if b.epoch <= a.epoch or b.start_offset < a.start_offset:
            raise CorruptFileError(f"{what}: entries out of order: {a} then {b}")
    return entries


def consistent_point(
    mine: Sequence[EpochEntry], my_end: int, theirs: Sequence[EpochEntry], their_end: int
) -> int:
    """Where two logs stop being the same: the newest epoch both record with one start offset,
    up to the nearer of its two ends (each entry ends where the next begins, the last at the
    log's end) (RocketMQ's findConsistentPoint). When they share no epoch but every epoch of
    ``theirs`` is newer than every one of ``mine`` and begins no later (a master that held no
    data of this log's epochs, as one elected with an empty log), the logs agree up to where
    ``theirs`` begins. -1 otherwise."""
    theirs_by_epoch = {e.epoch: i for i, e in enumerate(theirs)}
    for i in range(len(mine) - 1, -1, -1):
        entry = mine[i]
        j = theirs_by_epoch.get(entry.epoch)
        if j is None or theirs[j].start_offset != entry.start_offset:
            continue
        end_mine = mine[i + 1].start_offset if i + 1 < len(mine) else my_end
        end_theirs = theirs[j + 1].start_offset if j + 1 < len(theirs) else their_end
        return min(end_mine, end_theirs)
    if (
        mine
        and theirs
        and theirs[0].epoch > mine[-1].epoch
        and theirs[0].start_offset <= mine[0].start_offset
    ):
        return min(theirs[0].start_offset, my_end)
    return -1


class EpochFile:
    """The epoch entries of one store, kept in ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.backup = self.path.with_name(self.path.name + ".bak")
        self._lock = threading.Lock()
        self._entries: list[EpochEntry] = []

    # ---- loading and writing ----------------------------------------------------------------

    def load(self) -> list[EpochEntry]:
        """Read the file (or its backup when the file is missing, empty or damaged); the
        entries found. CorruptFileError when both exist and neither is whole."""
        found: list[EpochEntry] | None = None
        problem: str | None = None
        for candidate in (self.path, self.backup):
            try:
                data = candidate.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                problem = f"{candidate}: {exc}"
                continue
            try:
                found = decode(data, str(candidate))
            except CorruptFileError as exc:
                problem = str(exc)
                log.warning("%s", exc)
                continue
            if found:
                break
        if found is None and problem is not None:
            raise CorruptFileError(f"no usable epoch file: {problem}")
        with self._lock:
            self._entries = list(found or [])
            return list(self._entries)

    def _persist(self) -> None:
        """Write the entries (lock held). Nothing is written for no entries."""
        if not self._entries:
            return
        data = encode(self._entries)
        with translate_os_errors(f"write {self.path}"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                replace_synced(self.backup, self.path.read_bytes())
            replace_synced(self.path, data)
            fsync_dir(self.path.parent)

    # ---- reading ----------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    def last_epoch(self) -> int:
        with self._lock:
            return self._entries[-1].epoch if self._entries else NO_EPOCH

    def last_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    def entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            for e in self._entries:
                if e.epoch == epoch:
                    return e
            return None

    def end_of(self, epoch: int) -> int:
        """Where ``epoch``'s data ends: the next entry's start, OPEN_END for the newest (and
        for an epoch not recorded)."""
        with self._lock:
            for i, e in enumerate(self._entries):
                if e.epoch == epoch:
                    nxt = self._entries[i + 1] if i + 1 < len(self._entries) else None
                    return nxt.start_offset if nxt is not None else OPEN_END
            return OPEN_END

    def find_by_offset(self, offset: int) -> EpochEntry | None:
        """The entry whose data holds ``offset`` (start <= offset < end; of epochs starting
        at one offset the newest), None when before the first."""
        with self._lock:
            found = None
            for e in self._entries:
                if e.start_offset <= offset:
                    found = e
                else:
                    break
            return found

    # ---- changing ---------------------------------------------------------------------------

    def append(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; False (nothing changed) when it
        is not newer than the last entry, or starts before it. An epoch that holds no data
        (the next one starts where it starts) is kept: a replica that has only it still
        shares it with this log."""
        with self._lock:
            if self._entries:
                last = self._entries[-1]
                if epoch <= last.epoch or start_offset < last.start_offset:
                    return False
            self._entries.append(EpochEntry(epoch, start_offset))
            self._persist()
            return True

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Forget the epochs that start at or after ``offset`` (the log was cut there)."""
        with self._lock:
            keep = [e for e in self._entries if e.start_offset < offset]
            if len(keep) != len(self._entries):
                self._entries = keep
                self._persist_or_remove()

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        """Forget ``epoch`` and every later one."""
        with self._lock:
            keep = [e for e in self._entries if e.epoch < epoch]
            if len(keep) != len(self._entries):
                self._entries = keep
                self._persist_or_remove()

    def truncate_prefix_by_offset(self, offset: int) -> None:
        """Forget the epochs whose data ends at or before ``offset`` (files deleted below it);
        the newest entry always stays."""
        with self._lock:
            entries = self._entries
            keep = [
                e
                for i, e in enumerate(entries)
                if i + 1 == len(entries) or entries[i + 1].start_offset > offset
            ]
            if len(keep) != len(entries):
                self._entries = keep
                self._persist()

    def _persist_or_remove(self) -> None:
        if self._entries:
            self._persist()
            return
        with translate_os_errors(f"remove {self.path}"):
            for p in (self.path, self.backup):
                try:
                    p.unlink()
                except FileNotFoundError:
                    pass
            if self.path.parent.exists():
                fsync_dir(self.path.parent)
