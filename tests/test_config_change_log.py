"""The topic and subscription-group tables' change log: a change is one appended line, made
durable before the call returns; the file is rewritten whole in the background and at load;
a torn last line is ignored; a broker killed (-9) right after answering creates restarts with
every topic, and its topics.json then holds them in RocketMQ's format."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rocketstore.broker.state._change_log import ChangeLog
from rocketstore.broker.state._config_table import COMPACT_MIN_CHANGES
from rocketstore.broker.state._subscription_group import (
    SUBSCRIPTION_GROUP_FILE,
    SubscriptionGroupManager,
)
from rocketstore.broker.state._topic_config import TOPICS_FILE, TopicConfig, TopicConfigManager
from rocketstore.client._admin import AdminClient
from support.waits import wait_until

CLI = [sys.executable, "-m", "rocketstore.cli"]


def manager(path: Path) -> TopicConfigManager:
    return TopicConfigManager(path, "broker-a")


def file_topics(path: Path) -> dict[str, dict[str, object]]:
    table: dict[str, dict[str, object]] = json.loads((path / TOPICS_FILE).read_text())[
        "topicConfigTable"
    ]
    return table


def test_a_change_is_a_line_and_a_restart_replays_it(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.update(TopicConfig("First", 4, 4))  # the first change writes the whole file
    assert "First" in file_topics(tmp_path) and "TBW102" in file_topics(tmp_path)
    for i in range(10):
        m.update(TopicConfig(f"T{i}", 2, 2))
    m.delete("T3")
    version = m.data_version
    log = ChangeLog(tmp_path / TOPICS_FILE)
    lines = list(log.replay())
    assert [c["k"] for c in lines] == [*(f"T{i}" for i in range(10)), "T3"]
    assert "c" not in lines[-1]  # a removal
    assert "T0" not in file_topics(tmp_path)  # not rewritten per change

    again = manager(tmp_path)
    assert again.select("T0") == TopicConfig("T0", 2, 2) and again.select("T3") is None
    assert again.data_version == version
    # the load compacted the log into the file
    assert log.numbers() == []
    assert "T9" in file_topics(tmp_path) and "T3" not in file_topics(tmp_path)


def test_compaction_in_the_background_loses_nothing(tmp_path: Path) -> None:
    m = manager(tmp_path)
    count = COMPACT_MIN_CHANGES * 3
    for i in range(count):
        m.update(TopicConfig(f"Topic{i}", 1 + i % 8, 1 + i % 8))
    m.wait_compacted()
    assert m.compactions >= 2  # the first change's whole file, then at least one compaction
    on_disk = manager(tmp_path)
    for i in range(count):
        assert on_disk.select(f"Topic{i}") == TopicConfig(f"Topic{i}", 1 + i % 8, 1 + i % 8)
    assert on_disk.data_version == m.data_version


def test_a_torn_or_damaged_line_ends_its_file(tmp_path: Path) -> None:
    m = SubscriptionGroupManager(tmp_path)
    for group in ("G1", "G2", "G3"):
        m.find_or_create(group)
    log = ChangeLog(tmp_path / SUBSCRIPTION_GROUP_FILE)
    (number,) = log.numbers()
    path = log.file(number)
    good = path.read_bytes()
    # a crash during an append: half a line at the end
    path.write_bytes(good + b'1234abcd {"v":{"counter":9')
    again = SubscriptionGroupManager(tmp_path)
    assert all(again.get(g) is not None for g in ("G1", "G2", "G3"))
    # a flipped byte inside the last good line: its CRC fails, the lines before it stand
    m2 = SubscriptionGroupManager(tmp_path)
    m2.find_or_create("G4")
    m2.find_or_create("G5")
    (number,) = ChangeLog(tmp_path / SUBSCRIPTION_GROUP_FILE).numbers()
    path = ChangeLog(tmp_path / SUBSCRIPTION_GROUP_FILE).file(number)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0x01
    path.write_bytes(bytes(raw))
    third = SubscriptionGroupManager(tmp_path)
    assert third.get("G4") is not None and third.get("G5") is None


def _serve(store: Path) -> tuple[subprocess.Popen[str], str]:
    args = [
        "serve",
        "--store",
        str(store),
        "--namesrv-listen",
        "127.0.0.1:0",
        "--listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "",
        "--metrics-listen",
        "",
        "--console-listen",
        "",
        "--log-dir",
        str(store.parent / "logs"),
    ]
    proc = subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("broker broker-a") and " listening on " in line:
            addr = line.split(" listening on ")[1].split(",")[0].strip()
            return proc, addr
    proc.kill()
    proc.wait(30)
    raise AssertionError("serve did not start")


def test_topics_created_before_a_kill_9_are_there_after_it(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc, addr = _serve(store)
    names = [f"Kill{i}" for i in range(40)]
    try:
        with AdminClient("", timeout=30.0) as admin:
            for topic in names:
                admin.create_topic(addr, topic, read_queue_nums=3, write_queue_nums=3)
            # killed right after the last create was answered
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    config = store / "config"
    restarted = TopicConfigManager(config, "broker-a")  # what the broker's restart reads
    for topic in names:
        assert restarted.select(topic) == TopicConfig(topic, 3, 3), topic
    # and topics.json itself, RocketMQ's format, holds them after that load
    table = file_topics(config)
    assert all(table[t]["readQueueNums"] == 3 for t in names)
    assert wait_until(lambda: ChangeLog(config / TOPICS_FILE).numbers() == [], 5.0)


def test_a_clean_stop_leaves_the_whole_table_in_topics_json(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc, addr = _serve(store)
    names = [f"Clean{i}" for i in range(10)]
    try:
        with AdminClient("", timeout=30.0) as admin:
            for topic in names:
                admin.create_topic(addr, topic, read_queue_nums=2, write_queue_nums=2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    config = store / "config"
    assert ChangeLog(config / TOPICS_FILE).numbers() == []  # nothing left beside the file
    table = file_topics(config)
    assert all(table[t]["writeQueueNums"] == 2 for t in names)


def test_many_topics_at_once_are_one_change_each(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.update(TopicConfig("Seed", 1, 1))
    version = m.data_version.counter
    m.update_all([TopicConfig(f"Copied{i}", 4, 4) for i in range(50)])
    assert m.data_version.counter == version + 50
    again = manager(tmp_path)
    assert all(again.select(f"Copied{i}") == TopicConfig(f"Copied{i}", 4, 4) for i in range(50))
