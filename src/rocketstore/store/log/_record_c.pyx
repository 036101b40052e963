# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The put path's per-record work compiled: the record head packed, body and tail copied into
the commit log's mapped file (or write buffer), one record or a batch per call.

The twin of ``write_v4_py`` / ``write_batch_v4_py`` in ``_record.py``, the reference: both
check the same things in the same order before writing a byte (hosts are 8 bytes: ValueError;
integers fit their fields: struct.error; the parts add up to the total and the record lies
inside the target: ValueError; the target is writable: TypeError).

Layout (IPv4 hosts; every integer big-endian), see ``_record.py``::

     0 total i32 | 4 magic i32 | 8 crc i32 | 12 queue id i32 | 16 flag i32 | 20 queue offset
    28 phys offset i64 | 36 sys flag i32 | 40 born ts i64 | 48 born host 8 | 56 store ts i64
    64 store host 8 | 72 reconsume i32 | 76 prepared offset i64 | 84 body length i32 | 88 body,
    then the tail (topic length, topic, properties length, properties)
"""

import struct

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport INT32_MAX, INT64_MAX, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from rocketstore.store._big_endian cimport put32, put64

cdef object _struct_error = struct.error
cdef int32_t _MAGIC_V1 = <int32_t>0xDAA320A7
DEF HEAD_SIZE = 88


cdef inline int _not_packable() except -1:
    """What struct.pack raises for an integer out of its field's range or not an integer
    (called with Cython's OverflowError / TypeError being handled)."""
    raise _struct_error("an integer field is out of range or not an integer") from None


cdef inline const char *_host8(object o) except NULL:
    """Hosts are 8-byte bytes (struct's "8s" would pad or cut silently: refused instead)."""
    if type(o) is not bytes or PyBytes_GET_SIZE(o) != 8:
        raise ValueError("hosts must be 8 bytes (IPv4 address and port)")
    return PyBytes_AS_STRING(o)


cdef inline int _check_parts(Py_ssize_t total, Py_ssize_t blen, Py_ssize_t tlen) except -1:
    if HEAD_SIZE + blen + tlen != total:
        raise ValueError(
            f"record of {total} bytes does not match its parts ({HEAD_SIZE} + {blen} + {tlen})"
        )
    return 0


cdef inline int _check_room(Py_ssize_t pos, Py_ssize_t total, Py_ssize_t size) except -1:
    if pos < 0 or pos > size or total > size - pos:
        raise ValueError(f"record of {total} bytes at {pos} does not fit in {size} bytes")
    return 0


cdef inline int _blen_fits(Py_ssize_t blen) except -1:
    if blen > INT32_MAX:
        raise _struct_error("an integer field is out of range or not an integer")
    return 0


cdef inline int _get_target(object o, Py_buffer *view) except -1:
    """A view of the target (its length, for the room check)."""
    try:
        PyObject_GetBuffer(o, view, PyBUF_SIMPLE)
    except BufferError:
        raise TypeError("the target is not a writable buffer") from None
    return 0


cdef inline int _check_writable(Py_buffer *view) except -1:
    if view.readonly:
        raise TypeError("the target is not a writable buffer")
    return 0


cdef struct Head:
    int32_t magic, crc, queue_id, flag, sys_flag, reconsume
    int64_t qoff, phys, born_ts, store_ts, prepared
    const char *born_host
    const char *store_host


cdef inline void _write_one(
    unsigned char *dst, int32_t total, const Head *h, const void *body, Py_ssize_t blen,
    const void *tail, Py_ssize_t tlen,
) noexcept:
    put32(dst, <uint32_t>total)
    put32(dst + 4, <uint32_t>h.magic)
    put32(dst + 8, <uint32_t>h.crc)
    put32(dst + 12, <uint32_t>h.queue_id)
    put32(dst + 16, <uint32_t>h.flag)
    put64(dst + 20, <uint64_t>h.qoff)
    put64(dst + 28, <uint64_t>h.phys)
    put32(dst + 36, <uint32_t>h.sys_flag)
    put64(dst + 40, <uint64_t>h.born_ts)
    memcpy(dst + 48, h.born_host, 8)
    put64(dst + 56, <uint64_t>h.store_ts)
    memcpy(dst + 64, h.store_host, 8)
    put32(dst + 72, <uint32_t>h.reconsume)
    put64(dst + 76, <uint64_t>h.prepared)
    put32(dst + 84, <uint32_t>blen)
    memcpy(dst + HEAD_SIZE, body, <size_t>blen)
    memcpy(dst + HEAD_SIZE + blen, tail, <size_t>tlen)


def write_v4(
    target, pos, total, magic, crc, queue_id, flag, queue_offset, phys_offset, sys_flag,
    born_timestamp, born_host, store_timestamp, store_host, reconsume_times, prepared_offset,
    body, tail, /,
):
    """Pack one record (IPv4 hosts) into ``target`` at ``pos`` (see ``_record.write_v4_py``)."""
    cdef Head h
    cdef int32_t tot
    cdef Py_ssize_t p
    cdef Py_buffer b, t, g
    h.born_host = _host8(born_host)
    h.store_host = _host8(store_host)
    PyObject_GetBuffer(body, &b, PyBUF_SIMPLE)
    try:
        try:
            tot = total
            h.magic = magic
            h.crc = crc
            h.queue_id = queue_id
            h.flag = flag
            h.qoff = queue_offset
            h.phys = phys_offset
            h.sys_flag = sys_flag
            h.born_ts = born_timestamp
            h.store_ts = store_timestamp
            h.reconsume = reconsume_times
            h.prepared = prepared_offset
        except (OverflowError, TypeError):
            _not_packable()
        _blen_fits(b.len)
        PyObject_GetBuffer(tail, &t, PyBUF_SIMPLE)
        try:
            _check_parts(tot, b.len, t.len)
            p = pos
            _get_target(target, &g)
            try:
                _check_room(p, tot, g.len)
                _check_writable(&g)
                _write_one(<unsigned char *>g.buf + p, tot, &h, b.buf, b.len, t.buf, t.len)
            finally:
                PyBuffer_Release(&g)
        finally:
            PyBuffer_Release(&t)
    finally:
        PyBuffer_Release(&b)


cdef int _check_prepared(
    object p, Head *h, int32_t *total, Py_ssize_t end, Py_ssize_t size
) except -1:
    """One prepared record checked, in the reference's order: tuple, born host, body,
    integers, tail, parts, room; fills ``h`` and ``total``."""
    cdef Py_buffer b
    cdef Py_ssize_t blen, tlen
    if type(p) is not tuple or len(<tuple>p) < 13:
        raise TypeError("a prepared record must be a tuple of 13+ fields")
    h.born_host = _host8((<tuple>p)[8])
    PyObject_GetBuffer((<tuple>p)[3], &b, PyBUF_SIMPLE)
    blen = b.len
    PyBuffer_Release(&b)
    try:
        total[0] = (<tuple>p)[12]
        h.crc = (<tuple>p)[4]
        h.flag = (<tuple>p)[5]
        h.sys_flag = (<tuple>p)[6]
        h.born_ts = (<tuple>p)[7]
        h.reconsume = (<tuple>p)[9]
        h.prepared = (<tuple>p)[10]
    except (OverflowError, TypeError):
        _not_packable()
    _blen_fits(blen)
    PyObject_GetBuffer((<tuple>p)[1], &b, PyBUF_SIMPLE)
    tlen = b.len
    PyBuffer_Release(&b)
    _check_parts(total[0], blen, tlen)
    _check_room(end, total[0], size)
    return 0


def write_batch_v4(target, pos, base, queue_id, queue_offset, now, store_host, prepared, /):
    """Pack a batch of prepared records (IPv4 hosts, one queue) into ``target`` from ``pos``;
    returns their physical offsets (see ``_record.write_batch_v4_py``)."""
    cdef const char *shost = _host8(store_host)
    cdef int32_t qid
    cdef int64_t qoff, base_, now_
    cdef Py_ssize_t i, n, p, end
    cdef int32_t total
    cdef Head h
    cdef Py_buffer g, b, t
    cdef list out
    try:
        qid = queue_id
        qoff = queue_offset
        base_ = base
        now_ = now
    except (OverflowError, TypeError):
        _not_packable()
    if type(prepared) is not list:
        raise TypeError("prepared must be a list")
    cdef list recs = <list>prepared
    _get_target(target, &g)
    try:
        _check_writable(&g)
        p = pos
        if p < 0 or p > g.len:
            raise ValueError(f"position {p} outside {g.len} bytes")
        n = len(recs)
        # pass 1: every record checked before a byte is written
        end = p
        for i in range(n):
            if qoff > INT64_MAX - i or base_ > INT64_MAX - end:
                raise _struct_error("an integer field is out of range or not an integer")
            _check_prepared(recs[i], &h, &total, end, g.len)
            end += total
        # pass 2: write. The list cannot have changed (no Python code ran since pass 1, and
        # the list and its tuples are ours until we return); the checks are cheap, so they run
        # again rather than being trusted.
        out = [None] * n
        for i in range(n):
            rec = recs[i]
            _check_prepared(rec, &h, &total, p, g.len)
            PyObject_GetBuffer((<tuple>rec)[3], &b, PyBUF_SIMPLE)
            try:
                PyObject_GetBuffer((<tuple>rec)[1], &t, PyBUF_SIMPLE)
                try:
                    _check_parts(total, b.len, t.len)  # sizes as pass 1 saw them
                    h.magic = _MAGIC_V1
                    h.queue_id = qid
                    h.qoff = qoff + i
                    h.phys = base_ + p
                    if h.born_ts == 0:
                        h.born_ts = now_
                    h.store_ts = now_
                    h.store_host = shost
                    _write_one(<unsigned char *>g.buf + p, total, &h, b.buf, b.len, t.buf, t.len)
                finally:
                    PyBuffer_Release(&t)
            finally:
                PyBuffer_Release(&b)
            out[i] = h.phys
            p += total
        return out
    finally:
        PyBuffer_Release(&g)
