"""Pop consumption state: hand-out, invisibility, acks, redelivery, dead letters, persistence."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from rocketstore import ManualClock
from rocketstore.broker.state._pop import (
    POP_STATE_FILE,
    InvalidReceiptHandleError,
    PopState,
    ReadBatch,
    Receipt,
)

G, T = "G1", "TopicA"
INVISIBLE = 30_000


class FakeQueue:
    """A consume queue: ``size`` messages at offsets ``min_offset`` .. size-1; message ``i`` has
    commit-log offset ``1000 * i``. ``match`` decides which ones the consumer's filter takes."""

    def __init__(
        self, size: int, *, match: Callable[[int], bool] | None = None, min_offset: int = 0
    ) -> None:
        self.size = size
        self.min_offset = min_offset
        self.match = match or (lambda offset: True)
        self.reads: list[tuple[int, int]] = []
        self.scan_limit = 32  # units one read looks at, like a store get with a filter

    def read(self, offset: int, max_count: int) -> ReadBatch:
        self.reads.append((offset, max_count))
        offset = max(offset, self.min_offset)
        found: list[tuple[int, int]] = []
        end = min(self.size, offset + self.scan_limit)
        pos = offset
        while pos < end and len(found) < max_count:
            if self.match(pos):
                found.append((pos, 1000 * pos))
            pos += 1
        return ReadBatch(found, pos)


def receive(
    pop: PopState,
    queue: FakeQueue,
    max_nums: int,
    *,
    invisible_ms: int = INVISIBLE,
    group: str = G,
    queue_id: int = 0,
    start_offset: int | Callable[[], int] = 0,
    max_delivery_attempts: int = 17,
) -> list[Receipt]:
    """``pop.receive`` on ``queue``; it must have no dead letters."""
    got = pop.receive(
        group,
        T,
        queue_id,
        max_nums,
        invisible_ms,
        read=queue.read,
        start_offset=start_offset,
        max_delivery_attempts=max_delivery_attempts,
    )
    assert got.dead_letters == ()
    return list(got.deliveries)


def offsets(receipts: Iterable[Receipt]) -> list[int]:
    return [r.offset for r in receipts]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def pop(clock: ManualClock) -> PopState:
    return PopState(None, clock=clock)


def test_consumers_of_a_group_get_distinct_messages_while_invisible(
    pop: PopState, clock: ManualClock
) -> None:
    queue = FakeQueue(10)
    first = receive(pop, queue, 3)
    second = receive(pop, queue, 3)
    assert offsets(first) == [0, 1, 2]
    assert offsets(second) == [3, 4, 5]
    assert [r.phys_offset for r in first] == [0, 1000, 2000]
    assert {r.attempt for r in first + second} == {1}
    assert len({r.handle for r in first + second}) == 6
    r = first[0]
    assert (r.group, r.topic, r.queue_id) == (G, T, 0)
    assert r.deliver_time_ms == clock.now_ms()
    assert r.invisible_until_ms == clock.now_ms() + INVISIBLE
    # just before the deadline nothing comes back; the rest of the queue is still there
    clock.advance(INVISIBLE / 1000 - 0.001)
    assert offsets(receive(pop, queue, 10)) == [6, 7, 8, 9]
    assert receive(pop, queue, 10) == []
    assert pop.in_flight(G, T, 0) == list(range(10))


def test_other_groups_and_queues_are_independent(pop: PopState) -> None:
    queue = FakeQueue(5)
    assert offsets(receive(pop, queue, 2)) == [0, 1]
    assert offsets(receive(pop, queue, 2, group="G2")) == [0, 1]
    assert offsets(receive(pop, queue, 2, queue_id=1)) == [0, 1]
    assert pop.progress(G, T, 0) == 0
    assert pop.progress(G, T, 7) is None


def test_progress_moves_over_the_contiguous_acked_prefix(pop: PopState) -> None:
    queue = FakeQueue(10)
    got = receive(pop, queue, 4)
    assert pop.progress(G, T, 0) == 0
    pop.ack(got[1].handle)
    pop.ack(got[2].handle)
    assert pop.progress(G, T, 0) == 0  # offset 0 still in flight
    assert pop.in_flight(G, T, 0) == [0, 3]
    acked = pop.ack(got[0].handle)
    assert acked.offset == 0
    assert pop.progress(G, T, 0) == 3
    pop.ack(got[3].handle)
    assert pop.progress(G, T, 0) == 4  # nothing in flight: next_offset
    assert pop.progress_table() == {(G, T, 0): 4}


def test_expired_message_comes_back_with_next_attempt_and_old_handle_is_refused(
    pop: PopState, clock: ManualClock
) -> None:
    queue = FakeQueue(3)
    got = receive(pop, queue, 2)
    pop.ack(got[1].handle)
    clock.advance(INVISIBLE / 1000)
    again = receive(pop, queue, 5)
    # the redelivery first, then the new message
    assert [(r.offset, r.attempt) for r in again] == [(0, 2), (2, 1)]
    assert again[0].phys_offset == 0
    with pytest.raises(InvalidReceiptHandleError, match="stale"):
        pop.ack(got[0].handle)
    pop.ack(again[0].handle)
    assert pop.progress(G, T, 0) == 2
    clock.advance(INVISIBLE / 1000)
    assert [(r.offset, r.attempt) for r in receive(pop, queue, 5)] == [(2, 2)]


def test_redeliveries_count_against_max_nums(pop: PopState, clock: ManualClock) -> None:
    queue = FakeQueue(10)
    receive(pop, queue, 4)
    clock.advance(INVISIBLE / 1000)
    assert [(r.offset, r.attempt) for r in receive(pop, queue, 3)] == [(0, 2), (1, 2), (2, 2)]
    assert [(r.offset, r.attempt) for r in receive(pop, queue, 3)] == [(3, 2), (4, 1), (5, 1)]


def test_ack_after_expiry_works_until_the_message_is_handed_out_again(
    pop: PopState, clock: ManualClock
) -> None:
    queue = FakeQueue(2)
    late, other = receive(pop, queue, 2)
    clock.advance(2 * INVISIBLE / 1000)
    pop.ack(late.handle)  # expired but nobody else has it: accepted
    again = receive(pop, queue, 5)
    assert [(r.offset, r.attempt) for r in again] == [(1, 2)]
    with pytest.raises(InvalidReceiptHandleError):
        pop.ack(other.handle)
    with pytest.raises(InvalidReceiptHandleError):
        pop.ack(late.handle)  # acked already


def test_change_invisible_extends_and_replaces_the_handle(
    pop: PopState, clock: ManualClock
) -> None:
    queue = FakeQueue(1)
    (got,) = receive(pop, queue, 1)
    clock.advance(10)
    changed = pop.change_invisible(got.handle, 60_000, group=G, topic=T)
    assert changed.handle != got.handle
    assert (changed.offset, changed.attempt, changed.phys_offset) == (0, 1, 0)
    assert changed.invisible_until_ms == clock.now_ms() + 60_000
    with pytest.raises(InvalidReceiptHandleError, match="stale"):
        pop.ack(got.handle)
    with pytest.raises(InvalidReceiptHandleError):
        pop.change_invisible(got.handle, 1000)
    clock.advance(INVISIBLE / 1000)
    assert receive(pop, queue, 1) == []  # the old deadline no longer applies
    clock.advance(30)
    (again,) = receive(pop, queue, 1)
    assert again.attempt == 2
    # zero: visible again at once (a negative acknowledgement)
    pop.change_invisible(again.handle, 0)
    assert [(r.offset, r.attempt) for r in receive(pop, queue, 1)] == [(0, 3)]
    with pytest.raises(ValueError):
        pop.change_invisible(again.handle, -1)


def test_forged_damaged_or_foreign_handles_are_refused(clock: ManualClock) -> None:
    pop = PopState(None, clock=clock)
    (got,) = receive(pop, FakeQueue(1), 1)
    payload, mac = got.handle.split(".")
    # a handle of the same shape signed with another secret
    other = PopState(None, clock=clock)
    (foreign,) = receive(other, FakeQueue(1), 1)
    flipped = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
    bad = [
        "",
        "no-dot",
        f"{flipped}.{mac}",
        f"{payload}.{mac[:-1]}",
        f"{payload}.",
        f"{payload}.{mac}x",
        f"é.{mac}",
        foreign.handle,
    ]
    for handle in bad:
        with pytest.raises(InvalidReceiptHandleError):
            pop.ack(handle)
        with pytest.raises(InvalidReceiptHandleError):
            pop.decode(handle)
    with pytest.raises(InvalidReceiptHandleError, match="group"):
        pop.ack(got.handle, group="G2")
    with pytest.raises(InvalidReceiptHandleError, match="topic"):
        pop.ack(got.handle, topic="TopicB")
    assert pop.decode(got.handle) == got
    assert got.handle.isascii()
    pop.ack(got.handle, group=G, topic=T)


def test_message_due_for_dead_letter_queue_after_max_attempts(clock: ManualClock) -> None:
    pop = PopState(None, clock=clock, dead_letter_retry_ms=5_000)
    queue = FakeQueue(2)

    def take(n: int = 5) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        got = pop.receive(G, T, 0, n, INVISIBLE, read=queue.read, max_delivery_attempts=2)
        return [(r.offset, r.attempt) for r in got.deliveries], [
            (r.offset, r.attempt) for r in got.dead_letters
        ]

    first = pop.receive(G, T, 0, 1, INVISIBLE, read=queue.read, max_delivery_attempts=2)
    assert [r.offset for r in first.deliveries] == [0]
    clock.advance(INVISIBLE / 1000)
    assert take(1) == ([(0, 2)], [])
    clock.advance(INVISIBLE / 1000)
    got = pop.receive(G, T, 0, 5, INVISIBLE, read=queue.read, max_delivery_attempts=2)
    assert [(r.offset, r.attempt) for r in got.deliveries] == [(1, 1)]
    (dead,) = got.dead_letters
    assert (dead.offset, dead.attempt, dead.phys_offset) == (0, 2, 0)
    assert pop.statistics().dead_letters_pending == 1
    # not handed to a consumer any more; offered again for the dead-letter queue when the
    # broker did not ack the put in time
    clock.advance(4.999)
    assert take() == ([], [])
    clock.advance(0.001)
    again = pop.receive(G, T, 0, 5, INVISIBLE, read=queue.read, max_delivery_attempts=2)
    assert [(r.offset, r.attempt) for r in again.dead_letters] == [(0, 2)]
    with pytest.raises(InvalidReceiptHandleError):
        pop.ack(dead.handle)
    assert pop.progress(G, T, 0) == 0
    pop.ack(again.dead_letters[0].handle)  # the broker put it into %DLQ%G1
    assert pop.progress(G, T, 0) == 1
    assert pop.statistics().dead_letters_pending == 0


def orderly(
    pop: PopState, queue: FakeQueue, n: int, *, max_attempts: int = 17
) -> tuple[list[tuple[int, int]], list[Receipt], list[Receipt]]:
    got = pop.receive(
        G,
        T,
        0,
        n,
        INVISIBLE,
        read=queue.read,
        max_delivery_attempts=max_attempts,
        orderly=True,
    )
    return (
        [(r.offset, r.attempt) for r in got.deliveries],
        list(got.deliveries),
        list(got.dead_letters),
    )


def test_orderly_queue_hands_out_the_next_batch_only_after_the_last_is_acked(
    pop: PopState, clock: ManualClock
) -> None:
    queue = FakeQueue(10)
    first, receipts, _ = orderly(pop, queue, 3)
    assert first == [(0, 1), (1, 1), (2, 1)]
    # another consumer of the group gets nothing while the batch is out, even part-acked
    assert orderly(pop, queue, 3)[0] == []
    pop.ack(receipts[0].handle)
    pop.ack(receipts[1].handle)
    assert orderly(pop, queue, 3)[0] == []
    pop.ack(receipts[2].handle)
    assert orderly(pop, queue, 3)[0] == [(3, 1), (4, 1), (5, 1)]
    # an unordered receive of the same state is not held back (the flag is per receive)
    assert offsets(receive(pop, queue, 2)) == [6, 7]


def test_orderly_queue_redelivers_unacked_messages_in_offset_order_before_new_ones(
    pop: PopState, clock: ManualClock
) -> None:
    queue = FakeQueue(10)
    _, receipts, _ = orderly(pop, queue, 4)
    pop.ack(receipts[1].handle)
    # offset 2's invisibility is pushed out: the queue stays held until it ends
    longer = pop.change_invisible(receipts[2].handle, 2 * INVISIBLE)
    clock.advance(INVISIBLE / 1000)
    assert orderly(pop, queue, 5)[0] == []
    clock.advance(INVISIBLE / 1000)
    got, again, _ = orderly(pop, queue, 5)
    # 0, 2, 3 come back (attempt 2) in order, then new ones fill the batch
    assert got == [(0, 2), (2, 2), (3, 2), (4, 1), (5, 1)]
    with pytest.raises(InvalidReceiptHandleError):
        pop.ack(longer.handle)
    for r in again:
        pop.ack(r.handle)
    assert pop.progress(G, T, 0) == 6


def test_orderly_leftover_redeliveries_go_out_before_anything_new(
    pop: PopState, clock: ManualClock
) -> None:
    queue = FakeQueue(10)
    orderly(pop, queue, 5)
    clock.advance(INVISIBLE / 1000)
    got, receipts, _ = orderly(pop, queue, 2)
    assert got == [(0, 2), (1, 2)]
    assert orderly(pop, queue, 2)[0] == []
    for r in receipts:
        pop.ack(r.handle)
    # 2..4 are still unacked and visible: they go first, and nothing new joins them
    assert orderly(pop, queue, 2)[0] == [(2, 2), (3, 2)]
    clock.advance(INVISIBLE / 1000)
    assert orderly(pop, queue, 5)[0] == [(2, 3), (3, 3), (4, 2), (5, 1), (6, 1)]


def test_orderly_message_past_max_attempts_is_dead_lettered_and_the_queue_moves_on(
    clock: ManualClock,
) -> None:
    pop = PopState(None, clock=clock, dead_letter_retry_ms=5_000)
    queue = FakeQueue(3)
    assert orderly(pop, queue, 1, max_attempts=2)[0] == [(0, 1)]
    clock.advance(INVISIBLE / 1000)
    assert orderly(pop, queue, 1, max_attempts=2)[0] == [(0, 2)]
    clock.advance(INVISIBLE / 1000)
    got, receipts, dead = orderly(pop, queue, 1, max_attempts=2)
    assert [(d.offset, d.attempt) for d in dead] == [(0, 2)]
    assert got == [(1, 1)]
    pop.ack(receipts[0].handle)
    # held until the broker acks the dead-letter put
    assert orderly(pop, queue, 1, max_attempts=2)[0] == []
    pop.ack(dead[0].handle)
    assert orderly(pop, queue, 1, max_attempts=2)[0] == [(2, 1)]


def test_filtered_out_offsets_are_skipped_for_good(pop: PopState) -> None:
    queue = FakeQueue(200, match=lambda offset: offset % 50 == 49)
    got = receive(pop, queue, 4)
    # the first read (32 units) finds nothing, the second finds offset 49 and scans to 64
    assert offsets(got) == [49]
    assert queue.reads == [(0, 4), (32, 4)]
    assert pop.progress(G, T, 0) == 49
    pop.ack(got[0].handle)
    assert pop.progress(G, T, 0) == 64
    assert offsets(receive(pop, queue, 4)) == [99]


def test_reading_past_the_end_changes_nothing(pop: PopState) -> None:
    queue = FakeQueue(0)
    assert receive(pop, queue, 4) == []
    assert pop.progress(G, T, 0) == 0
    queue.size = 2
    assert offsets(receive(pop, queue, 4)) == [0, 1]


def test_start_offset_and_queue_minimum(pop: PopState) -> None:
    queue = FakeQueue(10, min_offset=4)
    calls: list[int] = []

    def start() -> int:
        calls.append(1)
        return 2

    assert offsets(receive(pop, queue, 2, start_offset=start)) == [4, 5]
    assert offsets(receive(pop, queue, 2, start_offset=start)) == [6, 7]
    assert calls == [1]  # asked once, for the queue's first receive
    assert pop.progress(G, T, 0) == 4  # offsets 2 and 3 are gone from the queue: skipped


def test_reset_forgets_in_flight_messages(pop: PopState) -> None:
    queue = FakeQueue(10)
    got = receive(pop, queue, 3)
    pop.reset(G, T, 0, 8)
    assert pop.progress(G, T, 0) == 8
    with pytest.raises(InvalidReceiptHandleError):
        pop.ack(got[0].handle)
    assert offsets(receive(pop, queue, 5)) == [8, 9]


def test_failed_read_leaves_expired_messages_to_be_redelivered(
    pop: PopState, clock: ManualClock
) -> None:
    queue = FakeQueue(3)
    receive(pop, queue, 2)
    clock.advance(INVISIBLE / 1000)

    def broken(offset: int, max_count: int) -> ReadBatch:
        raise OSError("disk gone")

    with pytest.raises(OSError):
        pop.receive(G, T, 0, 5, INVISIBLE, read=broken)
    assert [(r.offset, r.attempt) for r in receive(pop, queue, 5)] == [(0, 2), (1, 2), (2, 1)]


def test_read_that_breaks_its_contract_is_refused(pop: PopState) -> None:
    def backwards(offset: int, max_count: int) -> ReadBatch:
        return ReadBatch([], offset - 1)

    def outside(offset: int, max_count: int) -> ReadBatch:
        return ReadBatch([(offset + 5, 0)], offset + 1)

    def too_many(offset: int, max_count: int) -> ReadBatch:
        return ReadBatch([(offset + i, 0) for i in range(max_count + 1)], offset + max_count + 1)

    for read in (backwards, outside, too_many):
        with pytest.raises(ValueError):
            pop.receive(G, T, 0, 2, INVISIBLE, read=read, start_offset=3)
    assert pop.in_flight(G, T, 0) == []


def test_arguments_are_checked(pop: PopState) -> None:
    queue = FakeQueue(1)
    with pytest.raises(ValueError):
        receive(pop, queue, 0)
    with pytest.raises(ValueError):
        receive(pop, queue, 1, invisible_ms=-1)
    with pytest.raises(ValueError):
        receive(pop, queue, 1, max_delivery_attempts=0)
    with pytest.raises(ValueError):
        receive(pop, queue, 1, start_offset=-1)
    with pytest.raises(ValueError):
        pop.reset(G, T, 0, -1)
    with pytest.raises(ValueError):
        PopState(None, dead_letter_retry_ms=0)


# ---- persistence ---------------------------------------------------------------------------


def test_restart_keeps_in_flight_messages_progress_and_handles(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "config" / POP_STATE_FILE
    pop = PopState(path, clock=clock)
    queue = FakeQueue(10)
    got = receive(pop, queue, 4)
    pop.ack(got[0].handle)
    changed = pop.change_invisible(got[2].handle, 120_000)
    assert pop.persist() is True
    assert pop.persist() is False  # nothing changed since
    assert not (tmp_path / "config" / (POP_STATE_FILE + ".tmp")).exists()

    restarted = PopState(path, clock=clock)
    assert restarted.progress(G, T, 0) == 1
    assert restarted.in_flight(G, T, 0) == [1, 2, 3]
    # in-flight messages stay invisible; new ones continue after them
    assert offsets(receive(restarted, queue, 2)) == [4, 5]
    # the handles given out before the restart still work
    restarted.ack(got[1].handle)
    with pytest.raises(InvalidReceiptHandleError):
        restarted.ack(got[2].handle)  # replaced by the change before the restart
    restarted.ack(changed.handle)
    clock.advance(INVISIBLE / 1000)
    assert [(r.offset, r.attempt) for r in receive(restarted, queue, 1)] == [(3, 2)]


def test_crash_window_repeats_messages_but_loses_none(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / POP_STATE_FILE
    pop = PopState(path, clock=clock)
    queue = FakeQueue(4)
    persisted = receive(pop, queue, 2)
    pop.persist()
    # after the last persist: an ack and a hand-out, then the process dies
    pop.ack(persisted[0].handle)
    lost = receive(pop, queue, 1)
    assert offsets(lost) == [2]

    restarted = PopState(path, clock=clock)
    with pytest.raises(InvalidReceiptHandleError):
        restarted.ack(lost[0].handle)  # its hand-out was never recorded
    again = receive(restarted, queue, 5)
    assert [(r.offset, r.attempt) for r in again] == [(2, 1), (3, 1)]
    clock.advance(INVISIBLE / 1000)
    # the unrecorded ack: offset 0 comes back, with offset 1
    back = receive(restarted, queue, 5)
    assert [(r.offset, r.attempt) for r in back][:2] == [(0, 2), (1, 2)]


def test_state_file_is_json_and_a_damaged_file_falls_back_to_the_backup(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / POP_STATE_FILE
    pop = PopState(path, clock=clock)
    queue = FakeQueue(10)
    first = receive(pop, queue, 2)
    pop.persist()
    receive(pop, queue, 2)
    pop.persist()
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    (q,) = doc["queues"]
    assert (q["group"], q["topic"], q["queue_id"], q["next_offset"]) == (G, T, 0, 4)
    assert [row[0] for row in q["in_flight"]] == [0, 1, 2, 3]

    path.write_text('{"version": 1, "queues": [')  # torn
    restarted = PopState(path, clock=clock)
    assert restarted.in_flight(G, T, 0) == [0, 1]  # the previous good file
    restarted.ack(first[0].handle)


def test_given_secret_is_not_written_to_the_file(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / POP_STATE_FILE
    pop = PopState(path, clock=clock, secret=b"k" * 32)
    (got,) = receive(pop, FakeQueue(1), 1)
    pop.persist()
    assert json.loads(path.read_text())["secret"] is None
    assert b"k" * 32 not in path.read_bytes()
    PopState(path, clock=clock, secret=b"k" * 32).ack(got.handle)
    with pytest.raises(InvalidReceiptHandleError):
        PopState(path, clock=clock).ack(got.handle)  # without the secret: a new random one


def test_in_memory_state_does_not_persist(pop: PopState) -> None:
    receive(pop, FakeQueue(1), 1)
    assert pop.persist() is False


# ---- several consumers ---------------------------------------------------------------------


def test_concurrent_consumers_never_hold_the_same_message(clock: ManualClock) -> None:
    pop = PopState(None, clock=clock)
    queue = FakeQueue(2000)
    delivered: list[int] = []
    delivered_lock = threading.Lock()
    errors: list[BaseException] = []

    def consumer() -> None:
        try:
            while True:
                got = receive(pop, queue, 7)
                if not got:
                    return
                with delivered_lock:
                    delivered.extend(offsets(got))
                for r in got:
                    pop.ack(r.handle)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=consumer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert sorted(delivered) == list(range(2000))
    assert pop.progress(G, T, 0) == 2000


@pytest.mark.parametrize("seed", range(5))
def test_random_interleaving_keeps_the_invariants(seed: int, clock: ManualClock) -> None:
    """Consumers receive, ack, extend and drop messages at random while time moves on: no
    message is held by two consumers at once, an acked message never comes back, progress is
    the smallest unacked offset, and in the end every message is acked."""
    rng = random.Random(seed)
    pop = PopState(None, clock=clock)
    queue = FakeQueue(300, match=lambda offset: offset % 7 != 3)
    held: dict[int, Receipt] = {}  # offset -> the receipt its consumer holds
    acked: set[int] = set()
    wanted = {o for o in range(300) if o % 7 != 3}

    for _ in range(3000):
        action = rng.random()
        now = clock.now_ms()
        if action < 0.35:
            got = receive(pop, queue, rng.randint(1, 5), invisible_ms=rng.choice([0, 500, 2000]))
            for r in got:
                assert r.offset not in acked
                previous = held.get(r.offset)
                assert previous is None or previous.invisible_until_ms <= now
                held[r.offset] = r
        elif action < 0.65 and held:
            offset = rng.choice(sorted(held))
            r = held.pop(offset)
            pop.ack(r.handle)
            acked.add(offset)
        elif action < 0.75 and held:
            offset = rng.choice(sorted(held))
            held[offset] = pop.change_invisible(held[offset].handle, rng.choice([0, 1000]))
        elif action < 0.8 and held:
            held.pop(rng.choice(sorted(held)))  # a consumer dies with it
        else:
            clock.advance(rng.choice([0.1, 0.5, 1.0]))
        unacked = [o for o in range(300) if o in wanted and o not in acked]
        progress = pop.progress(G, T, 0)
        if progress is not None:  # None until the first receive
            assert progress <= (unacked[0] if unacked else 300)

    for _ in range(400):
        clock.advance(2.0)
        for r in receive(pop, queue, 50):
            assert r.offset not in acked
            pop.ack(r.handle)
            acked.add(r.offset)
        if acked == wanted:
            break
    assert acked == wanted
    assert pop.progress(G, T, 0) == 300


def test_renew_extends_invisibility_and_keeps_the_handle(pop: PopState, clock: ManualClock) -> None:
    queue = FakeQueue(2)
    (r,) = receive(pop, queue, 1, invisible_ms=1_000)
    clock.advance(0.9)
    deadline = pop.renew(r.handle, 1_000)
    assert deadline == clock.now_ms() + 1_000
    clock.advance(0.9)  # past the first deadline, before the renewed one
    assert offsets(receive(pop, queue, 5)) == [1]  # offset 0 stays invisible
    pop.ack(r.handle)  # the consumer's handle is still the current one
    with pytest.raises(InvalidReceiptHandleError):
        pop.renew(r.handle, 1_000)
