"""The key index: ``index/<yyyyMMddHHmmssSSS>`` files mapping message keys to commit-log offsets.

One file (every integer big-endian; S = max_hash_slot_num, N = max_index_num)::

    0            header, 40 bytes
                   0 beginTimestamp  int64   store time of the first entry
                   8 endTimestamp    int64   store time of the last entry
                  16 beginPhyOffset  int64   commit-log offset of the first entry
                  24 endPhyOffset    int64   commit-log offset of the last entry
                  32 hashSlotCount   int32   slots in use
                  36 indexCount      int32   next entry number (starts at 1: entry 0 is unused)
    40           S slots of int32: the newest entry number of the slot's chain (0 = empty)
    40 + 4S      N entries of 20 bytes:
                   0 keyHash   int32   abs(Java hashCode of "topic#key") (MIN_VALUE → 0)
                   4 phyOffset int64
                  12 timeDiff  int32   seconds since beginTimestamp
                  16 prevIndex int32   the previous entry of the same slot (0 = none)

slot = keyHash % S. A file is full when indexCount reaches N; the next file starts with the
previous file's end offset and time. Keys of a message: ``topic#UNIQ_KEY`` and ``topic#<key>``
for every KEYS token. A query walks files newest to oldest and each chain newest to oldest;
hashes collide, so callers re-check the messages.

Files are sparse: the header page, each slot page (with the pages around it, SLOT_PAGE_CHUNK
pages at a time: about 80 reservations cover the default 20 MB slot table) and the entries (in
steps of ENTRY_ALLOCATE_AHEAD) get their disk blocks before they are first written, so a full
disk raises StoreIOError (ENOSPC) with nothing written instead of a write into a hole (SIGBUS).

A record's keys are hashed and written by ``_index_write.put_keys`` (compiled when built).

Mappings: a file keeps no descriptor once mapped, and with a ``MappingLRU`` (the store's, the
one its consume-queue files share) it is mapped on demand: a loaded file when first read, and
unmapped again when idle and the LRU is over its bound. The writer *pins* the newest file (a
hold kept while it is the newest, ``IndexFile.pin``), so the entry writers, which write
through ``mf.mm`` without a hold, never meet an unmapped file; a query holds each file it
reads (``select``), and every other access (the header of a file no longer the newest, the
loader's look at entries) holds it for the call.

Threads: keys are added by the dispatcher only; queries from any thread.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._clock import SYSTEM_CLOCK, Clock
from .._durable import fsync_dir, make_dirs_synced
from .._errors import (
    CorruptFileError,
    StoreClosedError,
    StoreError,
    StoreIOError,
    translate_os_errors,
)
from .._java_hash import (
    index_key_hash,
    java_hash_unsigned,
    power31,
    powers31,
    to_signed,
    utf16_length,
)
from ..log._mapped_file import OS_PAGE_SIZE, MappedFile
from ..log._record import (
    KEY_SEPARATOR,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_ROLLBACK_TYPE,
    DispatchRequest,
)
from ._index_write import ENTRY as ENTRY
from ._index_write import ENTRY_SIZE as ENTRY_SIZE
from ._index_write import HEADER as HEADER
from ._index_write import HEADER_SIZE as HEADER_SIZE
from ._index_write import INT32_MAX as INT32_MAX
from ._index_write import INVALID_INDEX as INVALID_INDEX
from ._index_write import SLOT as SLOT
from ._index_write import SLOT_SIZE as SLOT_SIZE
from ._index_write import put_entry, put_keys, time_diff

if TYPE_CHECKING:
    import mmap

    import numpy as np
    from numpy.typing import NDArray

    from ..log._mapping_lru import MappingLRU

log = logging.getLogger(__name__)

MAX_QUERY_NUM = 64  # RocketMQ's maxMsgsNumBatch
BULK_MIN_RECORDS = 16  # smaller batches cost less through build_index than numpy's set-up
_MASK32 = 0xFFFFFFFF
ENTRY_ALLOCATE_AHEAD = 64 * 1024  # disk blocks reserved ahead of the entries written
SLOT_PAGE_CHUNK = 64  # slot pages given disk blocks together (256 KiB, aligned)


def index_file_size(slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


def index_file_name(now_ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as RocketMQ names index files."""
    dt = datetime.datetime.fromtimestamp(now_ms / 1000)
    return dt.strftime("%Y%m%d%H%M%S") + f"{now_ms % 1000:03d}"


class KeyHasher:
    """``index_key_hash(hashCode(topic + "#" + key))``, with the topic prefix hashed once."""

    def __init__(self) -> None:
        self._prefix: dict[str, int] = {}

    def __call__(self, topic: str, key: str) -> int:
        hp = self._prefix.get(topic)
        if hp is None:
            hp = self.prefix(topic)
        h = hp * power31(utf16_length(key)) + java_hash_unsigned(key)
        return index_key_hash(to_signed(h))

    def prefix(self, topic: str) -> int:
        """``java_hash_unsigned(topic + "#")``, remembered for up to 100,000 topics."""
        hp = self._prefix.get(topic)
        if hp is None:
            hp = java_hash_unsigned(topic + "#")
            if len(self._prefix) < 100_000:
                self._prefix[topic] = hp
        return hp


class IndexFile:
    """One index file. ``put_key`` from the dispatcher; ``select`` from any thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        slot_num: int,
        index_num: int,
        *,
        clock: Clock = SYSTEM_CLOCK,
        create: bool = True,
        read_only: bool = False,
        begin_phy_offset: int = 0,
        begin_timestamp: int = 0,
        lru: MappingLRU | None = None,
    ) -> None:
        """``lru``: mapped on demand within its bound (see the module's text)."""
        self.slot_num = slot_num
        self.index_num = index_num
        self.file_size = index_file_size(slot_num, index_num)
        self.pinned = False  # the writer's hold (the newest file): mapped while it lasts
        # no descriptor kept once mapped (reservations open one for the call)
        self.mf = MappedFile(
            path,
            self.file_size,
            clock=clock,
            read_only=read_only,
            create=create,
            keep_fd=False,
            lru=lru,
        )
        self.mf.set_positions(self.file_size)
        # disk blocks (the file is sparse): the header page, the slot pages written so far
        # (slots are written anywhere in their table), the entries up to _entries_allocated
        # (a slot page with no blocks holds empty slots only and is not read: on tmpfs even a
        # read fault on a hole needs a page, SIGBUS when the disk is full)
        entries_at = HEADER_SIZE + slot_num * SLOT_SIZE
        self._slot_pages = bytearray(entries_at // OS_PAGE_SIZE + 1)
        self._entries_allocated = max(entries_at, self.mf.allocated)
        if not self.mf.created:
            for lo, hi in self.mf.data_ranges(0, entries_at):
                first, last = lo // OS_PAGE_SIZE, -(-hi // OS_PAGE_SIZE)
                self._slot_pages[first:last] = b"\x01" * (last - first)
        self.path = self.mf.path
        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        if self.mf.created:
            # a new file continues where the previous one ended
            if begin_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = begin_phy_offset
            if begin_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = begin_timestamp
            if not read_only:
                try:
                    self.write_header()
                except BaseException:
                    self.mf.destroy(0)
                    raise
        else:
            self.load_header()

    @property
    def name(self) -> str:
        return self.path.name

    # ---- mapping ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _mapped(self) -> Iterator[mmap.mmap]:
        """The mapping, held for the block (mapped again when the LRU unmapped it).
        StoreClosedError once the file is shut down."""
        if not self.mf.hold():
            raise StoreClosedError(f"{self.path}: the index file is shut down")
        try:
            yield self.mf.mm
        finally:
            self.mf.release()

    def pin(self) -> None:
        """The writer's hold: the file stays mapped until ``unpin`` (it is the newest, the
        entry writers write it without a hold). Writer's thread. StoreClosedError once the
        file is shut down."""
        if not self.pinned:
            if not self.mf.hold():
                raise StoreClosedError(f"{self.path}: the index file is shut down")
            self.pinned = True

    def unpin(self) -> None:
        """Give up the writer's hold (the file is no longer the newest, or goes away)."""
        if self.pinned:
            self.pinned = False
            self.mf.release()

    def load_header(self) -> None:
        if not self._slot_pages[0]:  # no blocks: a file created and never written
            return
        if self.mf.mapped:
            with self._mapped() as mm:
                header = bytes(mm[:HEADER_SIZE])
        else:  # read, not mapped: a loaded file is mapped when a query first reads it
            with translate_os_errors(f"read {self.path}"):
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    header = os.pread(fd, HEADER_SIZE, 0)
                finally:
                    os.close(fd)
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = HEADER.unpack_from(header, 0)
        if self.index_count <= 0:
            self.index_count = 1

    def write_header(self) -> None:
        """Raises StoreIOError when the header's page has no disk blocks and gets none."""
        if not self._slot_pages[0]:
            self.allocate_slot_pages((0,))
        if self.pinned:  # the writer, every record: no hold needed
            self._pack_header(self.mf.mm)
            return
        with self._mapped() as mm:
            self._pack_header(mm)

    def _pack_header(self, mm: mmap.mmap) -> None:
        HEADER.pack_into(
            mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Add one entry (the header is written by ``write_header``). False when full."""
        if self.index_count >= self.index_num:
            return False
        put_entry(self, key_hash, phy_offset, store_timestamp)
        return True

    def allocate_slot_pages(self, pages: Iterable[int]) -> None:
        """Disk blocks for the slot table's pages ``pages`` (page numbers in the file) before
        slots in them are written, a chunk of SLOT_PAGE_CHUNK pages at a time (only the page
        when the disk has no room for its chunk). Raises StoreIOError (ENOSPC) with nothing
        written."""
        flags = self._slot_pages
        for page in pages:
            if not flags[page]:
                lo = page - page % SLOT_PAGE_CHUNK
                hi = min(lo + SLOT_PAGE_CHUNK, len(flags))
                try:
                    self.mf.allocate_range(lo * OS_PAGE_SIZE, hi * OS_PAGE_SIZE)
                except StoreIOError:
                    self.mf.allocate_range(page * OS_PAGE_SIZE, (page + 1) * OS_PAGE_SIZE)
                    lo, hi = page, page + 1
                flags[lo:hi] = b"\x01" * (hi - lo)

    def allocate_entries(self, end: int) -> None:
        """Disk blocks for the entries up to byte ``end`` of the file, reserved up to
        ENTRY_ALLOCATE_AHEAD bytes ahead (only what ``end`` needs when the disk has no room for
        more). Raises StoreIOError (ENOSPC) with nothing written."""
        have = self._entries_allocated
        if end <= have:
            return
        ahead = min(self.file_size, max(end, have + ENTRY_ALLOCATE_AHEAD))
        try:
            self.mf.allocate_range(have, ahead)
        except StoreIOError:
            if ahead <= end:
                raise
            self.mf.allocate_range(have, end)
            ahead = end
        self._entries_allocated = ahead

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    def select(
        self,
        key_hash: int,
        begin: int,
        end: int,
        accept: Callable[[int], bool],
        out: list[int],
        max_num: int,
    ) -> None:
        """Append to ``out`` the offsets of the chain entries with ``key_hash`` stored within
        [begin, end] that ``accept``, newest first, until ``out`` holds ``max_num``."""
        if not self.mf.hold():
            return
        try:
            mm = self.mf.mm
            count = self.index_count
            slot_pos = HEADER_SIZE + (key_hash % self.slot_num) * SLOT_SIZE
            if not self._slot_pages[slot_pos // OS_PAGE_SIZE]:
                return  # a page never written: every slot in it is empty
            slot_value = SLOT.unpack_from(mm, slot_pos)[0]
            if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
                return
            entries = HEADER_SIZE + self.slot_num * SLOT_SIZE
            base_time = self.begin_timestamp
            current = slot_value
            for _ in range(count):  # a damaged chain cannot loop forever
                if len(out) >= max_num:
                    return
                h, phy, diff, prev = ENTRY.unpack_from(mm, entries + current * ENTRY_SIZE)
                if diff < 0:
                    return
                # entry 1 set the begin time itself (its diff was taken from the previous
                # file's end time, as RocketMQ writes it)
                t = base_time + diff * 1000 if current != 1 else base_time
                if h == key_hash and begin <= t <= end and accept(phy):
                    out.append(phy)
                if prev <= INVALID_INDEX or prev > count or prev == current or t < begin:
                    return
                current = prev
        finally:
            self.mf.release()

    # ---- recovery ---------------------------------------------------------------------------

    def header_problem(self) -> str | None:
        """What makes the header unbelievable (counts out of range, offsets reversed), or None."""
        if not 1 <= self.index_count <= self.index_num:
            return f"index count {self.index_count} outside 1..{self.index_num}"
        if not 0 <= self.hash_slot_count <= self.slot_num:
            return f"slot count {self.hash_slot_count} outside 0..{self.slot_num}"
        if self.begin_phy_offset < 0 or self.end_phy_offset < self.begin_phy_offset:
            return f"offsets {self.begin_phy_offset}..{self.end_phy_offset} out of order"
        return None

    def entry(self, number: int) -> tuple[int, int, int, int]:
        """(key hash, commit-log offset, time diff s, previous entry) of entry ``number``."""
        at = HEADER_SIZE + self.slot_num * SLOT_SIZE + number * ENTRY_SIZE
        with self._mapped() as mm:
            return ENTRY.unpack_from(mm, at)  # type: ignore[return-value]

    def truncate_entries(self, keep: int) -> int:
        """Keep entries 1 .. keep-1 only: later entries are unlinked from their slots (newest
        first, so each slot falls back to its chain's older entry) and zeroed; the header then
        ends at the last kept entry. Returns how many entries were dropped. Loader thread."""
        count = self.index_count
        keep = max(1, keep)
        if keep >= count:
            return 0
        with self._mapped() as mm:
            return self._truncate_entries(mm, count, keep)

    def _truncate_entries(self, mm: mmap.mmap, count: int, keep: int) -> int:
        slots = HEADER_SIZE
        for n in range(count - 1, keep - 1, -1):
            key_hash, _phy, _diff, prev = self.entry(n)
            at = slots + (key_hash % self.slot_num) * SLOT_SIZE if key_hash >= 0 else -1
            if (
                at >= 0
                and self._slot_pages[at // OS_PAGE_SIZE]  # a page never written: no slot to undo
                and SLOT.unpack_from(mm, at)[0] == n
            ):
                fallback = prev if 0 < prev < n else INVALID_INDEX
                SLOT.pack_into(mm, at, fallback)
                if fallback == INVALID_INDEX:
                    self.hash_slot_count = max(0, self.hash_slot_count - 1)
        # the dropped entries, through the file descriptor: holes among them stay holes
        entries = HEADER_SIZE + self.slot_num * SLOT_SIZE
        self.mf.zero_range(entries + keep * ENTRY_SIZE, entries + count * ENTRY_SIZE)
        self.index_count = keep
        if keep > 1:
            _h, phy, diff, _p = self.entry(keep - 1)
            self.end_phy_offset = phy
            self.end_timestamp = (
                self.begin_timestamp + max(0, diff) * 1000
                if keep - 1 != 1
                else self.begin_timestamp
            )
        else:
            self.end_phy_offset = self.begin_phy_offset
            self.end_timestamp = self.begin_timestamp
        self.write_header()
        return count - keep

    def flush(self) -> None:
        self.write_header()
        self.mf.flushed_position = 0
        self.mf.flush(0)

    def close(self) -> None:
        self.unpin()
        self.mf.close()

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        self.unpin()
        return self.mf.destroy(interval_forcibly_ms)

    def __repr__(self) -> str:
        return f"IndexFile({self.name}, entries={self.index_count - 1}/{self.index_num - 1})"


# ---- bulk hashing (numpy) ---------------------------------------------------------------------

_powers31_table: list[NDArray[np.uint64]] = []  # one array, replaced when it grows


def _powers31(n: int) -> NDArray[np.uint64]:
    """31^i mod 2^32 for i in 0..n-1 (at least), as uint64."""
    import numpy as np

    if not _powers31_table or len(_powers31_table[0]) < n:
        _powers31_table[:] = [np.array(powers31(max(n, 256)), dtype=np.uint64)]
    return _powers31_table[0]


def split_key_hashes(
    topic: str, keys: Sequence[str], hasher: KeyHasher | None = None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The index hash of ``topic#token`` for every non-empty KEY_SEPARATOR-separated token of
    every KEYS value in ``keys``, in order, with the position in ``keys`` of its value.

    Equal to ``KeyHasher()(topic, token)`` token by token. Java hashes UTF-16 code units:
    values whose code units line up with their characters (ASCII, any BMP text) are hashed
    together with numpy; a batch holding characters beyond the BMP, which take two code units
    each, is hashed token by token with ``hasher``.
    """
    import numpy as np

    n = len(keys)
    text = "".join(keys)
    if text.isascii():
        units: NDArray[np.integer] = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:
        units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype="<u2")
        if len(units) != len(text):
            return _split_key_hashes_slow(topic, keys, hasher or KeyHasher())
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    if KEY_SEPARATOR in text or not lengths.all():
        records, lengths, packed = _split_units(units, lengths)
        if not len(records):
            return records, np.zeros(0, dtype=np.int64)
    else:  # one key a record, the common case: the values are the tokens
        records = np.arange(n, dtype=np.int64)
        packed = units.astype(np.uint64)
        if not n:
            return records, np.zeros(0, dtype=np.int64)
    # each unit is weighted by 31^(units after it in its token)
    packed_ends = np.cumsum(lengths)
    packed_starts = packed_ends - lengths
    powers = _powers31(int(lengths.max()) + 1)
    distance = np.repeat(packed_ends - 1, lengths) - np.arange(len(packed), dtype=np.int64)
    # uint64 sums wrap mod 2^64, which keeps the low 32 bits right; no segment is empty
    key_part = np.add.reduceat(packed * powers[distance], packed_starts) & np.uint64(_MASK32)
    prefix = np.uint64(java_hash_unsigned(topic + "#"))
    unsigned = (prefix * powers[lengths] + key_part) & np.uint64(_MASK32)
    signed = unsigned.astype(np.int64)
    signed[signed > INT32_MAX] -= 1 << 32
    hashes = np.abs(signed)
    hashes[hashes == 1 << 31] = 0  # abs(Integer.MIN_VALUE) stays negative: RocketMQ uses 0
    return records, hashes


def _split_units(
    units: NDArray[np.integer], lengths: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.uint64]]:
    """Split code units holding values of ``lengths`` units end to end into their non-empty
    KEY_SEPARATOR-separated tokens: (value of each token, token lengths, the tokens' units end
    to end)."""
    import numpy as np

    size = len(units)
    value_ends = np.cumsum(lengths)
    # where a new value begins: a token never runs from one value into the next
    boundary = np.zeros(size + 1, dtype=bool)
    boundary[value_ends] = True
    boundary[0] = True
    word = units != ord(KEY_SEPARATOR)
    is_start = word.copy()
    is_start[1:] &= ~word[:-1] | boundary[1:size]
    is_end = word.copy()
    is_end[:-1] &= ~word[1:] | boundary[1:size]
    starts = np.flatnonzero(is_start)
    token_lengths = np.flatnonzero(is_end) + 1 - starts
    records = np.searchsorted(value_ends, starts, side="right").astype(np.int64)
    # every non-separator unit belongs to exactly one token
    return records, token_lengths, units[word].astype(np.uint64)


def _split_key_hashes_slow(
    topic: str, keys: Sequence[str], hasher: KeyHasher
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``split_key_hashes`` token by token."""
    import numpy as np

    records: list[int] = []
    hashes: list[int] = []
    for r, value in enumerate(keys):
        if value:
            for key in value.split(KEY_SEPARATOR):
                if key:
                    records.append(r)
                    hashes.append(hasher(topic, key))
    return np.array(records, dtype=np.int64), np.array(hashes, dtype=np.int64)


def _put_block(
    f: IndexFile, key_hashes: NDArray[np.int64], phys: NDArray[np.int64], ts: int
) -> None:
    """Add entries ``f.index_count ..`` for ``key_hashes``/``phys`` stored at ``ts``, exactly as
    ``f.put_key`` would one by one. The caller makes sure they fit."""
    import numpy as np

    m = len(key_hashes)
    count = f.index_count
    numbers = np.arange(count, count + m, dtype=np.int64)
    slots = key_hashes % f.slot_num
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    first = np.ones(m, dtype=bool)
    first[1:] = sorted_slots[1:] != sorted_slots[:-1]
    last = np.ones(m, dtype=bool)
    last[:-1] = first[1:]
    # an entry chains to the previous entry of its slot in this block; the first of a slot to
    # what the slot held, if that is a plausible entry number at the time it is written
    prev = np.empty(m, dtype=np.int64)
    prev[order[1:]] = numbers[order[:-1]]
    firsts = order[first]
    begin = f.begin_timestamp
    first_diff = time_diff(begin, ts)
    if count <= 1:
        begin = ts  # entry 1 sets the file's begin time, which later entries count from
    diffs = np.full(m, time_diff(begin, ts), dtype=np.int64)
    diffs[0] = first_diff
    mm = f.mf.mm
    entry_at = HEADER_SIZE + f.slot_num * SLOT_SIZE + count * ENTRY_SIZE
    # disk blocks first (the file is sparse): the pages of the slots written, the entries
    f.allocate_slot_pages(np.unique((HEADER_SIZE + slots * SLOT_SIZE) // OS_PAGE_SIZE).tolist())
    f.allocate_entries(entry_at + m * ENTRY_SIZE)
    table = np.frombuffer(mm, dtype=">i4", count=f.slot_num, offset=HEADER_SIZE)
    entries = np.frombuffer(mm, dtype=_entry_dtype(), count=m, offset=entry_at)
    try:
        old = table[slots[firsts]].astype(np.int64)
        valid = (old > INVALID_INDEX) & (old <= numbers[firsts])
        prev[firsts] = np.where(valid, old, INVALID_INDEX)
        # entries before slots, as put_key writes them: a reader that sees a new slot value
        # finds its entry written
        entries["hash"] = key_hashes
        entries["phy"] = phys
        entries["diff"] = diffs
        entries["prev"] = prev
        table[sorted_slots[last]] = numbers[order[last]]
    finally:
        del table, entries  # no view may outlive the call: the mapping cannot close under one
    if count <= 1:
        f.begin_phy_offset = int(phys[0])
        f.begin_timestamp = ts
    f.hash_slot_count += len(firsts) - int(np.count_nonzero(valid))
    f.index_count = count + m
    f.end_phy_offset = int(phys[-1])
    f.end_timestamp = ts


@functools.lru_cache(maxsize=1)
def _entry_dtype() -> np.dtype[np.void]:
    """ENTRY as a numpy record (20 bytes, no padding)."""
    import numpy as np

    return np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])


class IndexService:
    """The index files of a store: adds the keys of dispatched messages and answers queries."""

    def __init__(
        self,
        index_dir: str | os.PathLike[str],
        *,
        slot_num: int,
        index_num: int,
        enabled: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        read_only: bool = False,
        on_flushed: Callable[[int], None] | None = None,
        lru: MappingLRU | None = None,
    ) -> None:
        """``lru``: the files are mapped on demand within its bound (see the module's text)."""
        self.dir = Path(index_dir)
        self.lru = lru
        self.slot_num = slot_num
        self.index_num = index_num
        self.enabled = enabled
        self.clock = clock
        self.read_only = read_only
        self.on_flushed = on_flushed
        self.files: list[IndexFile] = []  # oldest first; replaced, never mutated
        self._lock = threading.Lock()
        self._flushers: list[threading.Thread] = []
        self.hasher = KeyHasher()

    # ---- loading ----------------------------------------------------------------------------

    def load(self, last_exit_ok: bool = True, index_checkpoint_ms: int | None = None) -> bool:
        """Map the index files. After an abnormal exit, files whose last entry is newer than
        the checkpoint's index time are destroyed (recovery re-dispatches those messages).
        A newest file shorter than it should be (half created) is renamed ``*.corrupt``;
        any other size mismatch is an error (settings that do not fit the files). With the
        index disabled nothing is loaded."""
        if not self.enabled or not self.dir.is_dir():
            return True
        size = index_file_size(self.slot_num, self.index_num)
        files: list[IndexFile] = []
        with translate_os_errors(f"list {self.dir}"):
            names = sorted(e.name for e in os.scandir(self.dir) if e.is_file() and e.name.isdigit())
        for name in names:
            path = self.dir / name
            try:
                actual = path.stat().st_size
            except OSError:
                continue
            if actual != size:
                if name != names[-1] or actual > size or self.read_only:
                    raise CorruptFileError(
                        f"{path}: size {actual} is not {size} (max_hash_slot_num "
                        f"{self.slot_num}, max_index_num {self.index_num}): wrong settings?"
                    )
                # the newest file was being created when the process died
                log.warning(
                    "%s: half-created (%d of %d bytes); renamed to %s.corrupt",
                    path,
                    actual,
                    size,
                    name,
                )
                with translate_os_errors(f"rename {path}"):
                    os.replace(path, path.with_name(name + ".corrupt"))
                continue
            f = IndexFile(
                path,
                self.slot_num,
                self.index_num,
                clock=self.clock,
                create=False,
                read_only=self.read_only,
                lru=self.lru,
            )
            if (
                not last_exit_ok
                and index_checkpoint_ms is not None
                and f.end_timestamp > index_checkpoint_ms
            ):
                log.warning("%s: newer than the index checkpoint; destroyed", path)
                f.destroy(0)
                continue
            files.append(f)
        self.files = files
        return True

    # ---- writing ----------------------------------------------------------------------------

    def _last_file(self) -> IndexFile:
        files = self.files
        last = files[-1] if files else None
        if last is not None and not last.is_full():
            if not last.pinned:
                last.pin()  # a loaded file, the first write to it
            return last
        now = self.clock.now_ms()
        name = index_file_name(now)
        if last is not None and int(name) <= int(last.name):
            name = str(int(last.name) + 1)  # never two files with one name
        with translate_os_errors(f"create {self.dir}"):
            make_dirs_synced(self.dir)
        new = IndexFile(
            self.dir / name,
            self.slot_num,
            self.index_num,
            clock=self.clock,
            begin_phy_offset=last.end_phy_offset if last is not None else 0,
            begin_timestamp=last.end_timestamp if last is not None else 0,
            lru=self.lru,
        )
        try:
            new.pin()
            with translate_os_errors(f"sync {self.dir}"):
                fsync_dir(self.dir)
        except StoreError:
            new.destroy(0)
            raise
        with self._lock:
            self.files = [*files, new]
        if last is not None:
            last.write_header()
            last.unpin()
            t = threading.Thread(
                target=self._flush_file, args=(last,), name="IndexFlush", daemon=True
            )
            self._flushers = [th for th in self._flushers if th.is_alive()] + [t]
            t.start()
        return new

    def _flush_file(self, f: IndexFile) -> None:
        try:
            f.flush()
        except Exception:  # the file is flushed again at shutdown
            log.exception("%s: flush failed", f.path)
            return
        if self.on_flushed is not None and f.end_timestamp > 0:
            self.on_flushed(f.end_timestamp)

    def build_index(self, req: DispatchRequest, *, write_header: bool = True) -> None:
        """Index ``topic#UNIQ_KEY`` and ``topic#key`` of one dispatched record (not rollbacks).

        Dispatcher thread only. A record at or below the last indexed offset is skipped. With
        ``write_header=False`` the newest file's header is left for ``write_last_header`` (a
        batch writes it once; a file that fills up still gets its header when it does).
        """
        if not self.enabled or self.read_only:
            return
        if not req.uniq_key and not req.keys:
            if not self.files:
                self._last_file()  # the first dispatch creates the first file, as RocketMQ does
            return
        f = self._last_file()
        phys = req.commitlog_offset
        if phys < f.end_phy_offset or (phys == f.end_phy_offset and f.index_count > 1):
            return
        if req.sys_flag & SYSFLAG_TRANSACTION_MASK == TRANSACTION_ROLLBACK_TYPE:
            return
        prefix = self.hasher.prefix(req.topic)
        uniq_key, keys, ts = req.uniq_key, req.keys, req.store_timestamp
        done = put_keys(f, prefix, uniq_key, keys, phys, ts, 0)
        while done >= 0:  # the file is full: the next file takes the record's other keys
            f.write_header()
            log.info("index file %s is full; starting another", f.name)
            f = self._last_file()
            more = put_keys(f, prefix, uniq_key, keys, phys, ts, done)
            if more == done:
                raise CorruptFileError(f"{f.path}: a new index file refused an entry")
            done = more
        if write_header:
            f.write_header()

    def build_index_many(
        self, topic: str, offsets: Sequence[int], keys: Sequence[str], store_timestamp: int
    ) -> None:
        """Index the KEYS values ``keys[i]`` of records at ``offsets[i]`` (strictly increasing),
        all of ``topic`` and stored at ``store_timestamp``; no UNIQ_KEY, no rollbacks.

        The files end up byte for byte as after ``build_index`` of each record in order with
        ``write_header=False`` and then ``write_last_header``, but the keys are hashed and
        written with numpy, a file's new entries as one block. Needs numpy unless the batch is
        small. Dispatcher thread only.
        """
        n = len(offsets)
        if len(keys) != n:
            raise ValueError(f"{n} offsets but {len(keys)} KEYS values")
        if self.enabled and not self.read_only:
            bulk = n >= BULK_MIN_RECORDS and self.index_num >= 2
            i = 0
            # Records at or below the last indexed offset (a re-dispatch) and the record that
            # creates the first file take the per-record path; once past them, offsets only
            # grow, so no later record of the batch can be skipped.
            while i < n and (
                not bulk or not self.files or offsets[i] <= self.files[-1].end_phy_offset
            ):
                req = DispatchRequest(
                    topic, 0, offsets[i], 0, 0, store_timestamp, 0, keys[i], None, 0, 0
                )
                self.build_index(req, write_header=False)
                i += 1
            if i < n:
                self._build_index_bulk(topic, offsets[i:], keys[i:], store_timestamp)
        self.write_last_header()

    def _build_index_bulk(
        self, topic: str, offsets: Sequence[int], keys: Sequence[str], ts: int
    ) -> None:
        import numpy as np

        records, key_hashes = split_key_hashes(topic, keys, self.hasher)
        phys = np.asarray(offsets, dtype=np.int64)[records]
        total = len(key_hashes)
        done = 0
        while done < total:
            f = self._last_file()  # a new file when the newest is full
            m = min(f.index_num - f.index_count, total - done)
            _put_block(f, key_hashes[done : done + m], phys[done : done + m], ts)
            done += m
            if done < total:
                f.write_header()
                log.info("index file %s is full; starting another", f.name)
        # build_index asks for the newest file before it looks at a record's keys: a record
        # whose KEYS value holds only separators still replaces a full file
        files = self.files
        after = int(records[-1]) + 1 if total else 0
        if files and files[-1].is_full() and any(keys[after:]):
            self._last_file()

    def write_last_header(self) -> None:
        """Write the newest file's header. Dispatcher thread only."""
        files = self.files
        if files and not self.read_only:
            files[-1].write_header()

    # ---- reading ----------------------------------------------------------------------------

    def query(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin: int,
        end: int,
        accept: Callable[[int], bool] = lambda _phy: True,
    ) -> tuple[list[int], int, int]:
        """Offsets of the newest ``max_num`` accepted entries for ``topic#key`` stored within
        [begin, end], sorted ascending; with the newest file's end time and end offset."""
        max_num = min(max_num, MAX_QUERY_NUM)
        out: list[int] = []
        last_ts = last_phy = 0
        files = self.files
        if not files or max_num <= 0:
            return out, last_ts, last_phy
        key_hash = self.hasher(topic, key)
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if i == len(files) - 1:
                last_ts, last_phy = f.end_timestamp, f.end_phy_offset
            if f.is_time_matched(begin, end):
                f.select(key_hash, begin, end, accept, out, max_num)
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        out.sort()
        return out, last_ts, last_phy

    @property
    def last_update_timestamp(self) -> int:
        files = self.files
        return files[-1].end_timestamp if files else 0

    # ---- cleaning and lifecycle -------------------------------------------------------------

    def truncate_from(self, phys_offset: int) -> int:
        """Drop the entries of records at or after ``phys_offset`` (the commit log was cut
        there): the files that begin there or later are destroyed (never the first), the newest
        one left loses its entries past it. Returns how many entries went. Dispatch paused (no
        entry is added meanwhile)."""
        self._join_flushers()
        files = self.files
        gone = [f for f in files[1:] if f.begin_phy_offset >= phys_offset]
        dropped = 0
        for f in gone:
            dropped += max(0, f.index_count - 1)
            f.destroy(0)
        if gone:
            with self._lock:
                self.files = [f for f in self.files if f not in gone]
        if self.files:
            newest = self.files[-1]
            keep = newest.index_count
            while keep > 1 and newest.entry(keep - 1)[1] >= phys_offset:
                keep -= 1
            dropped += newest.truncate_entries(keep)
        return dropped

    def delete_expired_files(self, min_phys_offset: int) -> int:
        """Destroy files (never the last) whose entries all point below ``min_phys_offset``."""
        self._join_flushers()
        files = self.files
        gone = []
        for f in files[:-1]:
            if f.end_phy_offset >= min_phys_offset:
                break
            if not f.destroy(3000):
                break
            gone.append(f)
        if gone:
            with self._lock:
                self.files = [f for f in self.files if f not in gone]
        return len(gone)

    def flush(self) -> None:
        """Write every header and make the files durable (shutdown, tests)."""
        for f in self.files:
            if not self.read_only:
                try:
                    f.flush()
                except StoreError as exc:  # a header page with no blocks on a full disk
                    log.error("%s: flush failed: %s", f.path, exc)
        files = self.files
        if files and self.on_flushed is not None and files[-1].end_timestamp > 0:
            self.on_flushed(files[-1].end_timestamp)

    def _join_flushers(self) -> None:
        for t in self._flushers:
            t.join(30)
        self._flushers = []

    def shutdown(self) -> None:
        self._join_flushers()
        if not self.read_only:
            self.flush()
        for f in self.files:
            f.close()
        self.files = []

    def destroy(self) -> None:
        self._join_flushers()
        for f in self.files:
            f.destroy(3000)
        self.files = []
