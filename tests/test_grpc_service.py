"""The gRPC front end in process: each RPC of apache.rocketmq.v2.MessagingService through grpc
stubs generated from our protocol modules, against a broker on a background loop; statuses of
good and bad requests, pop consumption (invisibility, redelivery, stale handles, dead letters),
offset pulls, ACL, and the pop state across a restart."""

from __future__ import annotations

import dataclasses
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from rocketstore.grpc import GrpcConfig, GrpcFrontEnd
from rocketstore.grpc._acl import authorization_header, date_time_now, parse_credentials
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.grpc._pb import service_pb2 as spb
from rocketstore.grpc._pb import service_pb2_grpc
from rocketstore.protocol._subscription_group import SubscriptionGroupConfig
from rocketstore.store.services._schedule import timer_level
from support.grpc_broker import (
    MD,
    TEST_GRPC_CONFIG,
    BrokerThread,
    Code,
    ack,
    message,
    receive,
    receive_all,
    self_signed_cert,
    send,
    send_ok,
    unique,
)
from support.waits import wait_dispatched


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path_factory.mktemp("grpc-broker"))
    try:
        yield b.start()
    finally:
        b.close()


@pytest.fixture(scope="module")
def stub(broker: BrokerThread) -> Iterator[Any]:
    channel = grpc.insecure_channel(broker.grpc_address)
    try:
        yield service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()


def queued(b: BrokerThread) -> None:
    """Wait until dispatch has put every message sent so far in its queue: a send to a new
    queue is answered before that, and a receive's short long poll may end first."""
    wait_dispatched(b.broker.store)


def change_invisible(
    stub: Any, group: str, topic: str, handle: str, ms: int
) -> spb.ChangeInvisibleDurationResponse:
    req = spb.ChangeInvisibleDurationRequest(receipt_handle=handle, message_id="x")
    req.group.name = group
    req.topic.name = topic
    req.invisible_duration.FromMilliseconds(ms)
    return stub.ChangeInvisibleDuration(req, metadata=MD)


def bodies(msgs: list[pb.Message]) -> list[bytes]:
    return sorted(m.body for m in msgs)


# ---- routes, client settings, heartbeats --------------------------------------------------------


def test_query_route_gives_read_write_queues_at_the_endpoint_asked(stub: Any) -> None:
    topic = unique("RouteT")
    req = spb.QueryRouteRequest()
    req.topic.name = topic
    req.endpoints.scheme = pb.IPv4
    req.endpoints.addresses.add(host="127.0.0.1", port=4321)
    r = stub.QueryRoute(req, metadata=MD)
    assert r.status.code == Code.OK
    # auto-created as RocketMQ 5's proxy asks: min(4, the default topic's 8 write queues)
    assert [q.id for q in r.message_queues] == [0, 1, 2, 3]
    for q in r.message_queues:
        assert q.permission == pb.READ_WRITE
        assert q.topic.name == topic
        assert q.broker.name == "broker-a" and q.broker.id == 0
        assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [("127.0.0.1", 4321)]
        assert set(q.accept_message_types) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}


def test_query_route_without_endpoints_names_the_front_end(broker: BrokerThread, stub: Any) -> None:
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=unique("R"))), metadata=MD)
    (addr,) = r.message_queues[0].broker.endpoints.addresses
    assert f"{addr.host}:{addr.port}" == broker.grpc_address


@pytest.mark.parametrize("name", ["bad topic", "a" * 128, "SCHEDULE_TOPIC_XXXX", "TBW102", ""])
def test_query_route_refuses_illegal_and_system_topics(stub: Any, name: str) -> None:
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=name)), metadata=MD)
    assert r.status.code == Code.ILLEGAL_TOPIC
    assert not r.message_queues


def test_query_assignment_is_one_queue_for_the_whole_broker(stub: Any) -> None:
    topic = unique("AssignT")
    send_ok(stub, topic, b"x")
    req = spb.QueryAssignmentRequest()
    req.topic.name = topic
    req.group.name = unique("AssignG")
    r = stub.QueryAssignment(req, metadata=MD)
    assert r.status.code == Code.OK
    (a,) = r.assignments
    assert a.message_queue.id == -1 and a.message_queue.permission == pb.READ_WRITE
    req.topic.name = unique("NoSuchTopic")
    assert stub.QueryAssignment(req, metadata=MD).status.code == Code.TOPIC_NOT_FOUND
    req.group.name = "bad group"
    assert stub.QueryAssignment(req, metadata=MD).status.code == Code.ILLEGAL_CONSUMER_GROUP


def telemetry(stub: Any, *commands: spb.TelemetryCommand) -> list[spb.TelemetryCommand]:
    return list(stub.Telemetry(iter(commands), metadata=MD, timeout=10))


def test_telemetry_answers_publishing_and_subscription_settings(
    broker: BrokerThread, stub: Any
) -> None:
    producer = spb.TelemetryCommand()
    producer.settings.client_type = pb.PRODUCER
    producer.settings.publishing.topics.add(name="PubT")
    producer.settings.request_timeout.FromSeconds(3)
    consumer = spb.TelemetryCommand()
    consumer.settings.client_type = pb.SIMPLE_CONSUMER
    consumer.settings.subscription.group.name = "SettingsG"
    entry = consumer.settings.subscription.subscriptions.add()
    entry.topic.name = "PubT"
    entry.expression.type = pb.TAG
    entry.expression.expression = "*"
    empty = spb.TelemetryCommand()
    empty.settings.client_type = pb.PRODUCER  # neither publishing nor subscription
    answers = telemetry(stub, producer, empty, consumer)
    assert [a.status.code for a in answers] == [Code.OK, Code.BAD_REQUEST, Code.OK]
    pub = answers[0].settings
    assert pub.publishing.max_body_size == broker.broker.store_config.max_message_size
    assert pub.backoff_policy.max_attempts == 3
    assert pub.request_timeout.seconds == 3
    sub = answers[2].settings.subscription
    assert sub.receive_batch_size == TEST_GRPC_CONFIG.receive_batch_size
    assert sub.long_polling_timeout.ToMilliseconds() == TEST_GRPC_CONFIG.max_long_polling_ms
    assert not sub.fifo
    policy = answers[2].settings.backoff_policy
    assert policy.max_attempts == 17  # retryMaxTimes 16 + 1
    assert [d.ToMilliseconds() for d in policy.customized_backoff.next][:3] == [1000, 5000, 10000]


def test_heartbeat_and_termination(stub: Any) -> None:
    ok = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=MD)
    assert ok.status.code == Code.OK
    req = spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER)
    req.group.name = "HeartG"
    assert stub.Heartbeat(req, metadata=MD).status.code == Code.OK
    req.group.name = "bad group!"
    assert stub.Heartbeat(req, metadata=MD).status.code == Code.ILLEGAL_CONSUMER_GROUP
    odd = spb.HeartbeatRequest(client_type=pb.LITE_PUSH_CONSUMER)
    assert stub.Heartbeat(odd, metadata=MD).status.code == Code.UNRECOGNIZED_CLIENT_TYPE
    assert stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER)).status.code == (
        Code.CLIENT_ID_REQUIRED
    )
    bye = stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(), metadata=MD)
    assert bye.status.code == Code.OK


# ---- sending ------------------------------------------------------------------------------------


def test_send_keeps_the_message_id_tags_keys_and_properties(
    broker: BrokerThread, stub: Any
) -> None:
    topic = unique("SendT")
    entry = send_ok(
        stub,
        topic,
        b"payload",
        tag="TagA",
        keys=("k1", "k2"),
        props={"color": "red"},
        message_id="MY-ID-1",
    )
    assert entry.message_id == "MY-ID-1"
    store = broker.broker.store
    wait_dispatched(store)  # the index has its keys
    found = broker.run(lambda: store.query_message(topic, "MY-ID-1").messages)
    assert len(found) == 1
    (m,) = found
    assert m.body == b"payload" and m.tags == "TagA" and m.keys == ["k1", "k2"]
    assert m.properties["color"] == "red" and m.uniq_key == "MY-ID-1"
    assert entry.offset == m.queue_offset
    by_key = broker.run(lambda: store.query_message(topic, "k2").messages)
    assert [x.uniq_key for x in by_key] == ["MY-ID-1"]


def test_send_with_a_message_group_hashes_to_one_queue(broker: BrokerThread, stub: Any) -> None:
    topic = unique("FifoT")
    for i in range(6):
        send_ok(stub, topic, f"m{i}".encode(), group="order-42")
    store = broker.broker.store
    wait_dispatched(store)
    counts = broker.run(lambda: [store.get_max_offset_in_queue(topic, q) for q in range(4)])
    assert sorted(counts) == [0, 0, 0, 6]


def orderly_group(broker: BrokerThread, group: str) -> None:
    broker.run(
        lambda: broker.broker.groups.update(
            SubscriptionGroupConfig(group, consume_message_orderly=True)
        )
    )


def test_fifo_group_gets_each_queue_in_order_one_batch_at_a_time(
    broker: BrokerThread, stub: Any
) -> None:
    topic, group = unique("FifoRecvT"), unique("FifoRecvG")
    orderly_group(broker, group)
    consumer = spb.TelemetryCommand()
    consumer.settings.client_type = pb.SIMPLE_CONSUMER
    consumer.settings.subscription.group.name = group
    (answer,) = telemetry(stub, consumer)
    assert answer.settings.subscription.fifo
    sent = [f"m{i}".encode() for i in range(7)]
    for body in sent:
        send_ok(stub, topic, body, group="order-7")
    queued(broker)
    _, first, _ = receive(stub, group, topic, batch=3)
    assert [m.body for m in first] == sent[:3]
    assert all(m.system_properties.message_group == "order-7" for m in first)
    # the batch is out: another consumer of the group gets nothing, even after a partial ack
    assert not receive(stub, group, topic, batch=3, poll_ms=100)[1]
    handles = [m.system_properties.receipt_handle for m in first]
    assert ack(stub, group, topic, *handles[:2]).status.code == Code.OK
    assert not receive(stub, group, topic, batch=3, poll_ms=100)[1]
    # a consumer waiting in a long poll is answered by the ack that frees the queue
    pool = ThreadPoolExecutor(1)
    try:
        waiting = pool.submit(receive, stub, group, topic, batch=3, poll_ms=20_000, timeout=60.0)
        time.sleep(0.3)
        begin = time.monotonic()
        assert ack(stub, group, topic, handles[2]).status.code == Code.OK
        _, second, _ = waiting.result(60)
        assert time.monotonic() - begin < 10.0  # by the ack, long before the 20 s poll
    finally:
        pool.shutdown()
    assert [m.body for m in second] == sent[3:6]
    # not acked: after the invisible time the same batch comes back, in order, attempt 2
    second_handles = [m.system_properties.receipt_handle for m in second]
    assert change_invisible(stub, group, topic, second_handles[1], 0).status.code == Code.OK
    assert not receive(stub, group, topic, batch=3, poll_ms=100)[1]  # 3 and 5 still out
    for h in (second_handles[0], second_handles[2]):
        assert change_invisible(stub, group, topic, h, 0).status.code == Code.OK
    _, again, _ = receive(stub, group, topic, batch=4)
    assert [m.body for m in again] == sent[3:7]
    assert [m.system_properties.delivery_attempt for m in again] == [2, 2, 2, 1]


def test_delivery_timestamp_waits_in_the_longest_level_not_longer(
    broker: BrokerThread, stub: Any
) -> None:
    levels = broker.broker.store_config.delay_levels_ms()
    assert timer_level(0, levels) == 0
    assert timer_level(999, levels) == 1  # shorter than every level: the shortest
    assert timer_level(4999, levels) == 1
    assert timer_level(5000, levels) == 2
    assert timer_level(37_000, levels) == 4  # 30 s, then the rest
    assert timer_level(10**9, levels) == len(levels)
    topic = unique("DelayT")
    deliver = int(time.time() * 1000) + 600
    send_ok(stub, topic, b"later", deliver_ms=deliver)
    group = unique("DelayG")
    st, got, _ = receive(stub, group, topic, poll_ms=200)
    assert st.code == Code.MESSAGE_NOT_FOUND  # waiting in SCHEDULE_TOPIC_XXXX
    st, got, _ = receive(stub, group, topic, poll_ms=5_000, timeout=10)
    assert st.code == Code.OK and bodies(got) == [b"later"]
    assert time.time() * 1000 >= deliver  # level 1 (1 s) is not early
    sp = got[0].system_properties
    assert sp.message_type == pb.DELAY
    assert sp.delivery_timestamp.ToMilliseconds() == deliver


def test_send_answers_bad_messages_with_their_codes(broker: BrokerThread, stub: Any) -> None:
    topic = unique("BadSendT")
    cases = [
        (message(topic, b""), Code.MESSAGE_BODY_EMPTY),
        (message(topic, b"x", props={"UNIQ_KEY": "mine"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (message(topic, b"x", props={"k": "a\x01b"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (message(topic, b"x", tag="A||B"), Code.ILLEGAL_MESSAGE_TAG),
        (message(topic, b"x", tag="  "), Code.ILLEGAL_MESSAGE_TAG),
        (message(topic, b"x", keys=(" ",)), Code.ILLEGAL_MESSAGE_KEY),
        (message(topic, b"x", message_id=""), Code.ILLEGAL_MESSAGE_ID),
        (
            message(topic, b"x", deliver_ms=int(time.time() * 1000) + 3 * 86_400_000),
            Code.ILLEGAL_DELIVERY_TIME,
        ),
        (message("SCHEDULE_TOPIC_XXXX", b"x"), Code.ILLEGAL_TOPIC),
        (message("bad topic", b"x"), Code.ILLEGAL_TOPIC),
        (
            message(topic, b"x", props={str(i): "v" for i in range(200)}),
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
        ),
    ]
    big = message(topic, b"x")
    big.body = b"x" * (broker.broker.store_config.max_message_size + 1)
    cases.append((big, Code.MESSAGE_BODY_TOO_LARGE))
    delayed_txn = message(topic, b"x")
    delayed_txn.system_properties.message_type = pb.TRANSACTION
    delayed_txn.system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
    cases.append((delayed_txn, Code.ILLEGAL_DELIVERY_TIME))
    for msg, code in cases:
        r = send(stub, msg)
        assert r.status.code == code, (msg.user_properties, r.status)
    assert send(stub).status.code == Code.MESSAGE_CORRUPTED  # no message at all
    mixed = send(stub, message(topic, b"a"), message(unique("Other"), b"b"))
    assert mixed.status.code == Code.MESSAGE_CORRUPTED
    # and the server goes on serving
    assert send_ok(stub, topic, b"fine").message_id


def test_a_batch_gets_one_entry_per_message(stub: Any) -> None:
    topic = unique("BatchT")
    r = send(stub, *(message(topic, f"b{i}".encode(), message_id=f"B{i}") for i in range(5)))
    assert r.status.code == Code.OK
    assert [e.message_id for e in r.entries] == [f"B{i}" for i in range(5)]


def test_gzip_bodies_are_stored_plain(broker: BrokerThread, stub: Any) -> None:
    import gzip

    topic = unique("GzipT")
    m = message(topic, gzip.compress(b"squeezed"))
    m.system_properties.body_encoding = pb.GZIP
    assert send(stub, m).status.code == Code.OK
    queued(broker)
    _st, got, _ = receive(stub, unique("GzipG"), topic)
    assert [g.body for g in got] == [b"squeezed"]
    assert got[0].system_properties.body_encoding == pb.IDENTITY


# ---- receiving ----------------------------------------------------------------------------------


def test_receive_streams_status_messages_then_delivery_time(stub: Any) -> None:
    topic, group = unique("RecvT"), unique("RecvG")
    for i in range(3):
        send_ok(stub, topic, f"m{i}".encode(), tag="T", keys=(f"key{i}",), props={"i": str(i)})
    got, answers = receive_all(stub, group, topic, 3)
    for kinds in answers:
        assert kinds[0] == "status" and kinds[-1] == "delivery_timestamp"
        assert set(kinds[1:-1]) <= {"message"}
    assert bodies(got) == [b"m0", b"m1", b"m2"]
    for m in got:
        sp = m.system_properties
        assert sp.body_encoding == pb.IDENTITY
        assert sp.body_digest.type == pb.CRC32
        assert sp.body_digest.checksum == f"{zlib.crc32(m.body) & 0xFFFFFFFF:08X}"
        assert sp.receipt_handle and sp.delivery_attempt == 1
        assert sp.invisible_duration.ToMilliseconds() == 5_000
        assert sp.tag == "T" and m.user_properties["i"] == m.body.decode()[1:]
        assert list(sp.keys) == [f"key{m.body.decode()[1:]}"]
        assert "UNIQ_KEY" not in m.user_properties and "CLUSTER" not in m.user_properties
        assert sp.HasField("queue_offset") and sp.HasField("store_timestamp")


def test_empty_long_poll_answers_message_not_found_within_the_poll(
    broker: BrokerThread, stub: Any
) -> None:
    topic, group = unique("EmptyT"), unique("EmptyG")
    send_ok(stub, topic, b"x")
    queued(broker)
    receive(stub, group, topic)  # takes it
    begin = time.monotonic()
    st, got, kinds = receive(stub, group, topic, poll_ms=700)
    took = time.monotonic() - begin
    assert st.code == Code.MESSAGE_NOT_FOUND and not got
    assert kinds == ["status", "delivery_timestamp"]
    assert 0.6 <= took < 10.0  # held for its 700 ms, not for the longest poll (20 s)


def test_long_poll_is_answered_when_a_message_arrives(broker: BrokerThread, stub: Any) -> None:
    import threading

    topic, group = unique("WakeT"), unique("WakeG")
    send_ok(stub, topic, b"first")
    queued(broker)
    receive(stub, group, topic)
    timer = threading.Timer(0.3, lambda: send_ok(stub, topic, b"second"))
    timer.start()
    begin = time.monotonic()
    try:
        st, got, _ = receive(stub, group, topic, poll_ms=20_000, timeout=60.0)
    finally:
        timer.join()
    assert st.code == Code.OK and bodies(got) == [b"second"]
    assert time.monotonic() - begin < 10.0  # by the arrival, long before the 20 s poll


def test_long_poll_never_outlasts_the_deadline(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("DeadlineT"), unique("DeadlineG")
    send_ok(stub, topic, b"x")
    queued(broker)
    receive(stub, group, topic)
    # poll from the deadline: answered MESSAGE_NOT_FOUND before it (past it, the call would
    # end in DEADLINE_EXCEEDED instead)
    st, _, _ = receive(stub, group, topic, poll_ms=None, timeout=5.0)
    assert st.code == Code.MESSAGE_NOT_FOUND


def test_a_receive_cancelled_in_its_long_poll_takes_nothing(
    broker: BrokerThread, stub: Any
) -> None:
    topic, group = unique("CancelT"), unique("CancelG")
    send_ok(stub, topic, b"first")
    queued(broker)
    receive(stub, group, topic)
    req = spb.ReceiveMessageRequest(batch_size=8)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.invisible_duration.FromMilliseconds(60_000)
    req.long_polling_timeout.FromMilliseconds(10_000)
    call = stub.ReceiveMessage(req, metadata=MD, timeout=15)
    time.sleep(0.3)  # in its long poll now
    call.cancel()
    time.sleep(0.2)
    send_ok(stub, topic, b"second")
    st, got, _ = receive(stub, group, topic, poll_ms=2_000)
    assert st.code == Code.OK and bodies(got) == [b"second"]  # not hidden by the gone client


def test_a_restart_after_a_crash_redelivers_what_the_lost_state_had_in_flight(
    tmp_path: Path,
) -> None:
    import shutil

    b = BrokerThread(tmp_path)
    topic, group = "CrashT", "CrashG"
    state = tmp_path / "config" / "popState.json"
    try:
        b.start()
        with grpc.insecure_channel(b.grpc_address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            send_ok(stub, topic, b"once", group="q")
            queued(b)
            _, got, _ = receive(stub, group, topic, invisible_ms=800)
            b.run(b.grpc.pop.persist)
            shutil.copy(state, tmp_path / "before-ack.json")
            assert ack(stub, group, topic, got[0].system_properties.receipt_handle).status.code == (
                Code.OK
            )
        b.stop()
        # a crash before the ack reached the file: the state as it was persisted before it
        shutil.copy(tmp_path / "before-ack.json", state)
        b.start()
        with grpc.insecure_channel(b.grpc_address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            _, back, _ = receive(stub, group, topic, invisible_ms=800, poll_ms=3_000)
            assert bodies(back) == [b"once"]  # at least once: the ack was lost, the message not
            assert back[0].system_properties.delivery_attempt == 2
    finally:
        b.close()


def test_tag_filter(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("TagT"), unique("TagG")
    for i, tag in enumerate(["A", "B", "C", "A", "B"]):
        send_ok(stub, topic, f"{tag}{i}".encode(), tag=tag)
    queued(broker)
    st, got, _ = receive(stub, group, topic, expression="A || C")
    assert bodies(got) == [b"A0", b"A3", b"C2"]
    st, got, _ = receive(stub, group, topic, expression="A || C")
    assert st.code == Code.MESSAGE_NOT_FOUND


def test_batch_size_and_sharing_between_consumers(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("ShareT"), unique("ShareG")
    for i in range(10):
        send_ok(stub, topic, f"s{i}".encode())
    queued(broker)
    _, first, _ = receive(stub, group, topic, batch=4)
    _, second, _ = receive(stub, group, topic, batch=4)
    _, third, _ = receive(stub, group, topic, batch=4)
    assert (len(first), len(second), len(third)) == (4, 4, 2)
    all_bodies = bodies(first + second + third)
    assert all_bodies == sorted(f"s{i}".encode() for i in range(10))  # nobody got one twice


def test_concurrent_consumers_of_a_group_never_share_an_invisible_message(
    broker: BrokerThread,
) -> None:
    import threading

    topic, group = unique("ConcT"), unique("ConcG")
    channels = [grpc.insecure_channel(broker.grpc_address) for _ in range(4)]
    stubs = [service_pb2_grpc.MessagingServiceStub(c) for c in channels]
    try:
        for i in range(60):
            send_ok(stubs[0], topic, f"c{i}".encode())
        queued(broker)
        seen: list[list[bytes]] = [[] for _ in stubs]

        def consume(i: int) -> None:
            while True:
                _st, got, _ = receive(stubs[i], group, topic, batch=3, poll_ms=200)
                if not got:
                    return
                seen[i].extend(m.body for m in got)

        workers = [threading.Thread(target=consume, args=(i,)) for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        everything = [b for per in seen for b in per]
        assert sorted(everything) == sorted(f"c{i}".encode() for i in range(60))  # no twice
        assert sum(1 for per in seen if per) >= 2  # the work was shared
    finally:
        for c in channels:
            c.close()


def test_unacked_message_comes_back_with_the_next_attempt(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("RedeliverT"), unique("RedeliverG")
    send_ok(stub, topic, b"again")
    queued(broker)
    _, got, _ = receive(stub, group, topic, invisible_ms=400)
    assert got[0].system_properties.delivery_attempt == 1
    _st, none, _ = receive(stub, group, topic, invisible_ms=400, poll_ms=100)
    assert not none  # still invisible
    _, back, _ = receive(stub, group, topic, invisible_ms=400, poll_ms=3_000)
    assert bodies(back) == [b"again"] and back[0].system_properties.delivery_attempt == 2
    old = got[0].system_properties.receipt_handle
    assert ack(stub, group, topic, old).status.code == Code.INVALID_RECEIPT_HANDLE
    assert ack(stub, group, topic, back[0].system_properties.receipt_handle).status.code == Code.OK


def test_ack_stale_and_forged_handles(stub: Any) -> None:
    topic, group = unique("AckT"), unique("AckG")
    send_ok(stub, topic, b"a")
    send_ok(stub, topic, b"b")
    got, _kinds = receive_all(stub, group, topic, 2)
    h1, h2 = (m.system_properties.receipt_handle for m in got)
    r = ack(stub, group, topic, h1)
    assert r.status.code == Code.OK and r.entries[0].status.code == Code.OK
    again = ack(stub, group, topic, h1)
    assert again.status.code == Code.INVALID_RECEIPT_HANDLE
    forged = h2[:-3] + ("AAA" if not h2.endswith("AAA") else "BBB")
    assert ack(stub, group, topic, forged).status.code == Code.INVALID_RECEIPT_HANDLE
    assert ack(stub, group, topic, "garbage").status.code == Code.INVALID_RECEIPT_HANDLE
    assert ack(stub, unique("OtherG"), topic, h2).status.code == Code.INVALID_RECEIPT_HANDLE
    mixed = ack(stub, group, topic, h2, h1)
    assert mixed.status.code == Code.MULTIPLE_RESULTS
    assert [e.status.code for e in mixed.entries] == [Code.OK, Code.INVALID_RECEIPT_HANDLE]
    assert ack(stub, group, topic).status.code == Code.BAD_REQUEST


def test_auto_renewed_receive_stays_invisible_while_its_client_lives(tmp_path: Path) -> None:
    config = dataclasses.replace(
        TEST_GRPC_CONFIG,
        default_invisible_ms=1_500,
        renew_ahead_ms=1_200,
        pop_persist_interval_ms=100,
        release_invisible_ms=200,
    )
    b = BrokerThread(tmp_path, grpc_config=config)
    b.start()
    channel = grpc.insecure_channel(b.grpc_address)
    try:
        s = service_pb2_grpc.MessagingServiceStub(channel)
        topic, group = "AutoRenewT", "AutoRenewG"
        push = [("x-mq-client-id", "push-client")]
        send_ok(s, topic, b"long-running")
        send_ok(s, topic, b"left-behind")
        queued(b)
        _, first, _ = receive(
            s, group, topic, batch=1, invisible_ms=None, metadata=push, auto_renew=True
        )
        assert [m.body for m in first] == [b"long-running"]
        _, second, _ = receive(
            s, group, topic, batch=1, invisible_ms=None, metadata=push, auto_renew=True
        )
        assert [m.body for m in second] == [b"left-behind"]
        # well past the 1.5 s default: renewed, so no other consumer gets them
        time.sleep(3.5)
        assert not receive(s, group, topic, invisible_ms=5_000, poll_ms=100)[1]
        # the original handle still acks
        handle = first[0].system_properties.receipt_handle
        assert ack(s, group, topic, handle).status.code == Code.OK
        # the client leaves: what it did not ack is visible again at once (200 ms)
        req = spb.NotifyClientTerminationRequest()
        req.group.name = group
        assert s.NotifyClientTermination(req, metadata=push).status.code == Code.OK
        # within this 3 s poll, before its 5 s invisibility could end
        _, again, _ = receive(s, group, topic, invisible_ms=5_000, poll_ms=3_000)
        assert [m.body for m in again] == [b"left-behind"]
        assert again[0].system_properties.delivery_attempt == 2
    finally:
        channel.close()
        b.close()


def test_change_invisible_duration(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("ChangeT"), unique("ChangeG")
    send_ok(stub, topic, b"c")
    queued(broker)
    _, got, _ = receive(stub, group, topic, invisible_ms=30_000)
    handle = got[0].system_properties.receipt_handle
    r = change_invisible(stub, group, topic, handle, 0)  # visible again at once
    assert r.status.code == Code.OK and r.receipt_handle and r.receipt_handle != handle
    assert change_invisible(stub, group, topic, handle, 0).status.code == (
        Code.INVALID_RECEIPT_HANDLE
    )
    _, back, _ = receive(stub, group, topic, poll_ms=2_000)
    assert bodies(back) == [b"c"]
    assert back[0].system_properties.delivery_attempt == 2
    too_long = change_invisible(
        stub, group, topic, back[0].system_properties.receipt_handle, 13 * 3_600_000
    )
    assert too_long.status.code == Code.ILLEGAL_INVISIBLE_TIME


def test_dead_letter_after_max_attempts(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("DlqT"), unique("DlqG")
    groups = broker.broker.groups
    broker.run(lambda: groups.update(groups.find_or_create(group).replace(retry_max_times=1)))
    send_ok(stub, topic, b"doomed", message_id="DOOMED-1", props={"p": "q"})
    queued(broker)
    _, one, _ = receive(stub, group, topic, invisible_ms=200)
    _, two, _ = receive(stub, group, topic, invisible_ms=200, poll_ms=2_000)
    assert [m.system_properties.delivery_attempt for m in one + two] == [1, 2]
    st, three, _ = receive(stub, group, topic, invisible_ms=200, poll_ms=1_000)
    assert st.code == Code.MESSAGE_NOT_FOUND and not three
    dlq = f"%DLQ%{group}"
    store = broker.broker.store

    def dead() -> list[Any]:
        return store.get_message("check", dlq, 0, 0, 32).messages

    deadline = time.monotonic() + 60
    while not broker.run(dead) and time.monotonic() < deadline:
        time.sleep(0.05)
    (d,) = broker.run(dead)
    assert d.body == b"doomed" and d.uniq_key == "DOOMED-1" and d.properties["p"] == "q"
    assert d.properties["DLQ_ORIGIN_TOPIC"] == topic
    assert d.properties["DLQ_ORIGIN_MESSAGE_ID"] == "DOOMED-1"
    assert d.reconsume_times == 2


def test_forward_to_dead_letter_queue(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("FwdT"), unique("FwdG")
    send_ok(stub, topic, b"give up", message_id="FWD-1")
    queued(broker)
    _, got, _ = receive(stub, group, topic)
    req = spb.ForwardMessageToDeadLetterQueueRequest(
        receipt_handle=got[0].system_properties.receipt_handle,
        message_id="FWD-1",
        delivery_attempt=1,
        max_delivery_attempts=16,
    )
    req.group.name = group
    req.topic.name = topic
    assert stub.ForwardMessageToDeadLetterQueue(req, metadata=MD).status.code == Code.OK
    again = stub.ForwardMessageToDeadLetterQueue(req, metadata=MD)
    assert again.status.code == Code.INVALID_RECEIPT_HANDLE
    store = broker.broker.store
    wait_dispatched(store)
    dead = broker.run(lambda: store.get_message("x", f"%DLQ%{group}", 0, 0, 8).messages)
    assert [m.uniq_key for m in dead] == ["FWD-1"]
    st, _none, _ = receive(stub, group, topic, poll_ms=100)
    assert st.code == Code.MESSAGE_NOT_FOUND  # acked once stored in the DLQ


def test_receive_answers_bad_requests_with_their_codes(stub: Any) -> None:
    topic = unique("BadRecvT")
    send_ok(stub, topic, b"x")
    group = unique("BadRecvG")
    cases = [
        (dict(invisible_ms=50), Code.ILLEGAL_INVISIBLE_TIME),
        (dict(invisible_ms=13 * 3_600_000), Code.ILLEGAL_INVISIBLE_TIME),
        (dict(invisible_ms=None), Code.ILLEGAL_INVISIBLE_TIME),
        (dict(filter_type=pb.SQL, expression="a > 1"), Code.ILLEGAL_FILTER_EXPRESSION),
        (dict(batch=0), Code.BAD_REQUEST),
        (dict(topic=unique("Missing")), Code.TOPIC_NOT_FOUND),
        (dict(topic="bad topic"), Code.ILLEGAL_TOPIC),
        (dict(group="bad group"), Code.ILLEGAL_CONSUMER_GROUP),
        (dict(group="CID_RMQ_SYS_X"), Code.ILLEGAL_CONSUMER_GROUP),
    ]
    for kw, code in cases:
        args: dict[str, Any] = {"group": group, "topic": topic, **kw}
        st, got, kinds = receive(stub, args.pop("group"), args.pop("topic"), **args)
        assert st.code == code, (kw, st)
        assert not got and kinds == ["status", "delivery_timestamp"]
    st, got, _ = receive(stub, group, topic)
    assert st.code == Code.OK and bodies(got) == [b"x"]  # still serving


def end_transaction(
    stub: Any, topic: str, entry: spb.SendResultEntry, resolution: int, **kw: Any
) -> spb.EndTransactionResponse:
    req = spb.EndTransactionRequest(
        message_id=kw.pop("message_id", entry.message_id),
        transaction_id=kw.pop("transaction_id", entry.transaction_id),
        resolution=resolution,  # type: ignore[arg-type]
        source=kw.pop("source", pb.SOURCE_CLIENT),
    )
    req.topic.name = topic
    return stub.EndTransaction(req, metadata=MD)


def transactional(topic: str, body: bytes, **kw: Any) -> pb.Message:
    m = message(topic, body, **kw)
    m.system_properties.message_type = pb.TRANSACTION
    return m


def test_transactional_send_commit_and_rollback(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("TxT"), unique("TxG")
    r = send(stub, transactional(topic, b"commit-me", tag="A"))
    assert r.status.code == Code.OK, r.status
    (committed,) = r.entries
    assert len(committed.transaction_id) == 32
    (rolled,) = send(stub, transactional(topic, b"roll-me-back")).entries
    # halves are not received
    assert not receive(stub, group, topic, poll_ms=100)[1]
    ok = end_transaction(stub, topic, committed, pb.COMMIT)
    assert ok.status.code == Code.OK, ok.status
    assert end_transaction(stub, topic, rolled, pb.ROLLBACK).status.code == Code.OK
    queued(broker)
    _, got, _ = receive(stub, group, topic)
    assert [m.body for m in got] == [b"commit-me"]
    assert got[0].system_properties.message_id == committed.message_id
    assert got[0].system_properties.tag == "A"
    # repeated: a no-op; the other resolution: refused
    assert end_transaction(stub, topic, committed, pb.COMMIT).status.code == Code.OK
    assert end_transaction(stub, topic, committed, pb.ROLLBACK).status.code == Code.BAD_REQUEST
    assert end_transaction(stub, topic, rolled, pb.COMMIT).status.code == Code.BAD_REQUEST
    assert not receive(stub, group, topic, poll_ms=100)[1]


def test_end_transaction_refuses_bad_ids(stub: Any) -> None:
    topic = unique("TxBadT")
    (entry,) = send(stub, transactional(topic, b"x")).entries
    cases = {
        "not hex": end_transaction(stub, topic, entry, pb.COMMIT, transaction_id="zz" * 16),
        "short": end_transaction(stub, topic, entry, pb.COMMIT, transaction_id="1234"),
        "forged": end_transaction(stub, topic, entry, pb.COMMIT, transaction_id="0" * 32),
        "other id": end_transaction(stub, topic, entry, pb.COMMIT, message_id="NOT-IT"),
        "other topic": end_transaction(stub, unique("TxOtherT"), entry, pb.COMMIT),
    }
    for name, r in cases.items():
        assert r.status.code == Code.INVALID_TRANSACTION_ID, name
    r = end_transaction(stub, topic, entry, pb.TRANSACTION_RESOLUTION_UNSPECIFIED)
    assert r.status.code == Code.BAD_REQUEST
    assert end_transaction(stub, topic, entry, pb.COMMIT).status.code == Code.OK


def test_orphaned_transaction_is_recovered_through_the_telemetry_stream(
    broker: BrokerThread, stub: Any
) -> None:
    topic, group = unique("TxOrphanT"), unique("TxOrphanG")
    (entry,) = send(stub, transactional(topic, b"orphan", keys=("k9",))).entries
    settings = spb.TelemetryCommand()
    settings.settings.client_type = pb.PRODUCER
    settings.settings.publishing.topics.add(name=topic)
    md = [("x-mq-client-id", "tx-checker")]
    stop = threading.Event()

    def commands() -> Iterator[spb.TelemetryCommand]:
        yield settings
        stop.wait(10)

    stream = stub.Telemetry(commands(), metadata=md, timeout=15)
    try:
        first = next(stream)
        assert first.status.code == Code.OK
        transactions = broker.broker.transactions
        old = transactions.timeout_ms
        transactions.timeout_ms = 0
        try:
            queued(broker)  # the check reads the half queue
            assert broker.call(transactions.check) == 1
        finally:
            transactions.timeout_ms = old
        command = next(stream)
        recover = command.recover_orphaned_transaction_command
        assert recover.message.topic.name == topic and recover.message.body == b"orphan"
        assert recover.message.system_properties.message_id == entry.message_id
        assert list(recover.message.system_properties.keys) == ["k9"]
        # the check names the broker's copy: a new id
        assert recover.transaction_id != entry.transaction_id
        req = spb.EndTransactionRequest(
            message_id=entry.message_id,
            transaction_id=recover.transaction_id,
            resolution=pb.COMMIT,
            source=pb.SOURCE_SERVER_CHECK,
        )
        req.topic.name = topic
        assert stub.EndTransaction(req, metadata=md).status.code == Code.OK
    finally:
        stop.set()
        stream.cancel()
    queued(broker)
    _, got, _ = receive(stub, group, topic)
    assert [m.body for m in got] == [b"orphan"]


def recall(stub: Any, topic: str, handle: str) -> spb.RecallMessageResponse:
    req = spb.RecallMessageRequest(recall_handle=handle)
    req.topic.name = topic
    return stub.RecallMessage(req, metadata=MD)


def test_recall_cancels_a_delayed_message_before_its_time(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("RecallT"), unique("RecallG")
    # far enough ahead that the sends and the recall are done before it on a loaded machine
    deliver = int(time.time() * 1000) + 10_000
    kept = send_ok(stub, topic, b"kept", deliver_ms=deliver)
    dropped = send_ok(stub, topic, b"recalled", deliver_ms=deliver)
    plain = send_ok(stub, topic, b"now")
    assert kept.recall_handle and dropped.recall_handle and not plain.recall_handle
    r = recall(stub, topic, dropped.recall_handle)
    assert r.status.code == Code.OK and r.message_id == dropped.message_id
    # refused: malformed, of another topic
    assert recall(stub, topic, "not-a-handle!").status.code == Code.BAD_REQUEST
    assert recall(stub, unique("OtherT"), kept.recall_handle).status.code == Code.BAD_REQUEST
    assert time.time() * 1000 < deliver, "the recall came after the delivery time"
    got: list[bytes] = []
    end = time.monotonic() + 60
    while time.monotonic() < end and sorted(got) != [b"kept", b"now"]:
        _, msgs, _ = receive(stub, group, topic, poll_ms=500)
        got += [m.body for m in msgs]
        if msgs:  # taken: not handed out again after their invisible time
            handles = [m.system_properties.receipt_handle for m in msgs]
            assert ack(stub, group, topic, *handles).status.code == Code.OK
    assert sorted(got) == [b"kept", b"now"]
    # after its time: too late
    assert recall(stub, topic, kept.recall_handle).status.code == Code.NOT_FOUND
    time.sleep(1.5)  # the recalled one's level passed: still never delivered
    assert not receive(stub, group, topic, poll_ms=200)[1]


# ---- pull-style consumption ---------------------------------------------------------------------


def pull(
    stub: Any, group: str, topic: str, queue_id: int, offset: int, *, poll_ms: int = 0, **kw: Any
) -> tuple[pb.Status, list[pb.Message], int | None]:
    req = spb.PullMessageRequest(offset=offset, batch_size=kw.get("batch", 32))
    req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.id = queue_id
    req.filter_expression.type = pb.TAG
    req.filter_expression.expression = kw.get("expression", "*")
    req.long_polling_timeout.FromMilliseconds(poll_ms)
    st, msgs, nxt = pb.Status(), [], None
    for r in stub.PullMessage(req, metadata=MD, timeout=10):
        kind = r.WhichOneof("content")
        if kind == "status":
            st = r.status
        elif kind == "message":
            msgs.append(r.message)
        else:
            nxt = r.next_offset
    return st, msgs, nxt


def queue_request(cls: Any, group: str | None, topic: str, queue_id: int, **kw: Any) -> Any:
    req = cls(**kw)
    if group is not None:
        req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.id = queue_id
    return req


def test_pull_update_get_and_query_offsets(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("PullT"), unique("PullG")
    for i in range(8):
        send_ok(stub, topic, f"p{i}".encode(), tag="A" if i % 2 else "B", group="one-queue")
    store = broker.broker.store
    wait_dispatched(store)
    (qid,) = broker.run(
        lambda: [q for q in range(4) if store.get_max_offset_in_queue(topic, q) == 8]
    )
    st, msgs, nxt = pull(stub, group, topic, qid, 0, batch=3)
    assert st.code == Code.OK and [m.body for m in msgs] == [b"p0", b"p1", b"p2"] and nxt == 3
    assert [m.system_properties.queue_offset for m in msgs] == [0, 1, 2]
    assert not msgs[0].system_properties.receipt_handle
    st, msgs, nxt = pull(stub, group, topic, qid, 3, expression="A")
    assert [m.body for m in msgs] == [b"p3", b"p5", b"p7"] and nxt == 8
    begin = time.monotonic()
    st, msgs, nxt = pull(stub, group, topic, qid, 8, poll_ms=300)
    assert st.code == Code.MESSAGE_NOT_FOUND and nxt == 8 and time.monotonic() - begin >= 0.25
    st, _, nxt = pull(stub, group, topic, qid, 50)
    assert st.code == Code.ILLEGAL_OFFSET and nxt == 8
    st, _, _ = pull(stub, group, topic, 99, 0)
    assert st.code == Code.BAD_REQUEST

    get = queue_request(spb.GetOffsetRequest, group, topic, qid)
    assert stub.GetOffset(get, metadata=MD).status.code == Code.OFFSET_NOT_FOUND
    upd = queue_request(spb.UpdateOffsetRequest, group, topic, qid, offset=5)
    assert stub.UpdateOffset(upd, metadata=MD).status.code == Code.OK
    r = stub.GetOffset(get, metadata=MD)
    assert r.status.code == Code.OK and r.offset == 5
    assert broker.run(lambda: broker.broker.offsets.query_offset(group, topic, qid)) == 5
    bad = queue_request(spb.UpdateOffsetRequest, group, topic, qid, offset=-1)
    assert stub.UpdateOffset(bad, metadata=MD).status.code == Code.ILLEGAL_OFFSET

    def query(policy: int, ts: int | None = None) -> int:
        req = queue_request(spb.QueryOffsetRequest, None, topic, qid, query_offset_policy=policy)
        if ts is not None:
            req.timestamp.FromMilliseconds(ts)
        r = stub.QueryOffset(req, metadata=MD)
        assert r.status.code == Code.OK
        return int(r.offset)

    assert query(pb.BEGINNING) == 0 and query(pb.END) == 8
    assert query(pb.TIMESTAMP, 0) == 0
    assert query(pb.TIMESTAMP, int(time.time() * 1000) + 60_000) == 7  # the last message


def test_pop_progress_becomes_the_groups_consumer_offset(broker: BrokerThread, stub: Any) -> None:
    topic, group = unique("ProgT"), unique("ProgG")
    for i in range(3):
        send_ok(stub, topic, f"g{i}".encode(), group="same")
    got, _kinds = receive_all(stub, group, topic, 3)
    ack(stub, group, topic, *(m.system_properties.receipt_handle for m in got))
    qid = got[0].system_properties.queue_id
    get = queue_request(spb.GetOffsetRequest, group, topic, qid)
    deadline = time.monotonic() + 60
    while stub.GetOffset(get, metadata=MD).offset != 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stub.GetOffset(get, metadata=MD).offset == 3


# ---- ACL ----------------------------------------------------------------------------------------


def test_acl_checks_signatures(tmp_path: Path) -> None:
    creds = parse_credentials("goodAK:goodSK")
    b = BrokerThread(tmp_path, grpc_config=TEST_GRPC_CONFIG.replace(credentials=creds))
    try:
        b.start()
        with grpc.insecure_channel(b.grpc_address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            when = date_time_now()

            def md(ak: str, sk: str) -> list[tuple[str, str]]:
                return [
                    *MD,
                    ("x-mq-date-time", when),
                    ("authorization", authorization_header(ak, sk, when)),
                ]

            good, bad_sk, bad_ak = md("goodAK", "goodSK"), md("goodAK", "x"), md("who", "goodSK")
            req = spb.QueryRouteRequest(topic=pb.Resource(name="AclT"))
            assert stub.QueryRoute(req, metadata=good).status.code == Code.OK
            for metadata in (bad_sk, bad_ak, MD):
                r = stub.QueryRoute(req, metadata=metadata)
                assert r.status.code == Code.UNAUTHORIZED and not r.message_queues
            assert send(stub, message("AclT", b"x"), metadata=bad_sk).status.code == (
                Code.UNAUTHORIZED
            )
            assert send(stub, message("AclT", b"x"), metadata=good).status.code == Code.OK
            queued(b)
            st, got, _ = receive(stub, "AclG", "AclT", metadata=bad_ak)
            assert st.code == Code.UNAUTHORIZED and not got
            st, got, _ = receive(stub, "AclG", "AclT", metadata=good)
            assert st.code == Code.OK and bodies(got) == [b"x"]
            cmd = spb.TelemetryCommand()
            cmd.settings.publishing.topics.add(name="AclT")
            (answer,) = stub.Telemetry(iter([cmd]), metadata=bad_sk, timeout=5)
            assert answer.status.code == Code.UNAUTHORIZED
            assert b.grpc.service.auth_failures >= 6
    finally:
        b.close()


def test_acl_config_rejects_empty_keys() -> None:
    from rocketstore.store._errors import StoreConfigError

    with pytest.raises(StoreConfigError):
        GrpcConfig(credentials={"ak": ""})
    with pytest.raises(StoreConfigError):
        parse_credentials("no-secret")


def test_tls(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    config = TEST_GRPC_CONFIG.replace(tls_cert=str(cert), tls_key=str(key))
    b = BrokerThread(tmp_path / "broker", grpc_config=config)
    try:
        b.start()
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(b.grpc_address, creds) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            assert send_ok(stub, "TlsT", b"over tls").message_id
            queued(b)
            _, got, _ = receive(stub, "TlsG", "TlsT")
            assert bodies(got) == [b"over tls"]
        with grpc.insecure_channel(b.grpc_address) as plain:
            stub = service_pb2_grpc.MessagingServiceStub(plain)
            with pytest.raises(grpc.RpcError):
                stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="TlsT")), timeout=2)
    finally:
        b.close()


# ---- restart ------------------------------------------------------------------------------------


def test_pop_state_survives_a_restart(tmp_path: Path) -> None:
    b = BrokerThread(tmp_path)
    topic, group = "RestartT", "RestartG"
    try:
        b.start()
        with grpc.insecure_channel(b.grpc_address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            for i in range(4):
                send_ok(stub, topic, f"r{i}".encode(), group="q")
            got, _kinds = receive_all(stub, group, topic, 4, invisible_ms=1_500)
            assert len(got) == 4
            by_body = {m.body: m.system_properties.receipt_handle for m in got}
            assert ack(stub, group, topic, by_body[b"r0"], by_body[b"r1"]).status.code == Code.OK
        b.stop()
        assert (tmp_path / "config" / "popState.json").exists()
        b.start()
        with grpc.insecure_channel(b.grpc_address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            # a handle from before the restart still works
            assert ack(stub, group, topic, by_body[b"r2"]).status.code == Code.OK
            st, _none, _ = receive(stub, group, topic, poll_ms=100)
            assert st.code == Code.MESSAGE_NOT_FOUND  # r3 is still invisible
            _, back, _ = receive(stub, group, topic, poll_ms=3_000)
            assert bodies(back) == [b"r3"]  # only the unacked one, nothing lost or repeated
            assert back[0].system_properties.delivery_attempt == 2
    finally:
        b.close()


def test_attach_grpc_and_a_port_in_use(broker: BrokerThread, tmp_path: Path) -> None:
    from rocketstore.grpc import attach_grpc

    fe = attach_grpc(broker.broker, "127.0.0.1", broker.grpc.port, acl={"ak": "sk"})
    assert fe.config.acl_enabled and fe.config.port == broker.grpc.port
    assert fe.config.min_invisible_ms == GrpcConfig().min_invisible_ms
    taken = TEST_GRPC_CONFIG.replace(port=broker.grpc.port)
    fe = GrpcFrontEnd(broker.broker, taken, pop_state_path=tmp_path / "popState.json")
    with pytest.raises(OSError, match="cannot bind"):
        broker.call(fe.start)


def test_grpc_config_from_cli(tmp_path: Path) -> None:
    from rocketstore.grpc import grpc_config_from_cli
    from rocketstore.store._errors import StoreConfigError

    assert grpc_config_from_cli(None) is None and grpc_config_from_cli("") is None
    c = grpc_config_from_cli("0.0.0.0:9000")
    assert c is not None and (c.host, c.port, c.acl_enabled) == ("0.0.0.0", 9000, False)
    assert grpc_config_from_cli("[::1]:81").host == "::1"  # type: ignore[union-attr]
    assert grpc_config_from_cli("localhost").port == 8081  # type: ignore[union-attr]
    acl = tmp_path / "acl.txt"
    acl.write_text("# accounts\nak1:sk1\nak2=sk2\n")
    c = grpc_config_from_cli("127.0.0.1:0", acl_file=str(acl))
    assert c is not None and dict(c.credentials or {}) == {"ak1": "sk1", "ak2": "sk2"}
    (tmp_path / "acl.json").write_text('{"a": "b"}')
    c = grpc_config_from_cli(":1", acl_file=str(tmp_path / "acl.json"))
    assert c is not None and dict(c.credentials or {}) == {"a": "b"}
    for bad in ("host:port", "h:1:2"):
        with pytest.raises(StoreConfigError):
            grpc_config_from_cli(bad)
    with pytest.raises(StoreConfigError):
        grpc_config_from_cli(":1", acl_file=str(tmp_path / "missing"))
    with pytest.raises(StoreConfigError):
        grpc_config_from_cli(":1", tls_cert="c.pem")
