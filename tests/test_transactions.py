"""Transactional messages over the remoting protocol: half messages kept out of their topic,
END_TRANSACTION commit and rollback, the broker's checks of open transactions
(CHECK_TRANSACTION_STATE to the producer's connection), given-up halves, repeated and refused
ends, the state across a restart, and the files as RocketMQ 4.x lays them out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.broker.messaging._transaction import (
    OP_TAG,
    PROPERTY_CHECK_TIMES,
    SYSTEM_GROUP,
)
from rocketstore.remoting._codes import RequestCode
from rocketstore.remoting._codes import ResponseCode as RC
from rocketstore.remoting._command import RemotingCommand
from rocketstore.store.log._record import (
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_COMMIT_TYPE,
    decode_msg_id,
)
from support.grpc_broker import BrokerThread
from support.transactions import (
    COMMIT,
    PG,
    ROLLBACK,
    UNKNOWN,
    TxProducer,
    check,
    queue_messages,
    quiet_broker,
    wait_for,
)

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    with quiet_broker(tmp_path) as b:
        yield b


@pytest.fixture
def producer(broker: BrokerThread) -> Iterator[TxProducer]:
    p = TxProducer(broker)
    try:
        yield p
    finally:
        p.close()


def test_half_message_is_kept_out_of_its_topic_until_committed(
    broker: BrokerThread, producer: TxProducer
) -> None:
    topic = "TxTopicA"
    sent, uniq = producer.send_half(topic, b"order-1", queue_id=1)
    assert sent.code == RC.SUCCESS, sent.remark
    assert sent.ext_fields["queueId"] in ("1", 1)
    assert queue_messages(broker, topic, 1) == []
    (half,) = queue_messages(broker, HALF, 0)
    assert half.sys_flag & SYSFLAG_TRANSACTION_MASK == 0
    assert half.properties["REAL_TOPIC"] == topic and half.properties["REAL_QID"] == "1"
    assert half.properties["TRAN_MSG"] == "true" and half.properties["PGROUP"] == PG
    assert int(sent.ext_fields["queueOffset"]) == half.queue_offset
    assert decode_msg_id(sent.ext_fields["msgId"])[1] == half.commitlog_offset

    r = producer.end(sent, uniq, COMMIT)
    assert r.code == RC.SUCCESS, r.remark
    (msg,) = queue_messages(broker, topic, 1)
    assert bytes(msg.body) == b"order-1"
    assert msg.sys_flag & SYSFLAG_TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
    assert msg.prepared_transaction_offset == half.commitlog_offset
    assert msg.properties["UNIQ_KEY"] == uniq and msg.tags == "TagTx"
    assert msg.born_timestamp == half.born_timestamp
    (op,) = queue_messages(broker, OP, 0)
    assert bytes(op.body) == str(half.queue_offset).encode() and op.tags == OP_TAG
    # the same end again stores nothing more; the other resolution is refused
    assert producer.end(sent, uniq, COMMIT).code == RC.SUCCESS
    refused = producer.end(sent, uniq, ROLLBACK)
    assert refused.code == RC.SYSTEM_ERROR and "already committed" in (refused.remark or "")
    assert len(queue_messages(broker, topic, 1)) == 1
    # the message is found by its key like any other
    found = broker.run(lambda: broker.broker.store.query_message(topic, uniq, 10, 0, 2**62))
    assert any(m.topic == topic for m in found.messages)


def test_rollback_stores_nothing_under_the_topic(
    broker: BrokerThread, producer: TxProducer
) -> None:
    topic = "TxTopicB"
    sent, uniq = producer.send_half(topic, b"never")
    assert producer.end(sent, uniq, ROLLBACK).code == RC.SUCCESS
    assert queue_messages(broker, topic, 1) == []
    assert len(queue_messages(broker, OP, 0)) == 1
    # an unknown state changes nothing (and is not answered to a one-way request)
    sent2, uniq2 = producer.send_half(topic, b"later")
    assert producer.end(sent2, uniq2, UNKNOWN).code == RC.SUCCESS
    assert queue_messages(broker, topic, 1) == [] and len(queue_messages(broker, OP, 0)) == 1


def test_bad_ends_are_refused_and_the_broker_keeps_serving(
    broker: BrokerThread, producer: TxProducer
) -> None:
    topic = "TxTopicC"
    sent, uniq = producer.send_half(topic, b"x")
    wrong_offset = producer.end(sent, uniq, COMMIT, commit_log_offset=1)
    assert wrong_offset.code == RC.SYSTEM_ERROR and "half message" in (wrong_offset.remark or "")
    wrong_group = producer.end(sent, uniq, COMMIT, group="OtherGroup")
    assert wrong_group.code == RC.SYSTEM_ERROR and "producer group" in (wrong_group.remark or "")
    wrong_id = producer.end(sent, "NOTTHEID", COMMIT)
    assert wrong_id.code == RC.SYSTEM_ERROR
    bad = producer.call(
        RemotingCommand.request(
            RequestCode.END_TRANSACTION,
            {"commitOrRollback": "8", "tranStateTableOffset": "x", "commitLogOffset": "0"},
        )
    )
    assert bad.code == RC.SYSTEM_ERROR
    odd = producer.end(sent, uniq, 5)
    assert odd.code == RC.SYSTEM_ERROR
    assert queue_messages(broker, topic, 1) == []
    assert producer.end(sent, uniq, COMMIT).code == RC.SUCCESS
    assert len(queue_messages(broker, topic, 1)) == 1


def test_open_transaction_is_checked_with_its_producer(
    broker: BrokerThread, producer: TxProducer
) -> None:
    topic = "TxTopicD"
    producer.heartbeat()
    sent, uniq = producer.send_half(topic, b"checked", queue_id=2, KEYS="k1")
    assert sent.code == RC.SUCCESS
    done, done_uniq = producer.send_half(topic, b"ended", queue_id=2)
    assert producer.end(done, done_uniq, ROLLBACK).code == RC.SUCCESS
    assert check(broker) == 1
    assert wait_for(lambda: len(queue_messages(broker, topic, 2)) == 1)
    (ext, asked) = producer.checks[0]
    assert ext["transactionId"] == uniq and ext["msgId"] == uniq
    # the producer is asked about a copy appended to the half queue, with its real topic
    assert asked.topic == topic and asked.queue_id == 2 and bytes(asked.body) == b"checked"
    assert asked.properties[PROPERTY_CHECK_TIMES] == "1"
    halves = queue_messages(broker, HALF, 0)
    assert len(halves) == 3 and int(ext["tranStateTableOffset"]) == halves[2].queue_offset
    assert int(ext["commitLogOffset"]) == halves[2].commitlog_offset
    (msg,) = queue_messages(broker, topic, 2)
    assert bytes(msg.body) == b"checked" and msg.keys == ["k1"]
    # everything is resolved: the progress is past all three halves and nobody is asked again
    assert check(broker) == 0
    offsets = broker.broker.offsets
    assert wait_for(lambda: offsets.query_offset(SYSTEM_GROUP, HALF, 0) == 3)
    assert check(broker) == 0 and len(producer.checks) == 1


def test_a_late_commit_and_the_checks_answer_store_the_message_once(
    broker: BrokerThread, producer: TxProducer
) -> None:
    topic = "TxTopicE"
    producer.heartbeat()
    producer.answer = UNKNOWN  # the check finds the producer undecided
    sent, uniq = producer.send_half(topic, b"once")
    assert check(broker) == 1
    assert wait_for(lambda: len(producer.checks) == 1)
    # now the producer commits the original half; the copy is done with it
    assert producer.end(sent, uniq, COMMIT).code == RC.SUCCESS
    producer.answer = COMMIT
    assert check(broker) == 0
    assert len(queue_messages(broker, topic, 1)) == 1


def test_half_without_answer_is_given_up_after_check_max(tmp_path: Path) -> None:
    b = BrokerThread(
        tmp_path,
        broker_overrides={
            "transaction_timeout": 0,
            "transaction_check_interval": 3_600_000,
            "transaction_check_max": 3,
        },
    )
    b.start()
    p = TxProducer(b)
    try:
        sent, _ = p.send_half("TxTopicF", b"orphan")
        assert sent.code == RC.SUCCESS
        for _ in range(3):
            assert check(b) == 0  # no producer connected to ask
        times = [m.properties.get(PROPERTY_CHECK_TIMES) for m in queue_messages(b, HALF, 0)]
        assert times == [None, "1", "2", "3"]
        check(b)
        assert len(queue_messages(b, HALF, 0)) == 4  # given up: no more copies
        assert b.broker.offsets.query_offset(SYSTEM_GROUP, HALF, 0) == 4
        assert queue_messages(b, "TxTopicF", 1) == []
    finally:
        p.close()
        b.close()


def test_young_halves_wait_for_the_timeout(tmp_path: Path) -> None:
    b = BrokerThread(
        tmp_path,
        broker_overrides={"transaction_timeout": 60_000, "transaction_check_interval": 3_600_000},
    )
    b.start()
    p = TxProducer(b)
    try:
        p.heartbeat()
        sent, _ = p.send_half("TxTopicG", b"young")
        assert sent.code == RC.SUCCESS
        assert check(b) == 0 and p.checks == []
        assert len(queue_messages(b, HALF, 0)) == 1
        assert b.broker.offsets.query_offset(SYSTEM_GROUP, HALF, 0) in (-1, 0)
    finally:
        p.close()
        b.close()


def test_resolutions_survive_a_restart(tmp_path: Path) -> None:
    overrides = {"transaction_timeout": 0, "transaction_check_interval": 3_600_000}
    b = BrokerThread(tmp_path, broker_overrides=overrides)
    b.start()
    p = TxProducer(b)
    try:
        p.heartbeat()
        p.answer = UNKNOWN
        committed, cu = p.send_half("TxTopicH", b"committed")
        open_, _ou = p.send_half("TxTopicH", b"open")
        assert open_.code == RC.SUCCESS
        assert check(b) == 2  # both copied and asked, neither answered
        assert p.end(committed, cu, COMMIT).code == RC.SUCCESS
    finally:
        p.close()
        b.close()
    b2 = BrokerThread(tmp_path, broker_overrides=overrides)
    b2.start()
    p2 = TxProducer(b2)
    try:
        p2.heartbeat()
        assert check(b2) == 1  # only the open one: the committed one's copy is known done
        assert wait_for(lambda: len(queue_messages(b2, "TxTopicH", 1)) == 2)
        bodies = sorted(bytes(m.body) for m in queue_messages(b2, "TxTopicH", 1))
        assert bodies == [b"committed", b"open"]
        assert [bytes(m.body) for _, m in p2.checks] == [b"open"]
    finally:
        p2.close()
        b2.close()


def test_broker_may_refuse_transactional_messages(tmp_path: Path) -> None:
    b = BrokerThread(tmp_path, broker_overrides={"reject_transaction_message": True})
    b.start()
    p = TxProducer(b)
    try:
        sent, _ = p.send_half("TxTopicI", b"no")
        assert sent.code == RC.NO_PERMISSION
        assert queue_messages(b, HALF, 0) == []
    finally:
        p.close()
        b.close()
