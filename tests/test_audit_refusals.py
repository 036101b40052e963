"""The audit log under a flood of refusals: a source's repeated refusals are counted and told
in one line an interval, so an outsider refused a thousand times a second cannot rotate the
real trail out of the file."""

from __future__ import annotations

import logging

import pytest

from rocketstore.acl._audit import AUDIT_LOGGER, RefusalLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]


def refuse(log: RefusalLog, source: str, *, resource: str = "topic:T", account: str = "") -> None:
    log.refused(
        account=account or None,
        source=source,
        request="gRPC SendMessage",
        resource=resource,
        reason="No accessKey is configured",
    )


def test_a_flood_of_refusals_writes_a_bounded_number_of_lines_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    clock = FakeClock()
    log = RefusalLog(interval_s=60.0, full_lines=3, clock=clock)
    for i in range(10_000):  # one outsider, a new port each time, one resource
        refuse(log, f"10.0.0.9:{40_000 + i % 20_000}")
        clock.now += 0.001
    refuse(log, "10.0.0.7:5000")  # another source: its own first line
    assert lines(caplog) == [
        'DENY account=- source=10.0.0.9:40000 request=gRPC SendMessage resource=topic:T reason="No accessKey is configured"',
        'DENY account=- source=10.0.0.7:5000 request=gRPC SendMessage resource=topic:T reason="No accessKey is configured"',
    ]
    clock.now += 60.0
    log.flush()  # the intervals are over: one line each source that had more
    summary = lines(caplog)[2:]
    assert summary == [
        'DENY-SUMMARY source=10.0.0.9 refused=9,999 more in 60 s accounts=- requests="gRPC SendMessage"'
    ]
    assert (log.written, log.counted) == (2, 9_999)
    # a new interval: the source's first refusal is written in full again
    refuse(log, "10.0.0.9:1")
    assert lines(caplog)[-1].startswith("DENY account=- source=10.0.0.9:1 ")


def test_varying_what_is_asked_for_does_not_get_round_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each (account, request, resource) of a source is written once an interval, at most
    ``full_lines`` of them; then everything is counted."""
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    clock = FakeClock()
    log = RefusalLog(interval_s=60.0, full_lines=3, clock=clock)
    for i in range(1_000):
        refuse(log, "[2001:db8::1]:7000", resource=f"topic:T{i}", account=f"ak{i % 7}")
    assert len(lines(caplog)) == 3
    clock.now += 61.0
    refuse(log, "192.0.2.1:1")  # any later refusal tells the intervals that ended
    told = [line for line in lines(caplog) if line.startswith("DENY-SUMMARY")]
    assert len(told) == 1 and "source=[2001:db8::1] refused=997 more" in told[0]
    assert "accounts=" in told[0] and ",+3" in told[0]  # 7 accounts: 4 named, 3 more


def test_sources_followed_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    clock = FakeClock()
    log = RefusalLog(interval_s=60.0, full_lines=1, max_sources=4, clock=clock)
    for i in range(100):
        for _ in range(2):
            refuse(log, f"198.51.100.{i}:1")
    # every source got its first line; the ones forgotten early were told as they went
    assert sum(1 for line in lines(caplog) if line.startswith("DENY account")) == 100
    assert sum(1 for line in lines(caplog) if line.startswith("DENY-SUMMARY")) == 96
    assert len(log._sources) == 4
