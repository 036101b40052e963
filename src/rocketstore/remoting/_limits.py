"""What one peer may cost a server: the log lines its bad requests write (``LogLimiter``), the
connections it may open and the bytes they may hold (``ServerLimits``, kept by ``BufferBudget``).

What a connection holds, as counted here: its unsent answers (the transport's write buffer)
and the part of its read buffer beyond the standard 64 KiB (the buffer of a large frame being
received). Each connection's figure is recounted after every write and every new read
buffer; the total is the sum (an estimate between recounts: what went out since is still
counted, so it errs high, and is recounted exactly before anything is closed for it). A
connection over its own share, or the largest ones while the total is over the server's, are
aborted and their buffers dropped: at once after a write, on the next turn of the loop after a
read::

    answers written ─┐                                  ┌─ over max_buffered_per_connection:
    read buffer  ────┼─ Connection._count ─ total ──────┤   abort that connection
    grown / freed ───┘      (O(1))                      └─ total over max_buffered_total:
                                                            recount all, abort the largest
                                                            (those not reading first)

A frame's announced length buys it a buffer of that size only within the room left in the
budget; beyond it, the buffer grows with the bytes that actually arrive.

Apart from that, a connection that does not read its answers stops being read from above the
high-water mark (backpressure), and one that stays that way ``write_stall_timeout`` seconds is
closed by the server's sweep. Once closed connections have let go of ``TRIM_AFTER`` bytes, the
sweep hands the freed memory back to the system (glibc's ``malloc_trim``; the allocator keeps
it otherwise, and the process stays as large as at its worst).

Loop thread only (a LogLimiter shared by several loops is safe too: the worst a race does is
let a line more through).
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._codes import ResponseCode

if TYPE_CHECKING:
    from ._connection import Connection

MiB = 1024 * 1024
TRIM_AFTER = 64 * MiB


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where there is none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (TypeError: Windows)
        return None
    return lambda: trim(0)


MALLOC_TRIM = _malloc_trim()


class RequestError(ValueError):
    """A request that cannot be served as sent (a header field missing or not a number, a
    body that does not decode): answered with ``code`` (SYSTEM_ERROR unless the handler names
    a more specific one) and the message as the remark, logged as one line, no traceback.
    Handlers may raise any ValueError for bad input; this one chooses its response code."""

    def __init__(self, message: str, code: int = ResponseCode.SYSTEM_ERROR) -> None:
        super().__init__(message)
        self.code = int(code)


class LogLimiter:
    """A logger that writes at most ``burst`` lines per ``interval`` seconds; what it holds back
    is counted and told in one line with the first message of the next interval::

        remoting: 4,210 similar messages suppressed in the last 60 s

    One limiter per kind of message (bad requests, failed handlers), shared by every
    connection: a flood from many peers is bounded as much as one from a single peer."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 5,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._window_end = float("-inf")
        self._written = 0
        self.suppressed = 0  # held back in the current interval

    def log(self, level: int, msg: str, *args: Any, exc_info: BaseException | None = None) -> bool:
        """Write the line unless this interval's share is spent; True when it was written."""
        now = self._clock()
        if now >= self._window_end:
            if self.suppressed:
                self.logger.log(
                    level,
                    "%s similar messages suppressed in the last %g s",
                    f"{self.suppressed:,}",
                    self.interval,
                )
            self._window_end = now + self.interval
            self._written = 0
            self.suppressed = 0
        if self._written >= self.burst:
            self.suppressed += 1
            return False
        self._written += 1
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What the connections of one server may hold.

    ``max_connections``: connections beyond it are closed as soon as they are accepted (one
    log line a few times a minute). A connection costs some 11 KiB idle and 70 KiB busy (its
    64 KiB read buffer; the server's sweep shrinks it again once the connection is idle), so
    10,000 of them are some 110 MB idle, 700 MB all busy; RocketMQ clients keep one connection
    per broker and name server, so that is thousands of clients.

    ``write_high_water`` / ``write_low_water``: reading from a connection stops while more than
    the high-water mark of its answers is unsent, and resumes below the low-water mark.

    ``max_buffered_per_connection``: a connection holding more (unsent answers and a large
    frame's read buffer) is aborted; room for the high-water mark and a few answers of a
    4 MiB message each.

    ``max_buffered_total``: what all connections together may hold; over it, the connections
    holding the most are aborted, those that stopped reading their answers first.

    ``write_stall_timeout``: a connection whose answers stay above the high-water mark this
    many seconds is closed.

    ``max_in_flight``: a connection with this many requests waiting for their answers (held
    pulls, sends waiting for their flush) is not read from until a quarter of them are
    answered; a held pull holds some 3.3 KiB, so one connection holds some 27 MiB of
    them at most. RocketMQ's Java client allows itself 65,535 asynchronous requests; one
    client with more than 8,192 queues held on one broker is rare."""

    max_connections: int = 10_000
    write_high_water: int = 1 * MiB
    write_low_water: int = 256 * 1024
    max_buffered_per_connection: int = 16 * MiB
    max_buffered_total: int = 256 * MiB
    write_stall_timeout: float = 60.0
    max_in_flight: int = 8192

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be positive, not {self.max_connections}")
        if not 0 <= self.write_low_water <= self.write_high_water:
            raise ValueError("write_low_water must be between 0 and write_high_water")
        if self.max_buffered_per_connection < self.write_high_water:
            raise ValueError("max_buffered_per_connection must be at least write_high_water")
        if self.max_buffered_total < self.max_buffered_per_connection:
            raise ValueError("max_buffered_total must be at least max_buffered_per_connection")
        if self.write_stall_timeout <= 0:
            raise ValueError("write_stall_timeout must be positive")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be positive, not {self.max_in_flight}")


DEFAULT_LIMITS = ServerLimits()


@dataclass(frozen=True, slots=True)
class ServerStatistics:
    """A snapshot of a server's connections and what they hold."""

    connections: int
    buffered_bytes: int  # unsent answers and large read buffers, counted now
    unsent_bytes: int  # the unsent answers alone
    read_buffer_bytes: int  # every read buffer, whole (the budget counts large ones' excess)
    refused_connections: int  # beyond max_connections
    closed_over_budget: int  # aborted for holding too much
    closed_stalled: int  # closed for not reading their answers for write_stall_timeout


class BufferBudget:
    """The running total of what a server's connections hold, and its enforcement (see the
    module docstring). ``members`` is the server's live set of connections."""

    def __init__(
        self,
        limits: ServerLimits,
        members: Iterable[Connection],
        name: str,
        *,
        trim: Callable[[], object] | None = MALLOC_TRIM,
    ) -> None:
        self.limits = limits
        self.members = members
        self.name = name
        self.total = 0
        self.closed_over_budget = 0
        self.released = 0  # what closed connections let go of since the last trim
        self._trim = trim
        self._scheduled = False
        self._log = LogLimiter(logging.getLogger("rocketstore.remoting._server"))

    def changed(self, conn: Connection, *, defer: bool = False) -> None:
        """``conn``'s figure was recounted: when it or the total is over its limit, enforce
        the limits now (after a write), or on the next turn of the loop with ``defer`` (after
        a new read buffer: the transport is in the middle of a read)."""
        limits = self.limits
        if (
            conn._buffered <= limits.max_buffered_per_connection
            and self.total <= limits.max_buffered_total
        ):
            return
        if not defer:
            self.enforce()
        elif not self._scheduled and conn._loop is not None:
            self._scheduled = True
            conn._loop.call_soon(self._deferred)

    def maybe_trim(self) -> bool:
        """Hand freed memory back to the system once closed connections have let go of
        ``TRIM_AFTER`` bytes; True when it did."""
        if self.released < TRIM_AFTER or self._trim is None:
            return False
        self.released = 0
        self._trim()
        return True

    def room(self) -> int:
        """What the connections may still take before the total is over its limit."""
        return self.limits.max_buffered_total - self.total

    def recount(self) -> int:
        """Count every connection again (what was written since may have gone out)."""
        total = 0
        for conn in self.members:
            total += conn._recount()
        self.total = total
        return total

    def _deferred(self) -> None:
        self._scheduled = False
        self.enforce()

    def enforce(self) -> None:
        """Recount, abort every connection over its own limit, then, while the total is over
        the server's, the connections holding the most, those not reading their answers
        first."""
        limits = self.limits
        self.recount()
        for conn in [c for c in self.members if c._buffered > limits.max_buffered_per_connection]:
            self._abort(conn, f"holds {conn._buffered:,} bytes")
        if self.total <= limits.max_buffered_total:
            return
        # the connections that stopped reading their answers first, then the largest
        ranked = sorted(self.members, key=lambda c: (c.reading, -c._buffered))
        for conn in ranked:
            if self.total <= limits.max_buffered_total:
                break
            self._abort(conn, f"holds {conn._buffered:,} bytes of {self.total:,} in all")

    def _abort(self, conn: Connection, why: str) -> None:
        self._log.log(
            logging.WARNING,
            "%s: closing %s: %s (max %s a connection, %s in all)",
            self.name,
            conn.peer,
            why,
            f"{self.limits.max_buffered_per_connection:,}",
            f"{self.limits.max_buffered_total:,}",
        )
        self.closed_over_budget += 1
        conn.abort()
