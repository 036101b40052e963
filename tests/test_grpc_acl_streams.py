"""A client id is a name, not a credential: over gRPC with ACL on, what the broker sends down a
Telemetry stream (an orphaned transaction's check, which carries the half message) goes only to a
stream whose own account may publish the message's topic, never to another account's stream that
took the same ``x-mq-client-id``; and one account's settings do not replace those another account
registered under that id."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rocketstore.grpc._acl import authorization_header, date_time_now
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.grpc._pb import service_pb2 as spb
from rocketstore.grpc._pb import service_pb2_grpc
from rocketstore.remoting import ResponseCode
from support.acl_env import ACL_YML, ADMIN, call, create_topic_ext
from support.grpc_broker import BrokerThread
from support.transactions import check
from support.waits import wait_until

Code = pb.Code
VICTIM_ID = "victim-producer@1"


def signed(ak: str, sk: str, client_id: str) -> list[tuple[str, str]]:
    when = date_time_now()
    return [
        ("x-mq-client-id", client_id),
        ("x-mq-date-time", when),
        ("authorization", authorization_header(ak, sk, when)),
    ]


def user(client_id: str = VICTIM_ID) -> list[tuple[str, str]]:
    return signed("userAK001", "userSK001", client_id)  # PUB|SUB on Shared


def attacker(client_id: str = VICTIM_ID) -> list[tuple[str, str]]:
    return signed("attackAK1", "attackSK1", client_id)  # PUB on PubOnly only


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    b = BrokerThread(
        tmp_path / "store",
        broker_overrides={
            "acl_enable": True,
            "acl_file": str(acl),
            "transaction_timeout": 0,  # checked when the test asks
            "transaction_check_interval": 3_600_000,
        },
    )
    try:
        b.start()
        for topic in ("Shared", "PubOnly"):
            r = call(b.broker.address, 17, create_topic_ext(topic), ADMIN)
            assert r.code == ResponseCode.SUCCESS, r.remark
        yield b
    finally:
        b.close()


@pytest.fixture
def stub(broker: BrokerThread) -> Iterator[Any]:
    channel = grpc.insecure_channel(broker.grpc_address)
    try:
        yield service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()


def publishing(topic: str) -> spb.TelemetryCommand:
    command = spb.TelemetryCommand()
    command.settings.client_type = pb.PRODUCER
    command.settings.publishing.topics.add(name=topic)
    return command


class Stream:
    """A Telemetry stream held open on a thread of its own, keeping what comes down it."""

    def __init__(
        self, stub: Any, metadata: list[tuple[str, str]], first: list[spb.TelemetryCommand]
    ) -> None:
        self._stop = threading.Event()
        self.received: list[spb.TelemetryCommand] = []
        self.done = False  # the broker ended the stream

        def commands() -> Iterator[spb.TelemetryCommand]:
            yield from first
            self._stop.wait(30)

        self._call = stub.Telemetry(commands(), metadata=metadata, timeout=30)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for command in self._call:
                self.received.append(command)
        except grpc.RpcError:
            pass
        self.done = True

    def recovered(self) -> list[bytes]:
        return [
            c.recover_orphaned_transaction_command.message.body
            for c in self.received
            if c.HasField("recover_orphaned_transaction_command")
        ]

    def close(self) -> None:
        self._stop.set()
        self._call.cancel()
        self._thread.join(10)


def send_half(stub: Any, topic: str, body: bytes) -> spb.SendResultEntry:
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = f"HALF{time.monotonic_ns():X}"
    m.system_properties.body_encoding = pb.IDENTITY
    m.system_properties.message_type = pb.TRANSACTION
    r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=user(), timeout=10)
    assert r.status.code == Code.OK, r.status
    (entry,) = r.entries
    return entry


def test_a_stream_under_anothers_client_id_gets_no_check(broker: BrokerThread, stub: Any) -> None:
    """The victim's producer publishes Shared; the attacker opens a stream under the victim's
    client id without any settings of its own: the check of Shared's half (with its body)
    went down the attacker's stream, the newest of that id."""
    victim = Stream(stub, user(), [publishing("Shared")])
    thief: Stream | None = None
    try:
        assert wait_until(lambda: any(c.HasField("settings") for c in victim.received))
        thief = Stream(stub, attacker(), [])
        tx = broker.grpc.service.transactions

        def thief_settled() -> bool:  # refused, or its stream open beside the victim's
            assert thief is not None
            return thief.done or len(broker.run(lambda: tx._streams.get(VICTIM_ID, []))) == 2

        assert wait_until(thief_settled)
        send_half(stub, "Shared", b"the half's secret body")
        assert check(broker) == 1
        assert wait_until(lambda: victim.recovered() == [b"the half's secret body"])
        assert thief.recovered() == []
        assert [c.status.code for c in thief.received] == [Code.FORBIDDEN]
        assert "client id" in thief.received[0].status.message
    finally:
        victim.close()
        if thief is not None:
            thief.close()


def test_settings_of_another_account_do_not_replace_the_owners(
    broker: BrokerThread, stub: Any
) -> None:
    """Settings the attacker sends under the victim's client id (publishing its own topic) do
    not replace the victim's: the victim's stream still gets its topic's checks."""
    victim = Stream(stub, user(), [publishing("Shared")])
    thief: Stream | None = None
    try:
        assert wait_until(lambda: any(c.HasField("settings") for c in victim.received))
        thief = Stream(stub, attacker(), [publishing("PubOnly")])
        assert wait_until(lambda: bool(thief and thief.received))
        assert thief.received[0].status.code == Code.FORBIDDEN

        def published() -> list[str]:
            info = broker.run(lambda: broker.grpc.service.clients.get(VICTIM_ID))
            assert info is not None and info.settings is not None
            return [t.name for t in info.settings.publishing.topics]

        assert published() == ["Shared"]
        send_half(stub, "Shared", b"still the owner's")
        assert check(broker) == 1
        assert wait_until(lambda: victim.recovered() == [b"still the owner's"])
        assert thief.recovered() == []
    finally:
        victim.close()
        if thief is not None:
            thief.close()


def test_another_account_cannot_end_a_clients_session(broker: BrokerThread, stub: Any) -> None:
    """NotifyClientTermination and Heartbeat under the victim's client id (no group named, so
    no group to check) forgot the victim's settings and released what it received."""
    victim = Stream(stub, user(), [publishing("Shared")])
    try:
        assert wait_until(lambda: any(c.HasField("settings") for c in victim.received))
        ended = stub.NotifyClientTermination(
            spb.NotifyClientTerminationRequest(), metadata=attacker(), timeout=10
        )
        assert ended.status.code == Code.FORBIDDEN, ended.status
        beat = stub.Heartbeat(
            spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=attacker(), timeout=10
        )
        assert beat.status.code == Code.FORBIDDEN, beat.status
        info = broker.run(lambda: broker.grpc.service.clients.get(VICTIM_ID))
        assert info is not None and info.settings is not None
        # the holder itself still may, and an id of the attacker's own is the attacker's
        beat = stub.Heartbeat(
            spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=user(), timeout=10
        )
        assert beat.status.code == Code.OK, beat.status
        own = stub.Heartbeat(
            spb.HeartbeatRequest(client_type=pb.PRODUCER),
            metadata=attacker("attacker@1"),
            timeout=10,
        )
        assert own.status.code == Code.OK, own.status
    finally:
        victim.close()


def test_a_client_id_is_held_while_in_use() -> None:
    """The first account holds an id until it has not used it for CLIENT_EXPIRY_MS (an open
    Telemetry stream counts as use); then another account may take it."""
    from rocketstore.grpc._clients import CLIENT_EXPIRY_MS, ClientRegistry
    from rocketstore.grpc._config import GrpcConfig
    from rocketstore.store._clock import ManualClock

    clock = ManualClock(1_000_000)
    expiry_s = CLIENT_EXPIRY_MS / 1000
    registry = ClientRegistry(None, GrpcConfig(), clock)  # type: ignore[arg-type]
    assert registry.claim("c1", "owner") and registry.claim("c1", "owner")
    assert not registry.claim("c1", "other")
    clock.advance(expiry_s)
    registry.expire(streaming={"c1"})  # a stream open: still in use
    clock.advance(expiry_s)
    assert not registry.claim("c1", "other")
    registry.expire()
    clock.advance(expiry_s + 0.001)
    registry.expire()
    assert registry.claim("c1", "other")
    assert not registry.claim("c1", "owner")


def receive_request(topic: str, group: str) -> spb.ReceiveMessageRequest:
    req = spb.ReceiveMessageRequest(batch_size=1)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.filter_expression.type = pb.TAG  # type: ignore[assignment]
    req.filter_expression.expression = "*"
    req.invisible_duration.FromMilliseconds(10_000)
    req.long_polling_timeout.FromMilliseconds(100)
    return req


def receive_status(stub: Any, metadata: list[tuple[str, str]]) -> spb.Status:
    answers = list(
        stub.ReceiveMessage(receive_request("Shared", "GShared"), metadata=metadata, timeout=30)
    )
    return answers[0].status


def ack(stub: Any, metadata: list[tuple[str, str]]) -> spb.AckMessageResponse:
    req = spb.AckMessageRequest()
    req.group.name = "GShared"
    req.topic.name = "Shared"
    req.entries.add(message_id="00", receipt_handle="not-a-handle")
    return stub.AckMessage(req, metadata=metadata, timeout=30)


def reader(client_id: str) -> list[tuple[str, str]]:
    return signed("readerAK1", "readerSK1", client_id)  # SUB everywhere but Secret


def test_receives_and_acks_claim_their_client_id(broker: BrokerThread, stub: Any) -> None:
    """ReceiveMessage and AckMessage neither claimed nor checked the client id: an id a
    consumer used only to receive could be taken by another account (its Heartbeat and
    Telemetry then refused the owner's). Now a receive claims the id as Telemetry does, and
    another account's receive, ack or heartbeat under it is refused."""
    owner = user("receiver@1")
    assert receive_status(stub, owner).code in (Code.OK, Code.MESSAGE_NOT_FOUND)
    for refused in (
        receive_status(stub, reader("receiver@1")),
        ack(stub, reader("receiver@1")).status,
        stub.Heartbeat(
            spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=pb.Resource(name="GShared")),
            metadata=reader("receiver@1"),
            timeout=30,
        ).status,
    ):
        assert refused.code == Code.FORBIDDEN and "client id" in refused.message, refused
    # the owner goes on under its id; the other account under an id of its own
    assert receive_status(stub, owner).code in (Code.OK, Code.MESSAGE_NOT_FOUND)
    assert ack(stub, owner).status.code != Code.FORBIDDEN
    assert receive_status(stub, reader("reader@1")).code in (Code.OK, Code.MESSAGE_NOT_FOUND)
    # an ack claims too: an id first used by an ack is its account's
    assert ack(stub, reader("acker@1")).status.code != Code.FORBIDDEN
    refused = receive_status(stub, user("acker@1"))
    assert refused.code == Code.FORBIDDEN and "client id" in refused.message
