# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Consume-queue units written by dispatch, compiled: the twin of ``_unit_write.py`` (the
reference), checking the same things in the same order (integer ranges: struct.error; sequence
lengths and buffer bounds: ValueError) before writing a byte.

A unit: 0 COMMITLOG OFFSET int64 | 8 SIZE int32 | 12 TAGS CODE int64, big-endian.
"""

import struct

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from rocketstore.store._big_endian cimport put32, put64

cdef object _struct_error = struct.error
DEF UNIT_SIZE = 20


cdef inline void _put_unit(unsigned char *p, int64_t off, int32_t size, int64_t code) noexcept:
    put64(p, <uint64_t>off)
    put32(p + 8, <uint32_t>size)
    put64(p + 12, <uint64_t>code)


cdef inline int _writable(object o, Py_buffer *view) except -1:
    """A writable view of ``o``; TypeError, as a slice assignment raises it, when there is none."""
    try:
        PyObject_GetBuffer(o, view, PyBUF_WRITABLE)
    except BufferError:
        raise TypeError("the target is not a writable buffer") from None
    return 0


cdef inline int _fields(object o, object s, object c, int64_t *off, int32_t *size,
                        int64_t *code) except -1:
    """The unit's fields as C integers; struct.error as struct.pack raises it."""
    try:
        off[0] = o
        size[0] = s
        code[0] = c
    except (OverflowError, TypeError):
        raise _struct_error("a unit field is out of range or not an integer") from None
    return 0


def put_next_unit(cq, phys_offset, size, tags_code, offset, /):
    """The next unit of ``cq``'s last file, or a skip (see ``_unit_write.put_next_unit_py``)."""
    cdef int64_t off, code
    cdef int32_t sz
    cdef Py_ssize_t pos
    cdef Py_buffer view
    _fields(phys_offset, size, tags_code, &off, &sz, &code)
    end = phys_offset + size
    if end <= cq.max_physic_offset:
        return True
    files = cq.queue.files
    if not files:
        return False
    mf = files[len(files) - 1]
    wrote = mf.wrote_position
    stop = wrote + UNIT_SIZE
    if not wrote or stop > mf.allocated or mf.from_offset + wrote != offset * 20:
        return False
    if not mf.writer_held:
        return False
    pos = wrote
    _writable(mf.mm, &view)
    try:
        if pos < 0 or pos > view.len - UNIT_SIZE:
            raise IndexError("mmap slice assignment is wrong size")
        _put_unit(<unsigned char *>view.buf + pos, off, sz, code)
    finally:
        PyBuffer_Release(&view)
    mf.wrote_position = stop
    cq.max_physic_offset = end
    return True


def pack_units(buf, pos, phys_offsets, sizes, tags_codes, /):
    """Pack a batch's units into ``buf`` from ``pos``; the end (see ``_unit_write.pack_units_py``)."""
    cdef Py_ssize_t n = len(phys_offsets)
    cdef Py_ssize_t i, start
    cdef Py_buffer view
    cdef int64_t off, code
    cdef int32_t sz
    cdef unsigned char *p
    if len(sizes) != n or len(tags_codes) != n:
        raise ValueError(f"{n} offsets, {len(sizes)} sizes and {len(tags_codes)} tags codes")
    _writable(buf, &view)
    try:
        if pos < 0 or pos > view.len or n > (view.len - <Py_ssize_t>pos) // UNIT_SIZE:
            raise ValueError(f"{n} units at {pos} do not fit in {view.len} bytes")
        start = pos
        for i in range(n):  # every field checked before the first byte is written
            _fields(phys_offsets[i], sizes[i], tags_codes[i], &off, &sz, &code)
        p = <unsigned char *>view.buf + start
        for i in range(n):
            _fields(phys_offsets[i], sizes[i], tags_codes[i], &off, &sz, &code)
            _put_unit(p, off, sz, code)
            p += UNIT_SIZE
    finally:
        PyBuffer_Release(&view)
    return start + n * UNIT_SIZE
