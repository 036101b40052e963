"""Interop with the official RocketMQ 5.x Python client (rocketmq-python-client) against the
gRPC front end: the client runs tests/support/grpc_interop_client.py in its own venv (cached; see
test_grpc_proto.py), in subprocesses bounded in time, while the broker runs in this process on
a background loop so the tests can look at its store and state.

Covered: sends with tags, keys, properties and a delivery time; a SimpleConsumer with a tag
filter (ack, change of invisible duration, a stale handle refused, redelivery with the attempt
raised, an empty long poll within the await duration); dead letters after the group's max
attempts; a PushConsumer (with a failed consumption retried); ACL on (good and bad keys) and
off; messages crossing between the gRPC and the remoting front ends both ways; a bad send
refused while the server keeps serving; a transactional producer (commit, rollback, open
transactions resolved by its checker); a FIFO push consumer keeping message groups in order; the
recall of a delayed message.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.client import Producer as RemotingProducer
from rocketstore.client import PullConsumer as RemotingConsumer
from support.grpc_broker import TEST_GRPC_CONFIG, BrokerThread, self_signed_cert
from support.grpc_client import client_python as client_python  # the client's venv (fixture)
from support.grpc_client import run_client
from support.waits import wait_dispatched


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path_factory.mktemp("grpc-interop"))
    try:
        yield b.start()
    finally:
        b.close()


def wait_for(check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_send_then_simple_consumer_with_a_tag_filter(
    client_python: Path, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = "InteropSimple"
    sent = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="produce",
        topic=topic,
        messages=[
            {"body": "a", "tag": "A", "keys": ["k1", "k2"], "properties": {"color": "red"}},
            {"body": "b", "tag": "B"},
            {"body": "c", "tag": "A"},
            {"body": "d", "tag": "A", "properties": {"n": "4"}},
        ],
    )
    assert not sent["errors"] and len(sent["receipts"]) == 4
    ids = [r["message_id"] for r in sent["receipts"]]
    store = broker.broker.store
    wait_dispatched(store)  # a send to a new queue is answered before dispatch indexes it
    # the client's message id is the message's UNIQ_KEY: it can be found by id and by key
    found = broker.run(lambda: store.query_message(topic, ids[0]).messages)
    assert [m.body for m in found] == [b"a"]
    assert sorted(found[0].keys) == ["k1", "k2"] and found[0].properties["color"] == "red"
    assert [m.uniq_key for m in broker.run(lambda: store.query_message(topic, "k2").messages)] == [
        ids[0]
    ]

    out = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="simple",
        topic=topic,
        group="InteropSimpleG",
        filter="A",
        expect=3,
        await_s=2,
    )
    first = out["first"]
    assert sorted(m["body"] for m in first) == ["a", "c", "d"]  # B filtered out
    assert all(m["attempt"] == 1 and not m["corrupted"] for m in first)
    by_body = {m["body"]: m for m in first}
    assert by_body["a"]["keys"] == ["k1", "k2"] and by_body["a"]["properties"] == {"color": "red"}
    assert by_body["d"]["properties"] == {"n": "4"} and by_body["a"]["tag"] == "A"
    assert {m["message_id"] for m in first} == {ids[0], ids[2], ids[3]}
    assert out["handle_changed"]
    assert out["stale_ack"] == "BadRequestException: 40013"  # INVALID_RECEIPT_HANDLE
    # the first was acked; the others came back with their attempt raised
    again = out["again"]
    assert sorted(m["body"] for m in again) == sorted(m["body"] for m in first[1:])
    assert all(m["attempt"] == 2 for m in again)
    # held for its await_duration of 2 s (and answered then, not at a longer hold)
    assert out["empty"] == 0 and 1.5 <= out["empty_s"] < 20


def test_delivery_time_delays_the_message(
    client_python: Path, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = "InteropDelay"
    begin = time.time()
    sent = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="produce",
        topic=topic,
        messages=[{"body": "later", "delay_s": 2}],
    )
    done = time.time()
    assert not sent["errors"]
    store = broker.broker.store

    def arrived() -> list[Any]:
        return broker.run(
            lambda: [m for q in range(4) for m in store.get_message("chk", topic, q, 0, 8).messages]
        )

    (m,) = wait_for(arrived, 60)
    deliver = int(m.properties["TIMER_DELIVER_MS"])
    # 2 s from the whole second in which the client sent it (it sets int(time.time()) + 2)
    assert int(begin) + 2 <= deliver / 1000 <= done + 2 + 0.001
    # stored under its topic at its delivery time, never early (it waited in the 1 s level until
    # the rest of its delay was over; how late depends on the machine's load)
    assert deliver <= m.store_timestamp
    assert m.properties["DELAY"] == "1"
    got = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="receive",
        topic=topic,
        group="InteropDelayG",
        rounds=1,
        invisible_s=5,
    )
    (received,) = got["rounds"][0]
    assert received["body"] == "later" and received["delivery_timestamp"] == deliver


def test_dead_letter_after_the_groups_max_attempts(
    client_python: Path, broker: BrokerThread, tmp_path: Path
) -> None:
    topic, group = "InteropDlq", "InteropDlqG"
    groups = broker.broker.groups
    broker.run(lambda: groups.update(groups.find_or_create(group).replace(retry_max_times=1)))
    run_client(
        client_python,
        broker,
        tmp_path,
        scenario="produce",
        topic=topic,
        messages=[{"body": "doomed", "tag": "X"}],
    )
    out = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="receive",
        topic=topic,
        group=group,
        rounds=3,
        invisible_s=1,
        pause_s=1.2,
        await_s=1,
    )
    attempts = [[m["attempt"] for m in r] for r in out["rounds"]]
    assert attempts == [[1], [2], []]
    store = broker.broker.store
    dead = wait_for(
        lambda: broker.run(lambda: store.get_message("chk", f"%DLQ%{group}", 0, 0, 8).messages)
    )
    assert [m.body for m in dead] == [b"doomed"]
    assert dead[0].properties["DLQ_ORIGIN_TOPIC"] == topic


def test_push_consumer(client_python: Path, broker: BrokerThread, tmp_path: Path) -> None:
    topic = "InteropPush"
    run_client(
        client_python,
        broker,
        tmp_path,
        scenario="produce",
        topic=topic,
        messages=[{"body": b, "tag": "P"} for b in ("p1", "p2", "fail", "p3")],
    )
    out = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="push",
        topic=topic,
        group="InteropPushG",
        filter="P",
        expect=4,
        wait_retry=True,
        limit_s=25,
    )
    seen = out["seen"]
    assert {s["body"] for s in seen} == {"p1", "p2", "p3", "fail"}
    fails = sorted(s["attempt"] for s in seen if s["body"] == "fail")
    assert fails[:2] == [1, 2]  # failed once, redelivered with the next attempt
    assert all(s["attempt"] == 1 for s in seen if s["body"] != "fail")


def test_acl_on_with_good_and_bad_keys(client_python: Path, tmp_path: Path) -> None:
    config = TEST_GRPC_CONFIG.replace(credentials={"interopAK": "interopSK"})
    b = BrokerThread(tmp_path / "broker", grpc_config=config)
    try:
        b.start()
        msgs = [{"body": "secret", "tag": "S"}]
        good = run_client(
            client_python,
            b,
            tmp_path / "h1",
            scenario="produce",
            topic="AclT",
            messages=msgs,
            ak="interopAK",
            sk="interopSK",
        )
        assert not good["errors"] and len(good["receipts"]) == 1
        for ak, sk in (("interopAK", "wrong"), ("nobody", "interopSK"), ("", "")):
            bad = run_client(
                client_python,
                b,
                tmp_path / "h2",
                scenario="produce",
                topic="AclT",
                messages=msgs,
                ak=ak,
                sk=sk,
            )
            assert bad["errors"] and not bad["receipts"], (ak, sk)
        assert b.grpc.service.auth_failures > 0
        got = run_client(
            client_python,
            b,
            tmp_path / "h3",
            scenario="receive",
            topic="AclT",
            group="AclG",
            rounds=1,
            invisible_s=5,
            ak="interopAK",
            sk="interopSK",
        )
        assert [m["body"] for m in got["rounds"][0]] == ["secret"]
    finally:
        b.close()


def test_acl_off_takes_any_keys(client_python: Path, broker: BrokerThread, tmp_path: Path) -> None:
    out = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="produce",
        topic="NoAclT",
        messages=[{"body": "x"}],
        ak="whoever",
        sk="whatever",
    )
    assert not out["errors"] and len(out["receipts"]) == 1


def test_grpc_and_remoting_front_ends_share_messages(
    client_python: Path, broker: BrokerThread, tmp_path: Path
) -> None:
    # gRPC → remoting: sent by the official 5.x client, pulled by a 4.x remoting consumer
    topic = "CrossT"
    sent = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="produce",
        topic=topic,
        messages=[{"body": f"g{i}", "tag": "G", "keys": [f"key{i}"]} for i in range(4)],
    )
    ids = {r["message_id"] for r in sent["receipts"]}
    consumer = RemotingConsumer(broker.namesrv_address, "CrossRemotingG")
    try:
        pulled = wait_for(
            lambda: [
                m for mq in consumer.queues(topic) for m in consumer.pull(mq, 0, 32, "G").messages
            ]
        )
    finally:
        consumer.close()
    assert sorted(m.body for m in pulled) == [b"g0", b"g1", b"g2", b"g3"]
    assert {m.uniq_key for m in pulled} == ids
    assert all(m.tags == "G" and len(m.keys) == 1 for m in pulled)

    # remoting → gRPC: sent by the 4.x remoting producer, received by the official 5.x client
    topic2 = "CrossT2"
    with RemotingProducer(broker.namesrv_address) as producer:
        for i in range(3):
            producer.send(topic2, f"r{i}".encode(), tags="R", keys=[f"rk{i}"])
        producer.send(topic2, b"other", tags="O")
    out = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="receive",
        topic=topic2,
        group="CrossGrpcG",
        filter="R",
        rounds=2,
        invisible_s=5,
    )
    got = [m for r in out["rounds"] for m in r]
    assert sorted(m["body"] for m in got) == ["r0", "r1", "r2"]
    assert all(m["tag"] == "R" and m["keys"] == [f"rk{m['body'][1]}"] for m in got)
    assert all(m["message_id"] and not m["corrupted"] for m in got)


def test_a_refused_send_leaves_the_server_serving(
    client_python: Path, broker: BrokerThread, tmp_path: Path
) -> None:
    out = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="produce",
        topic="RefusedT",
        messages=[{"body": "bad", "properties": {"UNIQ_KEY": "mine"}}, {"body": "good"}],
    )
    assert len(out["errors"]) == 1 and "BadRequestException" in out["errors"][0]
    assert len(out["receipts"]) == 1


def test_tls(client_python: Path, tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    config = TEST_GRPC_CONFIG.replace(tls_cert=str(cert), tls_key=str(key))
    b = BrokerThread(tmp_path / "broker", grpc_config=config)
    try:
        b.start()
        out = run_client(
            client_python,
            b,
            tmp_path / "home",
            roots=cert,
            scenario="produce",
            topic="TlsT",
            messages=[{"body": "encrypted"}],
            tls=True,
        )
        assert not out["errors"] and len(out["receipts"]) == 1
        store = b.broker.store
        wait_dispatched(store)  # a send to a new queue is answered before dispatch indexes it
        found = b.run(lambda: store.query_message("TlsT", out["receipts"][0]["message_id"]))
        assert [m.body for m in found.messages] == [b"encrypted"]
    finally:
        b.close()


def test_transactions_with_the_official_producer(client_python: Path, tmp_path: Path) -> None:
    b = BrokerThread(
        tmp_path / "broker",
        broker_overrides={"transaction_timeout": 1500, "transaction_check_interval": 300},
    )
    b.start()
    try:
        topic = "InteropTx"
        out = run_client(
            client_python,
            b,
            tmp_path / "client",
            scenario="transaction",
            topic=topic,
            messages=[
                {"body": "commit-now", "end": "commit"},
                {"body": "rollback-now", "end": "rollback"},
                {"body": "commit-on-check", "end": "open"},
                {"body": "rollback-on-check", "end": "open"},
            ],
            expect_checked=["commit-on-check", "rollback-on-check"],
        )
        assert all(r["transaction_id"] for r in out["receipts"])
        # the open ones were checked; an end slower than the timeout may be checked too
        # (its checker answers as the producer did)
        assert {"commit-on-check", "rollback-on-check"} <= set(out["checked"])
        store = b.broker.store

        def bodies() -> list[bytes]:
            return sorted(
                bytes(m.body)
                for q in range(4)
                for m in store.get_message("reader", topic, q, 0, 32).messages
            )

        assert wait_for(lambda: b.run(bodies) == [b"commit-now", b"commit-on-check"])
        # and a consumer sees exactly those
        got = run_client(
            client_python,
            b,
            tmp_path / "client",
            scenario="receive",
            topic=topic,
            group="InteropTxG",
            rounds=2,
            invisible_s=30,
            await_s=1,
        )
        seen = sorted(m["body"] for r in got["rounds"] for m in r)
        assert seen == ["commit-now", "commit-on-check"]
    finally:
        b.close()


def test_fifo_group_consumes_each_message_group_in_order(
    client_python: Path, broker: BrokerThread, tmp_path: Path
) -> None:
    from rocketstore.protocol._subscription_group import SubscriptionGroupConfig

    topic, group = "InteropFifo", "InteropFifoG"
    broker.run(
        lambda: broker.broker.groups.update(
            SubscriptionGroupConfig(group, consume_message_orderly=True)
        )
    )
    messages = [{"body": f"{g}-{i}", "group": g} for i in range(5) for g in ("ga", "gb")]
    run_client(
        client_python,
        broker,
        tmp_path,
        scenario="fifo_produce",
        topic=topic,
        messages=messages,
    )
    out = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="fifo_push",
        topic=topic,
        group=group,
        expect=len(messages),
        fail_once=["ga-2"],
    )
    assert out["fifo"] is True
    for g in ("ga", "gb"):
        order = [s["body"] for s in out["seen"] if s["group"] == g]
        expected = [f"{g}-{i}" for i in range(5)]
        if g == "ga":  # failed once, consumed again at once, before ga-3
            expected.insert(3, "ga-2")
        assert order == expected


def test_recall_of_a_delayed_message(
    client_python: Path, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = "InteropRecall"
    out = run_client(client_python, broker, tmp_path, scenario="recall", topic=topic, delay_s=4)
    assert out["recall_handles"]
    assert out["recalled_id"] == out["recall_message_id"]
    assert out["late_recall"] == "NotFoundException: 40400"  # after its time
    got = run_client(
        client_python,
        broker,
        tmp_path,
        scenario="receive",
        topic=topic,
        group="InteropRecallG",
        rounds=2,
        invisible_s=30,
        await_s=1,
    )
    assert sorted(m["body"] for r in got["rounds"] for m in r) == ["keep"]
