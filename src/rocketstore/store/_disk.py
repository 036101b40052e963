"""Disk health: how full the store's partitions are, and the store's running flags.

``DiskUsageProbe`` is any callable ``path -> used ratio`` (0.0 .. 1.0, or -1.0 when it cannot be
told); the store takes one so tests can simulate a full disk. ``disk_used_ratio`` is the real one:
as RocketMQ, used = total - free (blocks reserved for root count as used space only when they are
really used, i.e. ``f_bfree``, not ``f_bavail``).

RunningFlags are RocketMQ's bit set (reported as ``runningFlags`` in the runtime info)::

    0x01 NOT_READABLE   0x02 NOT_WRITEABLE   0x04 WRITE_LOGICS_QUEUE_ERROR
    0x08 WRITE_INDEX_FILE_ERROR               0x10 DISK_FULL

Threads: the flags are read from any thread and changed by the clean service (and the store's
lifecycle); each change is one locked read-modify-write.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

DiskUsageProbe = Callable[[str], float]
"""``path -> used ratio`` of the partition holding ``path`` (-1.0: unknown)."""

NOT_READABLE_BIT = 0x01
NOT_WRITEABLE_BIT = 0x02
WRITE_LOGICS_QUEUE_ERROR_BIT = 0x04
WRITE_INDEX_FILE_ERROR_BIT = 0x08
DISK_FULL_BIT = 0x10
_NOT_WRITEABLE_MASK = (
    NOT_WRITEABLE_BIT | WRITE_LOGICS_QUEUE_ERROR_BIT | WRITE_INDEX_FILE_ERROR_BIT | DISK_FULL_BIT
)


def disk_used_ratio(path: str) -> float:
    """Used fraction of the partition holding ``path`` (its nearest existing ancestor), as
    RocketMQ computes it: used / (used + what an unprivileged user may still take), rounded up to
    a whole percent; so the blocks reserved for root count as full, and rocketstore and
    RocketMQ clean at the same moment on the same disk. -1.0 when the file system cannot be
    asked."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return -1.0
        probe = parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    used = total - st.f_bfree * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if entire <= 0:
        return -1.0
    return -(-used * 100 // entire) / 100.0  # a whole percent, rounded up


_WHY_NOT_WRITEABLE = (
    (DISK_FULL_BIT, "the disk is full"),
    (WRITE_LOGICS_QUEUE_ERROR_BIT, "writing the consume queues failed (dispatch paused)"),
    (WRITE_INDEX_FILE_ERROR_BIT, "writing the index failed (dispatch paused)"),
    (NOT_WRITEABLE_BIT, "writes are turned off"),
)


WRITE_FAILED_PREFIX = "the store cannot write: "
"""How a refusal caused by something other than a full disk begins (its cause follows): the
broker answers it as it is, not with RocketMQ's disk-full wording."""


def why_not_writeable(bits: int) -> str:
    """Why running flags ``bits`` refuse writes, in words ('' when they do not)."""
    return "; ".join(text for bit, text in _WHY_NOT_WRITEABLE if bits & bit)


class RunningFlags:
    """RocketMQ's running-flag bits of a store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bits = 0

    @property
    def bits(self) -> int:
        return self._bits

    def is_writeable(self) -> bool:
        return not self._bits & _NOT_WRITEABLE_MASK

    def is_readable(self) -> bool:
        return not self._bits & NOT_READABLE_BIT

    @property
    def disk_full(self) -> bool:
        return bool(self._bits & DISK_FULL_BIT)

    def set_bit(self, bit: int, on: bool) -> bool:
        """Set or clear ``bit``; True when that changed it."""
        with self._lock:
            before = self._bits
            self._bits = before | bit if on else before & ~bit
            return self._bits != before

    def make_disk_full(self) -> bool:
        """Mark the disk full; True when it was not marked before."""
        return self.set_bit(DISK_FULL_BIT, True)

    def make_disk_ok(self) -> bool:
        """Clear the disk-full mark; True when it was marked before."""
        return self.set_bit(DISK_FULL_BIT, False)

    def __repr__(self) -> str:
        return f"RunningFlags(0x{self._bits:02x})"
