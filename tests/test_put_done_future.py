"""A non-blocking put that is complete on return answers a DoneFuture: a full
concurrent.futures.Future built without a threading.Condition of its own; a put that waits
still gets a Future that its services complete."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus
from rocketstore.store.log._put_stages import DoneFuture


def _count_conditions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many Futures make their own Condition (Future.__init__) from now on."""
    made = [0]
    real = Future.__init__

    def counting(self: Future[Any]) -> None:
        made[0] += 1
        real(self)

    monkeypatch.setattr(Future, "__init__", counting)
    return made


def test_async_puts_complete_on_return_make_no_condition(
    open_store: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()  # ASYNC_FLUSH, no stages: every put is complete on return
    made = _count_conditions(monkeypatch)
    futures = [store.put_message_async(Message("T", b"x" * 10, i % 2)) for i in range(50)]
    futures.append(store.put_messages_async([Message("T", b"y", 1)] * 3))
    assert made[0] == 0
    assert all(f.done() and f.result().status is PutMessageStatus.PUT_OK for f in futures)
    assert [f.result().queue_offset for f in futures[:4]] == [0, 0, 1, 1]
    assert futures[-1].result().msg_count == 3


def test_a_done_future_is_a_future(open_store: Callable[..., MessageStore]) -> None:
    store = open_store()
    fut = store.put_message_async(Message("T", b"x"))
    assert isinstance(fut, Future) and isinstance(fut, DoneFuture)
    assert fut.done() and not fut.running() and not fut.cancelled()
    assert fut.exception() is None
    assert fut.result(timeout=0).status is PutMessageStatus.PUT_OK
    assert fut.cancel() is False
    with pytest.raises(InvalidStateError):
        fut.set_result(fut.result())
    seen: list[Future[Any]] = []
    fut.add_done_callback(seen.append)  # runs at once
    assert seen == [fut]

    def bad(_f: Future[Any]) -> None:
        raise ValueError("a callback's own error")

    fut.add_done_callback(bad)  # logged, as Future logs it; the put is unaffected
    assert fut.result().status is PutMessageStatus.PUT_OK

    other: Future[int] = Future()
    threading.Timer(0.05, other.set_result, (1,)).start()
    done, not_done = concurrent.futures.wait([fut, other], timeout=5)
    assert done == {fut, other} and not not_done
    again = store.put_message_async(Message("T", b"z"))
    assert set(concurrent.futures.as_completed([fut, again], timeout=5)) == {fut, again}

    async def awaited() -> Any:
        return await asyncio.wrap_future(store.put_message_async(Message("T", b"w")))

    assert asyncio.run(awaited()).status is PutMessageStatus.PUT_OK


@pytest.mark.sources_only
def test_refused_and_failed_async_puts(
    open_store: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    refused = store.put_message_async(Message("bad topic!", b"x"))
    assert refused.done()
    assert refused.result().status is PutMessageStatus.MESSAGE_ILLEGAL

    def boom(*_args: Any) -> None:
        raise OSError("no")

    monkeypatch.setattr(store.commit_log, "_prepare", boom)
    failed = store.put_message_async(Message("T", b"x"))
    assert isinstance(failed.exception(timeout=0), OSError)


def test_a_put_that_waits_still_gets_a_future_completed_later(
    open_store: Callable[..., MessageStore],
) -> None:
    store = open_store(flush_disk_type="SYNC_FLUSH")
    fut = store.put_message_async(Message("T", b"x"))
    assert not isinstance(fut, DoneFuture)
    assert fut.result(timeout=10).status is PutMessageStatus.PUT_OK
    no_wait = store.put_message_async(Message("T", b"x", wait_store_msg_ok=False))
    assert isinstance(no_wait, DoneFuture)
