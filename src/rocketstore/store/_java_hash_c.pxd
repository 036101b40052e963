# cython: language_level=3
# Java's String.hashCode over the code units of a Python str, shared by the compiled modules
# that hash text (_java_hash_c, queue/_index_write_c).

from libc.stdint cimport uint8_t, uint16_t, uint32_t


cdef extern from "Python.h":
    int PyUnicode_1BYTE_KIND
    int PyUnicode_2BYTE_KIND


cdef inline uint32_t java_hash_on(uint32_t h, int kind, const void *data, Py_ssize_t start,
                                  Py_ssize_t end) noexcept:
    """Java's hash continued from ``h`` over the UTF-16 code units of characters [start, end)
    of a str's data of ``kind``: a character above U+FFFF counts as its surrogate pair, a lone
    surrogate as itself. Unsigned 32-bit arithmetic wraps as Java's int does."""
    cdef Py_ssize_t i
    cdef uint32_t c
    cdef const uint8_t *s1
    cdef const uint16_t *s2
    cdef const uint32_t *s4
    if kind == PyUnicode_1BYTE_KIND:
        s1 = <const uint8_t *>data
        for i in range(start, end):
            h = h * 31u + s1[i]
    elif kind == PyUnicode_2BYTE_KIND:
        s2 = <const uint16_t *>data
        for i in range(start, end):
            h = h * 31u + s2[i]
    else:
        s4 = <const uint32_t *>data
        for i in range(start, end):
            c = s4[i]
            if c > 0xFFFF:
                c -= 0x10000
                h = h * 31u + (0xD800u + (c >> 10))
                h = h * 31u + (0xDC00u + (c & 0x3FFu))
            else:
                h = h * 31u + c
    return h
