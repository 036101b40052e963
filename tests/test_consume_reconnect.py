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

from _interop import ServerProcess, servers, stop_process

CLI = [sys.executable, "-m", "rocketstore.cli"]
TOPIC = "ReconnectTopic"
GROUP = "reconnect-group"
IDLE_TIMEOUT_S = 8


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
            wait_for(lambda: len(lines) >= len(before), 30, "the first messages")

            first.stop()
            second = ServerProcess.serve(
                store, tmp_path / "serve-2.log", namesrv_port=ns_port, broker_port=broker_port
            )
            started.append(second)
            after = [f"after-{i}" for i in range(20)]
            produce(ns, after)
            wait_for(lambda: len(lines) >= len(before) + len(after), 60, "the later messages")
            # then nothing for the idle timeout: the consumer ends by itself
            status = consumer.wait(IDLE_TIMEOUT_S + 30)
            errors = consumer.stderr.read() if consumer.stderr else ""
        finally:
            if consumer.poll() is None:
                stop_process(consumer, grace=5)
            reader.join(10)
    assert status == 0, errors
    assert "Traceback" not in errors
    printed = [line.rstrip("\n") for line in lines]
    assert sorted(printed) == sorted(before + after)  # each once: none skipped, none twice
