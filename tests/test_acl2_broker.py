"""ACL 2.0 through a real broker (authenticationEnabled and authorizationEnabled on, a Super user
from initAuthenticationUser): every user and ACL admin request answered for the Super user, decided
on the cluster for a normal user (as RocketMQ 5.3 does) and refused for an unsigned one; a normal user's sends and pulls decided by
its ACL; the users and ACLs kept in config/auth.json across a restart; the gRPC front end's
checker deciding with the same users."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.acl import RequestSigner
from rocketstore.acl._auth_store import AuthStore
from rocketstore.acl._table import BROKER
from rocketstore.client._admin import AdminClient
from rocketstore.client._auth_admin import AuthAdmin, acl_info
from rocketstore.client._route import ClientError
from rocketstore.remoting import ResponseCode
from support.acl_env import (
    BROKER_SAMPLES,
    acl2_refused,
    call,
    create_topic_ext,
    group_body,
    send_v2_ext,
)
from support.grpc_broker import BrokerThread
from support.waits import wait_dispatched

RC = ResponseCode
ROOT = RequestSigner("rootUser", "rootPass1")
ALICE = RequestSigner("alice01", "alicePass1")
OVERRIDES = {
    "authentication_enabled": True,
    "authorization_enabled": True,
    "init_authentication_user": json.dumps({"username": "rootUser", "password": "rootPass1"}),
}
AUTH_CODES = range(3001, 3011)


def pull_ext(topic: str, group: str) -> dict[str, str]:
    ext: dict[str, Any] = BROKER_SAMPLES[11](None, topic, group)[0]  # type: ignore[arg-type]
    return ext


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    root = tmp_path_factory.mktemp("acl2")
    b = BrokerThread(root / "store", broker_overrides=OVERRIDES)
    b.start()
    try:
        addr = b.broker.address
        for topic in ("X", "Y"):
            r = call(addr, 17, create_topic_ext(topic), ROOT)
            assert r.code == RC.SUCCESS, r.remark
        for group in ("GA", "GB"):
            r = call(addr, 200, {}, ROOT, group_body(group))
            assert r.code == RC.SUCCESS, r.remark
        with AdminClient(signer=ROOT) as admin:
            auth = AuthAdmin(admin)
            auth.create_user(addr, "alice01", "alicePass1")
            auth.create_acl(addr, acl_info("User:alice01", ["Topic:X"], ["Pub", "Sub", "Get"]))
            auth.create_acl(addr, acl_info("User:alice01", ["Group:GA"], ["Sub"]))
        yield b
    finally:
        b.close()


def admin_of(signer: Any) -> AuthAdmin:
    return AuthAdmin(AdminClient(signer=signer))


def test_the_auth_codes_are_decided_on_the_cluster_as_rocketmq_does(broker: BrokerThread) -> None:
    """As RocketMQ 5.3's headers declare them: Cluster Update for a change, Get for a read;
    a Super user is made, changed or removed by a Super user only."""
    addr = broker.broker.address
    assert all(BROKER[c].auth_admin for c in AUTH_CODES)
    for code in AUTH_CODES:
        ext, body = BROKER_SAMPLES[code](None, "X", "GA")  # type: ignore[arg-type]
        for signer in (ALICE, None):
            r = call(addr, code, ext, signer, body)
            assert acl2_refused(r), (code, signer, r.code, r.remark)
    refused = call(addr, 3005, {}, ALICE)
    assert "User:alice01 has no permission to access Cluster:DefaultCluster" in (
        refused.remark or ""
    )
    unsigned = call(addr, 3005, {}, None)
    assert "username cannot be null" in (unsigned.remark or "")

    clara = RequestSigner("clara01", "claraPass1")
    with AdminClient(signer=ROOT) as admin:
        auth = AuthAdmin(admin)
        auth.create_user(addr, "clara01", "claraPass1")
        auth.create_acl(addr, acl_info("User:clara01", ["Cluster:DefaultCluster"], ["Get"]))
    try:
        with AdminClient(signer=clara) as admin:
            reader = AuthAdmin(admin)
            assert "rootUser" in [u["username"] for u in reader.list_users(addr)]
            with pytest.raises(ClientError, match="no permission to access Cluster"):
                reader.create_user(addr, "dora01", "doraPass1")
        with AdminClient(signer=ROOT) as admin:
            AuthAdmin(admin).update_acl(
                addr, acl_info("User:clara01", ["Cluster:DefaultCluster"], ["Get", "Update"])
            )
        with AdminClient(signer=clara) as admin:
            writer = AuthAdmin(admin)
            writer.create_user(addr, "dora01", "doraPass1")
            with pytest.raises(ClientError, match="super user can only be create by super user"):
                writer.create_user(addr, "eve0001", "evePass1", "Super")
            with pytest.raises(ClientError, match="super user can only be update by super user"):
                writer.delete_user(addr, "rootUser")
            writer.delete_user(addr, "dora01")
    finally:
        with AdminClient(signer=ROOT) as admin:
            AuthAdmin(admin).delete_user(addr, "clara01")


def test_the_admin_requests_for_a_super_user(broker: BrokerThread) -> None:
    addr = broker.broker.address
    with AdminClient(signer=ROOT) as admin:
        auth = AuthAdmin(admin)
        auth.create_user(addr, "bob0001", "bobPass01", "Normal")
        with pytest.raises(ClientError) as info:
            auth.create_user(addr, "bob0001", "other")
        assert info.value.code == RC.NO_PERMISSION and "The user is existed" in str(info.value)
        auth.update_user(addr, "bob0001", user_status="disable")
        assert auth.get_user(addr, "bob0001") == {
            "username": "bob0001",
            "password": "bobPass01",
            "userType": "Normal",
            "userStatus": "disable",
        }
        assert auth.get_user(addr, "nobody") is None
        names = [u["username"] for u in auth.list_users(addr)]
        assert {"rootUser", "alice01", "bob0001"} <= set(names)
        assert [u["username"] for u in auth.list_users(addr, "bob")] == ["bob0001"]
        info_doc = acl_info("User:bob0001", ["Topic:X", "Group:G*"], ["Sub"], ["10.0.0.0/8"])
        auth.create_acl(addr, info_doc)
        auth.update_acl(addr, acl_info("User:bob0001", ["Topic:X"], ["Pub"], [], "Deny"))
        got = auth.get_acl(addr, "User:bob0001")
        assert got == {
            "subject": "User:bob0001",
            "policies": [
                {
                    "policyType": "Custom",
                    "entries": [
                        {
                            "resource": "Topic:X",
                            "actions": ["Pub"],
                            "decision": "Deny",
                        },
                        {
                            "resource": "Group:G*",
                            "actions": ["Sub"],
                            "sourceIps": ["10.0.0.0/8"],
                            "decision": "Allow",
                        },
                    ],
                }
            ],
        }
        listed = auth.list_acls(addr, None, "Group:G*")
        assert [a["subject"] for a in listed] == ["User:bob0001"]
        assert [e["resource"] for e in listed[0]["policies"][0]["entries"]] == ["Group:G*"]
        auth.delete_acl(addr, "User:bob0001", "Topic:X")
        got = auth.get_acl(addr, "User:bob0001")
        assert got is not None
        assert [e["resource"] for e in got["policies"][0]["entries"]] == ["Group:G*"]
        with pytest.raises(ClientError, match="subject of User:ghost is not exist"):
            auth.create_acl(addr, acl_info("User:ghost", ["Topic:X"], ["Pub"]))
        r = call(addr, 3001, {"username": "eve0001"}, ROOT, b'{"password": "p", "userType": "x"}')
        assert r.code == RC.NO_PERMISSION and "userType" in (r.remark or "")
        r = call(addr, 3001, {}, ROOT, b'{"password": "p"}')
        assert r.code == RC.INVALID_PARAMETER
        auth.delete_user(addr, "bob0001")
        assert auth.get_user(addr, "bob0001") is None
        auth.delete_user(addr, "bob0001")  # none: still SUCCESS
        with pytest.raises(ClientError, match="not exist"):
            auth.get_acl(addr, "User:bob0001")


def test_a_normal_users_sends_and_pulls_follow_its_acl(broker: BrokerThread) -> None:
    addr = broker.broker.address
    ok = call(addr, 310, send_v2_ext("X"), ALICE, b"to X")
    assert ok.code == RC.SUCCESS, ok.remark
    refused = call(addr, 310, send_v2_ext("Y"), ALICE, b"to Y")
    assert acl2_refused(refused)
    assert "User:alice01 has no permission to access Topic:Y" in (refused.remark or "")
    assert not acl2_refused(call(addr, 11, pull_ext("X", "GA"), ALICE))
    assert acl2_refused(call(addr, 11, pull_ext("X", "GB"), ALICE))  # not its group
    assert acl2_refused(call(addr, 11, pull_ext("Y", "GA"), ALICE))  # not its topic
    wrong = RequestSigner("alice01", "not-the-password")
    r = call(addr, 310, send_v2_ext("X"), wrong, b"x")
    assert acl2_refused(r) and "check signature failed" in (r.remark or "")
    # a Super user sends anywhere; cluster-wide admin requests need Cluster rights
    assert call(addr, 310, send_v2_ext("Y"), ROOT, b"to Y").code == RC.SUCCESS
    assert acl2_refused(call(addr, 17, create_topic_ext("Z"), ALICE))


def test_a_disabled_user_is_refused(broker: BrokerThread) -> None:
    addr = broker.broker.address
    with AdminClient(signer=ROOT) as admin:
        auth = AuthAdmin(admin)
        auth.create_user(addr, "carol01", "carolPass1")
        auth.create_acl(addr, acl_info("User:carol01", ["Topic:X"], ["Pub"]))
        assert (
            call(addr, 310, send_v2_ext("X"), RequestSigner("carol01", "carolPass1"), b"c").code
            == RC.SUCCESS
        )
        auth.update_user(addr, "carol01", user_status="disable")
    r = call(addr, 310, send_v2_ext("X"), RequestSigner("carol01", "carolPass1"), b"c")
    assert acl2_refused(r) and "User:carol01 is disabled." in (r.remark or "")


def test_grpc_decides_with_the_same_users(broker: BrokerThread) -> None:
    import time

    import grpc

    from rocketstore.grpc._acl import authorization_header, date_time_now
    from rocketstore.grpc._pb import definition_pb2 as pb
    from rocketstore.grpc._pb import service_pb2 as spb
    from rocketstore.grpc._pb import service_pb2_grpc

    def md(ak: str, sk: str) -> list[tuple[str, str]]:
        now = date_time_now()
        return [
            ("x-mq-client-id", f"acl2-{ak}"),
            ("x-mq-date-time", now),
            ("authorization", authorization_header(ak, sk, now)),
        ]

    def send(stub: Any, topic: str, metadata: Any) -> int:
        m = pb.Message(body=b"over gRPC")
        m.topic.name = topic
        m.system_properties.message_id = f"ACL2{time.monotonic_ns():X}"
        m.system_properties.body_encoding = pb.IDENTITY
        m.system_properties.message_type = pb.NORMAL
        r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=metadata, timeout=10)
        return int(r.status.code)

    def receive(stub: Any, group: str, topic: str, metadata: Any) -> int:
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=1,
            auto_renew=False,
        )
        req.invisible_duration.FromMilliseconds(5_000)
        req.long_polling_timeout.FromMilliseconds(100)
        return int(next(iter(stub.ReceiveMessage(req, metadata=metadata, timeout=10))).status.code)

    alice = md("alice01", "alicePass1")
    with grpc.insecure_channel(broker.grpc_address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        assert send(stub, "X", alice) == pb.Code.OK
        assert send(stub, "Y", alice) == pb.Code.FORBIDDEN
        assert send(stub, "X", md("alice01", "wrong")) == pb.Code.UNAUTHORIZED
        assert send(stub, "Y", md("rootUser", "rootPass1")) == pb.Code.OK
        # a send to a new queue is answered before dispatch puts it where a receive finds it
        wait_dispatched(broker.broker.store)
        assert receive(stub, "GA", "X", alice) == pb.Code.OK
        assert receive(stub, "GB", "X", alice) == pb.Code.FORBIDDEN


def test_users_and_acls_are_kept_in_the_config_dir(broker: BrokerThread) -> None:
    config_dir = Path(broker.root) / "config"
    kept = AuthStore(config_dir)
    assert kept.get_user("alice01") is not None and kept.is_super("rootUser")
    acl = kept.get_acl("User:alice01")
    assert acl is not None
    assert [e.resource.key for p in acl.policies for e in p.entries] == ["Topic:X", "Group:GA"]


def test_the_cli_commands(broker: BrokerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from rocketstore.cli import main

    addr = broker.broker.address
    monkeypatch.setenv("ROCKETSTORE_ACCESS_KEY", "rootUser")
    monkeypatch.setenv("ROCKETSTORE_SECRET_KEY", "rootPass1")
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert "success" in run("user", "create", "-b", addr, "-u", "dave001", "-p", "davePass1")
    run("user", "update", "-b", addr, "-u", "dave001", "-s", "disable")
    users = json.loads(run("user", "list", "-b", addr, "-f", "dave", "--json"))
    assert users == {
        addr: [
            {
                "username": "dave001",
                "password": "davePass1",
                "userType": "Normal",
                "userStatus": "disable",
            }
        ]
    }
    run("acl", "create", "-b", addr, "-s", "User:dave001", "-r", "Topic:X,Group:GA", "-a", "Sub")
    run("acl", "update", "-b", addr, "-s", "User:dave001", "-r", "Topic:X", "-a", "Pub,Sub")
    got = json.loads(run("acl", "get", "-b", addr, "-s", "User:dave001", "--json"))[addr][0]
    entries = got["policies"][0]["entries"]
    assert [(e["resource"], e["actions"]) for e in entries] == [
        ("Topic:X", ["Pub", "Sub"]),
        ("Group:GA", ["Sub"]),
    ]
    assert "Group:GA" in run("acl", "list", "-b", addr, "-s", "dave")
    run("acl", "delete", "-b", addr, "-s", "User:dave001", "-r", "Group:GA")
    listed = json.loads(run("acl", "list", "-b", addr, "-s", "dave", "--json"))[addr]
    assert [e["resource"] for e in listed[0]["policies"][0]["entries"]] == ["Topic:X"]
    bad = runner.invoke(
        main, ["acl", "create", "-b", addr, "-s", "User:dave001", "-r", "Queue:x", "-a", "Pub"]
    )
    assert bad.exit_code != 0 and "resource type" in bad.output
    ns = broker.namesrv.address  # the cluster's brokers, through the name server
    assert "success" in run(
        "user", "create", "-n", ns, "-c", "DefaultCluster", "-u", "frank01", "-p", "frankPass1"
    )
    assert list(json.loads(run("user", "get", "-n", ns, "-u", "frank01", "--json"))) == [addr]
    run("user", "delete", "-n", ns, "-u", "frank01")
    run("user", "delete", "-b", addr, "-u", "dave001")
    assert json.loads(run("user", "get", "-b", addr, "-u", "dave001", "--json")) == {}


def test_changes_and_refusals_are_audited(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    addr = broker.broker.address
    with caplog.at_level("INFO", logger="rocketstore.audit"):
        with AdminClient(signer=ROOT) as admin:
            AuthAdmin(admin).create_user(addr, "erin001", "erinPass1")
        call(addr, 3003, {"username": "erin001"}, ALICE)
    lines = [r.getMessage() for r in caplog.records if r.name == "rocketstore.audit"]
    assert any(
        line.startswith("ALLOW account=rootUser ")
        and "request=3001 AUTH_CREATE_USER resource=user:erin001" in line
        for line in lines
    ), lines
    assert any(
        line.startswith("DENY account=alice01 ") and "request=3003 AUTH_DELETE_USER" in line
        for line in lines
    ), lines
    assert (
        "[AUTHORIZATION] Subject = User:rootUser is Allow Action = Update from sourceIp = "
        "127.0.0.1 on resource = Cluster:DefaultCluster for request = 3001." in lines
    ), lines


def test_the_init_users_password_is_not_in_the_broker_config(broker: BrokerThread) -> None:
    r = call(broker.broker.address, 26, {}, ROOT)
    assert r.code == RC.SUCCESS
    text = bytes(r.body).decode()
    assert "authenticationEnabled=true" in text
    assert "rootPass1" not in text and "initAuthenticationUser" not in text


def test_copy_users_and_acls_to_another_broker(
    broker: BrokerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from rocketstore.cli import main

    other = BrokerThread(tmp_path / "store", broker_overrides=OVERRIDES)
    other.start()
    try:
        src, dst = broker.broker.address, other.broker.address
        with AdminClient(signer=ROOT) as admin:
            auth = AuthAdmin(admin)
            auth.create_user(dst, "alice01", "oldPass01")  # there already: updated
            monkeypatch.setenv("ROCKETSTORE_ACCESS_KEY", "rootUser")
            monkeypatch.setenv("ROCKETSTORE_SECRET_KEY", "rootPass1")
            runner = CliRunner()
            out = runner.invoke(main, ["user", "copy", "-f", src, "-t", dst, "-u", "alice01"])
            assert out.exit_code == 0, out.output
            out = runner.invoke(main, ["acl", "copy", "-f", src, "-t", dst, "-s", "User:alice01"])
            assert out.exit_code == 0, out.output
            assert "copy acl of User:alice01" in out.output
            assert auth.get_user(dst, "alice01") == auth.get_user(src, "alice01")
            assert auth.get_acl(dst, "User:alice01") == auth.get_acl(src, "User:alice01")
            copied = auth.copy_users(src, dst)  # every user, in Python
            assert "rootUser" in copied and len(auth.list_users(dst)) >= len(auth.list_users(src))
        ok = call(dst, 310, send_v2_ext("X"), ALICE, b"on the copy")
        assert not acl2_refused(ok), ok.remark
        assert acl2_refused(call(dst, 310, send_v2_ext("Y"), ALICE, b"x"))
    finally:
        other.close()


@pytest.mark.parametrize(
    ("code", "ext", "body", "why"),
    [
        (3006, {"subject": "User:alice01"}, b"{not json", "The body is not JSON."),
        (3006, {"subject": "User:alice01"}, b"[1, 2]", "The body of acl is null"),
        (3006, {"subject": "User:alice01"}, b"[" * 5000 + b"]" * 5000, "not JSON"),
        (3007, {"subject": "User:alice01"}, b'{"policies": [{"entries": []}]}', "entries is empty"),
        (3007, {"subject": "Group:g"}, b'{"policies": [{"entries": [1]}]}', "is not User:<name>"),
        (3001, {"username": "x1"}, b'{"password": 5}', "password must be text"),
        (3008, {"subject": "User:alice01", "resource": "Queue:q"}, b"", "resource type"),
    ],
)
def test_bad_admin_requests_are_answered_and_change_nothing(
    broker: BrokerThread, code: int, ext: dict[str, str], body: bytes, why: str
) -> None:
    addr = broker.broker.address
    before = AuthStore(Path(broker.root) / "config")
    r = call(addr, code, ext, ROOT, body)
    assert r.code == RC.NO_PERMISSION and why in (r.remark or ""), (r.code, r.remark)
    after = AuthStore(Path(broker.root) / "config")
    assert after.list_users() == before.list_users()
    assert after.list_acls() == before.list_acls()
    assert call(addr, 3005, {}, ROOT).code == RC.SUCCESS  # serves on
