"""What a stored put waits for before its result is final, for the blocking and the
non-blocking put alike.

A put is appended under the put lock at once. Then, unless it carries WAIT=false::

    append ──► flush wait ──────────► stage 1 ──────────► stage 2 … ──► final result
               GroupCommitService      e.g. a SYNC_MASTER's replication wait
               (SYNC_FLUSH only)       (GroupTransferService: FLUSH_SLAVE_TIMEOUT,
                                        SLAVE_NOT_AVAILABLE)

``CommitLog.put_message`` goes through the chain in the putting thread, blocking on each step;
``put_message_async`` hands it to a ``PutCompletion``, which the thread that ends each step moves
on and whose future completes with the last result. The chain stops at the first status that
is not PUT_OK: the record is stored either way, and the first failure is what the producer
hears (a FLUSH_DISK_TIMEOUT is not overwritten by the replication's answer).

A stage (``PutStage``) is a callable ``stage(end_offset, result)``: ``end_offset`` is the
commit-log byte position just after the put's record (or batch), ``result`` the put's result
so far (PUT_OK). It returns the result to go on with, either at once (the wait is over before it
began: the slave has the bytes already, or no slave is in reach) or as a
``concurrent.futures.Future`` that its own service completes, with its own timeout. A stage must
not block and should not raise (an exception ends the put in UNKNOWN_ERROR): it may run on an
event loop's thread (a non-blocking put under ASYNC_FLUSH), in the group-commit thread or in
the thread that completed the previous stage's future. Stages are registered with
``CommitLog.add_put_stage``. A stage may also offer ``blocking(end, result)``, which the blocking
put calls instead (it waits in the producer's thread; see ``run_stages``), and
``attach(end, result, done)``, which the non-blocking put calls instead: it returns the answer,
or None and later calls ``done(answer)`` (no future to build and complete).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import FINISHED

from ._message import PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)

PutStage = Callable[[int, PutMessageResult], "Future[PutMessageResult] | PutMessageResult"]
_PUT_OK = PutMessageStatus.PUT_OK


_DONE_CONDITION = threading.Condition()  # shared by every DoneFuture (see there)


class DoneFuture(Future[PutMessageResult]):
    """The future of a non-blocking put that is complete on return (ASYNC_FLUSH without
    stages, WAIT=false, a refused put): a ``concurrent.futures.Future`` in every respect (done,
    its result, callbacks run at once, ``wait``, ``as_completed``, ``asyncio.wrap_future``),
    built without the ``threading.Condition`` every Future makes for itself. It never changes
    state, so nobody waits on its condition: they all share one, which its methods hold only
    for a moment (``concurrent.futures.wait`` takes it once per future, reentrantly)."""

    def __init__(self, result: PutMessageResult) -> None:  # no Future.__init__: its Condition
        self._condition = _DONE_CONDITION
        self._state = FINISHED
        self._result = result
        self._exception = None
        self._waiters = []
        self._done_callbacks: list[Callable[[Future[PutMessageResult]], object]] = []

    # its state never changes: the answers need no lock
    def done(self) -> bool:
        return True

    def running(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> PutMessageResult:
        return self._result  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return None

    def add_done_callback(self, fn: Callable[[Future[PutMessageResult]], object]) -> None:
        """Runs ``fn`` at once, as Future does for a done future (its exception logged)."""
        try:
            fn(self)
        except Exception:
            log.exception("exception calling callback for %r", self)


def settle(future: Future[PutMessageResult], result: PutMessageResult) -> None:
    """Complete ``future`` with ``result``; a future its holder cancelled is left alone."""
    try:
        future.set_result(result)
    except InvalidStateError:  # cancelled: the put is stored all the same
        pass


def _failed(result: PutMessageResult, exc: BaseException) -> PutMessageResult:
    log.error("a put stage failed", exc_info=exc)
    return result._replace(status=PutMessageStatus.UNKNOWN_ERROR, error=f"put stage: {exc!r}")


def _call(
    stage: PutStage, end: int, result: PutMessageResult
) -> Future[PutMessageResult] | PutMessageResult:
    try:
        return stage(end, result)
    except Exception as exc:
        return _failed(result, exc)


def run_stages(stages: Sequence[PutStage], end: int, result: PutMessageResult) -> PutMessageResult:
    """The blocking put: each stage in turn, waiting on its future. Producer threads.

    A stage with a ``blocking(end, result)`` method is asked through it instead: it waits in
    the calling thread and returns the result, with no future to build and complete (the
    replication wait of a SYNC_MASTER's blocking puts)."""
    for stage in stages:
        if result.status is not _PUT_OK:
            break
        blocking = getattr(stage, "blocking", None)
        if blocking is not None:
            try:
                result = blocking(end, result)
            except Exception as exc:
                result = _failed(result, exc)
            continue
        r = _call(stage, end, result)
        if isinstance(r, Future):
            try:
                r = r.result()  # the stage's service bounds the wait
            except Exception as exc:
                r = _failed(result, exc)
        result = r
    return result


class PutCompletion:
    """One non-blocking put on its way through the flush wait and the stages to ``future``.

    Moved on by whichever thread ends a step (see the module); nothing here blocks.
    """

    __slots__ = ("_next", "end", "future", "result", "stages")

    def __init__(
        self,
        future: Future[PutMessageResult],
        end: int,
        result: PutMessageResult,
        stages: Sequence[PutStage],
    ) -> None:
        self.future = future
        self.end = end
        self.result = result  # as stored: PUT_OK
        self.stages = stages
        self._next = 0

    def flushed(self, ok: bool) -> None:
        """GroupCommitService's callback: the flush wait ended (True: durable in time)."""
        if ok:
            self.advance(self.result)
        else:
            settle(self.future, self.result._replace(status=PutMessageStatus.FLUSH_DISK_TIMEOUT))

    def advance(self, result: PutMessageResult) -> None:
        """Run the stages from the next one on with ``result``, until one answers with a
        future (its done callback comes back here), one fails, or none is left."""
        stages = self.stages
        while result.status is _PUT_OK and self._next < len(stages):
            stage = stages[self._next]
            self._next += 1
            attach = getattr(stage, "attach", None)
            if attach is not None:
                try:
                    r = attach(self.end, result, self.advance)
                except Exception as exc:
                    r = _failed(result, exc)
                if r is None:
                    return  # the stage calls advance with its answer
                result = r
                continue
            r = _call(stage, self.end, result)
            if isinstance(r, Future):
                r.add_done_callback(self._stage_done)
                return
            result = r
        settle(self.future, result)

    def _stage_done(self, f: Future[PutMessageResult]) -> None:
        try:
            r = f.result()
        except BaseException as exc:  # a cancelled stage future included
            r = _failed(self.result, exc)
        self.advance(r)
