"""Waiting in tests: for a condition, and for dispatch to catch up with the commit log."""

from __future__ import annotations

import time
from collections.abc import Callable

from rocketstore import MessageStore

WAIT_S = 30.0
"""How long a test waits for a condition before it fails: generous, since the poll returns as
soon as the condition holds and CI runs on a busy shared machine (a test never asserts that
something happens fast; speed is measured by the benchmarks)."""


def wait_until(cond: Callable[[], bool], timeout: float = WAIT_S, poll: float = 0.001) -> bool:
    """Whether ``cond()`` became true within ``timeout`` seconds (checked every ``poll``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(poll)
    return cond()


def wait_dispatched(store: MessageStore, timeout: float = WAIT_S) -> None:
    """Wait until dispatch has taken everything in the commit log; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() > 0:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.001)
