"""The loop of ``rocketstore consume``: every read queue of a topic, pulled in turn (a long poll
when there is one queue), each message printed, then the group's offset committed: at least
once, in queue order.

A broker that goes away (restarted, a connection reset, a name server without its route for a
while) does not end the command: the consumer waits with a growing pause (0.2 s, doubling, at
most 5 s), asks the name servers for the route again and goes on from the offsets it holds,
which are never behind what it committed, so nothing is skipped and nothing printed twice. It
says so on standard error once per outage. Only the first lookup's failure ends the command
(the caller turns it into one error line). Main thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..client import ClientError, MessageQueue, PullConsumer
from ..client._names import InvalidNameError
from ..remoting import RemotingError

FIRST_PAUSE_S = 0.2
MAX_PAUSE_S = 5.0
MULTI_QUEUE_IDLE_PAUSE_S = 0.05
LONG_POLL_MS = 15_000


class TopicTail:
    """Follows ``topic``'s queues for the consumer's group; ``emit`` gets each message,
    ``flush`` is called after each round that emitted some, ``warn`` gets a line for standard
    error."""

    def __init__(
        self,
        consumer: PullConsumer,
        topic: str,
        *,
        expression: str = "*",
        from_beginning: bool = False,
        commit: bool = True,
        emit: Callable[[Any], None],
        warn: Callable[[str], None],
        flush: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.consumer = consumer
        self.topic = topic
        self.expression = expression
        self.from_beginning = from_beginning
        self.commit = commit
        self.emit = emit
        self.warn = warn
        self.flush = flush
        self.clock = clock
        self.sleep = sleep
        self.queues: list[MessageQueue] = []
        self.offsets: dict[MessageQueue, int] = {}
        self.committed: dict[MessageQueue, int] = {}
        self.seen = 0

    def resolve(self) -> None:
        """The topic's queues from a fresh route; a queue not known yet starts at the group's
        committed offset (its minimum offset when it has none, or with ``from_beginning``)."""
        queues = self.consumer.queues(self.topic)
        for mq in queues:
            if mq in self.offsets:
                continue
            committed = -1 if self.from_beginning else self.consumer.fetch_consumer_offset(mq)
            start = committed if committed >= 0 else self.consumer.min_offset(mq)
            self.offsets[mq] = start
            self.committed[mq] = start
        self.queues = queues

    def _round(self, max_messages: int | None) -> int:
        """One pull of each queue; the messages emitted. Offsets move past what was emitted
        before they are committed."""
        suspend_ms = LONG_POLL_MS if len(self.queues) == 1 else 0
        got = 0
        for mq in self.queues:
            offset = self.offsets[mq]
            r = self.consumer.pull(mq, offset, 32, self.expression, suspend_ms=suspend_ms)
            if r.status == "OFFSET_ILLEGAL":
                self.offsets[mq] = r.next_begin_offset
                continue
            for m in r.messages:
                self.emit(m)
                self.seen += 1
                got += 1
                self.offsets[mq] = m.queue_offset + 1
                if max_messages is not None and self.seen >= max_messages:
                    break
            else:
                self.offsets[mq] = r.next_begin_offset
            self._maybe_commit(mq)
            if max_messages is not None and self.seen >= max_messages:
                break
        return got

    def _maybe_commit(self, mq: MessageQueue) -> None:
        if self.commit and self.offsets[mq] != self.committed.get(mq):
            self.consumer.commit_offset(mq, self.offsets[mq])
            self.committed[mq] = self.offsets[mq]

    def run(self, *, max_messages: int | None = None, idle_timeout: float | None = None) -> int:
        """Until ``max_messages`` were emitted or nothing arrived for ``idle_timeout`` seconds
        (an outage counts as idle); the number emitted. The first route lookup's errors are
        raised; later ones are waited out."""
        self.resolve()
        idle_since = self.clock()
        pause = 0.0
        while max_messages is None or self.seen < max_messages:
            try:
                if pause:
                    self.resolve()
                got = self._round(max_messages)
            except InvalidNameError:
                raise
            except (RemotingError, ClientError) as exc:
                if not pause:
                    self.warn(f"warning: {exc}; retrying (the consumer goes on from its offsets)")
                pause = min(pause * 2, MAX_PAUSE_S) if pause else FIRST_PAUSE_S
                if idle_timeout is not None and self.clock() - idle_since >= idle_timeout:
                    break
                self.sleep(pause)
                continue
            if pause:
                self.warn(f"reconnected: consuming {self.topic} again")
                pause = 0.0
            if got:
                self.flush()
                idle_since = self.clock()
            elif idle_timeout is not None and self.clock() - idle_since >= idle_timeout:
                break
            elif len(self.queues) > 1:
                self.sleep(MULTI_QUEUE_IDLE_PAUSE_S)
        self._commit_all()
        return self.seen

    def _commit_all(self) -> None:
        """Commit what is not committed yet (a commit a broker missed); errors are left, the
        offsets are at least once."""
        for mq in self.queues:
            try:
                self._maybe_commit(mq)
            except (RemotingError, ClientError):
                pass
