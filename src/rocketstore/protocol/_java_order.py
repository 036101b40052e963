"""The iteration order of Java's ``HashMap`` / ``HashSet`` with ``String`` keys.

RocketMQ's name server keeps its tables in ``HashMap``s and fastjson writes them (and the lists
built from them) in iteration order, so a body is byte-for-byte RocketMQ's only when its maps and
lists come in that order. A HashMap iterates bucket by bucket, and within a bucket in insertion
order (a resize splits a bucket's list without reordering it)::

    bucket(key) = (h ^ (h >>> 16)) & (capacity - 1)      h = key.hashCode()
    capacity    = the initial capacity (a power of two, 16 by default), doubled while
                  size > 0.75 * capacity

Bins of 8+ colliding keys that Java turns into trees are not modelled (they need 64+ buckets
and eight keys of one bucket).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..store._java_hash import java_hash_unsigned


def hash_map_capacity(size: int, initial: int = 16) -> int:
    """The table size of a HashMap created with ``initial`` capacity that now holds ``size``
    entries (it never shrank)."""
    capacity = 1
    while capacity < initial:
        capacity <<= 1
    while size > capacity * 3 // 4:
        capacity <<= 1
    return capacity


def java_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """``keys`` (in insertion order) in the order a HashMap of that initial capacity iterates
    them once they are all in."""
    items = list(keys)
    mask = hash_map_capacity(len(items), initial_capacity) - 1

    def bucket(key: str) -> int:
        h = java_hash_unsigned(key)
        return (h ^ (h >> 16)) & mask

    return sorted(items, key=bucket)  # stable: insertion order within a bucket
