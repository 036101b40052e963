"""The console's message views with ACL on: an account that may not read a topic never gets its
messages' bodies, whichever way it asks: 403 by time and by key (it names the topic itself),
and by either id the same not-found answer whether a message lies there or not (which topic
wrote at an offset is not told either)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rocketstore.acl import RequestSigner
from rocketstore.client import Producer, SendResult
from rocketstore.client._route import ClientError
from rocketstore.console._server import _acl_refused
from rocketstore.remoting import ResponseCode
from support.console_env import ATTACKER_ACL_YML, ConsoleEnv, http, opened, sign_in
from support.waits import wait_until


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleEnv]:
    with opened(
        tmp_path_factory.mktemp("console-acl-read"), acl=True, acl_yml=ATTACKER_ACL_YML
    ) as e:
        yield e


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
        "/api/messages/key?topic=Secret&key=secret-key",
        "/api/messages/time?topic=Secret",
    ):
        r = http(env, "GET", path, cookie=attacker)
        assert r.status == 403, (path, r.status, r.body)
        assert b"the secret body" not in r.body and b"AclException" in r.body
    for query in (
        f"id={secret.offset_msg_id}",
        f"id={secret.offset_msg_id}&topic=Secret",
        f"id={secret.msg_id}&topic=Secret",
    ):
        r = http(env, "GET", f"/api/messages/id?{query}", cookie=attacker)
        assert r.status == 404, (query, r.status, r.body)
        assert b"the secret body" not in r.body and b"Secret" not in r.body
    admin = sign_in(env, "console-admin", "admin-secret-1")
    r = http(env, "GET", f"/api/messages/id?id={secret.offset_msg_id}", cookie=admin)
    assert r.status == 200 and r.doc["messages"][0]["bodyText"] == "the secret body"


def test_find_by_offset_id_answers_alike_where_a_message_is_and_where_none_is(
    env: ConsoleEnv, secret: SendResult
) -> None:
    """An account without SUB on a message's topic was answered 403 naming the topic where a
    message lies and 502 where none does: it learned which topic wrote at each offset. Now
    both answers are the same, apart from the id they repeat."""
    from rocketstore.store.log._record import decode_msg_id

    _host, offset = decode_msg_id(secret.offset_msg_id)
    # the same broker, an offset nothing was written at
    empty = secret.offset_msg_id[:-16] + f"{offset + 10_000_000:016X}"
    attacker = sign_in(env, "attackAK1", "attackSK1")
    answers = []
    for msg_id in (secret.offset_msg_id, empty):
        r = http(env, "GET", f"/api/messages/id?id={msg_id}", cookie=attacker)
        answers.append((r.status, r.body.replace(msg_id.encode(), b"<id>")))
    assert answers[0] == answers[1], answers
    assert answers[0][0] == 404 and b"Secret" not in answers[0][1]
    # the admin, who may read it, still finds the message, and is told none is at the other
    admin = sign_in(env, "console-admin", "admin-secret-1")
    assert (
        http(env, "GET", f"/api/messages/id?id={secret.offset_msg_id}", cookie=admin).status == 200
    )
    assert http(env, "GET", f"/api/messages/id?id={empty}", cookie=admin).status == 404


def test_either_acls_refusal_is_taken_for_one() -> None:
    """A broker's plain ACL refuses with 4.x's AclException, its ACL 2.0 with 5.3's
    NO_PERMISSION and the reason alone: the console's sign-in check knows both."""
    v1 = "org.apache.rocketmq.acl.common.AclException: check signature failed."
    assert _acl_refused(ClientError(ResponseCode.SYSTEM_ERROR, v1))
    assert _acl_refused(ClientError(ResponseCode.NO_PERMISSION, "check signature failed."))
    assert not _acl_refused(ClientError(ResponseCode.TOPIC_NOT_EXIST, "topic not exist"))
