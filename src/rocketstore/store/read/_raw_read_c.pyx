# cython: language_level=3, boundscheck=False, wraparound=False
"""A pull's per-record check compiled, for the plain record (V1 magic, IPv4 hosts).

``check_v4`` returns True only when the record passes every check of ``_raw_read._check`` (the
reference): it lies inside the buffer, its length, magic and queue id are the unit's, its
topic is the queue's and its body CRC matches. For anything else (another record kind, a
damaged or foreign record, a position outside the buffer) it returns False without raising,
and the caller runs the reference, which raises what applies. So the compiled check can only
let through what the reference lets through, and every error is the reference's.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcmp

from rocketstore.store._big_endian cimport get32


cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char *mem, Py_ssize_t size, int flags)
    int PyBUF_READ


cdef int32_t _MAGIC_V1 = <int32_t>0xDAA320A7
cdef int _V6 = 0x10 | 0x20


cdef inline int32_t _get32(const unsigned char *p) noexcept:
    return <int32_t>get32(p)


def check_v4(buf, pos_, size_, raw_topic, queue_id, crc32, /):
    """True when the plain record at ``pos`` passes the reference's checks; False to let the
    reference decide."""
    cdef Py_buffer view
    cdef const unsigned char *b
    cdef Py_ssize_t length, body, topic_at, n, pos, size
    cdef int32_t body_len, crc
    cdef int64_t qid
    if type(raw_topic) is not bytes:
        return False
    try:
        qid = queue_id
        pos = pos_
        size = size_
    except (OverflowError, TypeError):
        return False
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const unsigned char *>view.buf
        length = view.len
        if pos < 0 or pos > length - 88:
            return False
        b += pos
        if (
            _get32(b) != size
            or _get32(b + 4) != _MAGIC_V1
            or _get32(b + 12) != qid
            or _get32(b + 36) & _V6
        ):
            return False
        crc = _get32(b + 8)
        body_len = _get32(b + 84)
        n = PyBytes_GET_SIZE(raw_topic)
        body = pos + 88
        topic_at = body + body_len
        if body_len < 0 or topic_at + 1 + n + 2 > pos + size or topic_at + 1 + n > length:
            return False
        if (<const unsigned char *>view.buf)[topic_at] != n or memcmp(
            <const char *>view.buf + topic_at + 1, PyBytes_AS_STRING(raw_topic), <size_t>n
        ) != 0:
            return False
        got = crc32(PyMemoryView_FromMemory(<char *>view.buf + body, body_len, PyBUF_READ))
        return (got & 0x7FFFFFFF) == crc
    finally:
        PyBuffer_Release(&view)
