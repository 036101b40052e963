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

Answers built away from the loop (a handler that reads a large record in a worker thread) are
counted before they are built: the handler asks for room (``Connection.reserve``, or
``Connection.room`` in a coroutine) with the answer's size, and the room stays counted as the
connection's until the answer is written, where the unsent bytes take its place. Room is given
while the connection's unsent answers and rooms are below its share (the high-water mark) and
the total stays within ``max_buffered_total``; when the total is full, connections that have
not taken any of their unsent answers for ``STALL_GRACE_S`` are aborted to make room, the one
stalled longest first (a client that pipelines requests and never reads cannot hold the budget
against the others). A request that finds no room waits, unbuilt: the connection
stops reading and serving (a request left in the read buffer, or a coroutine waiting), and
goes on when the budget's ``wake`` finds the room (after a write, a close, a recount)::

    reserve(n) ── fits? ── yes: counted (conn._reserved), answer built, written: uncounted
                    │
                    no: waiter (FIFO) ── wake(): fits now ── granted, the connection goes on

Apart from that, a connection that does not read its answers stops being read from above the
high-water mark (backpressure), and one that stays that way ``write_stall_timeout`` seconds is
closed by the server's sweep. Once closed connections have let go of ``TRIM_AFTER`` bytes (or of
any, when the connections hold nothing any more), the sweep hands the freed memory back to the system (glibc's ``malloc_trim``; the allocator keeps
it otherwise, and the process stays as large as at its worst).

Loop thread only (a LogLimiter shared by several loops is safe too: the worst a race does is
let a line more through).
"""

from __future__ import annotations

import asyncio
import collections
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
RETRY_WAKE_S = 0.05  # requests waiting for room in the total: looked at again this often
STALL_GRACE_S = 1.0  # a connection whose unsent answers have not gone down for this long
# is aborted when the total has no room for an answer


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where there is none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (TypeError: Windows)
        return None
    return lambda: trim(0)


MALLOC_TRIM = _malloc_trim()


class Trimmer:
    """When to hand freed memory back to the system: once ``TRIM_AFTER`` bytes were let go
    (``released``), or any once the owner holds nothing any more (a burst that ended short of
    ``TRIM_AFTER`` would keep its memory otherwise). The remoting servers' budget and the gRPC
    front end each keep one."""

    def __init__(self, trim: Callable[[], object] | None = MALLOC_TRIM) -> None:
        self.released = 0  # let go of since the last trim
        self.trims = 0
        self._trim = trim

    def maybe_trim(self, busy: bool) -> bool:
        """Trim when due (``busy``: the owner still holds something); True when it did."""
        if self._trim is None or not self.released:
            return False
        if self.released < TRIM_AFTER and busy:
            return False
        self.released = 0
        self.trims += 1
        self._trim()
        return True


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
    client with more than 8,192 queues held on one broker is rare.

    ``handshake_timeout``: a connection that is not established this many seconds after it
    was accepted (no whole frame sent; with an ACL, no request it let in) is closed; RocketMQ
    clients send their first request as soon as they connect."""

    max_connections: int = 10_000
    write_high_water: int = 1 * MiB
    write_low_water: int = 256 * 1024
    max_buffered_per_connection: int = 16 * MiB
    max_buffered_total: int = 256 * MiB
    write_stall_timeout: float = 60.0
    max_in_flight: int = 8192
    handshake_timeout: float = 10.0

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
        if self.handshake_timeout <= 0:
            raise ValueError("handshake_timeout must be positive")


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
    closed_unestablished: int = 0  # closed, or replaced by a new one, before established


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
        self.trimmer = Trimmer(trim)  # what closed connections let go of, handed back
        self._scheduled = False
        self._log = LogLimiter(logging.getLogger("rocketstore.remoting._server"))
        # requests waiting for room for their answers, first come first served:
        # [connection, opaque, bytes, future (None: a request left in the read buffer)]
        self.waiting: collections.deque[list[Any]] = collections.deque()
        self.reserved = 0  # room given to answers not written yet, all connections
        self.waited = 0  # requests that had to wait for room
        self._waking = False
        self._retry: asyncio.TimerHandle | None = None

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

    @property
    def released(self) -> int:
        """What closed connections let go of since the last trim."""
        return self.trimmer.released

    @released.setter
    def released(self, nbytes: int) -> None:
        self.trimmer.released = nbytes

    def maybe_trim(self) -> bool:
        """Hand freed memory back to the system once closed connections have let go of
        ``TRIM_AFTER`` bytes, or of any once the connections hold nothing; True when it did."""
        return self.trimmer.maybe_trim(bool(self.total or self.reserved))

    def room(self) -> int:
        """What the connections may still take before the total is over its limit."""
        return self.limits.max_buffered_total - self.total

    def recount(self, quiet_since: float | None = None) -> int:
        """Count every connection again (what was written since may have gone out). With
        ``quiet_since`` (loop time of the previous count), a connection that has read nothing
        since and holds no unsent answer and no room keeps its count: nothing it holds can
        have changed (a write that leaves bytes unsent counts itself, a room released uncounts
        itself), and an idle server's sweep walks thousands of them."""
        total = 0
        for conn in self.members:
            if (
                quiet_since is not None
                and not conn._unsent
                and not conn._reserved
                and conn.last_active < quiet_since
                and not conn.closed
            ):
                total += conn._buffered
                continue
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

    # ---- room for answers built before they are written ------------------------------------

    def _fits(self, conn: Connection, nbytes: int) -> bool:
        """Whether an answer of ``nbytes`` fits ``conn``'s share: what it holds of unsent
        answers and rooms is below the high-water mark."""
        transport = conn.transport
        used = conn._reserved + (transport.get_write_buffer_size() if transport else 0)
        return used < self.limits.write_high_water

    def _fits_total(self, conn: Connection, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit the total; aborts connections that have not taken any
        of their unsent answers for STALL_GRACE_S (the longest stalled first) when that makes
        them fit."""
        limit = self.limits.max_buffered_total
        if self.total + nbytes <= limit:
            return True
        if self.recount() + nbytes <= limit:  # (what went out since the last count)
            return True
        if conn._loop is None:
            return False
        before = conn._loop.time() - STALL_GRACE_S
        stalled = sorted(
            (
                c
                for c in self.members
                if 0 < c.stalled_since <= before and c is not conn and not c.closed
            ),
            key=lambda c: c.stalled_since,
        )
        for other in stalled:
            if self.total + nbytes <= limit:
                break
            self._abort(other, f"holds {other._buffered:,} bytes, its answers untaken")
        return self.total + nbytes <= limit

    def _grant(self, conn: Connection, opaque: int, nbytes: int) -> None:
        conn._reserved += nbytes
        conn._buffered += nbytes
        conn._room[opaque] = conn._room.get(opaque, 0) + nbytes
        self.total += nbytes
        self.reserved += nbytes

    def reserve(self, conn: Connection, opaque: int, nbytes: int) -> bool:
        """Count an answer of ``nbytes`` to request ``opaque`` on ``conn`` now if it fits
        (True), and until ``release``; False when it does not (nothing counted)."""
        granted = conn._granted
        if granted:  # room found for a request that waited in the read buffer
            conn._granted = 0
            self._release_bytes(conn, granted)
            if nbytes <= granted:
                self._grant(conn, opaque, nbytes)
                return True
        if self.waiting and any(w[0] is conn for w in self.waiting):
            return False  # behind this connection's own waiting requests
        if self._fits(conn, nbytes) and self._fits_total(conn, nbytes):
            self._grant(conn, opaque, nbytes)
            return True
        return False

    def wait(
        self, conn: Connection, opaque: int, nbytes: int, fut: asyncio.Future[None] | None
    ) -> None:
        """Queue a request that found no room; ``fut`` is set when it is given (None: the
        request waits in the connection's read buffer and is served again)."""
        self.waited += 1
        self.waiting.append([conn, opaque, nbytes, fut])

    def release(self, conn: Connection, opaque: int) -> None:
        """The answer to request ``opaque`` is being written (or will never be): its room
        goes (the unsent bytes are counted from the write on)."""
        nbytes = conn._room.pop(opaque, 0)
        if nbytes:
            self._release_bytes(conn, nbytes)

    def _release_bytes(self, conn: Connection, nbytes: int) -> None:
        conn._reserved -= nbytes
        conn._buffered -= nbytes
        self.total -= nbytes
        self.reserved -= nbytes

    def drop(self, conn: Connection) -> None:
        """``conn`` closed: its rooms and waiting requests go."""
        if conn._reserved:
            self.total -= conn._reserved
            self.reserved -= conn._reserved
            conn._buffered -= conn._reserved
            conn._reserved = 0
            conn._granted = 0
            conn._room.clear()
        if self.waiting:
            kept: collections.deque[list[Any]] = collections.deque()
            for w in self.waiting:
                if w[0] is conn:
                    if w[3] is not None and not w[3].done():
                        w[3].cancel()
                else:
                    kept.append(w)
            self.waiting = kept

    def _wake_again(self) -> None:
        self._retry = None
        self.wake()

    def wake(self) -> None:
        """Give room to the waiting requests it fits, first come first served (one that
        waits for its own connection's share does not hold up the others; one that waits
        for the total does)."""
        if not self.waiting or self._waking:
            return
        self._waking = True
        try:
            kept: list[list[Any]] = []
            found: list[Connection] = []
            blocked: set[int] = set()  # connections with an earlier request still waiting
            total_full = False
            for w in list(self.waiting):
                conn, opaque, nbytes, fut = w
                if conn.closed or (fut is not None and fut.done()):
                    continue
                if total_full or id(conn) in blocked or not self._fits(conn, nbytes):
                    blocked.add(id(conn))
                    kept.append(w)
                    continue
                if not self._fits_total(conn, nbytes):
                    total_full = True  # the later ones wait behind it
                    blocked.add(id(conn))
                    kept.append(w)
                    continue
                self._grant(conn, opaque, nbytes)
                if fut is None:  # served again from the read buffer, which takes the room
                    conn._room[opaque] -= nbytes
                    if not conn._room[opaque]:
                        del conn._room[opaque]
                    conn._granted += nbytes
                else:
                    fut.set_result(None)
                found.append(conn)
            self.waiting = collections.deque(w for w in kept if not w[0].closed)
        finally:
            self._waking = False
        if total_full and self._retry is None:
            # answers of connections that read them leave without a callback below the
            # high-water mark: look again shortly
            self._retry = asyncio.get_running_loop().call_later(RETRY_WAKE_S, self._wake_again)
        for conn in found:
            if id(conn) not in blocked:
                conn._room_found()
