"""The official RocketMQ 4.x client (the ``rocketmq`` 0.4.4 package, RocketMQ's C++ client inside)
against ``rocketstore serve`` with ``aclEnable=true``: the plain_acl.yml is found under
$ROCKETMQ_HOME/conf as RocketMQ's broker finds it; with an account's credentials the client's
signed sends and pulls go through, without them (or with a wrong secret key, or on a topic the
account may not write) they are refused, and the broker serves on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.interop import (
    ClientError,
    Rmq4Client,
    ServerProcess,
    namesrv_of,
    servers,
)

PLAIN_ACL = """\
accounts:
  - accessKey: interopAK
    secretKey: interopSK
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - T_acl=PUB|SUB
      - T_acl_unsigned=PUB|SUB
      - T_denied=DENY
"""
CREDS = {"access_key": "interopAK", "secret_key": "interopSK"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("acl-serve")
    home = root / "rocketmq-home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    conf = root / "broker.conf"
    conf.write_text("aclEnable=true\nmappedFileSizeCommitLog=16777216\n")
    with pytest.MonkeyPatch.context() as mp, servers() as started:
        mp.setenv("ROCKETMQ_HOME", str(home))  # where the broker looks for conf/plain_acl.yml
        started.append(ServerProcess.serve(root / "store", root / "serve.log", conf=conf))
        yield started[0]


def test_signed_sends_and_pulls_go_through(server: ServerProcess, rmq4: Rmq4Client) -> None:
    spec = [{"body": f"acl{i}", "tags": "A"} for i in range(3)]
    sent = rmq4.run("send", namesrv_of(server), "PG_acl", "T_acl", spec=spec, timeout=40, **CREDS)
    assert [s["status"] for s in sent] == ["OK"] * 3, sent
    pulled = rmq4.run("pull", namesrv_of(server), "CG_acl", "T_acl", expect=3, timeout=40, **CREDS)
    assert sorted(m["body"] for m in pulled if "body" in m) == ["acl0", "acl1", "acl2"]


@pytest.mark.parametrize(
    ("topic", "creds"),
    [
        ("T_acl", {}),  # no credentials
        ("T_acl", {"access_key": "interopAK", "secret_key": "not-the-secret"}),
        ("T_denied", CREDS),  # an account that may not write the topic
        ("T_other", CREDS),  # defaultTopicPerm: DENY
    ],
    ids=["unsigned", "bad-secret", "denied-topic", "default-deny"],
)
def test_refused_sends(
    server: ServerProcess, rmq4: Rmq4Client, topic: str, creds: dict[str, str]
) -> None:
    before = server.audit().count("DENY ")
    with pytest.raises(ClientError):
        rmq4.run(
            "send",
            namesrv_of(server),
            "PG_acl_refused",
            topic,
            spec=[{"body": "refused"}],
            timeout=60,
            send_timeout_ms=2000,
            **creds,
        )
    assert server.audit().count("DENY ") > before
    assert server.running


def test_unsigned_pull_is_refused(server: ServerProcess, rmq4: Rmq4Client) -> None:
    # a topic of this test's own: the audit log writes the first refusal of each account,
    # request and resource a minute in full (repeats are counted into a summary line)
    sent = rmq4.run(
        "send", namesrv_of(server), "PG_acl", "T_acl_unsigned", spec=[{"body": "for-pull"}], timeout=40,
        **CREDS,
    )  # fmt: skip
    assert sent[0]["status"] == "OK"
    before = server.audit().count("DENY account=- ")
    try:
        pulled = rmq4.run(
            "pull", namesrv_of(server), "CG_acl_unsigned", "T_acl_unsigned", expect=1, timeout=8
        )
    except ClientError:
        pulled = []
    assert not [m for m in pulled if "body" in m]
    # refused where it first asks: the name server's route (or the broker's pull)
    assert server.audit().count("DENY account=- ") > before
