"""The console's message views with ACL on: an account that may not read a topic gets 403 for
its messages whichever way it asks (by time, by key, by either id), and never their bodies."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rocketstore.acl import RequestSigner
from rocketstore.client import Producer, SendResult
from support.console_env import ConsoleEnv, http
from support.waits import wait_until

ACL_YML = """\
accounts:
  - accessKey: console-admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: attackAK1
    secretKey: attackSK1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [PubOnly=PUB]
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleEnv]:
    e = ConsoleEnv(tmp_path_factory.mktemp("console-acl-read"), acl=True, acl_yml=ACL_YML)
    try:
        yield e.open()
    finally:
        e.close()


def sign_in(env: ConsoleEnv, ak: str, sk: str) -> str:
    r = http(env, "POST", "/api/login", {"accessKey": ak, "secretKey": sk})
    assert r.status == 200, r.body
    return str(r.headers["Set-Cookie"]).split(";")[0]


@pytest.fixture(scope="module")
def secret(env: ConsoleEnv) -> SendResult:
    admin = sign_in(env, "console-admin", "admin-secret-1")
    for topic in ("Secret", "PubOnly"):
        made = http(env, "POST", "/api/topic/create", {"topic": topic}, cookie=admin)
        assert made.status == 200, made.body
    with Producer(env.namesrv) as p:
        p.client.signer = RequestSigner("console-admin", "admin-secret-1")
        sent = p.send("Secret", b"the secret body", keys="secret-key")
    assert wait_until(
        lambda: env.broker is not None and env.broker.store.dispatch_behind_bytes() == 0
    )
    return sent


def test_find_by_id_shows_no_body_to_an_account_that_cannot_read(
    env: ConsoleEnv, secret: SendResult
) -> None:
    """The console's "find by id" showed Secret's bodies to a DENY-all account (its search by
    time and key answered 403)."""
    attacker = sign_in(env, "attackAK1", "attackSK1")
    for path in (
        f"/api/messages/id?id={secret.offset_msg_id}",
        f"/api/messages/id?id={secret.offset_msg_id}&topic=Secret",
        f"/api/messages/id?id={secret.msg_id}&topic=Secret",
        "/api/messages/key?topic=Secret&key=secret-key",
        "/api/messages/time?topic=Secret",
    ):
        r = http(env, "GET", path, cookie=attacker)
        assert r.status == 403, (path, r.status, r.body)
        assert b"the secret body" not in r.body and b"AclException" in r.body
    admin = sign_in(env, "console-admin", "admin-secret-1")
    r = http(env, "GET", f"/api/messages/id?id={secret.offset_msg_id}", cookie=admin)
    assert r.status == 200 and r.doc["messages"][0]["bodyText"] == "the secret body"
