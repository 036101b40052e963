"""ByteRoom: a byte budget that answers built away from a connection take before they are built
and give back once written (the gRPC front end's receives, the console's HTTP answers; the
remoting connections have their own, ``_limits.BufferBudget``).

``acquire(n)`` takes ``n`` bytes when they fit (at once), else waits, first come first served,
until they do or its timeout passes (False: nothing taken); ``release(n)`` gives bytes back
and lets the waiting in. A request larger than the whole budget is let in when nothing else
is taken (it would never fit otherwise), so it costs at most itself beyond the budget::

    taken ──────────────────────── limit
    [ answers being built or written ][ room ]     acquire(n): n ≤ room → taken += n
                                                   else wait (FIFO) for release

Loop thread only.
"""

from __future__ import annotations

import asyncio
import collections


class ByteRoom:
    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"a byte room must be positive, not {limit}")
        self.limit = limit
        self.taken = 0
        self.peak = 0  # the most ever taken at once
        self.waited = 0  # acquisitions that had to wait
        self.timed_out = 0  # acquisitions that gave up
        self.given_back = 0  # every byte ever released (memory its owner may hand back)
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    def _fits(self, nbytes: int) -> bool:
        return self.taken + nbytes <= self.limit or self.taken == 0

    def try_acquire(self, nbytes: int) -> bool:
        """Take ``nbytes`` if they fit now and nobody waits before them."""
        if self._waiting or not self._fits(nbytes):
            return False
        self._take(nbytes)
        return True

    async def acquire(self, nbytes: int, timeout: float | None = None) -> bool:
        """Take ``nbytes``, waiting up to ``timeout`` seconds (None: as long as it takes) for
        them to fit; False when they did not in time (nothing taken)."""
        if self.try_acquire(nbytes):
            return True
        self.waited += 1
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (nbytes, fut)
        self._waiting.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            if fut.done() and not fut.cancelled():  # given just as the time ran out
                return True
            self._forget(entry)
            self.timed_out += 1
            return False
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(nbytes)  # given, but nobody is left to use it
            else:
                self._forget(entry)
            raise
        return True

    def release(self, nbytes: int) -> None:
        """Give ``nbytes`` back and let in the waiting that fit now, in order."""
        self.taken -= nbytes
        self.given_back += nbytes
        self._let_in()

    def _take(self, nbytes: int) -> None:
        self.taken += nbytes
        if self.taken > self.peak:
            self.peak = self.taken

    def _forget(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        try:
            self._waiting.remove(entry)
        except ValueError:
            pass
        entry[1].cancel()
        self._let_in()  # the next may fit where this one did not

    def _let_in(self) -> None:
        while self._waiting:
            nbytes, fut = self._waiting[0]
            if fut.done():
                self._waiting.popleft()
                continue
            if not self._fits(nbytes):
                return
            self._waiting.popleft()
            self._take(nbytes)
            fut.set_result(None)
