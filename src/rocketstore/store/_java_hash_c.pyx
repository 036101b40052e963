# cython: language_level=3, boundscheck=False, wraparound=False
"""Java's String.hashCode over a Python str, compiled: the twin of ``java_hash_unsigned_py`` in
``_java_hash.py`` (the reference). The hash runs over UTF-16 code units: characters above
U+FFFF count as their surrogate pair, lone surrogates as themselves (what the reference's
"surrogatepass" encoding gives). Unsigned 32-bit arithmetic wraps as Java's int does."""

cdef extern from "Python.h":
    int PyUnicode_KIND(object)
    void *PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)


def java_hash_unsigned(text, /):
    """Java's String.hashCode of ``text`` as an unsigned 32-bit value."""
    if not isinstance(text, str):  # the reference fails on text.isascii() or .encode()
        raise AttributeError(f"'{type(text).__name__}' object has no attribute 'encode'")
    return java_hash_on(0, PyUnicode_KIND(text), PyUnicode_DATA(text), 0,
                        PyUnicode_GET_LENGTH(text))
