"""The official RocketMQ 4.x client (the ``rocketmq`` 0.4.4 package, RocketMQ's C++ client inside)
against ``rocketstore serve`` with ACL 2.0 (broker.conf's authenticationEnabled and
authorizationEnabled, a Super user from initAuthenticationUser): a Normal user made through the
admin requests signs with its name and password as the access and secret keys; its sends and
pulls on the topic and group its ACL allows go through, a topic its ACL does not name, a wrong
password or no credentials are refused, and the broker serves on."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from rocketstore.acl import RequestSigner
from rocketstore.client._admin import AdminClient
from rocketstore.client._auth_admin import AuthAdmin, acl_info
from support.interop import (
    ClientError,
    Rmq4Client,
    ServerProcess,
    namesrv_of,
    servers,
)

ROOT = RequestSigner("rootUser", "rootPass1")
CREDS = {"access_key": "rmq4user", "secret_key": "rmq4pass1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("acl2-serve")
    conf = root / "broker.conf"
    init = json.dumps({"username": "rootUser", "password": "rootPass1"})
    conf.write_text(
        "authenticationEnabled=true\nauthorizationEnabled=true\n"
        f"initAuthenticationUser={init}\nmappedFileSizeCommitLog=16777216\n"
    )
    with servers() as started:
        started.append(ServerProcess.serve(root / "store", root / "serve.log", conf=conf))
        server = started[0]
        assert server.broker is not None
        with AdminClient(signer=ROOT) as admin:
            auth = AuthAdmin(admin)
            auth.create_user(server.broker, "rmq4user", "rmq4pass1")
            auth.create_acl(
                server.broker, acl_info("User:rmq4user", ["Topic:T2_acl"], ["Pub", "Sub", "Get"])
            )
            auth.create_acl(server.broker, acl_info("User:rmq4user", ["Group:CG2_*"], ["Sub"]))
        yield server


def test_a_users_signed_sends_and_pulls_go_through(server: ServerProcess, rmq4: Rmq4Client) -> None:
    spec = [{"body": f"acl2-{i}", "tags": "A"} for i in range(3)]
    sent = rmq4.run("send", namesrv_of(server), "PG2_acl", "T2_acl", spec=spec, timeout=40, **CREDS)
    assert [s["status"] for s in sent] == ["OK"] * 3, sent
    pulled = rmq4.run(
        "pull", namesrv_of(server), "CG2_acl", "T2_acl", expect=3, timeout=40, **CREDS
    )
    assert sorted(m["body"] for m in pulled if "body" in m) == ["acl2-0", "acl2-1", "acl2-2"]


@pytest.mark.parametrize(
    ("topic", "creds"),
    [
        ("T2_acl", {}),
        ("T2_acl", {"access_key": "rmq4user", "secret_key": "not-the-password"}),
        ("T2_other", CREDS),  # a topic its ACL does not name
    ],
    ids=["unsigned", "bad-password", "not-in-its-acl"],
)
def test_refused_sends(
    server: ServerProcess, rmq4: Rmq4Client, topic: str, creds: dict[str, str]
) -> None:
    before = server.audit().count("DENY ")
    with pytest.raises(ClientError):
        rmq4.run(
            "send",
            namesrv_of(server),
            "PG2_refused",
            topic,
            spec=[{"body": "refused"}],
            timeout=60,
            send_timeout_ms=2000,
            **creds,
        )
    log = server.audit()
    assert log.count("DENY ") > before
    if creds:
        assert "account=rmq4user" in log
    if topic == "T2_other":
        assert "User:rmq4user has no permission to access Topic:T2_other" in log
    assert server.running
