"""Java's ``String.hashCode`` (RocketMQ hashes tags and index keys with it), computed fast.

``s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1]`` over UTF-16 code units, in int32 arithmetic.
Instead of a Python loop per character, the powers of 31 (mod 2^32) are precomputed and the sum
is one ``sum(map(operator.mul, units, powers))``; ASCII strings use their bytes directly as code
units. A prefix hash can be extended: ``hash(a + b) = hash(a) * 31^len(b) + hash(b)``.
"""

from __future__ import annotations

import array
import operator
import sys

from .._speedups import EXTENSIONS_ENABLED, missing

_MASK = 0xFFFFFFFF
_mul = operator.mul
_powers: list[int] = [1]  # 31^i mod 2^32
_tails: dict[int, tuple[int, ...]] = {}  # n → (31^(n-1), ..., 31^0)
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _grow(n: int) -> None:
    p = _powers
    while len(p) <= n:
        p.append(p[-1] * 31 & _MASK)


def _weights(n: int) -> tuple[int, ...]:
    w = _tails.get(n)
    if w is None:
        _grow(n)
        w = tuple(reversed(_powers[:n]))
        if n <= 4096:
            _tails[n] = w
    return w


def powers31(n: int) -> list[int]:
    """31^i mod 2^32 for i in 0..n-1."""
    _grow(n)
    return _powers[:n]


def power31(n: int) -> int:
    """31^n mod 2^32."""
    if n >= len(_powers):
        _grow(n)
    return _powers[n]


def java_hash_unsigned_py(text: str, /) -> int:
    """Java's String.hashCode of ``text`` as an unsigned 32-bit value (the reference for the
    compiled twin ``_java_hash_c.java_hash_unsigned``; ``java_hash_unsigned`` is the one
    ``_speedups`` selects)."""
    if text.isascii():
        data = text.encode()
        return int(sum(map(_mul, data, _weights(len(data))))) & _MASK
    units = array.array("H", text.encode(_UTF16, "surrogatepass"))
    return int(sum(map(_mul, units, _weights(len(units))))) & _MASK


java_hash_unsigned = java_hash_unsigned_py
if EXTENSIONS_ENABLED:
    try:
        from . import _java_hash_c
    except ImportError:
        missing("rocketstore.store._java_hash_c")
    else:
        java_hash_unsigned = _java_hash_c.java_hash_unsigned


def utf16_length(text: str) -> int:
    """Java's String.length(): UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode(_UTF16, "surrogatepass")) // 2


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (a signed int32)."""
    h = java_hash_unsigned(text)
    return h - 0x100000000 if h & 0x80000000 else h


def to_signed(h: int) -> int:
    h &= _MASK
    return h - 0x100000000 if h & 0x80000000 else h


def index_key_hash(signed_hash: int) -> int:
    """RocketMQ's index key hash: abs(hashCode), with Integer.MIN_VALUE mapped to 0."""
    if signed_hash == -0x80000000:
        return 0
    return -signed_hash if signed_hash < 0 else signed_hash
