# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The key index's per-record write, compiled: the twin of ``_index_write.put_keys_py`` (the
reference). One call hashes every key of a record (UTF-16 code units, continuing the topic
prefix's hash) and writes its entries and slots into the mapped index file.

Every slot page is looked up in the file's flags and every slot and entry position checked
against the mapping before a byte is written, raising what the reference raises (IndexError,
struct.error). The file's counters are kept in C during the call and stored on the file before
any Python code runs (the disk-block reservations) and before returning or raising. States no
file has (counters that are no C integers, a slot count below 1, keys that are not str, a
mapping that is not a writable buffer) go to the reference from the key reached.
"""

import struct

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from rocketstore.store._big_endian cimport get32, put32

from rocketstore.store._java_hash_c cimport java_hash_on


cdef extern from "Python.h":
    int PyUnicode_KIND(object)
    void *PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    int PyUnicode_1BYTE_KIND
    int PyUnicode_2BYTE_KIND


cdef object _struct_error = struct.error

cdef enum:
    HEADER_SIZE = 40
    SLOT_SIZE = 4
    ENTRY_SIZE = 20
    OS_PAGE_SIZE = 4096
    SEPARATOR = 0x20  # KEY_SEPARATOR
    INT32_MAX = 0x7FFFFFFF

cdef Py_ssize_t SANE = (<Py_ssize_t>1) << 40  # bigger slot tables or counts: the reference



cdef struct Ctx:
    Py_ssize_t count        # f.index_count
    Py_ssize_t index_num
    Py_ssize_t slot_num
    Py_ssize_t entries_allocated
    int64_t begin           # f.begin_timestamp
    int64_t ts
    int64_t phy
    bint bad_phy            # the offset is no int64: struct.error where an entry is packed
    Py_ssize_t new_slots    # not yet added to f.hash_slot_count
    bint wrote              # entries written since the file's attributes were last stored
    bint set_begin          # entry 1 written since then: the begin offset and time too
    bint loaded             # the fields above are the file's: no Python code ran since
    unsigned char *flags    # f._slot_pages
    Py_ssize_t flags_len
    bint have_view
    Py_buffer view          # f.mf.mm


cdef inline uint32_t _unit(int kind, const void *data, Py_ssize_t i) noexcept:
    if kind == PyUnicode_1BYTE_KIND:
        return (<const uint8_t *>data)[i]
    if kind == PyUnicode_2BYTE_KIND:
        return (<const uint16_t *>data)[i]
    return (<const uint32_t *>data)[i]


cdef inline void _release(Ctx *c) noexcept:
    if c.have_view:
        PyBuffer_Release(&c.view)
        c.have_view = False


cdef int _store(Ctx *c, object f, object phy_offset, object ts) except -1:
    """Set the attributes of the entries written since the last store, as the reference does."""
    if not c.wrote:
        return 0
    c.wrote = False
    if c.set_begin:
        c.set_begin = False
        f.begin_phy_offset = phy_offset
        f.begin_timestamp = ts
    if c.new_slots:
        f.hash_slot_count = f.hash_slot_count + c.new_slots
        c.new_slots = 0
    f.index_count = c.count
    f.end_phy_offset = phy_offset
    f.end_timestamp = ts
    return 0


cdef int _load(Ctx *c, object f) except -1:
    """The file's counters and slot-page flags: 0, or 1 when they are not what a file holds."""
    try:
        c.count = f.index_count
        c.index_num = f.index_num
        c.slot_num = f.slot_num
        c.entries_allocated = f._entries_allocated
        c.begin = f.begin_timestamp
        flags = f._slot_pages
    except (OverflowError, TypeError, AttributeError):
        return 1
    if c.slot_num < 1 or c.slot_num > SANE or c.count < 0 or c.count > SANE:
        return 1
    if type(flags) is not bytearray:
        return 1
    c.flags = <unsigned char *>PyByteArray_AS_STRING(flags)
    c.flags_len = PyByteArray_GET_SIZE(flags)
    c.loaded = True
    return 0


cdef int _put_one(Ctx *c, object f, uint32_t h, object phy_offset, object ts) except -1:
    """Write the entry of a key hashed to ``h``: 0; 1 when the file is full; 2 when the file is
    in a state for the reference (nothing written then)."""
    cdef Py_ssize_t slot_pos, entry_pos, page
    cdef int32_t slot_value
    cdef int64_t diff
    cdef bint called = False
    cdef unsigned char *p
    if not c.loaded:
        _store(c, f, phy_offset, ts)
        _release(c)
        if _load(c, f):
            return 2
    if c.count >= c.index_num:
        return 1
    if h & 0x80000000u:  # abs of the signed value; Integer.MIN_VALUE gives 0
        h = (0u - h) if h != 0x80000000u else 0u
    slot_pos = HEADER_SIZE + <Py_ssize_t>(<uint64_t>h % <uint64_t>c.slot_num) * SLOT_SIZE
    entry_pos = HEADER_SIZE + c.slot_num * SLOT_SIZE + c.count * ENTRY_SIZE
    page = slot_pos // OS_PAGE_SIZE
    if page >= c.flags_len:
        raise IndexError("bytearray index out of range")
    if not c.flags[page]:  # disk blocks first (Python code: the attributes stored before)
        _store(c, f, phy_offset, ts)
        _release(c)
        called = True
        c.loaded = False
        f.allocate_slot_pages((page,))
        try:
            c.entries_allocated = f._entries_allocated
        except (OverflowError, TypeError):
            return 2
    if entry_pos + ENTRY_SIZE > c.entries_allocated:
        _store(c, f, phy_offset, ts)
        _release(c)
        called = True
        c.loaded = False
        f.allocate_entries(entry_pos + ENTRY_SIZE)
    if called:  # what the reference reads after the reservations
        try:
            c.begin = f.begin_timestamp
        except (OverflowError, TypeError):
            return 2
    if not c.have_view:
        try:
            PyObject_GetBuffer(f.mf.mm, &c.view, PyBUF_WRITABLE)
        except (BufferError, TypeError):
            return 2
        c.have_view = True
    if slot_pos > c.view.len - SLOT_SIZE:
        raise _struct_error(f"a slot at {slot_pos} is outside the mapping ({c.view.len} bytes)")
    p = <unsigned char *>c.view.buf
    slot_value = <int32_t>get32(p + slot_pos)
    if slot_value <= 0 or slot_value > c.count:
        slot_value = 0
    if c.begin <= 0 or c.ts < c.begin:
        diff = 0
    else:
        diff = (c.ts - c.begin) // 1000
        if diff > INT32_MAX:
            diff = INT32_MAX
    if c.bad_phy:
        raise _struct_error("the commit-log offset is out of range or not an integer")
    if entry_pos > c.view.len - ENTRY_SIZE:
        raise _struct_error(f"an entry at {entry_pos} is outside the mapping ({c.view.len} bytes)")
    put32(p + entry_pos, h)
    put32(p + entry_pos + 4, <uint32_t>(<uint64_t>c.phy >> 32))
    put32(p + entry_pos + 8, <uint32_t><uint64_t>c.phy)
    put32(p + entry_pos + 12, <uint32_t>diff)
    put32(p + entry_pos + 16, <uint32_t>slot_value)
    put32(p + slot_pos, <uint32_t>c.count)
    if c.count <= 1:
        c.set_begin = True
        c.begin = c.ts
    if slot_value == 0:
        c.new_slots += 1
    c.count += 1
    c.wrote = True
    return 0


def put_keys(f, prefix_hash, uniq_key, keys, phy_offset, store_timestamp, done, /):
    """Write the record's keys from number ``done`` on into ``f``; -1 when all are written,
    else the number of the first key that did not fit (see ``_index_write.put_keys_py``)."""
    cdef Ctx c
    cdef uint32_t hp
    cdef Py_ssize_t first, number = 0, defer_at = -1, n, pos, start, end
    cdef int kind, which, r
    cdef const void *data
    if (uniq_key is not None and type(uniq_key) is not str) or (
        keys is not None and type(keys) is not str
    ):
        return _reference(f, prefix_hash, uniq_key, keys, phy_offset, store_timestamp, done)
    if not uniq_key and not keys:
        return -1
    try:
        hp = prefix_hash
        c.ts = store_timestamp
        first = done
    except (OverflowError, TypeError):
        return _reference(f, prefix_hash, uniq_key, keys, phy_offset, store_timestamp, done)
    c.bad_phy = False
    try:
        c.phy = phy_offset
    except (OverflowError, TypeError):
        c.bad_phy = True
    c.wrote = c.set_begin = c.loaded = c.have_view = False
    c.new_slots = 0
    try:
        for which in range(2):
            text = uniq_key if which == 0 else keys
            if not text:
                continue
            n = PyUnicode_GET_LENGTH(text)
            kind = PyUnicode_KIND(text)
            data = PyUnicode_DATA(text)
            pos = 0
            while pos < n:
                if which == 0:  # the UNIQ_KEY is one key, separators and all
                    start = 0
                    end = pos = n
                else:
                    while pos < n and _unit(kind, data, pos) == SEPARATOR:
                        pos += 1
                    if pos >= n:
                        break
                    start = pos
                    while pos < n and _unit(kind, data, pos) != SEPARATOR:
                        pos += 1
                    end = pos
                if number < first:
                    number += 1
                    continue
                r = _put_one(&c, f, java_hash_on(hp, kind, data, start, end), phy_offset,
                             store_timestamp)
                if r == 1:
                    return number
                if r == 2:
                    defer_at = number
                    break
                number += 1
            if defer_at >= 0:
                break
    finally:
        _release(&c)
        _store(&c, f, phy_offset, store_timestamp)
    if defer_at >= 0:
        return _reference(f, prefix_hash, uniq_key, keys, phy_offset, store_timestamp, defer_at)
    return -1


cdef object _reference(f, prefix_hash, uniq_key, keys, phy_offset, store_timestamp, done):
    """The reference, for what the twin leaves to it."""
    from rocketstore.store.queue._index_write import put_keys_py

    return put_keys_py(f, prefix_hash, uniq_key, keys, phy_offset, store_timestamp, done)
