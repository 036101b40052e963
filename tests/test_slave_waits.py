"""The broker loop's queue of sends waiting for a slave (broker/messaging/_slave_waits.py) over a
real group-transfer service: acknowledgements from another thread, many waits at once. The
checker keeps its own history (every acknowledgement it published, every answer with the time
it came) and judges afterwards: no wait answered PUT_OK before an acknowledgement covered it,
every wait answered exactly once, none timed out before its deadline.

The broker's end of it (a SYNC_MASTER broker, a slave whose acknowledgements the test holds
back, producers pipelining sends) is tests/test_ha_ack_order.py.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rocketstore.broker.messaging._slave_waits import SlaveWait, SlaveWaits
from rocketstore.store._clock import SystemClock
from rocketstore.store.ha._transfer import GroupTransferService
from rocketstore.store.log._message import PutMessageResult, PutMessageStatus

S = PutMessageStatus
RECORD = 1000  # every put's size here


class Slaves:
    """What the transfer service asks of the HA service: how many slaves are connected."""

    def __init__(self) -> None:
        self.count = 1
        self.woken = 0

    def connections(self) -> int:
        return self.count

    def wake(self) -> None:
        self.woken += 1


@pytest.fixture
def transfer() -> Iterator[tuple[GroupTransferService, Slaves]]:
    slaves = Slaves()
    service = GroupTransferService(
        SystemClock(),
        timeout_s=30.0,
        fallbehind_max=1 << 40,
        connection_count=slaves.connections,
        wake_writers=slaves.wake,
    )
    service.start()
    try:
        yield service, slaves
    finally:
        service.stop()


def stored(n: int) -> PutMessageResult:
    """The result of the ``n``th put: records of RECORD bytes one after another."""
    return PutMessageResult(S.PUT_OK, wrote_offset=n * RECORD, wrote_bytes=RECORD, queue_offset=n)


class History:
    """Answers as they came, with the loop's time and the acknowledged offset then."""

    def __init__(self, service: GroupTransferService) -> None:
        self.service = service
        self.answers: list[tuple[int, PutMessageStatus, float, float, int]] = []

    def answer(self, waits: list[SlaveWait]) -> None:
        now = time.monotonic()
        acked = self.service.acked
        for w in waits:
            self.answers.append((w.end, w.result.status, w.deadline, now, acked))


def test_many_waits_are_answered_only_once_a_slave_holds_them(
    transfer: tuple[GroupTransferService, Slaves],
) -> None:
    service, _slaves = transfer
    history = History(service)
    published: list[int] = []  # every offset the "slave" acknowledged, in order
    n = 3000
    stop = threading.Event()

    async def main() -> None:
        waits = SlaveWaits(asyncio.get_running_loop(), service, history.answer)
        top = 0  # the end of the newest put: the acker never acknowledges more
        rng = random.Random(7)

        def acker() -> None:
            # acknowledges up to what was put, in random steps (mid-record too), from its thread
            acked = 0
            while not stop.is_set():
                end = top
                if acked < end:
                    acked = min(end, acked + rng.randrange(1, 20 * RECORD))
                    published.append(acked)
                    service.notify_transfer_some(acked)
                time.sleep(rng.choice((0, 0, 0.0005, 0.002)))

        thread = threading.Thread(target=acker, daemon=True)
        thread.start()
        try:
            for i in range(n):
                assert isinstance(waits.wait(stored(i), 0), SlaveWait)  # not acknowledged yet
                top = (i + 1) * RECORD
                if i % 50 == 49:
                    await asyncio.sleep(0)  # the loop runs its drains between bursts
            assert await _until(lambda: len(history.answers) == n)
        finally:
            stop.set()
            thread.join(10)
            waits.close()

    asyncio.run(main())
    answered = [a[0] for a in history.answers]
    assert sorted(answered) == [(i + 1) * RECORD for i in range(n)]  # each exactly once
    assert all(status is S.PUT_OK for _end, status, _d, _t, _a in history.answers)
    # none answered before an acknowledgement covered it: the offset then, and the history
    assert all(end <= acked for end, _s, _d, _t, acked in history.answers)
    assert max(answered) <= published[-1]
    assert service.pending() == 0


def test_waits_past_their_deadline_time_out_and_the_rest_still_complete(
    transfer: tuple[GroupTransferService, Slaves],
) -> None:
    service, _slaves = transfer
    service.timeout_s = 2.0
    history = History(service)

    async def main() -> None:
        waits = SlaveWaits(asyncio.get_running_loop(), service, history.answer)
        began = time.monotonic()
        early = [waits.wait(stored(i), 0) for i in range(5)]
        assert all(isinstance(w, SlaveWait) for w in early)
        service.notify_transfer_some(2 * RECORD)  # covers the first two
        assert await _until(lambda: len(history.answers) == 2)
        service.timeout_s = 600.0  # the late ones, queued behind, are far from their deadline
        late = [waits.wait(stored(i), 0) for i in range(5, 8)]
        assert all(isinstance(w, SlaveWait) for w in late)
        # the three early ones time out at their deadline, the late ones are still waiting
        assert await _until(lambda: len(history.answers) == 5)
        assert time.monotonic() - began >= 2.0
        service.notify_transfer_some(8 * RECORD)
        assert await _until(lambda: len(history.answers) == 8)
        waits.close()

    asyncio.run(main())
    by_end = {end: (status, deadline, at) for end, status, deadline, at, _a in history.answers}
    assert [by_end[(i + 1) * RECORD][0] for i in range(8)] == [S.PUT_OK] * 2 + [
        S.FLUSH_SLAVE_TIMEOUT
    ] * 3 + [S.PUT_OK] * 3
    for i in range(2, 5):
        _status, deadline, at = by_end[(i + 1) * RECORD]
        assert at >= deadline  # not before its time
    assert service.timeouts == 3


def test_at_once_answers_and_a_stopped_service_ends_every_wait(
    transfer: tuple[GroupTransferService, Slaves],
) -> None:
    service, slaves = transfer
    history = History(service)

    async def main() -> None:
        waits = SlaveWaits(asyncio.get_running_loop(), service, history.answer)
        service.notify_transfer_some(3 * RECORD)
        r = waits.wait(stored(1), 0)  # held already
        assert isinstance(r, PutMessageResult) and r.status is S.PUT_OK
        slaves.count = 0
        r = waits.wait(stored(3), 0)  # no slave in reach
        assert isinstance(r, PutMessageResult) and r.status is S.SLAVE_NOT_AVAILABLE
        slaves.count = 1
        pending = [waits.wait(stored(i), 0) for i in range(3, 9)]
        assert all(isinstance(w, SlaveWait) for w in pending) and len(waits) == 6
        service.notify_transfer_some(5 * RECORD)
        assert await _until(lambda: len(history.answers) == 2)
        # the service stops long before the deadlines (30 s): the rest end now
        await asyncio.to_thread(service.stop)
        assert await _until(lambda: len(history.answers) == 6)
        assert len(waits) == 0
        r = waits.wait(stored(9), 0)  # a stopped service answers at once
        assert isinstance(r, PutMessageResult) and r.status is S.FLUSH_SLAVE_TIMEOUT
        waits.close()

    asyncio.run(main())
    statuses = sorted((end, status) for end, status, _d, _t, _a in history.answers)
    assert statuses == [((i + 1) * RECORD, S.PUT_OK) for i in range(3, 5)] + [
        ((i + 1) * RECORD, S.FLUSH_SLAVE_TIMEOUT) for i in range(5, 9)
    ]


async def _until(cond: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.002)
    return bool(cond())
