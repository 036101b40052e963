"""``rocketstore inspect``: verify a store directory (ours or RocketMQ's) without changing it.

Read-only from start to end: files are opened O_RDONLY and mapped for reading, the ``lock``
is neither taken nor needed (a running broker's store can be inspected; what is being written
at that moment may show up as a torn tail). What is checked:

- commit log: file names (20-digit offsets, contiguous) and sizes; every record (magic,
  lengths, body CRC, the offset it claims) through ``scan_records``; BLANK records; where the
  data ends; bytes that are not zero past the end; pre-allocated empty files;
- consume queues: file names and sizes, every unit against the record it points at (a
  record there, same size, topic, queue id and queue offset, a type that enters queues);
  units past the commit log's end; queues behind the commit log (dispatch not finished);
- index files: size, header, the last entries point at records;
- checkpoint: size, timestamps, the clean-shutdown record; the abort file.

Findings are errors (corruption: exit status 1) or warnings (a crashed store that recovery
will repair: a lagging queue, an abort file, a stale checkpoint). A directory with none of a
store's entries (commitlog/, consumequeue/, index/, checkpoint) is not inspected at all: the
report has one error saying it is not a store directory, and ``is_store`` is false.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._checkpoint import CHECKPOINT_FILE_SIZE, StoreCheckpoint
from .._errors import CorruptRecordError
from ..log._record import SYSFLAG_TRANSACTION_MASK, TRANSACTION_COMMIT_TYPE, check_record
from ..queue._consume_queue import BLANK_SIZE, UNIT, UNIT_SIZE
from ..queue._index import ENTRY, ENTRY_SIZE, HEADER, HEADER_SIZE, SLOT_SIZE
from ._scan import BAD_RECORD, BLANK_RECORD, ScannedRecord, scan_records

STORE_ENTRIES = ("commitlog", "consumequeue", "index", "checkpoint")
"""What a store directory holds at least one of (RocketMQ's and ours)."""
INDEX_ENTRIES_CHECKED = 10_000  # the newest entries of each index file
DEFAULT_INDEX_FILE_SIZE = HEADER_SIZE + 5_000_000 * SLOT_SIZE + 20_000_000 * ENTRY_SIZE


@dataclass
class QueueSummary:
    topic: str
    queue_id: int
    min_offset: int = 0
    max_offset: int = 0
    units_checked: int = 0
    log_messages: int = 0  # records of this queue in the commit log
    log_bytes: int = 0
    log_next_offset: int = 0  # one past the highest queue offset in the commit log

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
            "commit_log_messages": self.log_messages,
            "commit_log_bytes": self.log_bytes,
            "commit_log_next_offset": self.log_next_offset,
        }


@dataclass
class InspectReport:
    root: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    commit_log: dict[str, Any] = field(default_factory=dict)
    queues: dict[tuple[str, int], QueueSummary] = field(default_factory=dict)
    index: dict[str, Any] = field(default_factory=dict)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    abort_file: bool = False
    is_store: bool = True

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        topics: dict[str, dict[str, Any]] = {}
        for (topic, _qid), q in sorted(self.queues.items()):
            t = topics.setdefault(topic, {"messages": 0, "bytes": 0, "queues": []})
            t["messages"] += q.log_messages
            t["bytes"] += q.log_bytes
            t["queues"].append(q.as_dict())
        return {
            "root": self.root,
            "ok": self.ok,
            "is_store": self.is_store,
            "errors": self.errors,
            "warnings": self.warnings,
            "abort_file": self.abort_file,
            "checkpoint": self.checkpoint,
            "commit_log": self.commit_log,
            "topics": topics,
            "index": self.index,
        }


Progress = Callable[[int], None]


@contextlib.contextmanager
def _mapped(path: Path) -> Iterator[mmap.mmap | bytes]:
    """A read-only mapping of a whole file (an empty file gives b"")."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            yield b""
            return
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            mm.close()
    finally:
        os.close(fd)


def _numbered(d: Path) -> tuple[list[str], list[str]]:
    """(store-file names sorted, other names) in a directory."""
    names: list[str] = []
    other: list[str] = []
    for e in os.scandir(d):
        if e.is_file():
            (names if e.name.isdigit() else other).append(e.name)
    return sorted(names), sorted(other)


class Inspector:
    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        commit_log_file_size: int | None = None,
        consume_queue_file_size: int | None = None,
        max_hash_slot_num: int | None = None,
        max_index_num: int | None = None,
    ) -> None:
        self.root = Path(root)
        self.cl_size = commit_log_file_size
        self.cq_size = consume_queue_file_size
        self.slots = max_hash_slot_num
        self.entries = max_index_num
        self.report = InspectReport(str(self.root))
        self._cl_files: dict[int, Path] = {}  # commit-log files of the right size by offset
        self._bad_files: set[int] = set()  # offsets of files of another size
        self._in_bad_files = 0  # units and index entries pointing into those
        self._cl_end = 0
        self._cl_min = 0
        self._maps: dict[Path, mmap.mmap | bytes] = {}
        self._stack = contextlib.ExitStack()

    # ---- sizes of the work, for a progress bar ----------------------------------------------

    def work(self) -> int:
        """Bytes of commit log plus consume queue to read (the progress bar's total)."""
        total = 0
        for sub in ("commitlog", "consumequeue"):
            d = self.root / sub
            if d.is_dir():
                for dirpath, _dirs, files in os.walk(d):
                    total += sum(
                        os.path.getsize(os.path.join(dirpath, f)) for f in files if f.isdigit()
                    )
        return total

    def run(self, progress: Progress | None = None) -> InspectReport:
        step = progress or (lambda _n: None)
        rep = self.report
        if not self.root.is_dir():
            rep.is_store = False
            rep.errors.append(f"{self.root}: not a directory")
            return rep
        if not any((self.root / name).exists() for name in STORE_ENTRIES):
            rep.is_store = False
            rep.errors.append(
                f"{self.root} is not a store directory: it has no commitlog/, consumequeue/, "
                "index/ or checkpoint"
            )
            return rep
        rep.abort_file = (self.root / "abort").exists()
        if rep.abort_file:
            rep.warnings.append(
                "abort file present: the store was not shut down cleanly (or is open)"
            )
        with self._stack:
            per_queue = self._commit_log(step)
            self._consume_queues(per_queue, step)
            self._index()
            self._checkpoint()
        if self._in_bad_files:
            rep.warnings.append(
                f"{self._in_bad_files} consume-queue units and index entries point into "
                "commit-log files of the wrong size (not checked)"
            )
        self._maps.clear()
        return rep

    # ---- commit log -------------------------------------------------------------------------

    def _commit_log(self, step: Progress) -> dict[tuple[str, int], list[int]]:
        rep = self.report
        d = self.root / "commitlog"
        per_queue: dict[tuple[str, int], list[int]] = {}  # count, bytes, max qoff + 1
        info: dict[str, Any] = {"files": 0, "records": 0, "blank_records": 0, "bytes": 0}
        rep.commit_log = info
        if not d.is_dir():
            rep.warnings.append("no commitlog directory")
            return per_queue
        names, other = _numbered(d)
        for n in other:
            rep.warnings.append(f"commitlog/{n}: not a store file")
        if not names:
            return per_queue
        sizes = [os.path.getsize(d / n) for n in names]
        # a file cut short or half-created is smaller than the others, never larger
        size = self.cl_size or max(sizes)
        if not size:
            rep.errors.append("commitlog: every file is empty (0 bytes)")
            return per_queue
        info["file_size"] = size
        files = []
        for i, (n, s) in enumerate(zip(names, sizes, strict=True)):
            if len(n) != 20:
                rep.errors.append(f"commitlog/{n}: a name must be 20 digits")
            if s != size:
                rep.errors.append(
                    f"commitlog/{n}: {s} bytes, the files are {size} (cut short or half-created: "
                    "its records cannot be read; the other files are checked)"
                )
                self._bad_files.add(int(n))
                continue
            if int(n) % size:
                rep.errors.append(f"commitlog/{n}: not a multiple of the file size {size}")
            if i and int(n) != int(names[i - 1]) + size:
                rep.errors.append(
                    f"commitlog/{n}: does not follow {names[i - 1]} (a file is missing)"
                )
            files.append(d / n)
        self._cl_files = {int(p.name): p for p in files}
        info["files"] = len(files)
        if not files:
            return per_queue
        self._cl_min = int(files[0].name)
        end = self._cl_min
        ended = False
        batch: list[ScannedRecord] = []
        for path in files:
            base = int(path.name)
            with _mapped(path) as mm:
                if ended:
                    if len(mm) and _nonzero(mm, path):
                        rep.errors.append(
                            f"commitlog/{path.name}: data after the end of the log at {end}"
                        )
                    else:
                        rep.warnings.append(
                            f"commitlog/{path.name}: empty (pre-allocated) file after the end"
                        )
                    step(size)
                    continue
                r = scan_records(mm, 0, size, base, check_crc=True, collect=batch)
                for phys, rsize, topic, qid, qoff, sys_flag, _ts, _keyed in batch:
                    tran = sys_flag & SYSFLAG_TRANSACTION_MASK
                    if tran == 0 or tran == TRANSACTION_COMMIT_TYPE:
                        st = per_queue.get((topic, qid))
                        if st is None:
                            st = per_queue[(topic, qid)] = [0, 0, 0]
                        st[0] += 1
                        st[1] += rsize
                        if qoff + 1 > st[2]:
                            st[2] = qoff + 1
                    info["bytes"] += rsize
                    end = phys + rsize
                batch.clear()
                info["records"] += r.records
                if r.stop == BLANK_RECORD:
                    info["blank_records"] += 1
                    end = base + size
                elif r.stop == BAD_RECORD:
                    rep.errors.append(
                        f"commitlog/{path.name}: invalid record at {base + r.end}: {r.error}"
                    )
                    end = base + r.end
                    ended = True
                elif r.end < size:
                    end = base + r.end
                    ended = True
                    tail = _nonzero(mm, path, r.end)
                    if tail:
                        rep.errors.append(
                            f"commitlog/{path.name}: {tail} bytes past the end of the log at {end} are not zero"
                        )
                else:
                    end = base + size
            step(size)
        self._cl_end = end
        info["min_offset"] = self._cl_min
        info["max_offset"] = end
        return per_queue

    def _record(self, phys: int) -> Any:
        size = self.report.commit_log.get("file_size", 0)
        if not size or phys < self._cl_min or phys >= self._cl_end:
            return None
        path = self._cl_files.get(phys - phys % size)
        if path is None:
            return None
        mm = self._maps.get(path)
        if mm is None:
            mm = self._maps[path] = self._stack.enter_context(_mapped(path))
        pos = phys - int(path.name)
        limit = min(size, self._cl_end - int(path.name))
        try:
            r = check_record(mm, pos, limit, check_crc=False)
        except CorruptRecordError:
            return None
        return None if isinstance(r, int) else r

    # ---- consume queues ---------------------------------------------------------------------

    def _consume_queues(self, per_queue: dict[tuple[str, int], list[int]], step: Progress) -> None:
        rep = self.report
        d = self.root / "consumequeue"
        found: set[tuple[str, int]] = set()
        if d.is_dir():
            for topic_dir in sorted(p for p in d.iterdir() if p.is_dir()):
                for qdir in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
                    if not qdir.name.isdigit():
                        rep.warnings.append(
                            f"consumequeue/{topic_dir.name}/{qdir.name}: not a queue directory"
                        )
                        continue
                    key = (topic_dir.name, int(qdir.name))
                    found.add(key)
                    self._queue(key, qdir, per_queue.get(key), step)
        for key, (count, nbytes, nxt) in per_queue.items():
            if key not in found:
                q = rep.queues[key] = QueueSummary(key[0], key[1])
                q.log_messages, q.log_bytes, q.log_next_offset = count, nbytes, nxt
                rep.warnings.append(
                    f"{key[0]}/{key[1]}: {count} messages in the commit log, no consume queue "
                    "(dispatch will build it)"
                )

    def _queue(
        self, key: tuple[str, int], qdir: Path, stats: list[int] | None, step: Progress
    ) -> None:
        rep = self.report
        where = f"consumequeue/{key[0]}/{key[1]}"
        q = rep.queues[key] = QueueSummary(key[0], key[1])
        if stats is not None:
            q.log_messages, q.log_bytes, q.log_next_offset = stats
        names, other = _numbered(qdir)
        for n in other:
            rep.warnings.append(f"{where}/{n}: not a store file")
        if not names:
            return
        sizes = [os.path.getsize(qdir / n) for n in names]
        size = self.cq_size or max(sizes)
        if size % UNIT_SIZE:
            rep.warnings.append(f"{where}: file size {size} is not a multiple of {UNIT_SIZE}")
        first = True
        expect = int(names[0])
        ended = False
        for i, (n, s) in enumerate(zip(names, sizes, strict=True)):
            if int(n) != expect:
                rep.errors.append(f"{where}/{n}: expected a file named {expect:020d}")
            expect = int(n) + size
            if s != size:
                msg = f"{where}/{n}: {s} bytes, the queue's files are {size}"
                if i == len(names) - 1 and s < size:
                    rep.warnings.append(msg + " (a last file cut short; recovery extends it)")
                else:
                    rep.errors.append(msg)
            base = int(n)
            with _mapped(qdir / n) as mm:
                limit = len(mm) - len(mm) % UNIT_SIZE
                # the units past the last non-zero byte are all zero: the queue's end
                used = min(limit, -(-_nonzero(mm, qdir / n) // UNIT_SIZE) * UNIT_SIZE)
                for pos in range(0, used, UNIT_SIZE):
                    off, usize, _tags = UNIT.unpack_from(mm, pos)
                    offset = (base + pos) // UNIT_SIZE
                    if ended or off < 0 or usize <= 0:
                        if not ended:
                            ended = True
                            q.max_offset = offset
                        if off or usize or _tags:
                            rep.errors.append(
                                f"{where}: unit {offset} after the queue's end is not zero"
                            )
                            break
                        continue
                    if off == 0 and usize == BLANK_SIZE:
                        if first:
                            q.min_offset = offset + 1
                        continue
                    first = False
                    q.units_checked += 1
                    self._unit(where, q, offset, off, usize)
                if not ended:
                    ended = used < limit
                    q.max_offset = (base + used) // UNIT_SIZE
            step(s)
        if stats is not None and q.max_offset < q.log_next_offset:
            rep.warnings.append(
                f"{where}: {q.log_next_offset - q.max_offset} messages in the commit log are not in "
                "the queue yet (dispatch will add them)"
            )

    def _in_bad_file(self, phys: int) -> bool:
        """Whether ``phys`` lies in a commit-log file of the wrong size (reported once)."""
        size = self.report.commit_log.get("file_size", 0)
        if size and phys - phys % size in self._bad_files:
            self._in_bad_files += 1
            return True
        return False

    def _unit(self, where: str, q: QueueSummary, offset: int, phys: int, size: int) -> None:
        rep = self.report
        if self._in_bad_file(phys):
            return
        if phys < self._cl_min:
            q.min_offset = offset + 1  # its commit-log file was deleted
            return
        if phys + size > self._cl_end:
            rep.warnings.append(
                f"{where}: unit {offset} points past the commit log's end ({phys}+{size}); "
                "recovery drops it"
            )
            return
        r = self._record(phys)
        if r is None:
            rep.errors.append(f"{where}: unit {offset} points at {phys}, where no record starts")
            return
        tran = r.sys_flag & SYSFLAG_TRANSACTION_MASK
        if (
            r.msg_size != size
            or r.topic != q.topic
            or r.queue_id != q.queue_id
            or r.queue_offset != offset
            or not (tran == 0 or tran == TRANSACTION_COMMIT_TYPE)
        ):
            rep.errors.append(
                f"{where}: unit {offset} ({phys}, {size}) does not match the record there "
                f"({r.topic}/{r.queue_id} offset {r.queue_offset}, {r.msg_size} bytes)"
            )

    # ---- index ------------------------------------------------------------------------------

    def _index(self) -> None:
        rep = self.report
        d = self.root / "index"
        info: dict[str, Any] = {"files": []}
        rep.index = info
        if not d.is_dir():
            return
        names, other = _numbered(d)
        for n in other:
            rep.warnings.append(f"index/{n}: not an index file")
        for n in names:
            path = d / n
            size = path.stat().st_size
            slots, entries = self._index_geometry(size)
            item: dict[str, Any] = {"name": n, "size": size}
            info["files"].append(item)
            if slots is None or entries is None:
                rep.errors.append(
                    f"index/{n}: {size} bytes fits no index geometry (give the slot and entry numbers)"
                )
                continue
            with _mapped(path) as mm:
                if len(mm) < HEADER_SIZE:
                    rep.errors.append(f"index/{n}: shorter than its header")
                    continue
                b_ts, e_ts, b_phy, e_phy, slot_count, count = HEADER.unpack_from(mm, 0)
                item.update(
                    begin_timestamp=b_ts,
                    end_timestamp=e_ts,
                    begin_phy_offset=b_phy,
                    end_phy_offset=e_phy,
                    hash_slot_count=slot_count,
                    index_count=count,
                )
                if not 1 <= count <= entries or not 0 <= slot_count <= slots or e_phy < b_phy:
                    rep.errors.append(
                        f"index/{n}: header out of range (count {count}, slots {slot_count})"
                    )
                    continue
                entries_at = HEADER_SIZE + slots * SLOT_SIZE
                for k in range(count - 1, max(0, count - 1 - INDEX_ENTRIES_CHECKED), -1):
                    _h, phy, _diff, prev = ENTRY.unpack_from(mm, entries_at + k * ENTRY_SIZE)
                    if prev < 0 or prev >= k:
                        rep.errors.append(f"index/{n}: entry {k} links to entry {prev}")
                        break
                    if phy >= self._cl_end:
                        rep.warnings.append(
                            f"index/{n}: entry {k} points past the commit log's end"
                        )
                        break
                    if self._in_bad_file(phy):
                        continue
                    if phy >= self._cl_min and self._record(phy) is None:
                        rep.errors.append(
                            f"index/{n}: entry {k} points at {phy}, where no record starts"
                        )
                        break

    def _index_geometry(self, size: int) -> tuple[int | None, int | None]:
        if self.slots and self.entries:
            want = HEADER_SIZE + self.slots * SLOT_SIZE + self.entries * ENTRY_SIZE
            return (self.slots, self.entries) if size == want else (None, None)
        if size == DEFAULT_INDEX_FILE_SIZE:
            return 5_000_000, 20_000_000
        # RocketMQ's settings keep max_index_num = 4 * max_hash_slot_num: 84 bytes per slot
        if (size - HEADER_SIZE) % (SLOT_SIZE + 4 * ENTRY_SIZE) == 0:
            slots = (size - HEADER_SIZE) // (SLOT_SIZE + 4 * ENTRY_SIZE)
            return slots, 4 * slots
        return None, None

    # ---- checkpoint -------------------------------------------------------------------------

    def _checkpoint(self) -> None:
        rep = self.report
        path = self.root / "checkpoint"
        if not path.exists():
            rep.warnings.append(
                "no checkpoint file (a restart after a crash scans from the first file)"
            )
            return
        size = path.stat().st_size
        if size < 24:
            rep.errors.append(f"checkpoint: {size} bytes, too short for its timestamps")
            return
        if size != CHECKPOINT_FILE_SIZE:
            rep.warnings.append(f"checkpoint: {size} bytes, expected {CHECKPOINT_FILE_SIZE}")
        cp = StoreCheckpoint(path, read_only=True)
        try:
            rep.checkpoint = dict(cp.as_dict())
            rep.checkpoint["minTimestamp"] = cp.min_timestamp
            clean = cp.clean_end_offset()
            rep.checkpoint["cleanShutdownEnd"] = clean
            if clean is not None and clean != self._cl_end and self._cl_files:
                rep.warnings.append(
                    f"checkpoint: clean-shutdown end {clean}, the log ends at {self._cl_end}"
                )
        finally:
            cp.shutdown()


_STEP = 1 << 20
_ZEROS = bytes(_STEP)


def _data_ranges(path: Path, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The parts of ``[start, end)`` of a file that may hold data: the holes of a sparse file
    (a pre-allocated commit-log or consume-queue file is mostly one) are skipped with
    SEEK_DATA / SEEK_HOLE; where the file system cannot tell, the whole range."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = start
        while pos < end:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # no SEEK_DATA here: read it all
                    yield pos, end
                return  # ENXIO: a hole up to the end of the file
            if data >= end:
                return
            hole = min(end, os.lseek(fd, data, os.SEEK_HOLE))
            yield data, hole
            pos = hole
    finally:
        os.close(fd)


def _nonzero(mm: mmap.mmap | bytes, path: Path, start: int = 0) -> int:
    """How far past ``start`` non-zero bytes of ``mm`` (the mapping of ``path``) reach (0: all
    zero). Only the file's data is read, a megabyte at a time compared with zeros."""
    size = len(mm)
    reach = 0
    for begin, end in _data_ranges(path, start, size):
        for at in range(begin, end, _STEP):
            n = min(end, at + _STEP) - at
            if mm[at : at + n] != _ZEROS[:n]:
                reach = at + len(mm[at : at + n].rstrip(b"\0")) - start
    return reach
