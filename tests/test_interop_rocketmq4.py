"""rocketstore's broker and name server against the official RocketMQ 4.x client (the ``rocketmq``
0.4.4 package, RocketMQ's C++ client inside), each side in its own process over loopback: sends
and pulls, push consumption with tag filters, retries through ``%RETRY%<group>``, dead letters,
consumer offsets across a broker restart, kill -9 under SYNC_FLUSH, and malformed frames.

The client runs in a cached virtualenv (tests/support/interop.py); the tests are skipped only when pip
cannot install the package. Delay levels are shortened to seconds by a broker.conf so that
retries come back quickly.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker.state._consumer_offset import ConsumerOffsetManager
from rocketstore.client import MessageQueue, PullConsumer
from rocketstore.client._consumer import FOUND
from support.interop import (
    Rmq4Client,
    ServerProcess,
    free_port,
    namesrv_of,
    parse_lines,
    servers,
    stop_process,
)

BROKER = "broker-a"
DLQ_GROUP = "CG_dlq"
DLQ_MAX_TIMES = 2
# level 2 (the delayed send) is 2 s; levels 3.. (the retries: 3 + reconsume times) are 1 s
CONF = (
    "messageDelayLevel=1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s\n"
    "mappedFileSizeCommitLog=16777216\n"
    "mappedFileSizeConsumeQueue=60000\n"
)


def write_conf(root: Path) -> Path:
    conf = root / "broker.conf"
    conf.write_text(CONF)
    return conf


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, rmq4: Rmq4Client) -> Iterator[ServerProcess]:
    """One ``rocketstore serve`` for the tests that need nothing of their own; the DLQ test's
    group has at most DLQ_MAX_TIMES reconsumes (its subscriptionGroup.json entry)."""
    root = tmp_path_factory.mktemp("serve")
    store = root / "store"
    (store / "config").mkdir(parents=True)
    groups = {
        "subscriptionGroupTable": {
            DLQ_GROUP: {"groupName": DLQ_GROUP, "retryMaxTimes": DLQ_MAX_TIMES, "retryQueueNums": 1}
        },
        "dataVersion": {"counter": 1, "timestamp": 0},
    }
    (store / "config" / "subscriptionGroup.json").write_text(json.dumps(groups))
    with servers() as started:
        started.append(ServerProcess.serve(store, root / "serve.log", conf=write_conf(root)))
        yield started[0]


def messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if "body" in line and "topic" in line]


def sent_ok(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert all(line["status"] in ("OK", "ONEWAY") for line in lines if "status" in line), lines
    return lines


# ---- sending and pulling ----------------------------------------------------------------------


def test_sync_oneway_and_delayed_sends_pull_back_whole(
    server: ServerProcess, rmq4: Rmq4Client
) -> None:
    spec = [
        {"body": "s0", "tags": "TagA", "keys": "k0 kk0", "props": {"color": "red"}},
        {"body": "s1", "tags": "TagB", "keys": "k1", "props": {"color": "green", "n": "1"}},
        {"body": "s2", "tags": "TagA", "keys": "k2", "props": {"color": "blue"}},
        {"body": "one-way", "tags": "TagO", "oneway": True},
        {"body": "delayed", "tags": "TagD", "delay": 2},
        {"body": "z" * 6000 + "-end", "tags": "TagZ"},  # over 4 KiB: the client deflates it
    ]
    batch = [{"body": f"batch{i}", "tags": "TagB", "keys": f"bk{i}"} for i in range(3)]
    sent = sent_ok(
        rmq4.run(
            "send",
            namesrv_of(server),
            "PG_basic",
            "T_basic",
            spec=[*spec, {"batch": batch}],
            timeout=30,
        )
    )
    assert [s.get("body") for s in sent[:-1]] == [m["body"] for m in spec]
    assert sent[-1]["batch"] == [m["body"] for m in batch]
    ids = {s["body"]: s["msg_id"] for s in sent[:-1] if s["status"] == "OK"}
    spec += batch  # the C++ client's batch ("batch": "1") is stored as three messages

    pulled = messages(
        rmq4.run(
            "pull",
            namesrv_of(server),
            "CG_basic_pull",
            "T_basic",
            expect=len(spec),
            timeout=30,
            prop=["color", "n", "DELAY", "UNIQ_KEY"],
        )
    )
    by_body = {m["body"]: m for m in pulled}
    assert sorted(by_body) == sorted(m["body"] for m in spec)
    assert len(pulled) == len(spec)  # each once
    for item in spec:
        got = by_body[item["body"]]
        assert got["topic"] == "T_basic"
        assert got["tags"] == item["tags"]
        assert got["keys"] == item.get("keys", "")
        for name, value in (item.get("props") or {}).items():
            assert got["props"][name] == value
        if item["body"] in ids:
            assert got["id"] == ids[item["body"]] == got["props"]["UNIQ_KEY"]
    delayed = by_body["delayed"]
    assert delayed["props"]["DELAY"] == "2"
    # stored in the topic only when level 2 (2 s here) had passed
    assert delayed["store_timestamp"] - delayed["born_timestamp"] >= 1500

    # rocketstore's own consumer reads the same messages, the deflated body inflated
    ours = []
    with PullConsumer(namesrv_of(server), "CG_basic_ours") as consumer:
        for mq in consumer.queues("T_basic"):
            ours += consumer.pull(mq, 0, 32).messages
    assert sorted(m.body.decode() for m in ours) == sorted(m["body"] for m in spec)
    assert all(m.sys_flag & 1 == 0 for m in ours)


# ---- push consumers ---------------------------------------------------------------------------


def test_push_consumer_receives_only_its_tags(server: ServerProcess, rmq4: Rmq4Client) -> None:
    spec = [
        {"body": "a1", "tags": "TagA"},
        {"body": "b1", "tags": "TagB"},
        {"body": "c1", "tags": "TagC"},
        {"body": "a2", "tags": "TagA"},
        {"body": "c2", "tags": "TagC"},
        {"body": "b2", "tags": "TagB"},
    ]
    sent_ok(rmq4.run("send", namesrv_of(server), "PG_tags", "T_tags", spec=spec, timeout=30))
    lines = rmq4.run(
        "push",
        namesrv_of(server),
        "CG_tags",
        "T_tags",
        expr="TagA || TagB",
        expect=4,
        linger=2,
        timeout=25,
    )
    got = messages(lines)
    assert sorted(m["body"] for m in got) == ["a1", "a2", "b1", "b2"]
    assert {m["tags"] for m in got} == {"TagA", "TagB"}
    assert all(m["reconsume_times"] == 0 for m in got)


def test_two_consumers_of_a_group_share_the_queues(server: ServerProcess, rmq4: Rmq4Client) -> None:
    """The second member's heartbeat makes the broker send NOTIFY_CONSUMER_IDS_CHANGED; both
    rebalance, each takes two of the four queues, and every message is consumed by one of them."""
    group, topic = "CG_share", "T_share"
    sent_ok(
        rmq4.run(
            "send", namesrv_of(server), "PG_share", topic, spec=[{"body": "warm-up"}], timeout=30
        )
    )
    members = [
        rmq4.start("push", namesrv_of(server), group, topic, expect=10_000, timeout=9)
        for _ in range(2)
    ]
    try:
        time.sleep(3)  # both started and rebalanced
        spec = [{"body": f"x{i}", "shard": i} for i in range(8)]  # two on each queue
        sent_ok(rmq4.run("send", namesrv_of(server), "PG_share", topic, spec=spec, timeout=30))
        outputs = []
        for member in members:
            out, _ = member.communicate(timeout=30)
            outputs.append(messages(parse_lines(out)))
    finally:
        for member in members:
            stop_process(member, grace=2)
    bodies = [[m["body"] for m in got if m["body"] != "warm-up"] for got in outputs]
    assert sorted(bodies[0] + bodies[1]) == sorted(m["body"] for m in spec)  # each once
    queues = [{m["queue_id"] for m in got if m["body"] != "warm-up"} for got in outputs]
    assert len(queues[0]) == len(queues[1]) == 2
    assert not queues[0] & queues[1]


def test_orderly_consumer_gets_each_queue_in_order(server: ServerProcess, rmq4: Rmq4Client) -> None:
    """send_orderly puts each shard on one queue; an orderly push consumer locks its queues
    (LOCK_BATCH_MQ) before consuming them and sees every shard in sending order."""
    spec = [{"body": f"s{i % 3}-{i // 3}", "shard": i % 3} for i in range(12)]
    sent_ok(rmq4.run("send", namesrv_of(server), "PG_order", "T_order", spec=spec, timeout=30))
    got = messages(
        rmq4.run(
            "push", namesrv_of(server), "CG_order", "T_order", orderly=True, expect=12, timeout=25
        )
    )
    assert sorted(m["body"] for m in got) == sorted(m["body"] for m in spec)
    for shard in range(3):
        mine = [m for m in got if m["body"].startswith(f"s{shard}-")]
        assert [m["body"] for m in mine] == [f"s{shard}-{n}" for n in range(4)]
        assert len({m["queue_id"] for m in mine}) == 1


def test_reconsume_later_comes_back_through_the_retry_topic(
    server: ServerProcess, rmq4: Rmq4Client
) -> None:
    group, topic = "CG_retry", "T_retry"
    spec = [{"body": "r1", "tags": "TagA", "keys": "rk1"}, {"body": "r2", "tags": "TagB"}]
    sent = sent_ok(rmq4.run("send", namesrv_of(server), "PG_retry", topic, spec=spec, timeout=30))
    lines = rmq4.run(
        "push",
        namesrv_of(server),
        group,
        topic,
        fail_first=True,
        expect=2,
        linger=0.5,
        timeout=35,
        prop=["RETRY_TOPIC", "ORIGIN_MESSAGE_ID"],
    )
    got = messages(lines)
    for item, s in zip(spec, sent, strict=True):
        deliveries = [m for m in got if m["body"] == item["body"]]
        assert [m["verdict"] for m in deliveries] == ["RECONSUME_LATER", "CONSUME_SUCCESS"]
        first, second = deliveries
        assert (first["reconsume_times"], second["reconsume_times"]) == (0, 1)
        # the client puts the original topic back; id, tags and keys travel with the retry
        assert second["topic"] == topic
        assert second["props"]["RETRY_TOPIC"] == topic
        assert second["id"] == first["id"] == s["msg_id"]
        assert second["tags"] == item["tags"]
        assert second["keys"] == item.get("keys", "")
        assert second["props"]["ORIGIN_MESSAGE_ID"]
        assert second["store_timestamp"] > first["store_timestamp"]
    with PullConsumer(namesrv_of(server), "CG_retry_check") as check:
        assert check.max_offset(MessageQueue(f"%RETRY%{group}", BROKER, 0)) == 2


def test_messages_reach_the_dlq_after_max_reconsume_times(
    server: ServerProcess, rmq4: Rmq4Client
) -> None:
    topic = "T_dlq"
    sent_ok(
        rmq4.run(
            "send",
            namesrv_of(server),
            "PG_dlq",
            topic,
            spec=[{"body": "d1", "tags": "TagX"}],
            timeout=30,
        )
    )
    lines = rmq4.run(
        "push",
        namesrv_of(server),
        DLQ_GROUP,
        topic,
        fail_always=True,
        expect=3,
        linger=2,
        timeout=35,
    )
    got = messages(lines)
    # the first delivery and DLQ_MAX_TIMES retries, then no more
    assert [m["reconsume_times"] for m in got] == list(range(DLQ_MAX_TIMES + 1))
    assert {m["body"] for m in got} == {"d1"}

    dlq = MessageQueue(f"%DLQ%{DLQ_GROUP}", BROKER, 0)
    with PullConsumer(namesrv_of(server), "CG_dlq_check") as check:
        deadline = time.monotonic() + 60
        while True:
            r = check.pull(dlq, 0, 32)
            if r.status == FOUND or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert r.status == FOUND
    [dead] = r.messages
    assert dead.body == b"d1"
    assert dead.tags == "TagX"
    assert dead.reconsume_times == DLQ_MAX_TIMES + 1
    assert dead.properties["RETRY_TOPIC"] == topic
    assert "DELAY" not in dead.properties
    assert dead.properties.get("ORIGIN_MESSAGE_ID")


# ---- restarts and crashes ---------------------------------------------------------------------


def test_consumer_offsets_survive_a_broker_restart(tmp_path: Path, rmq4: Rmq4Client) -> None:
    """A name server and a broker apart (``rocketstore namesrv`` / ``rocketstore broker``); the
    broker is stopped with SIGTERM and started again on its store and port."""
    store, conf = tmp_path / "store", write_conf(tmp_path)
    port = free_port()
    group, topic = "CG_restart", "T_restart"
    with servers() as started:
        namesrv = ServerProcess.namesrv_only(tmp_path / "namesrv.log")
        started.append(namesrv)
        first = ServerProcess.broker_only(
            store, namesrv_of(namesrv), tmp_path / "first.log", port=port, conf=conf
        )
        started.append(first)
        spec = [{"body": f"o{i}"} for i in range(4)]
        sent_ok(rmq4.run("send", namesrv_of(namesrv), "PG_restart", topic, spec=spec, timeout=30))
        got = messages(
            rmq4.run("push", namesrv_of(namesrv), group, topic, expect=4, linger=0.5, timeout=25)
        )
        assert sorted(m["body"] for m in got) == ["o0", "o1", "o2", "o3"]
        assert first.stop() == 0  # SIGTERM: a clean shutdown
        assert not (store / "abort").exists()

        offsets = ConsumerOffsetManager(store / "config").query_offsets(group, topic)
        assert sum(offsets.values()) == 4

        second = ServerProcess.broker_only(
            store, namesrv_of(namesrv), tmp_path / "second.log", port=port, conf=conf
        )
        started.append(second)
        more = [{"body": f"o{i}"} for i in range(4, 6)]
        sent_ok(rmq4.run("send", namesrv_of(namesrv), "PG_restart", topic, spec=more, timeout=30))
        got = messages(
            rmq4.run("push", namesrv_of(namesrv), group, topic, expect=2, linger=2, timeout=25)
        )
        assert sorted(m["body"] for m in got) == ["o4", "o5"]


def read_topic(store: Path, conf: Path, topic: str) -> list[bytes]:
    """Every body of ``topic`` in a store directory no broker owns any more (recovered here)."""
    config = StoreConfig.from_broker_conf(conf)
    config = dataclasses.replace(config, store_path_root_dir=str(store), ha_listen_port=0)
    bodies: list[bytes] = []
    with MessageStore(config) as ms:
        for queue_id in range(16):
            offset = ms.get_min_offset_in_queue(topic, queue_id)
            end = ms.get_max_offset_in_queue(topic, queue_id)
            while offset < end:
                r = ms.get_message("check", topic, queue_id, offset=offset, max_msg_nums=32)
                bodies += [m.body for m in r.messages]
                if r.next_begin_offset <= offset:
                    break
                offset = r.next_begin_offset
    return bodies


def test_kill_9_under_sync_flush_loses_no_acknowledged_message(
    tmp_path: Path, rmq4: Rmq4Client
) -> None:
    """Three producers send one message after another; the broker is killed (-9) once 90 sends
    were acknowledged, with more in flight. The store, recovered after the crash, holds every
    acknowledged message once."""
    store, conf = tmp_path / "store", write_conf(tmp_path)
    topic = "T_crash"
    acked: list[str] = []
    lock = threading.Lock()

    def collect(producer: subprocess.Popen[str]) -> None:
        assert producer.stdout is not None
        for line in producer.stdout:
            for doc in parse_lines(line):
                if doc.get("status") == "OK":
                    with lock:
                        acked.append(doc["body"])

    with servers() as started:
        broker = ServerProcess.serve(store, tmp_path / "serve.log", conf=conf, flush="SYNC_FLUSH")
        started.append(broker)
        producers = [
            rmq4.start(
                "flood",
                namesrv_of(broker),
                f"PG_crash{n}",
                topic,
                count=100_000,
                send_timeout_ms=1000,
            )
            for n in range(3)
        ]
        readers = [threading.Thread(target=collect, args=(p,)) for p in producers]
        try:
            for reader in readers:
                reader.start()
            assert wait_until(lambda: len(acked) >= 90), f"only {len(acked)} sends acked"
            broker.kill()  # mid-stream: each producer has a send in flight
            for producer in producers:  # each ends at its first failed send
                producer.wait(20)
        finally:
            for producer in producers:
                stop_process(producer, grace=2)
            for reader in readers:
                reader.join(10)
        assert not broker.running
    stored = [b.decode() for b in read_topic(store, conf, topic)]
    assert set(acked) <= set(stored)
    assert len(stored) == len(set(stored))  # nothing stored twice
    for n in range(3):  # each producer's messages in sending order, none skipped
        mine = [int(b.rsplit("-", 1)[1]) for b in stored if b.startswith(f"PG_crash{n}-")]
        assert sorted(mine) == list(range(len(mine)))


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---- malformed input --------------------------------------------------------------------------


def raw_exchange(address: str, data: bytes, *, close_after_send: bool = False) -> bytes:
    """Send ``data`` on a fresh connection; what the broker answers before closing (at most
    2 s of waiting)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(data)
        if close_after_send:
            return b""
        s.settimeout(2)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return got


def test_malformed_frames_leave_the_broker_serving(server: ServerProcess, rmq4: Rmq4Client) -> None:
    assert server.broker is not None
    addr = server.broker
    # a length beyond any frame limit: the connection is dropped without an answer
    assert raw_exchange(addr, struct.pack(">i", 0x7FFFFFF0) + b"x" * 64) == b""
    # a negative length
    assert raw_exchange(addr, struct.pack(">i", -5) + b"x" * 16) == b""
    # a header that is not JSON, and a header length past the frame's end
    garbage = b"this is not json"
    raw_exchange(addr, struct.pack(">ii", 4 + len(garbage), len(garbage)) + garbage)
    raw_exchange(addr, struct.pack(">ii", 8, 1000) + b"{}{}")
    # an unknown serialize type
    raw_exchange(addr, struct.pack(">ii", 6, (7 << 24) | 2) + b"{}")
    # half a frame, then the client goes away
    raw_exchange(addr, struct.pack(">ii", 200, 50) + b'{"code":10', close_after_send=True)
    raw_exchange(addr, b"\x00\x00", close_after_send=True)
    assert server.running
    sent = sent_ok(
        rmq4.run(
            "send",
            namesrv_of(server),
            "PG_after_junk",
            "T_after_junk",
            spec=[{"body": "still here"}],
            timeout=30,
        )
    )
    assert [s["status"] for s in sent] == ["OK"]
