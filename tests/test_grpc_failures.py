"""A gRPC call that fails is answered with a status and logged within limits: a client's bad
request as one line (BAD_REQUEST), an internal failure with its traceback, a few a minute."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from rocketstore.grpc import _service
from rocketstore.grpc._convert import Code
from rocketstore.grpc._pb import service_pb2 as spb


def _serve(handle: Any, n: int) -> list[Any]:
    service = object.__new__(_service.MessagingService)

    async def main() -> list[Any]:
        return [
            await service._unary(None, spb.HeartbeatResponse, handle)  # type: ignore[arg-type]
            for _ in range(n)
        ]

    return asyncio.run(main())


@pytest.fixture(autouse=True)
def fresh_limiters(monkeypatch: pytest.MonkeyPatch) -> None:
    log = logging.getLogger(_service.__name__)
    monkeypatch.setattr(_service, "_bad_requests", _service.LogLimiter(log))
    monkeypatch.setattr(_service, "_failures", _service.LogLimiter(log))


def test_bad_requests_are_one_line_each_a_few_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    def bad() -> Any:
        raise ValueError("queue id -1 is not a queue")

    with caplog.at_level(logging.DEBUG, logger=_service.__name__):
        answers = _serve(bad, 500)
    assert {a.status.code for a in answers} == {Code.BAD_REQUEST}
    assert "queue id -1" in answers[0].status.message
    assert 1 <= len(caplog.records) <= 5
    assert not any(r.exc_info for r in caplog.records)


def test_internal_failures_keep_a_traceback_within_limits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> Any:
        raise RuntimeError("lost the table")

    with caplog.at_level(logging.DEBUG, logger=_service.__name__):
        answers = _serve(broken, 500)
    assert {a.status.code for a in answers} == {Code.INTERNAL_SERVER_ERROR}
    assert 1 <= len(caplog.records) <= 5
    assert all(r.exc_info for r in caplog.records)
