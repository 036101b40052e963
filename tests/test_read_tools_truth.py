"""What the read-only tools report is true: `stats` says where its runtime info comes from
(the files of a store no broker runs; a running broker's own counters through its port when
one owns the store), and `inspect` skips the holes of sparse files yet still finds data
written anywhere in them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner, Result

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.client import MessageQueue, Producer
from rocketstore.store.recovery._inspect import _data_ranges
from support.cluster import Cluster

BROKER_COUNTERS = {"putTps", "runtime", "bootTimestamp", "putMessageTimesTotal", "getTotalTps"}


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_message_store(root: Path) -> None:
    with MessageStore(StoreConfig(store_path_root_dir=str(root))) as store:
        assert store.put_message(Message("T", b"hello", 0)).ok


def test_stats_of_a_store_at_rest_gives_the_files_figures_only(tmp_path: Path) -> None:
    root = tmp_path / "store"
    one_message_store(root)
    doc = json.loads(cli("stats", "--store", str(root), "--json").output)
    assert doc["source"]["kind"] == "files" and "no broker runs on it" in doc["source"]["note"]
    info = doc["runtime_info"]
    assert int(info["commitLogMaxOffset"]) > 0 and info["dispatchBehindBytes"] == "0"
    assert not BROKER_COUNTERS & set(info), "a reader's own counters shown as the store's"
    text = cli("stats", "--store", str(root)).output
    assert text.splitlines()[0].startswith("runtime info from the store's files")


def test_stats_of_a_running_brokers_store_reads_the_broker(cluster: Cluster) -> None:
    broker = cluster.brokers["broker-a"]
    root = broker.store_config.store_path_root_dir
    with Producer(cluster.namesrv) as producer:
        for i in range(3):
            sent = producer.send(
                "StatsTopic", b"m%d" % i, queue=MessageQueue("StatsTopic", "broker-a", 0)
            )
            assert sent.status == "SEND_OK"
    result = cli("stats", "--store", root, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["source"]["kind"] == "broker", doc["source"]
    assert doc["source"]["address"] == cluster.addr("broker-a")
    info = doc["runtime_info"]
    assert set(info) >= BROKER_COUNTERS
    puts = broker.store.statistics().put_message_times_total
    assert int(info["putMessageTimesTotal"]) == puts >= 3  # the broker's, not the reader's
    assert doc["topics"]["StatsTopic"]["messages"] >= 3

    # another broker's address: not this store's, so the files' figures and why
    result = cli("stats", "--store", root, "--broker", cluster.addr("broker-b"), "--json")
    doc = json.loads(result.output)
    assert doc["source"]["kind"] == "files"
    assert "serves another store" in doc["source"]["note"]
    assert "owns the store" in doc["source"]["note"]
    assert not BROKER_COUNTERS & set(doc["runtime_info"])


def test_inspect_skips_holes_and_finds_data_written_in_them(tmp_path: Path) -> None:
    root = tmp_path / "store"
    one_message_store(root)
    [log] = (root / "commitlog").iterdir()
    size = log.stat().st_size
    ranges = list(_data_ranges(log, 0, size))
    assert ranges and sum(end - begin for begin, end in ranges) < size // 16  # holes skipped
    report = json.loads(cli("inspect", str(root), "--json").output)
    assert report["errors"] == [] and report["commit_log"]["records"] == 1

    # a byte far past the log's end, in what was a hole, is still found
    far = size - size // 10
    with open(log, "r+b") as f:
        f.seek(far)
        f.write(b"\x01")
    [queue] = (root / "consumequeue" / "T" / "0").iterdir()
    with open(queue, "r+b") as f:
        f.seek(queue.stat().st_size - 40)
        f.write(b"\x02")
    result = cli("inspect", str(root), "--json")
    assert result.exit_code == 1
    errors = json.loads(result.output)["errors"]
    assert any("past the end of the log" in e and "are not zero" in e for e in errors), errors
    assert any("after the queue's end is not zero" in e for e in errors), errors


def test_data_ranges_of_a_file_without_holes_is_the_whole_range(tmp_path: Path) -> None:
    path = tmp_path / "full"
    path.write_bytes(os.urandom(8192))
    assert list(_data_ranges(path, 100, 8000)) == [(100, 8000)]
    assert list(_data_ranges(path, 8192, 8192)) == []
