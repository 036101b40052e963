"""The key index's per-record write: the pure-Python reference of the compiled twin
``_index_write_c`` (selected once, at import, by ``_speedups``).

``put_keys`` adds the entries of one dispatched record to an index file (the layout is drawn in
``_index``): the record's keys are its UNIQ_KEY, then every non-empty KEY_SEPARATOR-separated
token of its KEYS value, in that order. Each key's hash is RocketMQ's: abs(Java hashCode of
``topic#key``) (Integer.MIN_VALUE → 0), computed from the topic prefix's hash ``prefix_hash``
(``java_hash_unsigned(topic + "#")``, which ``KeyHasher`` caches) by running the hash on over
the key's UTF-16 code units. Each entry is written by ``put_entry``, which
``IndexFile.put_key`` also uses, and which moves the file's counters and begin/end offsets and
times.

``put_keys`` stops at the first key that does not fit (the file is full) and returns its number;
the caller starts the next file and calls again from there. It returns -1 when every key from
``done`` on is written. The slot page and the entries get their disk blocks through the file
(``allocate_slot_pages``, ``allocate_entries``) before a byte of them is written; StoreIOError
from there leaves the key unwritten and the keys before it written and counted.

The twin checks every position against the mapping and the slot-page flags before it writes a
byte, and raises what the reference raises: IndexError for a slot page past the flags,
struct.error for a position outside the mapping or an offset outside int64. States no file has
(non-integer or out-of-range counters, a slot count below 1) it hands to the reference.

Threads: the dispatcher's.
"""

from __future__ import annotations

import mmap
import struct
from typing import Protocol

from ..._speedups import EXTENSIONS_ENABLED, missing
from .._java_hash import java_hash_unsigned, power31, utf16_length
from ..log._mapped_file import OS_PAGE_SIZE
from ..log._record import KEY_SEPARATOR

# the index file's layout (drawn in ``_index``, which takes these from here)
HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
SLOT = struct.Struct(">i")
SLOT_SIZE = SLOT.size  # 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size  # 20
INVALID_INDEX = 0
INT32_MAX = 0x7FFFFFFF
_MASK32 = 0xFFFFFFFF
_MIN64, _MAX64 = -(2**63), 2**63 - 1
_INT64 = struct.Struct(">q")


class _Mapped(Protocol):
    mm: mmap.mmap


class KeyedFile(Protocol):
    """What ``put_keys`` reads and moves of an index file (``IndexFile``)."""

    @property
    def mf(self) -> _Mapped: ...

    slot_num: int
    index_num: int
    index_count: int
    hash_slot_count: int
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    _slot_pages: bytearray
    _entries_allocated: int

    def allocate_slot_pages(self, pages: tuple[int, ...], /) -> None: ...

    def allocate_entries(self, end: int, /) -> None: ...


def _bad64(value: object) -> bool:
    """Whether struct refuses ``value`` as an int64."""
    try:
        _INT64.pack(value)
    except struct.error:
        return True
    return False


def time_diff(begin: int, store_timestamp: int) -> int:
    """An entry's timeDiff: whole seconds since the file's begin time (0 before the first
    entry), at most INT32_MAX."""
    if begin <= 0 or store_timestamp < begin:
        return 0
    return min((store_timestamp - begin) // 1000, INT32_MAX)


def put_entry(f: KeyedFile, key_hash: int, phy_offset: int, ts: int, bad_phy: bool = False) -> None:
    """Write entry number ``f.index_count`` (the file has room for it) and its slot, and move
    the file's counters and begin/end offsets and times. The slot page and the entry get their
    disk blocks first. ``bad_phy``: raise struct.error before a byte of the entry is written."""
    count = f.index_count
    slot_num = f.slot_num
    slot_pos = HEADER_SIZE + (key_hash % slot_num) * SLOT_SIZE
    entry_pos = HEADER_SIZE + slot_num * SLOT_SIZE + count * ENTRY_SIZE
    if not f._slot_pages[slot_pos // OS_PAGE_SIZE]:
        f.allocate_slot_pages((slot_pos // OS_PAGE_SIZE,))
    if entry_pos + ENTRY_SIZE > f._entries_allocated:
        f.allocate_entries(entry_pos + ENTRY_SIZE)
    mm = f.mf.mm
    slot_value = SLOT.unpack_from(mm, slot_pos)[0]
    if slot_value <= INVALID_INDEX or slot_value > count:
        slot_value = INVALID_INDEX
    diff = time_diff(f.begin_timestamp, ts)
    if bad_phy:
        raise struct.error("the commit-log offset is out of range or not an integer")
    ENTRY.pack_into(mm, entry_pos, key_hash, phy_offset, diff, slot_value)
    SLOT.pack_into(mm, slot_pos, count)
    if count <= 1:
        f.begin_phy_offset = phy_offset
        f.begin_timestamp = ts
    if slot_value == INVALID_INDEX:
        f.hash_slot_count += 1
    f.index_count = count + 1
    f.end_phy_offset = phy_offset
    f.end_timestamp = ts


def record_keys(uniq_key: str | None, keys: str | None) -> list[str]:
    """The keys ``put_keys`` indexes for a record, in order."""
    out = [uniq_key] if uniq_key else []
    if keys:
        out += [k for k in keys.split(KEY_SEPARATOR) if k]
    return out


def put_keys_py(
    f: KeyedFile,
    prefix_hash: int,
    uniq_key: str | None,
    keys: str | None,
    phy_offset: int,
    store_timestamp: int,
    done: int,
    /,
) -> int:
    """Write the record's keys from number ``done`` on into ``f``; -1 when all are written,
    else the number of the first key that did not fit (``f`` is full)."""
    if uniq_key:
        todo = [uniq_key]
        if keys:
            todo += keys.split(KEY_SEPARATOR)
    elif keys:
        todo = keys.split(KEY_SEPARATOR)
    else:
        return -1
    # an offset struct cannot pack fails where the first entry is packed, before a byte of it
    bad_phy = not (type(phy_offset) is int and _MIN64 <= phy_offset <= _MAX64) and _bad64(
        phy_offset
    )
    number = 0
    for key in todo:
        if not key:
            continue
        if number < done:
            number += 1
            continue
        if f.index_count >= f.index_num:
            return number
        h = (prefix_hash * power31(utf16_length(key)) + java_hash_unsigned(key)) & _MASK32
        if h & 0x80000000:  # abs of the signed value; Integer.MIN_VALUE gives 0
            h = 0x100000000 - h if h != 0x80000000 else 0
        put_entry(f, h, phy_offset, store_timestamp, bad_phy)
        number += 1
    return -1


put_keys = put_keys_py
if EXTENSIONS_ENABLED:
    try:
        from . import _index_write_c
    except ImportError:
        missing("rocketstore.store.queue._index_write_c")
    else:
        put_keys = _index_write_c.put_keys
