"""The per-queue checkpoint: every consume queue's state in one small file, so a restart need
not open and read every queue's files.

``<store root>/rocketstore-queues.checkpoint`` is rocketstore's own file (RocketMQ opens only
the names it knows in the store root: ``commitlog``, ``consumequeue``, ``index``,
``checkpoint``, ``abort``, ``lock``, ``config``; it never lists the root, so the file does not
disturb a RocketMQ broker opening the directory). Every integer big-endian::

      0 MAGIC          8s   "RSQUEUE1"
      8 FLAGS          i32  bit 0: written at a clean shutdown
     12 CQ FILE SIZE   i32  consume-queue file size the queues were written with
     16 LOG END        i64  commit-log end when written (a clean shutdown: its clean end)
     24 FROM           i64  dispatch position read before the queues were read
     32 COVERED        i64  dispatch position read after them
     40 VERIFY FROM    i64  a record start at least ``verify_bytes`` before LOG END when the
                            log has that much (else its earliest known): where a clean
                            restart's CRC scan of the tail starts
     48 PHYSIC TS      i64  the store checkpoint's physic and logics timestamps
     56 LOGICS TS      i64  at that moment (a clean shutdown: those of its clean record)
     64 WITNESS PHYS   i64  a dispatched record (the newest queue's last): where it starts
     72 WITNESS SIZE   i32  (-1 when no queue holds a message), its size
     76 WITNESS TIME   i64  and its store timestamp
     84 TOPICS         i32  number of topic blocks that follow
     88 TOPICS topic blocks:
          TOPIC LENGTH u16, TOPIC (UTF-8), QUEUES i32, then QUEUES entries of 48 bytes:
             0 QUEUE ID      i32
             4 MIN OFFSET    i64  logical offsets: the first readable unit
            12 MAX OFFSET    i64  and one past the last
            20 LAST PHYS     i64  the unit at MAX OFFSET - 1 (-1, 0, 0 when the queue
            28 LAST SIZE     i32  holds none): the commit-log offset, size and tags
            32 LAST TAGS     i64  code its file holds
            40 MAX PHYS      i64  end of the last real unit's record (-1: none)
    end - 4 CRC         u32  crc32 of every byte before it

Written (``write``) whole to ``<name>.tmp``, fsynced, renamed over the file, the directory
fsynced: a crash at any point leaves the old file or the new one, never a mixture (a torn
``.tmp`` is never read). A file whose CRC, magic, length or file size does not check out is
ignored (``read`` raises ``CorruptFileError``, the loader logs it once and reads the queue files
instead). When it is believed is the loader's business (store/recovery/_loader.py): after a
clean shutdown only when LOG END and the timestamps are those of the store checkpoint's clean
record; after a crash only when the witness record is still in the commit log and the
recovered log reaches COVERED. Every queue taken from it is checked against its files and the
commit log when first used.

A state is consistent for a queue as of a dispatch position: a queue that received no record
at or after FROM is exactly as recorded (dispatch is the only writer of units).

Threads: ``snapshot`` from the consume-queue flush service (or shutdown) while dispatch runs;
``write`` from the same thread; ``read`` at load.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from .._durable import fsync_dir, replace_synced
from .._errors import CorruptFileError, translate_os_errors

FILE_NAME = "rocketstore-queues.checkpoint"
MAGIC = b"RSQUEUE1"
FLAG_CLEAN = 1
HEADER = struct.Struct(">8siiqqqqqqqiqi")
TOPIC_HEAD = struct.Struct(">H")
QUEUE_COUNT = struct.Struct(">i")
ENTRY = struct.Struct(">iqqqiqq")
CRC = struct.Struct(">I")
NO_WITNESS = (-1, 0, 0)


class QueueState(NamedTuple):
    """One queue's state as the checkpoint keeps it (offsets logical, phys in bytes)."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_phys: int
    last_size: int
    last_tags: int
    max_phys: int


class QueueCheckpoint(NamedTuple):
    """The file's content."""

    clean: bool
    file_size: int
    log_end: int
    dispatch_from: int
    dispatch_covered: int
    verify_from: int
    physic_timestamp: int
    logics_timestamp: int
    witness: tuple[int, int, int]  # (phys, size, store timestamp), NO_WITNESS for none
    queues: tuple[QueueState, ...]


def encode(cp: QueueCheckpoint) -> bytes:
    """The file's bytes (queues grouped by topic, in the order given)."""
    by_topic: dict[str, list[QueueState]] = {}
    for q in cp.queues:
        by_topic.setdefault(q.topic, []).append(q)
    parts = [
        HEADER.pack(
            MAGIC,
            FLAG_CLEAN if cp.clean else 0,
            cp.file_size,
            cp.log_end,
            cp.dispatch_from,
            cp.dispatch_covered,
            cp.verify_from,
            cp.physic_timestamp,
            cp.logics_timestamp,
            cp.witness[0],
            cp.witness[1],
            cp.witness[2],
            len(by_topic),
        )
    ]
    pack = ENTRY.pack
    for topic, states in by_topic.items():
        name = topic.encode()
        parts.append(TOPIC_HEAD.pack(len(name)) + name + QUEUE_COUNT.pack(len(states)))
        parts.extend(
            pack(
                s.queue_id,
                s.min_offset,
                s.max_offset,
                s.last_phys,
                s.last_size,
                s.last_tags,
                s.max_phys,
            )
            for s in states
        )
    body = b"".join(parts)
    return body + CRC.pack(zlib.crc32(body))


def decode(data: bytes, where: str = "queue checkpoint") -> QueueCheckpoint:
    """Parse the file's bytes; CorruptFileError naming what is wrong."""
    if len(data) < HEADER.size + CRC.size:
        raise CorruptFileError(f"{where}: {len(data)} bytes, shorter than its header")
    (crc,) = CRC.unpack_from(data, len(data) - CRC.size)
    body = memoryview(data)[: len(data) - CRC.size]
    if zlib.crc32(body) != crc:
        raise CorruptFileError(f"{where}: CRC mismatch")
    fields = HEADER.unpack_from(body, 0)
    (magic, flags, file_size, log_end, d_from, covered, verify_from) = fields[:7]
    (physic, logics, w_phys, w_size, w_ts, n) = fields[7:]
    if magic != MAGIC:
        raise CorruptFileError(f"{where}: magic {magic!r}, expected {MAGIC!r}")
    pos = HEADER.size
    states: list[QueueState] = []
    try:
        for _ in range(n):
            (length,) = TOPIC_HEAD.unpack_from(body, pos)
            pos += TOPIC_HEAD.size
            topic = bytes(body[pos : pos + length]).decode()
            if len(topic.encode()) != length:
                raise CorruptFileError(f"{where}: a topic name runs past the end")
            pos += length
            (count,) = QUEUE_COUNT.unpack_from(body, pos)
            pos += QUEUE_COUNT.size
            end = pos + count * ENTRY.size
            if count < 0 or end > len(body):
                raise CorruptFileError(f"{where}: topic {topic}'s queues run past the end")
            for fields in ENTRY.iter_unpack(body[pos:end]):
                states.append(QueueState(topic, *fields))
            pos = end
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptFileError(f"{where}: {exc}") from None
    if pos != len(body):
        raise CorruptFileError(f"{where}: {len(body) - pos} bytes past the last topic")
    return QueueCheckpoint(
        bool(flags & FLAG_CLEAN),
        file_size,
        log_end,
        d_from,
        covered,
        verify_from,
        physic,
        logics,
        (w_phys, w_size, w_ts),
        tuple(states),
    )


def read(root: Path) -> QueueCheckpoint | None:
    """The checkpoint in store root ``root``; None when there is none; CorruptFileError when it
    does not parse."""
    path = root / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptFileError(f"{path}: {exc}") from None
    return decode(data, str(path))


def write(root: Path, cp: QueueCheckpoint) -> None:
    """Replace the checkpoint atomically (tmp, fsync, rename, directory fsync)."""
    path = root / FILE_NAME
    with translate_os_errors(f"write {path}"):
        replace_synced(path, encode(cp))
        fsync_dir(root)


def remove(root: Path) -> None:
    """Delete the checkpoint (and a leftover ``.tmp``): the queue files are the truth again."""
    path = root / FILE_NAME
    with translate_os_errors(f"remove {path}"):
        for p in (path, path.with_name(path.name + ".tmp")):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def newest_witness(states: Iterable[QueueState]) -> tuple[int, int]:
    """(phys, size) of the last unit of the queue whose last record ends furthest in the
    commit log, (-1, 0) when no queue holds a message."""
    best = (-1, 0)
    best_end = -1
    for s in states:
        if s.max_phys > best_end and s.last_size > 0 and s.last_phys + s.last_size == s.max_phys:
            best_end = s.max_phys
            best = (s.last_phys, s.last_size)
    return best


class QueueCheckpointWriter:
    """Takes and writes the per-queue checkpoint of a running store (narrow callables, no
    store): ``dispatched`` the dispatch position, ``states`` every queue's state, ``log_end``
    the commit log's end, ``timestamps`` the store checkpoint's (physic, logics),
    ``record_time`` the store timestamp of the record at a commit-log offset (-1: none).

    It remembers record starts (``boundary``: the load's scan start, then each dispatch
    position it reads) to name one ``verify_bytes`` before the end (VERIFY FROM)."""

    def __init__(
        self,
        root: Path,
        file_size: int,
        *,
        dispatched: Callable[[], int],
        states: Callable[[], list[QueueState]],
        log_end: Callable[[], int],
        timestamps: Callable[[], tuple[int, int]],
        record_time: Callable[[int], int],
        verify_bytes: int,
    ) -> None:
        self.root = root
        self.file_size = file_size
        self._dispatched = dispatched
        self._states = states
        self._log_end = log_end
        self._timestamps = timestamps
        self._record_time = record_time
        self.verify_bytes = verify_bytes
        self._boundaries: list[int] = []  # record starts, ascending
        self._lock = threading.Lock()
        self._generation = 0  # moved by ``invalidate``: what was taken before is not saved
        self._taken = -1
        self._saved: QueueCheckpoint | None = None  # what the file holds now (None: unknown)

    def boundary(self, phys: int) -> None:
        """Remember that a record starts at ``phys`` (or the log ends there)."""
        b = self._boundaries
        if b and phys <= b[-1]:
            if phys < b[0]:
                b.insert(0, phys)
            return
        b.append(phys)
        # keep one start at or before every verify window that may still be asked for
        limit = phys - self.verify_bytes
        while len(b) > 2 and b[1] <= limit:
            del b[0]

    def verify_from(self, end: int) -> int:
        """The latest remembered record start at least ``verify_bytes`` before ``end`` (the
        earliest one when none is that far back; ``end`` when none is known)."""
        b = [p for p in self._boundaries if p <= end]
        if not b:
            return end
        far = [p for p in b if p <= end - self.verify_bytes]
        return far[-1] if far else b[0]

    def take(self, *, clean: bool = False) -> QueueCheckpoint:
        """The queues' states, between two reads of the dispatch position (a queue that
        received nothing from the first one on is exactly as read)."""
        self._taken = self._generation
        dispatch_from = self._dispatched()
        self.boundary(dispatch_from)
        states = self._states()
        covered = self._dispatched()
        log_end = self._log_end()
        phys, size = newest_witness(states)
        witness = NO_WITNESS
        if phys >= 0:
            ts = self._record_time(phys)
            if ts >= 0:
                witness = (phys, size, ts)
        physic, logics = self._timestamps()
        return QueueCheckpoint(
            clean,
            self.file_size,
            log_end,
            dispatch_from,
            covered,
            self.verify_from(log_end),
            physic,
            logics,
            witness,
            tuple(states),
        )

    def save(self, cp: QueueCheckpoint) -> None:
        """Write what ``take`` returned, unless ``invalidate`` ran since, or the file holds
        exactly that already (an idle store: nothing dispatched, no queue changed, since the
        last write)."""
        with self._lock:
            if self._taken == self._generation and cp != self._saved:
                self._saved = None
                write(self.root, cp)
                self._saved = cp

    def invalidate(self) -> None:
        """The queues lost units the checkpoint may record (the commit log was cut): delete
        the file, and do not write a checkpoint taken before now. Any thread."""
        with self._lock:
            self._generation += 1
            self._boundaries.clear()
            self._saved = None
            remove(self.root)
