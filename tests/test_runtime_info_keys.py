"""The figures behind brokerStatus's keys that need counting: refused puts, put-latency
percentiles from the last minute's distribution, and the totals recorded at midnight."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rocketstore import Message, PutMessageStatus
from rocketstore.broker.state._stats import DailyTotals, seconds_to_next_midnight
from rocketstore.store.services._stats import PUT_LATENCY_BUCKETS, latency_percentile


def test_refused_puts_are_counted(open_store: Any) -> None:
    store = open_store(max_message_size=64)
    assert store.put_message(Message("T", b"x" * 10)).status is PutMessageStatus.PUT_OK
    assert store.put_message(Message("T", b"x" * 100)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages([Message("T", b"y" * 100)]).status is not PutMessageStatus.PUT_OK
    refused = store.put_message_async(Message("T", b"z" * 100)).result(60)
    assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.statistics().put_message_failed_times == 3
    assert store.runtime_info()["putMessageFailedTimes"] == "3"


def test_latency_percentiles_interpolate_inside_a_bucket() -> None:
    empty = (0,) * len(PUT_LATENCY_BUCKETS)
    assert latency_percentile(empty, 0.99) == 0.0
    # 90 puts under a millisecond, 10 between 10 and 50 ms
    dist = (90, 0, 10) + (0,) * (len(PUT_LATENCY_BUCKETS) - 3)
    assert latency_percentile(dist, 0.5) == 0.0
    assert latency_percentile(dist, 0.95) == pytest.approx(10 + 40 * 5 / 10)
    assert latency_percentile(dist, 0.999) == pytest.approx(10 + 40 * 9 / 10)


def test_daily_totals_shift_at_each_record() -> None:
    daily = DailyTotals()
    assert daily.totals(5, 7)["msgPutTotalTodayNow"] == "5"
    assert daily.totals(5, 7)["msgPutTotalTodayMorning"] == "0"
    daily.record(100, 40)
    daily.record(250, 90)
    got = daily.totals(300, 95)
    assert (got["msgPutTotalYesterdayMorning"], got["msgPutTotalTodayMorning"]) == ("100", "250")
    assert (got["msgGetTotalYesterdayMorning"], got["msgGetTotalTodayMorning"]) == ("40", "90")
    assert got["msgGetTotalTodayNow"] == "95"


def test_next_midnight_is_within_a_day() -> None:
    now = time.time()
    wait = seconds_to_next_midnight(now)
    assert 0 < wait <= 25 * 3600  # a day, or one with a daylight-saving hour
    assert time.localtime(now + wait + 1).tm_hour == 0
