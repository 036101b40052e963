"""Store statistics: exact counts after known traffic, TPS windows, latency buckets, the CLI."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rocketstore import GetMessageStatus, ManualClock, Message, MessageStore
from rocketstore.cli import main
from rocketstore.cli._stats import file_figures
from rocketstore.store.log._record import PROPERTY_DELAY, SCHEDULE_TOPIC
from rocketstore.store.services._stats import (
    PUT_LATENCY_BUCKETS,
    StoreStatistics,
    TopicPutStats,
    java_double,
    latency_bucket,
)
from support.waits import wait_dispatched

RUNTIME_KEYS = {
    "bootTimestamp",
    "runtime",
    "putMessageEntireTimeMax",
    "putMessageTimesTotal",
    "putMessageSizeTotal",
    "putMessageDistributeTime",
    "putMessageAverageSize",
    "dispatchMaxBuffer",
    "getMessageEntireTimeMax",
    "putTps",
    "getFoundTps",
    "getMissTps",
    "getTotalTps",
    "getTransferedTps",
    "commitLogDiskRatio",
    "consumeQueueDiskRatio",
    "commitLogMinOffset",
    "commitLogMaxOffset",
    "dispatchBehindBytes",
    "runningFlags",
}


def settle(store: MessageStore) -> None:
    deadline = time.monotonic() + 60
    while store.dispatch_behind_bytes() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_exact_counts_after_known_traffic(open_store: Any) -> None:
    clock = ManualClock()
    store: MessageStore = open_store(clock=clock, message_delay_level="1s 5s")
    store.schedule.stop()
    sizes: dict[str, int] = {"A": 0, "B": 0, SCHEDULE_TOPIC: 0}
    for i in range(7):
        sizes["A"] += store.put_message(Message("A", b"a" * (10 + i), i % 2, tags="t")).wrote_bytes
    batch = store.put_messages([Message("B", b"b" * 20, 3) for _ in range(5)])
    assert batch.ok and batch.msg_count == 5
    sizes["B"] += batch.wrote_bytes
    sizes[SCHEDULE_TOPIC] += store.put_message(
        Message("A", b"later", 0, properties={PROPERTY_DELAY: "2"})
    ).wrote_bytes
    assert not store.put_message(Message("bad topic!", b"x")).ok  # refused: not counted
    settle(store)
    found = [store.get_message("g", "A", 0, 0, 32), store.get_message("g", "B", 3, 1, 2)]
    missed = [
        store.get_message("g", "A", 0, 99, 1),
        store.get_message("g", "nope", 0, 0, 1),
        store.get_message("g", "B", 3, 5, 1),
    ]
    assert [r.status for r in found] == [GetMessageStatus.FOUND] * 2
    assert all(r.status is not GetMessageStatus.FOUND for r in missed)

    s = store.statistics()
    assert isinstance(s, StoreStatistics)
    assert s.put_message_times_total == 13
    assert s.put_message_size_total == sum(sizes.values())
    assert s.put_message_average_size == sum(sizes.values()) / 13
    assert dict(s.topics) == {
        "A": TopicPutStats(7, sizes["A"]),
        "B": TopicPutStats(5, sizes["B"]),
        SCHEDULE_TOPIC: TopicPutStats(1, sizes[SCHEDULE_TOPIC]),
    }
    assert (s.get_found_total, s.get_miss_total, s.get_transferred_total) == (2, 3, 4 + 2)
    # a manual clock never moves during a call: the 9 calls that stored something are "[<=0ms]"
    assert s.put_message_distribute_time == (9,) + (0,) * 12
    assert s.put_message_entire_time_max_ms == 0 and s.get_message_entire_time_max_ms == 0
    assert s.dispatch_behind_bytes == 0 and s.running_flags == 0
    assert s.commit_log_min_offset == 0 and s.commit_log_max_offset == sum(sizes.values())
    assert [(p.level, p.offset, p.max_offset) for p in s.schedule] == [(2, 0, 1)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.put_message_times_total = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.topics["A"] = TopicPutStats(0, 0)  # type: ignore[index]

    info = store.runtime_info()
    assert set(info) >= RUNTIME_KEYS
    assert all(isinstance(v, str) for v in info.values())
    assert info["putMessageTimesTotal"] == "13"
    assert info["putMessageSizeTotal"] == str(sum(sizes.values()))
    assert info["putMessageAverageSize"] == java_double(sum(sizes.values()) / 13)
    assert info["putMessageDistributeTime"].startswith("[<=0ms]:9 [0~10ms]:0 ")
    assert info["putMessageDistributeTime"].endswith("[10s~]:0 ")
    assert info["scheduleMessageOffset_2"] == "0,1"
    assert info[f"commitLogDiskRatio_{store.config.commit_log_dir}"] == info["commitLogDiskRatio"]
    assert 0 < float(info["commitLogDiskRatio"]) < 1


def test_before_any_put_rocketmq_reports_one(open_store: Any) -> None:
    info = open_store().runtime_info()
    assert info["putMessageTimesTotal"] == "1"  # RocketMQ's guard against dividing by zero
    assert info["putMessageAverageSize"] == "0.0"
    assert info["putTps"] == "  " and info["getTotalTps"] == "0.0 0.0 0.0"


def test_tps_windows_are_sampled_each_second(open_store: Any) -> None:
    clock = ManualClock()
    store: MessageStore = open_store(clock=clock)
    stats = store.stats
    stats.stop()  # the test takes the samples
    stats.sample()
    for second in range(60):
        for _ in range(5 if second < 50 else 20):
            assert store.put_message(Message("T", b"x")).ok
        settle(store)
        store.get_message("g", "T", 0, 0, 4)  # found: 4 transferred
        store.get_message("g", "T", 9, 0, 1)  # miss
        clock.advance(1)
        assert stats.maybe_sample()
        assert not stats.maybe_sample()  # one sample per second of clock time
    s = store.statistics()
    assert s.put_tps[0] == 20.0  # the last 10 s: 20 puts each second
    assert s.put_tps[1] == pytest.approx((50 * 5 + 10 * 20) / 60)
    assert s.put_tps[2] is None  # fewer than 601 samples
    assert s.get_found_tps[0] == 1.0 and s.get_miss_tps[0] == 1.0
    assert s.get_total_tps[:2] == (2.0, 2.0) and s.get_total_tps[2] == 0.0
    assert s.get_transferred_tps[0] == 4.0
    info = store.runtime_info()
    assert info["putTps"] == f"20.0 {java_double((50 * 5 + 10 * 20) / 60)} "
    assert info["getTotalTps"] == "2.0 2.0 0.0"
    assert info["getTransferedTps"] == "4.0 4.0 "


def test_latency_buckets_and_max() -> None:
    assert len(PUT_LATENCY_BUCKETS) == 13
    cases = {
        0: 0,
        1: 1,
        9: 1,
        10: 2,
        49: 2,
        50: 3,
        99: 3,
        100: 4,
        199: 4,
        200: 5,
        499: 5,
        500: 6,
        999: 6,
        1000: 7,
        1999: 7,
        2000: 8,
        3000: 9,
        4000: 10,
        5000: 11,
        9999: 11,
        10000: 12,
        10**7: 12,
    }
    assert {ms: latency_bucket(ms) for ms in cases} == cases


def test_slow_calls_fill_the_distribution(open_store: Any) -> None:
    clock = ManualClock()
    store: MessageStore = open_store(clock=clock)
    store.stats.stop()
    for _ in range(4):
        store.put_message(Message("T", b"x"))
    for seconds in (0.0012, 0.020, 0.020, 2.5):
        store.stats.note_slow_put(seconds)
    store.stats.note_get(0.3)
    s = store.statistics()
    # 4 timed slow calls; the 4 real calls are fast, the untimed rest of the calls
    assert s.put_message_distribute_time[:3] == (0, 1, 2) and s.put_message_distribute_time[8] == 1
    assert s.put_message_entire_time_max_ms == 2500 and s.get_message_entire_time_max_ms == 300
    ended = store.stats.reset_distribution()
    assert sum(ended) == 4
    store.put_message(Message("T", b"x"))
    assert store.statistics().put_message_distribute_time == (1,) + (0,) * 12
    assert store.statistics().put_message_entire_time_max_ms == 2500  # the max is since start


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (5.0, "5.0"),
        (0.25, "0.25"),
        (1234.5, "1234.5"),
        (1e7, "1.0E7"),
        (12345678.9, "1.23456789E7"),
        (0.0001, "1.0E-4"),
        (0.001, "0.001"),
        (-2.5e-5, "-2.5E-5"),
        (1 / 3, "0.3333333333333333"),
    ],
)
def test_java_double_formatting(value: float, text: str) -> None:
    assert java_double(value) == text


def test_cli_stats(open_store: Any, make_config: Any) -> None:
    store: MessageStore = open_store(message_delay_level="1s 5s")
    sizes = {"A": 0, "B": 0}
    for i in range(6):
        topic = "A" if i % 3 else "B"
        sizes[topic] += store.put_message(Message(topic, b"m" * i, i % 2)).wrote_bytes
    store.put_message(Message("A", b"d", properties={PROPERTY_DELAY: "2"}))
    root = make_config().store_path_root_dir
    wait_dispatched(store)  # the delay level's queue is made by then
    file_keys = set(file_figures(store.runtime_info()))
    store.shutdown()
    runner = CliRunner()
    r = runner.invoke(main, ["stats", "--store", root, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    # a store at rest: the figures its files give, none of a broker's counters
    assert out["source"]["kind"] == "files"
    assert set(out["runtime_info"]) == file_keys
    assert not {"putTps", "runtime", "putMessageTimesTotal"} & set(out["runtime_info"])
    assert out["topics"]["A"] == {"messages": 4, "bytes": sizes["A"]}
    assert out["topics"]["B"] == {"messages": 2, "bytes": sizes["B"]}
    assert out["topics"][SCHEDULE_TOPIC]["messages"] == 1
    assert [(lv["level"], lv["offset"], lv["max_offset"]) for lv in out["delay_levels"]] == [
        (2, 0, 1)
    ]
    text = runner.invoke(main, ["stats", "--store", root])
    assert (
        text.exit_code == 0 and "commitLogMaxOffset" in text.output and "delay level" in text.output
    )
    # reading did not deliver the pending delayed message nor write its progress
    assert not (Path(root) / "config" / "delayOffset.json.bak").exists()
