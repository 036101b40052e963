"""StoreLoader: everything between "the directory is ours" and "the store may take writes".

One ``load()`` runs numbered passes and returns an immutable LoadResult:

1. state       the ``abort`` file (present: the last run did not shut down cleanly), the
               checkpoint (missing, wrong size: said in the notes) and the clean-shutdown
               record in it (cleared at once: from now on the store may change)
2. files       commit-log files mapped; a last file cut short by a crash while it was being
               created is extended with zeroes; consume queues and index files mapped (a queue
               whose files do not load is deleted and rebuilt; after an abnormal exit, index
               files newer than the checkpoint's index time are destroyed). When the per-queue
               checkpoint is believed (below) a queue it lists opens no file: it takes its
               state from there and is checked when first used (``_queue_check.FirstUse``)
3. end         where the valid commit log ends:
                 clean    the clean-shutdown record, verified by a CRC scan from the end of the
                          consume queues to it (falls back to normal when they disagree)
                 normal   CRC scan of the last three files
                 abnormal CRC scan from the last file whose first record was stored at or before
                          the checkpoint's min_timestamp (the first file when none was)
               the scan stops at the first invalid record (bad magic, lengths that disagree,
               CRC mismatch, a record that is not where it says, a torn write)
4. cut         the tail past the end is zeroed, later files deleted
5. queues      units past the end dropped; after an abnormal exit every record of the scanned
               window is checked against its queue's unit (missing or different units are
               rebuilt, their index entries added); otherwise each queue's last units are
               checked against the commit log and cut back to the last one that matches
6. index       entries of the newest index file that point past the end, or at no record,
               are unlinked; an unbelievable header destroys the file
7. dispatch    catch-up dispatch of what the queues still miss
8. tables      the topic-queue table is rebuilt from the consume queues, queue minimums
               corrected, the recovered data made durable and the checkpoint moved to it

The per-queue checkpoint (``queue/_queue_checkpoint.py``) is believed
  clean     when it was written by the clean shutdown the checkpoint's clean record describes
            (same end, same timestamps); the clean scan starts at its VERIFY FROM
  abnormal  when its witness record is still in the commit log; the scan then starts no later
            than the checkpoint's dispatch position FROM, records before it whose queue is
            still as checkpointed are not checked one by one (their queue's state covers them),
            and a queue that got a record from FROM on is opened and checked as today; when the
            recovered log ends before what the checkpoint covered, every queue is opened
and otherwise ignored (said once in the notes): every queue's files are read, as without one.

Runs on the thread that opens the store, before any service starts.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._checkpoint import StoreCheckpoint
from .._durable import is_disk_full
from .._errors import CorruptFileError, CorruptRecordError, StoreIOError, translate_os_errors
from ..log._mapped_file import MappedFile
from ..log._record import SYSFLAG_TRANSACTION_MASK, TRANSACTION_COMMIT_TYPE, check_record
from ..queue._consume_queue import BLANK_SIZE, UNIT, UNIT_SIZE, ConsumeQueue
from ..queue._queue_checkpoint import NO_WITNESS, QueueCheckpoint, QueueState
from ..queue._queue_checkpoint import read as read_queue_checkpoint
from ._queue_check import FirstUse, check_tail, unit_at
from ._scan import BAD_RECORD, BLANK_RECORD, ScannedRecord, first_store_timestamp, scan_records

if TYPE_CHECKING:
    from .._clock import Clock
    from .._config import StoreConfig
    from ..log._commit_log import CommitLog
    from ..queue._consume_queue import ConsumeQueueTable
    from ..queue._index import IndexFile, IndexService
    from ..queue._reput import ReputMessageService

log = logging.getLogger(__name__)

RECOVER_FROM_LAST_FILES = 3
CLEAN_VERIFY_BYTES = 64 * 1024 * 1024  # a clean restart CRC-checks at least this much tail
_ZERO_CHUNK = 1 << 20
_ZEROS = bytes(_ZERO_CHUNK)

CLEAN = "clean"
NORMAL = "normal"
ABNORMAL = "abnormal"
EMPTY = "empty"


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What the loader found and what it changed. Immutable."""

    mode: str  # clean / normal / abnormal / empty
    abort_file_found: bool
    checkpoint_found: bool
    checkpoint_on_disk: tuple[int, int, int]  # physic, logics, index timestamps as found
    min_timestamp: int
    commit_log_files: int
    scan_from: int  # commit-log offset where the CRC scan started
    scanned_bytes: int
    scanned_records: int
    min_phys_offset: int
    max_phys_offset: int  # the recovered end of the commit log
    stop: str  # why the scan stopped: end of data, or what was wrong with the record there
    dirty_tail_bytes: int  # non-zero bytes past the end that were zeroed
    removed_commit_log_files: tuple[str, ...]
    consume_queues: int
    dropped_units: int  # units past the end or not matching the commit log
    rebuilt_queues: tuple[str, ...]  # "topic/queue" cut back or deleted because of bad units
    destroyed_index_files: tuple[str, ...]
    dropped_index_entries: int
    dispatched: int  # records dispatched during the load
    checkpoint_after: tuple[int, int, int]
    seconds: float
    notes: tuple[str, ...] = field(default=())
    queue_checkpoint: str = "none"  # the per-queue checkpoint: used / ignored / none
    queues_opened: int = 0  # queues whose files the load opened (all of them without it)

    def summary(self) -> str:
        mb = self.scanned_bytes / 1e6
        parts = [
            f"{self.mode} recovery in {self.seconds:.3f} s: commit log "
            f"{self.min_phys_offset}..{self.max_phys_offset} ({self.commit_log_files} files)",
            f"scanned {self.scanned_records} records / {mb:.1f} MB from {self.scan_from}, "
            f"stopped at {self.stop}",
        ]
        if self.dirty_tail_bytes or self.removed_commit_log_files:
            parts.append(
                f"cut {self.dirty_tail_bytes} dirty bytes, removed files "
                f"{list(self.removed_commit_log_files)}"
            )
        if self.dropped_units or self.rebuilt_queues:
            parts.append(f"dropped {self.dropped_units} units, rebuilt {list(self.rebuilt_queues)}")
        if self.destroyed_index_files or self.dropped_index_entries:
            parts.append(
                f"destroyed index files {list(self.destroyed_index_files)}, "
                f"dropped {self.dropped_index_entries} index entries"
            )
        parts.append(f"dispatched {self.dispatched}")
        parts.append(
            f"{self.queues_opened} of {self.consume_queues} queues opened "
            f"(per-queue checkpoint {self.queue_checkpoint})"
        )
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class StoreLoader:
    """Recovers a store directory its owner has just locked (see the module docstring)."""

    def __init__(
        self,
        config: StoreConfig,
        root: Path,
        *,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueTable,
        index: IndexService,
        reput: ReputMessageService,
        checkpoint: StoreCheckpoint,
        clock: Clock,
    ) -> None:
        self.config = config
        self.root = root
        self.cl = commit_log
        self.cqt = consume_queues
        self.index = index
        self.reput = reput
        self.cp = checkpoint
        self.clock = clock
        self.notes: list[str] = []
        self._rebuilt: list[str] = []
        self._dropped_units = 0
        self._dispatched = 0
        self._redispatch_from: int | None = None
        self._dispatch_paused_at: int | None = None  # a full disk stopped recovery's dispatch
        # controller mode: recovery dispatches no record past what was dispatched before (the
        # confirm offset held dispatch back then; the rest waits for it again)
        self._dispatch_limit: int | None = None
        self._destroyed_index: list[str] = []
        self._log_next: dict[tuple[str, int], int] = {}  # per queue: next offset seen in the scan
        self._dropped_index_entries = 0
        # the per-queue checkpoint, when believed: its dispatch position FROM and what it covers
        self._qcp: QueueCheckpoint | None = None
        self._qcp_status = "none"
        self._end: int | None = None  # the recovered end, once found (pass 4)
        self.first_use = FirstUse(commit_log, lambda: self._end)
        self._mapped_queues = 0

    def _note(self, text: str) -> None:
        log.warning("%s", text)
        self.notes.append(text)

    # ---- the passes -------------------------------------------------------------------------

    def load(self) -> LoadResult:
        begin = self.clock.monotonic()
        cfg = self.config
        cp = self.cp
        # 1. state
        abort = (self.root / "abort").exists()
        on_disk = (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp)
        if cp.problem:
            self._note(cp.problem)
        clean_end = None if abort else cp.clean_end_offset()
        cp.clear_clean()
        # 2. files
        self._repair_commit_log_files()
        self.cl.queue.load()
        files = self.cl.queue.files
        if not cp.existed and files:
            self._note(
                f"{cp.path}: no checkpoint; "
                + ("recovery scans from the first file" if abort else "recovering normally")
            )
        states = self._believe_queue_checkpoint(abort, clean_end)
        mapped = self.cqt.load(
            on_corrupt=self._queue_unloadable, states=states, first_use=self.first_use
        )
        self._mapped_queues = len(mapped)
        for cq in mapped:
            cq.recover()
        if cfg.enable_controller_mode:
            self._dispatch_limit = max(self.cqt.max_physic_offset(), 0)
        self._load_index(abort)
        # 3. end
        min_ts = cp.min_timestamp
        if cfg.message_index_enable and cfg.message_index_safe:
            min_ts = cp.min_timestamp_index
        scan_from = 0
        stop = "no commit-log files"
        scanned = records = 0
        last_ts = 0
        if not files:
            mode = EMPTY
            end = 0
        else:
            mode = NORMAL
            verified = None
            if clean_end is not None:
                verified = self._verify_clean_end(clean_end)
            if verified is not None:
                mode = CLEAN
                scan_from, end, stop, records, last_ts = verified
            elif abort:
                mode = ABNORMAL
                scan_from = self._abnormal_start(min_ts)
                if self._qcp is not None:
                    scan_from = min(scan_from, self._file_start(self._qcp.dispatch_from))
                end, stop, records, last_ts = self._scan(scan_from, reconcile=True)
                self._check_covered(end)
            else:
                first = files[max(0, len(files) - RECOVER_FROM_LAST_FILES)]
                scan_from = first.from_offset
                end, stop, records, last_ts = self._scan(scan_from, reconcile=False)
            scanned = end - scan_from
            if self._qcp is not None and mode == NORMAL:
                self._ignore_queue_checkpoint("the clean-shutdown end did not verify")
        # 4. cut
        dirty, removed = self._cut_commit_log(end, zero=mode != CLEAN)
        self._end = end
        # 5. queues (those still as checkpointed: only when their end is past the log's)
        self._dropped_units += self.cqt.truncate_dirty(end)
        for cq in list(self.cqt):
            if cq.pending is None:
                self._check_queue_tail(cq, end)
        self._check_queues_behind()
        # 6. index
        self._check_index(end)
        # 7. dispatch
        self._catch_up()
        # 8. tables
        self.cl.rebuild_topic_queue_table(self.cqt.offset_table())
        self.cqt.correct_min_offset(max(self.cl.min_offset, 0))
        self._make_durable(mode, last_ts)
        result = LoadResult(
            mode=mode,
            abort_file_found=abort,
            checkpoint_found=cp.existed,
            checkpoint_on_disk=on_disk,
            min_timestamp=min_ts,
            commit_log_files=len(self.cl.queue.files),
            scan_from=scan_from,
            scanned_bytes=max(0, scanned),
            scanned_records=records,
            min_phys_offset=max(self.cl.min_offset, 0),
            max_phys_offset=self.cl.max_offset,
            stop=stop,
            dirty_tail_bytes=dirty,
            removed_commit_log_files=tuple(removed),
            consume_queues=sum(1 for _ in self.cqt),
            dropped_units=self._dropped_units,
            rebuilt_queues=tuple(sorted(set(self._rebuilt))),
            destroyed_index_files=tuple(self._destroyed_index),
            dropped_index_entries=self._dropped_index_entries,
            dispatched=self._dispatched,
            checkpoint_after=(
                cp.physic_msg_timestamp,
                cp.logics_msg_timestamp,
                cp.index_msg_timestamp,
            ),
            seconds=round(self.clock.monotonic() - begin, 6),
            notes=tuple(self.notes),
            queue_checkpoint=self._qcp_status,
            queues_opened=self._mapped_queues + self.first_use.opened,
        )
        self._end = None  # from now on a queue opened is checked against the log as it is
        self.first_use.end = lambda: self.reput.reput_from_offset
        level = (
            logging.WARNING if mode == ABNORMAL or dirty or self._dropped_units else logging.INFO
        )
        log.log(level, "%s: %s", self.root, result.summary())
        return result

    # ---- pass 2: files ----------------------------------------------------------------------

    def _repair_commit_log_files(self) -> None:
        """Extend a last commit-log file that a crash left short (the file is created, then
        sized): only when it is empty or another file shows the configured size."""
        d = Path(self.config.commit_log_dir)
        if not d.is_dir():
            return
        size = self.config.mapped_file_size_commit_log
        with translate_os_errors(f"list {d}"):
            names = sorted(e.name for e in os.scandir(d) if e.is_file() and e.name.isdigit())
            if not names:
                return
            last = d / names[-1]
            actual = last.stat().st_size
            confirmed = len(names) > 1 and (d / names[0]).stat().st_size == size
            if actual < size and (actual == 0 or confirmed):
                self._note(f"{last}: {actual} of {size} bytes (cut short while created); extended")
                os.truncate(last, size)
            elif actual != size:
                raise CorruptFileError(
                    f"{last}: {actual} bytes, but mapped_file_size_commit_log is {size}: "
                    "open the store with the file size it was written with"
                )

    def _queue_unloadable(self, cq: ConsumeQueue, exc: CorruptFileError) -> None:
        self._note(f"consume queue {cq.topic}/{cq.queue_id} does not load ({exc}); rebuilt")
        shutil.rmtree(cq.path, ignore_errors=True)
        self._rebuilt.append(f"{cq.topic}/{cq.queue_id}")
        self._redispatch_from = 0  # everything still in the commit log

    # ---- the per-queue checkpoint ------------------------------------------------------------

    def _believe_queue_checkpoint(
        self, abort: bool, clean_end: int | None
    ) -> dict[tuple[str, int], QueueState] | None:
        """The queue states to adopt, or None (said once in the notes) when the per-queue
        checkpoint is missing, corrupt, stale or from another store."""
        try:
            qcp = read_queue_checkpoint(self.root)
        except CorruptFileError as exc:
            self._ignore_queue_checkpoint(str(exc))
            return None
        if qcp is None:
            self._qcp_status = "none"
            return None
        why = self._queue_checkpoint_problem(qcp, abort, clean_end)
        if why is not None:
            self._ignore_queue_checkpoint(why)
            return None
        self._qcp = qcp
        self._qcp_status = "used"
        return {(q.topic, q.queue_id): q for q in qcp.queues}

    def _queue_checkpoint_problem(
        self, qcp: QueueCheckpoint, abort: bool, clean_end: int | None
    ) -> str | None:
        cp = self.cp
        if qcp.file_size != self.config.consume_queue_file_size:
            return f"written with consume-queue files of {qcp.file_size} bytes"
        if not abort:
            if clean_end is None:
                return "no clean-shutdown record to match it with"
            if not qcp.clean or qcp.log_end != clean_end:
                return (
                    f"stale: it covers the commit log to {qcp.log_end}, the clean shutdown "
                    f"ended at {clean_end}"
                )
            if (qcp.physic_timestamp, qcp.logics_timestamp) != (
                cp.physic_msg_timestamp,
                cp.logics_msg_timestamp,
            ):
                return "its timestamps are not the clean shutdown's"
            return None
        files = self.cl.queue.files
        if not files:
            return "the commit log has no files"
        lo, hi = files[0].from_offset, files[-1].from_offset + files[-1].file_size
        if not lo <= qcp.dispatch_from <= qcp.dispatch_covered <= hi:
            return (
                f"its dispatch positions {qcp.dispatch_from}..{qcp.dispatch_covered} are not in "
                f"the commit log's files ({lo}..{hi})"
            )
        if qcp.witness == NO_WITNESS:
            if any(q.max_phys >= 0 for q in qcp.queues):
                return "no witness record"
            return None
        phys, size, ts = qcp.witness
        try:
            r = self.cl.check_at(phys, check_crc=True) if phys >= lo else 0
        except CorruptRecordError:
            r = 0
        if isinstance(r, int) or r.msg_size != size or r.store_timestamp != ts:
            return f"its witness record at {phys} is not in the commit log (another store's?)"
        return None

    def _ignore_queue_checkpoint(self, why: str) -> None:
        """Ignore the per-queue checkpoint from now on: every queue is opened and checked."""
        self._note(f"per-queue checkpoint ignored ({why}); the queue files are read")
        self._qcp_status = f"ignored: {why}"
        self._qcp = None
        self.cqt.open_all()

    def _file_start(self, phys: int) -> int:
        mf = self.cl.queue.find_mapped_file_by_offset(phys, return_first_on_not_found=True)
        return mf.from_offset if mf is not None else 0

    def _check_covered(self, end: int) -> None:
        """After the abnormal scan: the checkpoint's queue states may hold records the log
        lost; then none of them is trusted."""
        qcp = self._qcp
        if qcp is None:
            return
        reach = max([qcp.dispatch_covered, *(q.max_phys for q in qcp.queues)])
        if end < reach:
            self._ignore_queue_checkpoint(
                f"the recovered commit log ends at {end}, before {reach} it covered"
            )

    def _covered(self, cq: ConsumeQueue, phys: int, qoff: int) -> bool:
        """A record the checkpointed state of its queue (not opened yet) holds already."""
        state = cq.pending
        qcp = self._qcp
        return (
            state is not None
            and qcp is not None
            and phys < qcp.dispatch_from
            and state.min_offset <= qoff < state.max_offset
        )

    def _load_index(self, abort: bool) -> None:
        idx = self.index
        if not idx.enabled:
            return
        before = set(_index_names(idx.dir))
        try:
            idx.load(last_exit_ok=not abort, index_checkpoint_ms=self.cp.index_msg_timestamp)
        except CorruptFileError as exc:
            # a file of the wrong size in the middle: index files are derived data
            self._note(f"index files do not load ({exc}); the index starts over")
            for f in idx.files:
                f.close()
            for name in _index_names(idx.dir):
                os.replace(idx.dir / name, idx.dir / f"{name}.corrupt")
            idx.files = []
            idx.load(last_exit_ok=True)
        gone = sorted(before - {f.name for f in idx.files})
        if gone:
            self._destroyed_index.extend(gone)
            self._note(f"index files destroyed or set aside: {gone}")

    # ---- pass 3: where the commit log ends --------------------------------------------------

    def _abnormal_start(self, min_ts: int) -> int:
        files = self.cl.queue.files
        for mf in reversed(files):
            ts = first_store_timestamp(mf.mm, mf.allocated) if mf.allocated else 0
            if ts and ts <= min_ts:
                return mf.from_offset
        return files[0].from_offset

    def _scan(self, start: int, *, reconcile: bool) -> tuple[int, str, int, int]:
        """CRC-scan from ``start`` to the first invalid record: (end, why, records, last ts).
        With ``reconcile`` every record is checked against (or dispatched to) its queue."""
        check_crc = self.config.check_crc_on_recover
        files = self.cl.queue.files
        i = next(
            k
            for k, mf in enumerate(files)
            if mf.from_offset <= start < mf.from_offset + mf.file_size
        )
        pos = start - files[i].from_offset
        records = 0
        last_ts = 0
        batch: list[ScannedRecord] | None = [] if reconcile else None
        track: list[ScannedRecord] | None = None if reconcile else []
        while True:
            mf = files[i]
            r = scan_records(
                mf.mm,
                pos,
                mf.allocated,  # past the file's data only holes: not read through the mapping
                mf.from_offset,
                check_crc=check_crc,
                collect=batch if reconcile else track,
            )
            records += r.records
            if r.last_store_timestamp:
                last_ts = r.last_store_timestamp
            if batch:
                # the file is mapped read-write, dispatch may read it; records are reconciled
                # a file at a time
                self._reconcile(mf, batch)
                batch.clear()
            elif track is not None:
                log_next = self._log_next
                for _p, _s, topic, qid, qoff, sys_flag, _t, _k in track:
                    tran = sys_flag & SYSFLAG_TRANSACTION_MASK
                    if (tran == 0 or tran == TRANSACTION_COMMIT_TYPE) and qoff >= log_next.get(
                        (topic, qid), 0
                    ):
                        log_next[(topic, qid)] = qoff + 1
                track.clear()
            end = mf.from_offset + r.end
            if r.stop == BLANK_RECORD:
                if i + 1 < len(files):
                    i += 1
                    pos = 0
                    continue
                return (
                    mf.from_offset + mf.file_size,
                    "a BLANK record at the end of the last file",
                    records,
                    last_ts,
                )
            if r.stop == BAD_RECORD:
                return end, f"an invalid record at {end}: {r.error}", records, last_ts
            if r.end >= mf.file_size and i + 1 < len(files):  # file filled exactly
                i += 1
                pos = 0
                continue
            return end, f"end of data at {end}", records, last_ts

    def _verify_clean_end(self, clean_end: int) -> tuple[int, int, str, int, int] | None:
        """CRC-scan the last CLEAN_VERIFY_BYTES up to the recorded clean end, from the first
        record (a known record start: a consume-queue unit, found by binary search in each
        queue) at or after ``clean_end - CLEAN_VERIFY_BYTES``. The recorded end is believed
        only if the scan stops exactly there."""
        q = self.cl.queue
        start = self.cqt.max_physic_offset()
        target = clean_end - CLEAN_VERIFY_BYTES
        if self._qcp is not None and q.files:
            # the checkpoint names a record start far enough back: no queue file is read
            verify_from = max(self._qcp.verify_from, q.files[0].from_offset)
            start = verify_from if start < 0 else min(start, verify_from)
        else:
            for cq in self.cqt:
                phys = _first_unit_at_or_after(cq, target)
                if phys is not None and phys < start:
                    start = phys
        if start < 0 or not q.files:
            self._note(
                "a clean-shutdown record but no consume queues to verify it from; normal recovery"
            )
            return None
        first = q.files[0].from_offset
        last_end = q.files[-1].from_offset + q.file_size
        if not first <= start <= clean_end <= last_end:
            self._note(
                f"clean-shutdown end {clean_end} disagrees with the files or the queues "
                f"({first}..{last_end}, queues end at {start}); normal recovery"
            )
            return None
        if start == last_end:
            return start, clean_end, "the clean-shutdown end", 0, 0
        end, stop, records, last_ts = self._scan(start, reconcile=False)
        if end != clean_end:
            self._note(
                f"clean-shutdown end {clean_end}, but the records end at {end} ({stop}); "
                "normal recovery"
            )
            return None
        return start, end, f"the clean-shutdown end {end}", records, last_ts

    # ---- pass 4: cut the commit log ---------------------------------------------------------

    def _cut_commit_log(self, end: int, *, zero: bool) -> tuple[int, list[str]]:
        q = self.cl.queue
        removed = []
        while (last := q.last_file()) is not None and last.from_offset > end:
            removed.append(last.file_name)
            q.delete_last_mapped_file()
        if removed:
            self._note(f"commit-log files past the end {end} removed: {removed}")
        dirty = 0
        last = q.last_file()
        if last is not None:
            pos = end - last.from_offset
            if zero:
                dirty = _zero_dirty(last, pos)
                if dirty:
                    # now: flushes sync only what they add, and the cut must outlive a crash
                    last.sync_range(pos, pos + dirty)
                    self._note(f"{last.path}: {dirty} bytes of invalid data past {end} zeroed")
            last.set_positions(pos)
        q.set_flushed_where(end)
        return dirty, removed

    # ---- pass 5: consume queues -------------------------------------------------------------

    def _reconcile(self, mf: MappedFile, records: list[ScannedRecord]) -> None:
        """Abnormal recovery: make every scanned record's unit and index entries right.

        A record whose queue already holds the same unit (offset and size) at its queue
        offset costs a unit read; a missing unit is dispatched; a different unit cuts the
        queue there (it is rebuilt by the dispatch of this and the following records)."""
        # per queue: [queue, its end, its start, cached file, file start, file end] (offsets
        # in bytes); reading a unit from the cached file (held while cached) is one unpack
        queues: dict[tuple[str, int], list[Any]] = {}
        held = _HeldQueueFiles(queues)
        try:
            self._reconcile_records(mf, records, queues, held)
        finally:
            held.release_all()

    def _reconcile_records(
        self,
        mf: MappedFile,
        records: list[ScannedRecord],
        queues: dict[tuple[str, int], list[Any]],
        held: _HeldQueueFiles,
    ) -> None:
        cqt = self.cqt
        index = self.index if self.index.enabled else None
        dispatch = self.reput.dispatch
        delay_time = self.cl.delivery_time
        mm = mf.mm
        base = mf.from_offset
        limit = mf.file_size
        unpack_unit = UNIT.unpack_from
        for phys, size, topic, qid, qoff, sys_flag, _ts, keyed in records:
            need = False
            tran = sys_flag & SYSFLAG_TRANSACTION_MASK
            if tran == 0 or tran == TRANSACTION_COMMIT_TYPE:
                key = (topic, qid)
                st = queues.get(key)
                if st is None:
                    cq = cqt.find(topic, qid)
                    if cq is None:
                        need = True
                    elif not self._covered(cq, phys, qoff):
                        st = queues[key] = _queue_state(cq)
                if st is not None:
                    where = qoff * UNIT_SIZE
                    if where >= st[1]:
                        need = True
                    elif where >= st[2]:
                        if not st[4] <= where < st[5]:
                            mf_q = held.hold(key, st[0].queue.find_mapped_file_by_offset(where))
                            st[3:6] = (
                                [mf_q, mf_q.from_offset, mf_q.from_offset + mf_q.wrote_position]
                                if mf_q
                                else [None, 0, 0]
                            )
                        mf_q = st[3]
                        unit = unpack_unit(mf_q.mm, where - st[4]) if mf_q is not None else None
                        if unit is None or unit[0] != phys or unit[1] != size:
                            held.release(key)  # before the cut deletes files
                            cq = st[0]
                            dropped = cq.truncate_to(qoff)
                            self._dropped_units += dropped
                            self._rebuilt.append(f"{topic}/{qid}")
                            log.warning(
                                "%s/%d: unit %d is %s, the commit log has (%d, %d); %d units rebuilt",
                                topic,
                                qid,
                                qoff,
                                unit,
                                phys,
                                size,
                                dropped,
                            )
                            need = True
                    if need:
                        held.release(key)
                        del queues[key]  # dispatch changes the queue: read it again next time
            if index is not None and keyed and not need:
                files = index.files
                if not files:
                    need = True
                else:
                    f = files[-1]
                    need = phys > f.end_phy_offset or (
                        phys == f.end_phy_offset and f.index_count <= 1
                    )
            if need and self._dispatch_limit is not None and phys >= self._dispatch_limit:
                if self._dispatch_paused_at is None:
                    self._dispatch_paused_at = phys  # the rest waits for the confirm offset
            if need and self._dispatch_paused_at is None:
                req = check_record(mm, phys - base, limit, check_crc=False, delay_time=delay_time)
                assert not isinstance(req, int)
                try:
                    dispatch(req)
                except StoreIOError as exc:
                    if not is_disk_full(exc):
                        raise
                    self._pause_dispatch(phys, exc)
                    continue
                self._dispatched += 1
                self.reput.parsed += 1

    def _check_queue_tail(self, cq: ConsumeQueue, end: int) -> None:
        """Walk back from a queue's last unit to the last one that matches its record."""
        dropped, bad_from = check_tail(self.cl, cq, end)
        if bad_from < 0:
            return
        self._dropped_units += dropped
        self._rebuilt.append(f"{cq.topic}/{cq.queue_id}")
        self._note(
            f"consume queue {cq.topic}/{cq.queue_id}: {dropped} units from offset {bad_from} "
            "do not match the commit log; cut and re-dispatched"
        )
        resume = cq.max_physic_offset if cq.max_physic_offset >= 0 else 0
        if self._redispatch_from is None or resume < self._redispatch_from:
            self._redispatch_from = resume

    def _check_queues_behind(self) -> None:
        """A queue that ends before the last of its records seen in the scanned tail lost
        units (an emptied or cut file): re-dispatch from where it ends."""
        for (topic, qid), nxt in self._log_next.items():
            cq = self.cqt.find(topic, qid)
            have = cq.max_offset if cq is not None else 0
            if have >= nxt:
                continue
            resume = cq.max_physic_offset if cq is not None and cq.max_physic_offset >= 0 else 0
            self._note(
                f"consume queue {topic}/{qid} ends at {have}, the commit log has messages up to "
                f"{nxt - 1}; re-dispatched from {resume}"
            )
            self._rebuilt.append(f"{topic}/{qid}")
            if self._redispatch_from is None or resume < self._redispatch_from:
                self._redispatch_from = resume

    # ---- pass 6: index ----------------------------------------------------------------------

    def _check_index(self, end: int) -> None:
        idx = self.index
        if not idx.enabled or not idx.files:
            return
        keep: list[IndexFile] = []
        for f in idx.files:
            problem = f.header_problem()
            if (
                problem is None
                and f.index_count > 1
                and f.begin_phy_offset >= end > 0
                and f is not idx.files[0]
            ):
                problem = f"it starts at {f.begin_phy_offset}, past the commit log's end {end}"
            if problem is not None:
                self._note(f"{f.path}: {problem}; destroyed")
                self._destroyed_index.append(f.name)
                f.destroy(0)
                continue
            keep.append(f)
        idx.files = keep
        if self._destroyed_index:
            # re-dispatch from where the surviving index ends: rebuilds the newest entries
            resume = keep[-1].end_phy_offset if keep else 0
            if self._redispatch_from is None or resume < self._redispatch_from:
                self._redispatch_from = resume
        if not keep:
            return
        newest = keep[-1]
        # drop the newest file's entries that point past the end or at no record
        k = newest.index_count
        while k > 1:
            _h, phys, _d, _p = newest.entry(k - 1)
            if 0 <= phys < end and self._record_at(phys):
                break
            k -= 1
        dropped = newest.truncate_entries(k)
        if dropped:
            self._dropped_index_entries += dropped
            self._note(
                f"{newest.path}: {dropped} entries past the commit log's end or at no record dropped"
            )
            resume = newest.end_phy_offset if k > 1 else newest.begin_phy_offset
            if self._redispatch_from is None or resume < self._redispatch_from:
                self._redispatch_from = resume

    def _record_at(self, phys: int) -> bool:
        try:
            return not isinstance(self.cl.check_at(phys, check_crc=False), int)
        except CorruptRecordError:
            return False

    # ---- passes 7 and 8 ---------------------------------------------------------------------

    def _catch_up(self) -> None:
        cl = self.cl
        if self.first_use.rebuilt:
            self._redispatch_from = 0  # a checkpointed queue's files did not load
            self._rebuilt.extend(self.first_use.rebuilt)
        start = max(self.cqt.max_physic_offset(), cl.min_offset, 0)
        if self._redispatch_from is not None:
            start = max(min(start, self._redispatch_from), cl.min_offset, 0)
        self.reput.reput_from_offset = start
        behind = self.reput.dispatch_behind_bytes()
        if self._dispatch_paused_at is not None:
            self.reput.reput_from_offset = start = min(start, self._dispatch_paused_at)
            return
        if behind:
            log.info("dispatching %d bytes of the commit log from %d", behind, start)
        try:
            self._dispatched += self.reput.catch_up()
        except StoreIOError as exc:
            if not is_disk_full(exc):
                raise
            self._pause_dispatch(self.reput.reput_from_offset, exc)

    def _pause_dispatch(self, phys: int, exc: StoreIOError) -> None:
        """The disk is full: the queues and index get no new blocks. Recovery ends with
        dispatch at ``phys`` (nothing acknowledged is lost: the records are in the commit log);
        the dispatch service goes on from there once there is space, and the store takes no
        writes meanwhile."""
        self._dispatch_paused_at = phys
        self._note(f"dispatch paused at {phys}, the disk is full: {exc}")
        if self._redispatch_from is None or phys < self._redispatch_from:
            self._redispatch_from = phys

    def _make_durable(self, mode: str, last_ts: int) -> None:
        """Flush what recovery touched, then move the checkpoint to it."""
        cp = self.cp
        q = self.cl.queue
        if mode in (NORMAL, ABNORMAL) and q.files:
            last = q.files[-1]
            last.flushed_position = 0
            last.flush(0)
            if last_ts:
                cp.physic_msg_timestamp = max(cp.physic_msg_timestamp, last_ts)
        if self._dispatched or self._dropped_units:
            for cq in self.cqt:
                cq.flush(0)  # nothing for a queue whose files were not opened
            ts = self.cqt.last_store_timestamp
            if ts:
                cp.logics_msg_timestamp = max(cp.logics_msg_timestamp, ts)
        cp.flush()


MAX_HELD_QUEUE_FILES = 256


class _HeldQueueFiles:
    """The consume-queue file ``_reconcile`` reads each queue's units from, held (mapped) while
    it is cached: at most MAX_HELD_QUEUE_FILES at once, the oldest let go (and its queue's
    cached file forgotten), so a recovery through many queues stays within the mapping bound.
    Loader thread."""

    def __init__(self, queues: dict[tuple[str, int], list[Any]]) -> None:
        self._queues = queues  # key -> [queue, end, start, cached file, file start, file end]
        self._held: OrderedDict[tuple[str, int], MappedFile] = OrderedDict()

    def hold(self, key: tuple[str, int], mf: MappedFile | None) -> MappedFile | None:
        """``mf`` held as ``key``'s cached file (the one before let go); None when there is
        none or it is shut down."""
        self.release(key)
        if mf is None or not mf.hold():
            return None
        self._held[key] = mf
        while len(self._held) > MAX_HELD_QUEUE_FILES:
            old_key, old = self._held.popitem(last=False)
            st = self._queues.get(old_key)
            if st is not None:
                st[3:6] = [None, 0, 0]
            old.release()
        return mf

    def release(self, key: tuple[str, int]) -> None:
        mf = self._held.pop(key, None)
        if mf is not None:
            st = self._queues.get(key)
            if st is not None:
                st[3:6] = [None, 0, 0]
            mf.release()

    def release_all(self) -> None:
        while self._held:
            self._held.popitem(last=False)[1].release()


def _queue_state(cq: ConsumeQueue) -> list[Any]:
    files = cq.queue  # opens a checkpointed queue's files first
    return [cq, files.get_max_offset(), cq.min_logic_offset, None, 0, 0]


def _first_unit_at_or_after(cq: ConsumeQueue, target: int) -> int | None:
    """Commit-log offset of a queue's first unit whose record starts at or after ``target``."""
    lo, hi = cq.min_offset, cq.max_offset - 1
    found = None
    while lo <= hi:
        mid = (lo + hi) // 2
        unit = unit_at(cq, mid)
        if unit is None:
            return found
        if unit[1] == BLANK_SIZE or unit[0] < target:
            lo = mid + 1
        else:
            found = unit[0]
            hi = mid - 1
    return found


def _zero_dirty(mf: MappedFile, pos: int) -> int:
    """Zero whatever is not zero from ``pos`` to the end of the file; returns how far the
    non-zero bytes reached past ``pos`` (0: the tail was clean).

    Only the parts with disk blocks are read (holes read as zeroes, and a read fault on one
    may need a page: on tmpfs SIGBUS when the disk is full); zeroes are written through the
    file descriptor, so holes stay holes."""
    mm = mf.mm
    reach = 0
    for lo, hi in mf.data_ranges(pos, mf.file_size):
        at = max(lo, pos)
        while at < hi:
            n = min(_ZERO_CHUNK, hi - at)
            data = mm[at : at + n]  # a copy and a memcmp: exact, and faster than a checksum
            if data != (_ZEROS if n == _ZERO_CHUNK else bytes(n)):
                reach = at + len(data.rstrip(b"\0")) - pos
                mf.zero_range(at, at + n)
            at += n
    return reach


def _index_names(d: Path) -> list[str]:
    if not d.is_dir():
        return []
    return sorted(e.name for e in os.scandir(d) if e.is_file() and e.name.isdigit())
