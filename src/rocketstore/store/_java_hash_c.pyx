# cython: language_level=3, boundscheck=False, wraparound=False
"""Java's String.hashCode over a Python str, compiled: the twin of ``java_hash_unsigned_py`` in
``_java_hash.py`` (the reference). The hash runs over UTF-16 code units: characters above
U+FFFF count as their surrogate pair, lone surrogates as themselves (what the reference's
"surrogatepass" encoding gives). Unsigned 32-bit arithmetic wraps as Java's int does."""

from libc.stdint cimport uint8_t, uint16_t, uint32_t


cdef extern from "Python.h":
    int PyUnicode_KIND(object)
    void *PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    int PyUnicode_1BYTE_KIND
    int PyUnicode_2BYTE_KIND


def java_hash_unsigned(text, /):
    """Java's String.hashCode of ``text`` as an unsigned 32-bit value."""
    cdef uint32_t h = 0
    cdef uint32_t c
    cdef Py_ssize_t i, n
    cdef int kind
    cdef const uint8_t *s1
    cdef const uint16_t *s2
    cdef const uint32_t *s4
    if not isinstance(text, str):  # the reference fails on text.isascii() or .encode()
        raise AttributeError(f"'{type(text).__name__}' object has no attribute 'encode'")
    n = PyUnicode_GET_LENGTH(text)
    kind = PyUnicode_KIND(text)
    if kind == PyUnicode_1BYTE_KIND:
        s1 = <const uint8_t *>PyUnicode_DATA(text)
        for i in range(n):
            h = h * 31u + s1[i]
    elif kind == PyUnicode_2BYTE_KIND:
        s2 = <const uint16_t *>PyUnicode_DATA(text)
        for i in range(n):
            h = h * 31u + s2[i]
    else:
        s4 = <const uint32_t *>PyUnicode_DATA(text)
        for i in range(n):
            c = s4[i]
            if c > 0xFFFF:
                c -= 0x10000
                h = h * 31u + (0xD800u + (c >> 10))
                h = h * 31u + (0xDC00u + (c & 0x3FFu))
            else:
                h = h * 31u + c
    return h
