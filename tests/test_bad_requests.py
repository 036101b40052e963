"""Bad requests cost their sender an error answer, not the server its log: a broker on
loopback answers a thousand malformed requests of each kind with an error naming what was
wrong, writes a few log lines for all of them and serves a good request right after; a
handler's internal error is logged with its traceback, also a few times a minute at most.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.broker.state import _consumer_offset
from rocketstore.remoting import (
    RemotingClient,
    RemotingCommand,
    RequestError,
    ResponseCode,
    _connection,
    ext_int,
    ext_int32,
)
from rocketstore.remoting._limits import LogLimiter
from support.broker import RunningBroker, send_request
from support.remoting import raw_connect, read_command, serve

RC = ResponseCode
HUGE = "9" * 30
PER_KIND = 1000


@pytest.fixture
def fresh_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connections' log limiters as a new process has them (their budget is per minute)."""
    monkeypatch.setattr(_connection, "_bad_input_log", LogLimiter(_connection.log))
    monkeypatch.setattr(_connection, "_failure_log", LogLimiter(_connection.log))


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningBroker]:
    broker = RunningBroker(tmp_path / "b", store={}, broker={})
    try:
        yield broker
    finally:
        broker.stop()


def malformed() -> dict[str, list[tuple[RemotingCommand, str]]]:
    """Request kind → bad requests and a word their error names."""
    offset = {"topic": "T", "queueId": "0", "consumerGroup": "G", "commitOffset": "1"}
    return {
        "SEND_MESSAGE": [
            (send_request("T", sysFlag="x"), "sysFlag"),
            (send_request("T", bornTimestamp=HUGE), "bornTimestamp"),
            (send_request("T", flag=HUGE), "flag"),
            (send_request("T", reconsumeTimes="1.5"), "reconsumeTimes"),
        ],
        "UPDATE_CONSUMER_OFFSET": [
            (RemotingCommand.request(15, {**offset, "queueId": ""}), "queueId"),
            (RemotingCommand.request(15, {**offset, "commitOffset": "x"}), "commitOffset"),
            (RemotingCommand.request(15, {**offset, "queueId": HUGE}), "queueId"),
            (RemotingCommand.request(15, {**offset, "consumerGroup": ""}), "consumerGroup"),
        ],
        "QUERY_CONSUMER_OFFSET": [
            (RemotingCommand.request(14, {}), "queueId"),
            (RemotingCommand.request(14, {**offset, "queueId": "-3"}), "queueId"),
            (RemotingCommand.request(14, {**offset, "queueId": "x"}), "queueId"),
        ],
        "UPDATE_AND_CREATE_TOPIC": [
            (RemotingCommand.request(17, {}), "topic"),
            (RemotingCommand.request(17, {"topic": "A"}), "defaultTopic"),
        ],
        "CONSUMER_SEND_MSG_BACK": [
            (RemotingCommand.request(36, {"group": "G"}), "offset"),
            (RemotingCommand.request(36, {"group": "G", "offset": HUGE}), "offset"),
            (RemotingCommand.request(36, {"offset": "0"}), "group"),
            (
                RemotingCommand.request(36, {"group": "G", "offset": "0", "delayLevel": "x"}),
                "delay",
            ),
        ],
    }


def pipeline(address: str, commands: list[RemotingCommand]) -> list[RemotingCommand | None]:
    """Send ``commands`` over one connection (from a thread of their own: the server stops
    reading from a peer that does not read) and read their answers."""
    sock = raw_connect(address)
    try:
        data = b"".join(c.encode() for c in commands)
        sender = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
        sender.start()
        answers = [read_command(sock) for _ in commands]
        sender.join(10)
        return answers
    finally:
        sock.close()


def rocketstore_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("rocketstore")]


def test_a_flood_of_malformed_requests_gets_answers_and_a_few_log_lines(
    running: RunningBroker, caplog: pytest.LogCaptureFixture, fresh_limits: None
) -> None:
    with RemotingClient(timeout=5) as client:  # the topic exists: sends fail on their fields
        assert client.invoke(running.addr, send_request("T")).code == RC.SUCCESS
    caplog.clear()
    with caplog.at_level(logging.INFO):
        for kind, bad in malformed().items():
            commands = [copy.copy(bad[i % len(bad)][0]) for i in range(PER_KIND)]
            for i, cmd in enumerate(commands):
                cmd.opaque = i + 1
            answers = pipeline(running.addr, commands)
            for i, answer in enumerate(answers):
                assert answer is not None, f"{kind} #{i}: no answer"
                assert answer.opaque == i + 1
                assert answer.code == RC.SYSTEM_ERROR, (kind, answer.remark)
                assert bad[i % len(bad)][1] in (answer.remark or ""), (kind, answer.remark)
        with RemotingClient(timeout=5) as client:
            good = client.invoke(running.addr, send_request("T", b"after the flood"))
            assert good.code == RC.SUCCESS
    lines = rocketstore_lines(caplog)
    assert len(lines) < 20, [r.getMessage() for r in lines]
    assert not [r for r in lines if r.exc_info], "a traceback for a bad request"
    assert "Traceback" not in caplog.text
    assert any("refused request code" in r.getMessage() for r in lines)


def test_offsets_moved_back_again_and_again_are_logged_a_few_times(
    running: RunningBroker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = LogLimiter(_consumer_offset.log)
    monkeypatch.setattr(_consumer_offset, "_moved_back_log", limiter, raising=False)
    ext = {"topic": "T", "queueId": "0", "consumerGroup": "G"}
    commits = [
        RemotingCommand.request(15, {**ext, "commitOffset": str(10 if i % 2 else 5)})
        for i in range(PER_KIND)
    ]
    with caplog.at_level(logging.INFO):
        answers = pipeline(running.addr, commits)
    assert all(a is not None and a.code == RC.SUCCESS for a in answers)
    moved = [r for r in caplog.records if "moved back" in r.getMessage()]
    assert 1 <= len(moved) <= 5
    assert len(rocketstore_lines(caplog)) < 20


def test_an_internal_error_keeps_its_traceback_a_few_times_a_minute(
    caplog: pytest.LogCaptureFixture, fresh_limits: None
) -> None:
    def broken(cmd: RemotingCommand, conn: Any) -> RemotingCommand:
        raise RuntimeError("the handler is broken")

    def refuses(cmd: RemotingCommand, conn: Any) -> RemotingCommand:
        raise RequestError("no such thing", RC.TOPIC_NOT_EXIST)

    with caplog.at_level(logging.INFO), serve({1: broken, 2: refuses}) as s:
        answers = pipeline(s.address, [RemotingCommand.request(1) for _ in range(200)])
        assert all(a is not None and a.code == RC.SYSTEM_ERROR for a in answers)
        assert answers[0] is not None
        assert answers[0].remark == "RuntimeError: the handler is broken"
        refused = pipeline(s.address, [RemotingCommand.request(2)])[0]
        assert refused is not None
        assert (refused.code, refused.remark) == (RC.TOPIC_NOT_EXIST, "no such thing")
    tracebacks = [r for r in rocketstore_lines(caplog) if r.exc_info]
    assert 1 <= len(tracebacks) <= 5
    assert len(rocketstore_lines(caplog)) < 20


def test_the_log_limiter_tells_what_it_held_back() -> None:
    now = [0.0]
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("rocketstore.test_log_limiter")
    logger.propagate = False
    handler = Collect()
    logger.addHandler(handler)
    try:
        limiter = LogLimiter(logger, burst=3, interval=10.0, clock=lambda: now[0])
        written = [limiter.log(logging.WARNING, "bad %d", i) for i in range(100)]
        assert written == [True] * 3 + [False] * 97
        assert records == ["bad 0", "bad 1", "bad 2"]
        now[0] = 9.9
        assert not limiter.log(logging.WARNING, "bad %d", 100)
        now[0] = 10.0
        assert limiter.log(logging.WARNING, "bad %d", 101)
        assert records[3:] == ["98 similar messages suppressed in the last 10 s", "bad 101"]
    finally:
        logger.removeHandler(handler)


def test_numbers_out_of_javas_range_are_bad_requests() -> None:
    ext: dict[str, Any] = {"a": "9223372036854775807", "b": "9223372036854775808", "c": 2**31}
    assert ext_int(ext, "a") == 2**63 - 1
    with pytest.raises(RequestError, match="b: out of range"):
        ext_int(ext, "b")
    assert ext_int(ext, "c") == 2**31
    with pytest.raises(RequestError, match="c: out of range"):
        ext_int32(ext, "c")
    assert ext_int32({"d": "-2147483648"}, "d") == -(2**31)
    assert ext_int32({}, "d", 7) == 7
    with pytest.raises(ValueError, match="not an integer"):
        ext_int32({"d": "x"}, "d")
