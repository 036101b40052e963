"""The gRPC front end under the broker's ACL: signatures over a fresh x-mq-date-time only,
per-topic and per-group permissions of the same plain_acl.yml accounts the remoting port uses,
and a front end's own keys guarding the remoting port too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rocketstore.acl import ANY, PUB, SUB, AccessDeniedError, StaticAcl, parse_plain_acl
from rocketstore.acl._errors import PermissionDeniedError
from rocketstore.acl._remoting import EXCEPTION_PREFIX
from rocketstore.grpc._acl import (
    AclChecker,
    authorization_header,
    date_time_fresh,
    date_time_now,
    request_needs,
)
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.grpc._pb import service_pb2 as spb
from rocketstore.grpc._pb import service_pb2_grpc
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from rocketstore.remoting._signing import RequestSigner
from support.grpc_broker import TEST_GRPC_CONFIG, BrokerThread
from support.waits import wait_dispatched

Code = pb.Code
NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z

ACCOUNTS = {
    "accounts": [
        {"accessKey": "adminAK01", "secretKey": "adminSK01", "admin": True},
        {
            "accessKey": "userAK001",
            "secretKey": "userSK001",
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "SUB",
            "topicPerms": ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"],
            "groupPerms": ["groupA=DENY"],
        },
    ]
}


def signed(ak: str, sk: str, when: str) -> list[tuple[str, str]]:
    return [
        ("x-mq-client-id", "acl-test-client"),
        ("x-mq-date-time", when),
        ("authorization", authorization_header(ak, sk, when)),
    ]


# ---- the date-time window -------------------------------------------------------------------


def test_date_time_must_be_fresh() -> None:
    now = date_time_now(NOW)
    assert now == "20231114T221320Z"
    assert date_time_fresh(now, NOW)
    assert date_time_fresh(date_time_now(NOW - 14 * 60), NOW)
    assert date_time_fresh(date_time_now(NOW + 14 * 60), NOW)
    assert not date_time_fresh(date_time_now(NOW - 16 * 60), NOW)
    assert not date_time_fresh(date_time_now(NOW + 3600 * 30), NOW)
    assert not date_time_fresh("20240102T030405Z", NOW)  # a signature of long ago
    assert not date_time_fresh("x", NOW)
    assert not date_time_fresh("", NOW)


def test_checker_refuses_stale_and_foreign_signatures() -> None:
    checker = AclChecker(StaticAcl(parse_plain_acl(ACCOUNTS)), clock=lambda: NOW)
    now = date_time_now(NOW)
    checker.check(signed("userAK001", "userSK001", now), needs={"topicB": PUB})
    for metadata, why in (
        ([], "No accessKey is configured (no authorization header)"),
        (signed("userAK001", "userSK001", "x"), "Check signature failed"),
        (signed("userAK001", "userSK001", "20240102T030405Z"), "not within 900 s"),
        (signed("userAK001", "wrong", now), "Check signature failed for accessKey=userAK001"),
        (signed("nobody1", "userSK001", now), "No acl config for nobody1"),
    ):
        with pytest.raises(AccessDeniedError, match=why.replace("(", r"\(").replace(")", r"\)")):
            checker.check(metadata)
    with pytest.raises(PermissionDeniedError, match="topic:topicA"):
        checker.check(signed("userAK001", "userSK001", now), needs={"topicA": SUB})
    # the global white addresses of the file let a peer in without a signature
    white = AclChecker(
        StaticAcl(parse_plain_acl({**ACCOUNTS, "globalWhiteRemoteAddresses": ["10.1.*"]})),
        clock=lambda: NOW,
    )
    white.check([], peer="ipv4:10.1.2.3:4000", needs={"topicA": SUB})
    with pytest.raises(AccessDeniedError):
        white.check([], peer="ipv4:10.2.2.3:4000")


def test_request_needs() -> None:
    topic = pb.Resource(name="T")
    group = pb.Resource(name="G")
    mq = pb.MessageQueue(topic=topic)
    send = spb.SendMessageRequest(messages=[pb.Message(topic=topic), pb.Message(topic=group)])
    assert request_needs("SendMessage", send) == {"T": PUB, "G": PUB}
    assert request_needs("QueryRoute", spb.QueryRouteRequest(topic=topic)) == {"T": ANY}
    receive = spb.ReceiveMessageRequest(group=group, message_queue=mq)
    assert request_needs("ReceiveMessage", receive) == {"T": SUB, "%RETRY%G": SUB}
    ack = spb.AckMessageRequest(group=group, topic=topic)
    assert request_needs("AckMessage", ack) == {"T": SUB, "%RETRY%G": SUB}
    update = spb.UpdateOffsetRequest(group=group, message_queue=mq)
    assert request_needs("UpdateOffset", update) == {"T": SUB, "%RETRY%G": SUB}
    end = spb.EndTransactionRequest(topic=topic)
    assert request_needs("EndTransaction", end) == {"T": PUB}
    assert request_needs("Heartbeat", spb.HeartbeatRequest()) == {}
    assert request_needs("Heartbeat", spb.HeartbeatRequest(group=group)) == {"%RETRY%G": SUB}


# ---- a broker with an ACL file ----------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    import yaml

    root = tmp_path_factory.mktemp("grpc-acl")
    path = root / "plain_acl.yml"
    path.write_text(yaml.safe_dump(ACCOUNTS))
    b = BrokerThread(root / "store", broker_overrides={"acl_enable": True, "acl_file": str(path)})
    try:
        yield b.start()
    finally:
        b.close()


@pytest.fixture(scope="module")
def stub(acl_broker: BrokerThread) -> Iterator[Any]:
    channel = grpc.insecure_channel(acl_broker.grpc_address)
    try:
        yield service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()


def send(stub: Any, topic: str, body: bytes, metadata: Any) -> spb.SendMessageResponse:
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = f"ACL{time.monotonic_ns():X}"
    m.system_properties.body_encoding = pb.IDENTITY
    m.system_properties.message_type = pb.NORMAL
    return stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=metadata, timeout=10)


def receive_status(stub: Any, group: str, topic: str, metadata: Any) -> int:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=1,
        auto_renew=False,
    )
    req.invisible_duration.FromMilliseconds(5_000)
    req.long_polling_timeout.FromMilliseconds(100)
    first = next(iter(stub.ReceiveMessage(req, metadata=metadata, timeout=10)))
    return int(first.status.code)


def test_grpc_checks_topics_and_groups(acl_broker: BrokerThread, stub: Any) -> None:
    user = signed("userAK001", "userSK001", date_time_now())
    admin = signed("adminAK01", "adminSK01", date_time_now())
    route = spb.QueryRouteRequest(topic=pb.Resource(name="topicB"))
    assert stub.QueryRoute(route, metadata=user).status.code == Code.OK
    route_a = spb.QueryRouteRequest(topic=pb.Resource(name="topicA"))
    assert stub.QueryRoute(route_a, metadata=user).status.code == Code.FORBIDDEN
    assert stub.QueryRoute(route_a, metadata=admin).status.code == Code.OK

    assert send(stub, "topicB", b"ok", user).status.code == Code.OK
    r = send(stub, "topicA", b"no", user)
    assert r.status.code == Code.FORBIDDEN and "topic:topicA" in r.status.message
    assert send(stub, "topicC", b"sub only", user).status.code == Code.FORBIDDEN
    assert acl_broker.broker.topics.select("topicC") is None  # refused before any work

    assert receive_status(stub, "groupA", "topicB", user) == Code.FORBIDDEN
    # a send to a new queue is answered before dispatch puts it where a receive finds it
    wait_dispatched(acl_broker.broker.store)
    assert receive_status(stub, "groupB", "topicB", user) == Code.OK

    stale = signed("userAK001", "userSK001", "20240102T030405Z")
    r = stub.QueryRoute(route, metadata=stale)
    assert r.status.code == Code.UNAUTHORIZED and "x-mq-date-time" in r.status.message
    assert receive_status(stub, "groupB", "topicB", stale) == Code.UNAUTHORIZED
    (answer,) = stub.Telemetry(iter([spb.TelemetryCommand()]), metadata=stale, timeout=5)
    assert answer.status.code == Code.UNAUTHORIZED


def test_remoting_port_is_no_way_around(acl_broker: BrokerThread) -> None:
    """The topic a gRPC client may not write cannot be written through the remoting port."""
    ext = {"a": "P", "b": "topicA", "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "0"}
    ext |= {"h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
    for signer in (None, RequestSigner("userAK001", "userSK001")):
        with RemotingClient(timeout=5, signer=signer) as client:
            r = client.invoke(
                acl_broker.broker.address, RemotingCommand.request(310, dict(ext), b"x")
            )
        assert r.code == ResponseCode.SYSTEM_ERROR and (r.remark or "").startswith(EXCEPTION_PREFIX)


def test_front_end_keys_guard_the_remoting_port(tmp_path: Path) -> None:
    """A front end given its own keys (no ACL file) puts them on the remoting port too."""
    config = TEST_GRPC_CONFIG.replace(credentials={"keysAK1": "keysSK1"})
    b = BrokerThread(tmp_path, grpc_config=config)
    try:
        b.start()
        with RemotingClient(timeout=5, signer=None) as client:
            r = client.invoke(b.broker.address, RemotingCommand.request(215, {"topic": "x"}))
            assert r.code == ResponseCode.SYSTEM_ERROR and "No accessKey" in (r.remark or "")
            client.signer = RequestSigner("keysAK1", "keysSK1")
            r = client.invoke(b.broker.address, RemotingCommand.request(26, {}))
            assert r.code == ResponseCode.SUCCESS
        with grpc.insecure_channel(b.grpc_address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            route = spb.QueryRouteRequest(topic=pb.Resource(name="AnyTopic"))
            md = signed("keysAK1", "keysSK1", date_time_now())
            assert stub.QueryRoute(route, metadata=md).status.code == Code.OK
    finally:
        b.close()


def test_telemetry_settings_claim_only_what_the_account_may(
    acl_broker: BrokerThread, stub: Any
) -> None:
    """A producer's Telemetry settings name the topics it publishes, and an orphaned
    transaction of such a topic goes down its stream with the message: claiming a topic the
    account may not write ends the stream, and the client is not registered for it."""

    def settings(client_id: str, topic: str) -> spb.TelemetryCommand:
        command = spb.TelemetryCommand()
        command.settings.client_type = pb.PRODUCER
        command.settings.publishing.topics.add(name=topic)
        return command

    def telemetry(client_id: str, topic: str) -> list[spb.TelemetryCommand]:
        md = [("x-mq-client-id", client_id), *signed("userAK001", "userSK001", date_time_now())]
        md = [(k, v) for k, v in md if not (k == "x-mq-client-id" and v == "acl-test-client")]
        answers = stub.Telemetry(iter([settings(client_id, topic)]), metadata=md, timeout=5)
        return list(answers)

    def publishing(client_id: str) -> list[str]:
        info = acl_broker.run(lambda: acl_broker.grpc.service.clients.get(client_id))
        if info is None or info.settings is None:
            return []
        return [t.name for t in info.settings.publishing.topics]

    refused = telemetry("claims-topicA", "topicA")  # userAK001: topicA=DENY
    assert all(a.WhichOneof("command") != "settings" for a in refused), refused
    assert publishing("claims-topicA") == []
    allowed = telemetry("claims-topicB", "topicB")  # topicB=PUB|SUB
    assert any(a.status.code == Code.OK and a.HasField("settings") for a in allowed), allowed
    assert publishing("claims-topicB") == ["topicB"]
