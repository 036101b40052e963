"""``rocketstore consume`` across a broker restart: it waits for the broker, asks the name server
for the route again and goes on from its offsets: every message printed once, a normal exit,
no traceback."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rocketstore.cli._consume import TopicTail
from rocketstore.client import MessageQueue, PullResult
from rocketstore.remoting import RemotingError
from rocketstore.store._clock import ManualClock
from support.interop import ServerProcess, servers, stop_process

CLI = [sys.executable, "-m", "rocketstore.cli"]
TOPIC = "ReconnectTopic"
GROUP = "reconnect-group"
# the consumer ends after this long without a message: longer than a restart of `serve` takes
# on a busy machine, so it is still running when the later messages arrive
IDLE_TIMEOUT_S = 20


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def produce(namesrv: str, bodies: list[str]) -> None:
    out = cli(
        "produce", "--namesrv", namesrv, "--topic", TOPIC, stdin="".join(b + "\n" for b in bodies)
    )
    assert out.stdout.count('"SEND_OK"') == len(bodies), out.stdout


def test_consume_goes_on_after_a_broker_restart(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with servers() as started:
        first = ServerProcess.serve(store, tmp_path / "serve-1.log")
        started.append(first)
        assert first.namesrv is not None and first.broker is not None
        ns = first.namesrv
        ns_port = int(ns.rpartition(":")[2])
        broker_port = int(first.broker.rpartition(":")[2])
        cli("topic", "create", "-n", ns, "-t", TOPIC, "--queues", "2")
        wait_for(lambda: TOPIC in cli("topic", "list", "-n", ns).stdout.split(), 30, "the route")

        args = ["consume", "--namesrv", ns, "--topic", TOPIC, "--group", GROUP]
        consumer = subprocess.Popen(
            [*CLI, *args, "--timeout", str(IDLE_TIMEOUT_S)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(consumer.stdout or []))
        reader.start()
        try:
            before = [f"before-{i}" for i in range(20)]
            produce(ns, before)
            wait_for(lambda: len(lines) >= len(before), 60, "the first messages")

            first.stop()
            second = ServerProcess.serve(
                store, tmp_path / "serve-2.log", namesrv_port=ns_port, broker_port=broker_port
            )
            started.append(second)
            after = [f"after-{i}" for i in range(20)]
            produce(ns, after)
            wait_for(lambda: len(lines) >= len(before) + len(after), 120, "the later messages")
            # then nothing for the idle timeout: the consumer ends by itself
            status = consumer.wait(IDLE_TIMEOUT_S + 30)
            errors = consumer.stderr.read() if consumer.stderr else ""
        finally:
            if consumer.poll() is None:
                stop_process(consumer, grace=5)
            reader.join(10)
    assert status == 0, errors
    assert "Traceback" not in errors
    assert "reconnected: consuming ReconnectTopic again" in errors, errors
    printed = [line.rstrip("\n") for line in lines]
    assert sorted(printed) == sorted(before + after)  # each once: none skipped, none twice


# ---- the loop itself, against a broker that fails on cue (a fake clock, no sleeping) --------


class _FlakyBroker:
    """A PullConsumer's calls on one queue of ``count`` messages; ``fail_pulls`` /
    ``fail_commits`` calls fail (RemotingError) before the broker answers again; a pull that
    finds nothing takes a second of ``clock``."""

    def __init__(self, count: int, clock: ManualClock) -> None:
        self.clock = clock
        self.mq = MessageQueue("T", "broker-a", 0)
        self.count = count
        self.committed = -1
        self.fail_pulls = 0
        self.fail_commits = 0
        self.resolves = 0

    def queues(self, topic: str) -> list[MessageQueue]:
        self.resolves += 1
        return [self.mq]

    def fetch_consumer_offset(self, mq: MessageQueue) -> int:
        return self.committed

    def min_offset(self, mq: MessageQueue) -> int:
        return 0

    def pull(self, mq: MessageQueue, offset: int, max_nums: int, *_: Any, **__: Any) -> Any:
        if self.fail_pulls:
            self.fail_pulls -= 1
            raise RemotingError("connection reset")
        end = min(offset + 2, self.count)
        msgs = [SimpleNamespace(queue_offset=i) for i in range(offset, end)]
        if not msgs:
            self.clock.advance(1.0)  # a long poll that nothing ended
        status = "FOUND" if msgs else "NO_NEW_MSG"
        return PullResult(status, end, 0, self.count, messages=msgs)  # type: ignore[arg-type]

    def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        if self.fail_commits:
            self.fail_commits -= 1
            raise RemotingError("broker gone")
        self.committed = offset


def test_tail_waits_out_failures_without_repeating() -> None:
    clock = ManualClock()
    broker = _FlakyBroker(6, clock)
    printed: list[int] = []
    lines: list[str] = []
    pauses: list[float] = []

    def emit(m: Any) -> None:
        printed.append(m.queue_offset)
        if m.queue_offset == 1:  # the broker goes away after the first round was printed
            broker.fail_commits = 1
            broker.fail_pulls = 3

    def sleep(s: float) -> None:
        pauses.append(s)
        clock.advance(s)

    tail = TopicTail(
        broker,  # type: ignore[arg-type]
        "T",
        emit=emit,
        warn=lines.append,
        clock=clock.monotonic,
        sleep=sleep,
    )
    assert tail.run(idle_timeout=30) == 6
    assert printed == [0, 1, 2, 3, 4, 5]  # none twice, none skipped
    assert broker.committed == 6
    assert pauses[:4] == [0.2, 0.4, 0.8, 1.6]  # growing while the broker is away
    assert broker.resolves >= 4  # the route asked for again after each failure
    assert len(lines) == 2
    assert lines[0].startswith("warning: broker gone; retrying")
    assert lines[1] == "reconnected: consuming T again"


def test_tail_outage_counts_as_idle() -> None:
    clock = ManualClock()
    broker = _FlakyBroker(0, clock)
    broker.fail_pulls = 10**6
    lines: list[str] = []
    tail = TopicTail(
        broker,  # type: ignore[arg-type]
        "T",
        emit=lambda m: None,
        warn=lines.append,
        clock=clock.monotonic,
        sleep=clock.advance,
    )
    start = clock.monotonic()
    assert tail.run(idle_timeout=10) == 0
    assert 10 <= clock.monotonic() - start < 10 + 5  # ended by the timeout, not before
    assert len(lines) == 1 and lines[0].startswith("warning: connection reset")


def test_tail_first_lookup_fails_at_once() -> None:
    broker = _FlakyBroker(0, ManualClock())

    def no_route(topic: str) -> list[MessageQueue]:
        raise RemotingError("no name server answered")

    broker.queues = no_route  # type: ignore[method-assign]
    tail = TopicTail(broker, "T", emit=lambda m: None, warn=lambda s: None)  # type: ignore[arg-type]
    with pytest.raises(RemotingError):
        tail.run(idle_timeout=10)
