"""Sends that wait for a slave, answered on the event loop in one step per acknowledgement.

On a SYNC_MASTER with ASYNC_FLUSH the slave's acknowledgement is a stored send's only wait (the
group-transfer service is the store's one put stage). Such a send gets no future: it joins its
loop's queue of waits (``SlaveWaits``), in the order the loop stored them, which is also the
order of their end offsets and of their deadlines. Only the first of them is attached to the
transfer service::

    send stored (loop) ──► transfer.at_once ──► answered now: a slave holds it already, or
          │                                     none is in reach (SLAVE_NOT_AVAILABLE)
          ▼ waits
    queue: [first ─ attached] [next] [next] ...          (end offsets and deadlines grow)
          ▲
    an acknowledgement covers the first (the HA reader thread) ── one call_soon_threadsafe ─┐
    the loop's timer at the first deadline ─────────────────────────────────────────────────┤
                                                                                            ▼
    drain (loop): every wait up to the acknowledged offset ends PUT_OK, those past their
    deadline FLUSH_SLAVE_TIMEOUT; their answers go out together (``answer``, one write a
    connection); the new first is attached

So the reader thread does one hand-off for every acknowledgement that moves the first wait,
however many sends it covers, and nothing per send: no future, no callback, no lock.

The transfer service's own verdicts stay in force: every send asks ``at_once`` (a slave in
reach, a lease, whatever the service's kind decides), and the attached wait ends as the
service ends it. When the service has stopped (the store shuts down, or leaves SYNC_MASTER),
every wait queued here ends with the attached one's answer: none of them is acknowledged later
by what another term's slaves hold.

Threads: the loop's, but for ``_first_done`` (whichever thread ends the attached wait: an HA
reader, the transfer service's deadline loop, a thread stopping the store).
"""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import Callable
from typing import Any

from ...store.ha._transfer import GroupTransferService
from ...store.log._message import PutMessageResult, PutMessageStatus

_PUT_OK = PutMessageStatus.PUT_OK
_TIMED_OUT = PutMessageStatus.FLUSH_SLAVE_TIMEOUT


class SlaveWait:
    """One stored send waiting for a slave. ``result`` is the put's (PUT_OK) until the wait
    ends, then the answer. The fields after it are the owner's (who answers it, and how);
    ``SlaveWaits`` does not read them."""

    def __init__(self, end: int, deadline: float, result: PutMessageResult, queue_id: int) -> None:
        self.end = end  # the commit-log offset just after the record
        self.deadline = deadline  # loop time
        self.result = result
        self.queue_id = queue_id
        self.error: Exception | None = None  # the put raised (a put's future, not a slave's)
        self.held = False  # a put's future (SYNC_FLUSH), counted as a handler's pending one
        self.conn: Any = None
        self.opaque = 0
        self.serialize_type = 0
        self.code = 0
        self.topic = ""
        self.properties = ""
        self.size = 0
        self.began = 0.0
        self.response_code = 0  # its answer's, once answered


class SlaveWaits:
    """A loop's queue of sends waiting for a slave; ``answer(waits)`` is called on the loop
    with the waits that ended (each one's ``result`` its answer). A wait's deadline is the
    transfer service's ``timeout_s`` from when it began."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        transfer: GroupTransferService,
        answer: Callable[[list[SlaveWait]], None],
    ) -> None:
        self._loop = loop
        self.transfer = transfer
        self._answer = answer
        self._queue: collections.deque[SlaveWait] = collections.deque()
        self._attached: SlaveWait | None = None  # the wait attached to the transfer service
        # attached waits the service ended, with its answers: appended by any thread, taken
        # by the drain (deque's append and popleft are atomic)
        self._ended: collections.deque[tuple[SlaveWait, PutMessageResult]] = collections.deque()
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def wait(self, result: PutMessageResult, queue_id: int) -> PutMessageResult | SlaveWait:
        """A send stored with ``result`` (PUT_OK): its answer now, or its wait (queued), whose
        owner's fields the caller fills in before it returns to the loop. Loop thread."""
        end = result.wrote_offset + result.wrote_bytes
        transfer = self.transfer
        now = transfer.at_once(end, result)
        if now is not None:
            return now
        w = SlaveWait(end, self._loop.time() + transfer.timeout_s, result, queue_id)
        queue = self._queue
        if self._attached is None:
            # the first (the queue is empty: a wait leaves it only once it is not attached)
            answer = transfer.attach(end, result, functools.partial(self._first_done, w))
            if answer is not None:  # a slave acknowledged it meanwhile (or the service stopped)
                return answer
            self._attached = w
        else:
            transfer.waits += 1
            transfer.wake_writers()
        queue.append(w)
        if self._timer is None:
            self._timer = self._loop.call_at(w.deadline, self._drain)
        return w

    # ---- the hand-off -----------------------------------------------------------------------

    def _first_done(self, w: SlaveWait, result: PutMessageResult) -> None:
        """The transfer service ended the attached wait ``w`` with ``result``. Any thread."""
        self._ended.append((w, result))
        if self._scheduled:
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody waits for an answer any more
            pass

    def _drain(self) -> None:
        """Answer the waits that ended: by an acknowledgement, by the service, by their
        deadline (this is the timer's callback too). Loop thread."""
        self._scheduled = False  # first: a hand-off from now on schedules another drain
        done: list[SlaveWait] = []
        queue = self._queue
        acked = self.transfer.acked
        while queue and queue[0].end <= acked:
            done.append(queue.popleft())
        ended = self._ended
        while ended:
            w, answer = ended.popleft()
            if w is not self._attached:
                # a wait that ended here already (acknowledged, or timed out): the service
                # counted a timeout only if it ended it so too
                if w.result.status is _TIMED_OUT and answer.status is _PUT_OK:
                    self.transfer.timeouts += 1
                continue
            self._attached = None
            if answer.status is _PUT_OK or not queue or queue[0] is not w:
                continue  # covered: ended above
            if self.transfer.stopped:
                # the service stopped (the store shuts down, or leaves SYNC_MASTER): none of
                # them is acknowledged later by what another term's slaves hold
                queue.popleft()
                w.result = answer
                done.append(w)
                while queue:
                    q = queue.popleft()
                    q.result = q.result._replace(status=answer.status)
                    self.transfer.timeouts += 1
                    done.append(q)
            else:  # its own deadline (the service's clock): it alone ends
                queue.popleft()
                w.result = answer
                done.append(w)
        attached = self._attached
        if attached is not None and attached.end <= acked:
            self._attached = None  # its completion is on its way: stale when it comes
        self._expire(done)
        self._attach_first(done)
        if done:
            self._answer(done)

    def _expire(self, done: list[SlaveWait]) -> None:
        """Those past their deadline end FLUSH_SLAVE_TIMEOUT; the timer follows the first."""
        queue = self._queue
        now = self._loop.time()
        transfer = self.transfer
        while queue and queue[0].deadline <= now:
            w = queue.popleft()
            w.result = w.result._replace(status=_TIMED_OUT)
            if w is self._attached:
                self._attached = None  # counted when the service ends it (``_drain``)
            else:
                transfer.timeouts += 1
            done.append(w)
        timer = self._timer
        if timer is not None and (not queue or timer.when() <= now):
            timer.cancel()
            timer = self._timer = None
        if queue and timer is None:
            self._timer = self._loop.call_at(queue[0].deadline, self._drain)

    def _attach_first(self, done: list[SlaveWait]) -> None:
        """Attach the first wait unless one is attached: the service may answer it at once
        (then the next is tried)."""
        queue = self._queue
        transfer = self.transfer
        while queue and self._attached is None:
            w = queue[0]
            answer = transfer.attach(w.end, w.result, functools.partial(self._first_done, w))
            if answer is None:
                self._attached = w
                return
            queue.popleft()
            w.result = answer
            done.append(w)

    def close(self) -> None:
        """Stop the timer (the loop is going away); the waits are left unanswered."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
