"""The official RocketMQ 5.x Python client (rocketmq-python-client) against the gRPC front end of a
broker with ACL 2.0 on: a Normal user (its name and password as the client's credentials) sends
to and receives from the topic and group its ACL allows; a topic its ACL does not name, or a
wrong password, is refused."""

from __future__ import annotations

import json
from pathlib import Path

from rocketstore.acl import RequestSigner
from rocketstore.client._admin import AdminClient
from rocketstore.client._auth_admin import AuthAdmin, acl_info
from support.grpc_broker import BrokerThread
from support.grpc_client import client_python as client_python  # the client's venv (fixture)
from support.grpc_client import run_client

OVERRIDES = {
    "authentication_enabled": True,
    "authorization_enabled": True,
    "init_authentication_user": json.dumps({"username": "rootUser", "password": "rootPass1"}),
}


def test_a_users_grpc_client(client_python: Path, tmp_path: Path) -> None:
    b = BrokerThread(tmp_path / "broker", broker_overrides=OVERRIDES)
    try:
        b.start()
        addr = b.broker.address
        with AdminClient(signer=RequestSigner("rootUser", "rootPass1")) as admin:
            auth = AuthAdmin(admin)
            auth.create_user(addr, "grpcUser1", "grpcPass1")
            auth.create_acl(addr, acl_info("User:grpcUser1", ["Topic:AclT2"], ["Pub", "Sub"]))
            auth.create_acl(addr, acl_info("User:grpcUser1", ["Group:AclG2"], ["Sub"]))
            auth.create_acl(addr, acl_info("User:grpcUser1", ["Topic:Other2"], ["Pub"], [], "Deny"))
        creds = {"ak": "grpcUser1", "sk": "grpcPass1"}
        msgs = [{"body": "for a user", "tag": "U"}]
        good = run_client(
            client_python,
            b,
            tmp_path / "h1",
            scenario="produce",
            topic="AclT2",
            messages=msgs,
            **creds,
        )
        assert not good["errors"] and len(good["receipts"]) == 1, good
        for topic, ak, sk in (("Other2", *creds.values()), ("AclT2", "grpcUser1", "wrong")):
            bad = run_client(
                client_python,
                b,
                tmp_path / "h2",
                scenario="produce",
                topic=topic,
                messages=msgs,
                ak=ak,
                sk=sk,
            )
            assert bad["errors"] and not bad["receipts"], (topic, ak, sk)
        got = run_client(
            client_python,
            b,
            tmp_path / "h3",
            scenario="receive",
            topic="AclT2",
            group="AclG2",
            rounds=1,
            invisible_s=5,
            **creds,
        )
        assert [m["body"] for m in got["rounds"][0]] == ["for a user"]
    finally:
        b.close()
