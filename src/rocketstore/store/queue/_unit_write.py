"""Consume-queue units written by dispatch, per message: the pure-Python reference of the
compiled twin ``_unit_write_c`` (selected once, at import, by ``_speedups``).

A unit is 20 bytes, every integer big-endian (see ``_consume_queue``)::

     0 COMMITLOG OFFSET int64 | 8 SIZE int32 | 12 TAGS CODE int64

``put_next_unit`` is the usual case of ``ConsumeQueue.put_unit``: the next unit of a queue's
last file, which has its disk blocks already and is under the writer's hold (mapped, see
``MappingLRU``). It answers False for anything else (no file, a full file, a gap, blocks to
reserve, no writer hold), and ``put_unit`` handles that. ``pack_units`` packs the
units of a batch into a buffer in one go. Both check everything (sizes of the sequences, the
integer ranges, the bounds of the buffer) before writing a byte; the twin checks the same in
the same order and raises the same exceptions.

Threads: the dispatcher's (the put path under the put lock when dispatch runs inline).
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Sequence
from typing import Protocol

from ..._speedups import EXTENSIONS_ENABLED, missing
from ..log._mapped_file_queue import MappedFileQueue

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20


@functools.lru_cache(maxsize=64)
def _units_struct(n: int) -> struct.Struct:
    """``n`` consume-queue units packed at once."""
    return struct.Struct(">" + "qiq" * n)


class UnitQueue(Protocol):
    """What ``put_next_unit`` reads and moves of a consume queue (``ConsumeQueue``)."""

    @property
    def queue(self) -> MappedFileQueue: ...

    max_physic_offset: int


def put_next_unit_py(
    cq: UnitQueue, phys_offset: int, size: int, tags_code: int, offset: int, /
) -> bool:
    """Write the unit of logical ``offset`` when it is the next one of ``cq``'s last file
    (which has disk blocks for it, so room: a file's blocks never pass its size), or skip it when its record was dispatched
    before (a re-dispatch after a restart): True. False, with nothing written, for anything
    else. struct.error when a field is out of its range (checked first), IndexError when the
    file's mapping is shorter than its size says: nothing written then."""
    unit = UNIT.pack(phys_offset, size, tags_code)
    end = phys_offset + size
    if end <= cq.max_physic_offset:
        return True
    files = cq.queue.files
    if files:
        mf = files[-1]
        pos = mf.wrote_position
        stop = pos + 20
        if pos and stop <= mf.allocated and mf.from_offset + pos == offset * 20 and mf.writer_held:
            mf.mm[pos:stop] = unit  # (mmap: IndexError past its end)
            mf.wrote_position = stop
            cq.max_physic_offset = end
            return True
    return False


def pack_units_py(
    buf: bytearray | mmap.mmap,
    pos: int,
    phys_offsets: Sequence[int],
    sizes: Sequence[int],
    tags_codes: Sequence[int],
    /,
) -> int:
    """Pack one unit per (offset, size, tags code) into ``buf`` from ``pos``; returns the end.
    ValueError when the sequences differ in length or the units do not fit in ``buf``;
    struct.error when a field is out of its range. Nothing is written then."""
    n = len(phys_offsets)
    if len(sizes) != n or len(tags_codes) != n:
        raise ValueError(f"{n} offsets, {len(sizes)} sizes and {len(tags_codes)} tags codes")
    end = pos + n * UNIT_SIZE
    if pos < 0 or end > len(buf):
        raise ValueError(f"{n} units at {pos} do not fit in {len(buf)} bytes")
    fields = [v for unit in zip(phys_offsets, sizes, tags_codes, strict=True) for v in unit]
    buf[pos:end] = _units_struct(n).pack(*fields)
    return end


put_next_unit = put_next_unit_py
pack_units = pack_units_py
if EXTENSIONS_ENABLED:
    try:
        from . import _unit_write_c
    except ImportError:
        missing("rocketstore.store.queue._unit_write_c")
    else:
        put_next_unit = _unit_write_c.put_next_unit
        pack_units = _unit_write_c.pack_units
