"""StoreReader: a read-only view of a store directory (ours or RocketMQ's).

It never takes the ``lock`` and never writes: files are mapped read-only, so a store can be read
while the process that owns it keeps writing. What it can see of a live store:

- a queue ends at its last *valid* consume-queue unit (offset >= 0, size > 0); the zeroes the owner
  has not written yet end it, so a reader sees a prefix of what the owner has dispatched;
- every message is read through its unit: the unit gives the record's commit-log offset and size,
  the record is then checked (magic, lengths, topic, queue, offsets, body CRC) before it is
  returned. A record that fails a check is never returned.

Consume-queue files are read through :class:`QueueView` only (a thin read-only wrapper of
:class:`~rocketstore.store.queue._consume_queue.ConsumeQueue`); index files through :class:`IndexView`.
Both map their files on demand within one ``MappingLRU`` of the reader (``max_mapped_files``,
by default what the process's limits allow, as a store's): a reader of a store with more queue
files than the bound maps each when it reads it and unmaps idle ones, holding a file only while
it reads it (or while a view it handed out is alive). Commit-log files stay mapped once read.

Threads: one StoreReader per thread (it caches mappings without locks). Close it when done.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from .._errors import CorruptFileError, CorruptRecordError, StoreError
from ..log._mapped_file import MappedFile
from ..log._mapping_lru import MappingLRU, default_bound
from ..log._record import KEY_SEPARATOR, MessageExt, decode_message
from ..queue._consume_queue import BLANK_SIZE, UNIT, UNIT_SIZE, ConsumeQueue, is_valid_unit
from ..queue._index import MAX_QUERY_NUM, IndexService, index_file_size

COMMIT_LOG_DIR = "commitlog"
CONSUME_QUEUE_DIR = "consumequeue"
INDEX_DIR = "index"


class NotAStoreError(StoreError):
    """The directory holds no commit log and no consume queues."""


def _store_files(directory: Path) -> list[Path]:
    """The 20-digit data files of a directory, in offset order."""
    try:
        entries = [e for e in os.scandir(directory) if e.is_file()]
    except OSError:
        return []
    return sorted(
        (Path(e.path) for e in entries if len(e.name) == 20 and e.name.isdigit()),
        key=lambda p: p.name,
    )


def detect_file_size(directory: Path) -> int | None:
    """The size of the data files of a directory (all equal, except a last one being created)."""
    files = _store_files(directory)
    for path in files:
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if size > 0:
            return size
    return None


class QueueView:
    """The units of one consume queue, read-only. All consume-queue reading goes through here.

    ``min_offset`` / ``max_offset`` are logical offsets; ``max_offset`` is one past the last
    valid unit, found by a binary search in the last file (units are written in order).
    """

    def __init__(
        self,
        topic: str,
        queue_id: int,
        root: Path,
        file_size: int,
        lru: MappingLRU | None = None,
    ) -> None:
        """``lru``: the files mapped on demand within its bound (None: mapped while open)."""
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.cq = ConsumeQueue(topic, queue_id, root, file_size, read_only=True, lru=lru)
        for attempt in range(3):
            try:
                self.cq.load()
                break
            except CorruptFileError:
                # the owner may be creating the next file right now: look again
                if attempt == 2:
                    raise
                import time

                time.sleep(0.05)
        self.files = self.cq.queue.files
        self.units_per_file = file_size // UNIT_SIZE
        self.max_offset = self._find_end()
        self.min_offset = self._find_start()

    def _unit(self, mf: MappedFile, index: int) -> tuple[int, int, int]:
        if not mf.hold():
            raise CorruptFileError(f"{mf.path}: closed")
        try:
            return UNIT.unpack_from(mf.mm, index * UNIT_SIZE)  # type: ignore[return-value]
        finally:
            mf.release()

    def _find_end(self) -> int:
        for mf in reversed(self.files):
            if not is_valid_unit(*self._unit(mf, 0)[:2]):
                continue
            lo, hi = 1, self.units_per_file  # first invalid unit is in [lo, hi]
            while lo < hi:
                mid = (lo + hi) // 2
                if is_valid_unit(*self._unit(mf, mid)[:2]):
                    lo = mid + 1
                else:
                    hi = mid
            return mf.from_offset // UNIT_SIZE + lo
        return self.files[0].from_offset // UNIT_SIZE if self.files else 0

    def _find_start(self) -> int:
        """The first unit that is not a placeholder (BLANK fill before a queue's first message)."""
        if not self.files:
            return 0
        mf = self.files[0]
        base = mf.from_offset // UNIT_SIZE
        end = min(self.max_offset - base, self.units_per_file)
        lo, hi = 0, max(end, 0)
        while lo < hi:  # placeholders form a prefix of the first file
            mid = (lo + hi) // 2
            if self._unit(mf, mid)[1] == BLANK_SIZE:
                lo = mid + 1
            else:
                hi = mid
        return base + lo

    def unit_bytes(self, begin: int, end: int) -> Iterator[tuple[int, memoryview]]:
        """(first offset, raw 20-byte units) chunks covering ``[begin, end)``, one per file."""
        offset = max(begin, self.min_offset)
        end = min(end, self.max_offset)
        while offset < end:
            mf = self.cq.queue.find_mapped_file_by_offset(offset * UNIT_SIZE)
            if mf is None:
                raise CorruptFileError(
                    f"{self.topic}/{self.queue_id}: no consume-queue file holds offset {offset}"
                )
            first = mf.from_offset // UNIT_SIZE
            stop = min(end, first + self.units_per_file)
            if not mf.hold():
                raise CorruptFileError(f"{mf.path}: closed")
            try:  # held while the caller reads the view (a view still alive keeps it mapped)
                yield (
                    offset,
                    memoryview(mf.mm)[(offset - first) * UNIT_SIZE : (stop - first) * UNIT_SIZE],
                )
            finally:
                mf.release()
            offset = stop

    def units(self, begin: int, end: int) -> Iterator[tuple[int, int, int, int]]:
        """(offset, phys_offset, size, tags code) for the valid units in ``[begin, end)``."""
        for first, view in self.unit_bytes(begin, end):
            for i, (phys, size, tags) in enumerate(UNIT.iter_unpack(view)):
                if is_valid_unit(phys, size) and size != BLANK_SIZE:
                    yield first + i, phys, size, tags
            view.release()

    def unit(self, offset: int) -> tuple[int, int, int] | None:
        if not self.min_offset <= offset < self.max_offset:
            return None
        mf = self.cq.queue.find_mapped_file_by_offset(offset * UNIT_SIZE)
        if mf is None:
            return None
        return self._unit(mf, offset - mf.from_offset // UNIT_SIZE)

    def close(self) -> None:
        for mf in self.files:
            mf.close()


class CommitLogView:
    """Read-only mappings of commit-log files, opened on first use (new files appear live)."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self._files: dict[int, MappedFile] = {}

    def file_at(self, phys_offset: int) -> MappedFile | None:
        start = phys_offset - phys_offset % self.file_size
        mf = self._files.get(start)
        if mf is None:
            path = self.directory / f"{start:020d}"
            if not path.exists():
                return None
            mf = MappedFile(path, self.file_size, read_only=True, create=False)
            self._files[start] = mf
        return mf

    def min_offset(self) -> int:
        files = _store_files(self.directory)
        return int(files[0].name) if files else 0

    def close(self) -> None:
        for mf in self._files.values():
            try:
                mf.close()
            except BufferError:  # a numpy view of the mapping is still alive; GC closes it
                pass
        self._files.clear()


class IndexView:
    """Key lookups in the index files (``index/``), read-only, through IndexService.

    The slot and entry counts come from options or, failing that, from the file size with
    RocketMQ's ratio of four entries per slot.
    """

    def __init__(
        self,
        directory: Path,
        slots: int | None = None,
        entries: int | None = None,
        lru: MappingLRU | None = None,
    ):
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.lru = lru
        self._service: IndexService | None = None
        self._failed = False

    def _layout(self, size: int) -> tuple[int, int] | None:
        if self.slots and self.entries and index_file_size(self.slots, self.entries) == size:
            return self.slots, self.entries
        if (size - 40) % 84 == 0 and size > 40:
            slots = (size - 40) // 84
            return slots, slots * 4
        return None

    def _open(self) -> IndexService | None:
        if self._service is not None or self._failed:
            return self._service
        size = None
        if self.directory.is_dir():
            names = sorted(p for p in self.directory.iterdir() if p.name.isdigit())
            size = names[0].stat().st_size if names else None
        layout = self._layout(size) if size else None
        if layout is None:
            self._failed = True
            return None
        service = IndexService(
            self.directory, slot_num=layout[0], index_num=layout[1], read_only=True, lru=self.lru
        )
        try:
            service.load()
        except (CorruptFileError, OSError):
            self._failed = True
            return None
        self._service = service
        return service

    def service(self) -> IndexService | None:
        """The index files opened read-only; None when there are none, or none that fit a
        layout."""
        return self._open()

    def lookup(self, topic: str, key: str) -> list[int] | None:
        """Commit-log offsets of messages indexed under ``topic#key`` (hashes collide: callers
        re-check); None when the index cannot answer completely."""
        service = self._open()
        if service is None or not service.files:
            return None
        found, _ts, _phys = service.query(topic, key, MAX_QUERY_NUM, 0, 2**63 - 1)
        if len(found) >= MAX_QUERY_NUM:
            return None  # capped: the answer may be incomplete
        return found

    def close(self) -> None:
        if self._service is not None:
            for f in self._service.files:
                f.close()
            self._service = None


class StoreReader:
    """Read-only view of a store directory. Sizes are detected from the files when not given."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        commit_log_file_size: int | None = None,
        consume_queue_file_size: int | None = None,
        index_slots: int | None = None,
        index_entries: int | None = None,
        max_mapped_files: int | None = None,
    ) -> None:
        """``max_mapped_files``: consume-queue and index files mapped at once (None: what the
        process's limits allow, ``default_bound``)."""
        self.root = Path(root)
        cl_dir = self.root / COMMIT_LOG_DIR
        cq_dir = self.root / CONSUME_QUEUE_DIR
        if not self.root.is_dir() or not (cl_dir.is_dir() or cq_dir.is_dir()):
            raise NotAStoreError(
                f"{self.root} is not a store directory (no commitlog/ or consumequeue/ in it)"
            )
        self.cq_dir = cq_dir
        self.commit_log_file_size = commit_log_file_size or detect_file_size(cl_dir) or 1 << 30
        self.consume_queue_file_size = consume_queue_file_size or self._detect_cq_size()
        self.commit_log = CommitLogView(cl_dir, self.commit_log_file_size)
        self.mappings = MappingLRU(max_mapped_files or default_bound())
        self.index = IndexView(self.root / INDEX_DIR, index_slots, index_entries, self.mappings)
        self._queues: dict[tuple[str, int], QueueView] = {}

    def _detect_cq_size(self) -> int:
        for topic in self.topics():
            for qid in self.queue_ids(topic):
                size = detect_file_size(self.cq_dir / topic / str(qid))
                if size:
                    return size
        return 300_000 * UNIT_SIZE

    # ---- topics and queues ------------------------------------------------------------------

    def topics(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.cq_dir) if e.is_dir())
        except OSError:
            return []

    def queue_ids(self, topic: str) -> list[int]:
        try:
            return sorted(
                int(e.name)
                for e in os.scandir(self.cq_dir / topic)
                if e.is_dir() and e.name.isdigit()
            )
        except OSError:
            return []

    def queue(self, topic: str, queue_id: int) -> QueueView:
        view = self._queues.get((topic, queue_id))
        if view is None:
            view = QueueView(
                topic, queue_id, self.cq_dir, self.consume_queue_file_size, self.mappings
            )
            self._queues[(topic, queue_id)] = view
        return view

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first offset whose message is still in the commit log."""
        q = self.queue(topic, queue_id)
        low, high = q.min_offset, q.max_offset
        cl_min = self.commit_log.min_offset()
        while low < high:  # units point into the commit log in increasing order
            mid = (low + high) // 2
            unit = q.unit(mid)
            if unit is not None and unit[0] < cl_min:
                low = mid + 1
            else:
                high = mid
        return low

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.queue(topic, queue_id).max_offset

    # ---- messages ---------------------------------------------------------------------------

    def message_at(self, phys_offset: int, size: int, *, check_crc: bool = True) -> MessageExt:
        """The checked record at ``phys_offset``; CorruptRecordError when it is not a message."""
        mf = self.commit_log.file_at(phys_offset)
        if mf is None:
            raise CorruptRecordError(f"no commit-log file holds offset {phys_offset}")
        pos = phys_offset - mf.from_offset
        msg = decode_message(mf.mm, pos, min(pos + size, mf.file_size), check_crc=check_crc)
        if msg.store_size != size or msg.commitlog_offset != phys_offset:
            raise CorruptRecordError(
                f"the record at {phys_offset} has size {msg.store_size} and offset "
                f"{msg.commitlog_offset}; its unit says {size} at {phys_offset}"
            )
        return msg

    def read(
        self, topic: str, queue_id: int, begin: int = 0, end: int | None = None
    ) -> Iterator[MessageExt]:
        """The messages of a queue with offsets in ``[begin, end)``, checked (bad ones raise)."""
        q = self.queue(topic, queue_id)
        stop = q.max_offset if end is None else end
        for offset, phys, size, _tags in q.units(begin, stop):
            msg = self.message_at(phys, size)
            if msg.topic != topic or msg.queue_id != queue_id or msg.queue_offset != offset:
                raise CorruptRecordError(
                    f"{topic}/{queue_id} offset {offset} points at a record of "
                    f"{msg.topic}/{msg.queue_id} offset {msg.queue_offset}"
                )
            yield msg

    def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        q = self.queue(topic, queue_id)
        unit = q.unit(offset)
        if unit is None:
            raise CorruptRecordError(f"{topic}/{queue_id}: no unit at offset {offset}")
        return self.message_at(unit[0], unit[1], check_crc=False).store_timestamp

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset whose message was stored at or after ``timestamp_ms`` (binary search;
        store times grow with offsets). ``max_offset`` when every message is older."""
        low, high = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
        while low < high:
            mid = (low + high) // 2
            if self.store_time(topic, queue_id, mid) < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        return low

    def lookup_key(self, topic: str, key: str) -> list[tuple[int, int]] | None:
        """(queue id, offset) of the messages of ``topic`` with ``key`` among their keys (or as
        their UNIQ_KEY), from the index; None when the index cannot answer."""
        offsets = self.index.lookup(topic, key)
        if offsets is None:
            return None
        found = []
        for phys in offsets:
            mf = self.commit_log.file_at(phys)
            if mf is None:
                continue
            pos = phys - mf.from_offset
            try:
                msg = decode_message(mf.mm, pos, mf.file_size, check_crc=False, read_body=False)
            except CorruptRecordError:
                continue
            if msg.topic == topic and (key in msg.keys or msg.uniq_key == key):
                found.append((msg.queue_id, msg.queue_offset))
        return sorted(found)

    def close(self) -> None:
        for q in self._queues.values():
            q.close()
        self._queues.clear()
        self.commit_log.close()
        self.index.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def split_range(begin: int, end: int, max_rows: int) -> list[tuple[int, int]]:
    """``[begin, end)`` cut into pieces of at most ``max_rows``."""
    step = max(1, max_rows)
    return [(lo, min(lo + step, end)) for lo in range(begin, end, step)]


def keys_of(raw: str | None) -> list[str]:
    return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []


__all__ = [
    "CommitLogView",
    "IndexView",
    "NotAStoreError",
    "QueueView",
    "StoreReader",
    "split_range",
]
