"""The commands waiting to go down one Telemetry stream: the broker's answers to the client's
Settings, and its orphaned-transaction checks (which carry the half message).

A client that sends commands and never reads what comes back must not make the broker hold
its answers without end, so the queue is bounded twice::

    reader (the client's commands) ── put(answer): a place in the queue (at most ``capacity``)
                                        and the answer's bytes from the front end's room,
                                        waiting up to ``timeout`` for both (nothing is read
                                        from the client meanwhile); False: the client does
                                        not read, the stream reads no more (``drain``)
    broker's checks ───────────────── offer(check): only when both are free now; False: the
                                        check is tried again later (another producer, or the
                                        next round of checks)
    writer (the stream) ───────────── get() → (command, size), written(size): room back as
                                        it goes to gRPC (one reply a stream being written);
                                        None once ended and drained
    end()                              no more puts; drain() drops what waits, room back

Loop thread only.
"""

from __future__ import annotations

import asyncio

from ..remoting._room import ByteRoom
from ._pb import service_pb2 as spb


class Replies:
    def __init__(self, room: ByteRoom, capacity: int) -> None:
        self._room = room
        self._queue: asyncio.Queue[tuple[spb.TelemetryCommand, int] | None] = asyncio.Queue(
            capacity
        )
        self._ended = False

    @property
    def ended(self) -> bool:
        return self._ended

    def offer(self, command: spb.TelemetryCommand) -> bool:
        """Queue ``command`` if there are a place and room for it now."""
        if self._ended or self._queue.full():
            return False
        size = command.ByteSize()
        if not self._room.try_acquire(size):
            return False
        self._queue.put_nowait((command, size))
        return True

    async def put(self, command: spb.TelemetryCommand, timeout: float) -> bool:
        """Queue ``command``, waiting up to ``timeout`` seconds for room and for a place;
        False when either did not come (nothing queued)."""
        if self._ended:
            return False
        size = command.ByteSize()
        if not await self._room.acquire(size, timeout):
            return False
        try:
            await asyncio.wait_for(self._queue.put((command, size)), timeout)
        except TimeoutError:
            self._room.release(size)
            return False
        except BaseException:
            self._room.release(size)
            raise
        return True

    async def get(self) -> tuple[spb.TelemetryCommand, int] | None:
        """The next command and its size (call ``written(size)`` once it is written); None
        once the queue has ended and is empty."""
        if self._ended and self._queue.empty():
            return None
        return await self._queue.get()

    def written(self, size: int) -> None:
        self._room.release(size)

    def end(self) -> None:
        """No more commands: a waiting ``get`` returns None once the queue is empty."""
        if self._ended:
            return
        self._ended = True
        if not self._queue.full():
            self._queue.put_nowait(None)

    def drain(self) -> None:
        """Drop what waits, its room given back; a waiting ``get`` returns None (the stream
        ends when its client takes what is being written)."""
        self._ended = True
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                self._room.release(item[1])
        self._queue.put_nowait(None)  # (the queue is empty now)
