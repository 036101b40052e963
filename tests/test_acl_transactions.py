"""Transaction checks carry the half message: with ACL on they go only to a producer of the
group whose account may send to the message's topic, never to any account that registered
itself under the group's name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.remoting import ResponseCode
from support.acl_env import ACL_YML, ADMIN, ATTACKER, USER, acl_refused, call, create_topic_ext
from support.grpc_broker import BrokerThread
from support.transactions import COMMIT, QUIET_CHECKS, TxProducer, check, wait_for

RC = ResponseCode


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    b = BrokerThread(
        tmp_path / "store",
        broker_overrides={
            "acl_enable": True,
            "acl_file": str(acl),
            **QUIET_CHECKS,  # checked when the test asks
        },
    )
    try:
        yield b.start()
    finally:
        b.close()


def test_checks_go_only_to_producers_that_may_send_the_message(broker: BrokerThread) -> None:
    r = call(broker.broker.address, 17, create_topic_ext("Shared"), ADMIN)
    assert r.code == RC.SUCCESS
    owner = TxProducer(broker, group="PG_tx", answer=COMMIT)
    thief = TxProducer(broker, group="PG_tx")
    try:
        owner.client.signer = USER  # PUB|SUB on Shared
        thief.client.signer = ATTACKER  # PUB on PubOnly only
        thief.heartbeat()  # a producer group is anybody's name to register under
        sent, uniq = owner.send_half("Shared", b"the half's secret body")
        assert sent.code == RC.SUCCESS, sent.remark
        assert check(broker) == 0  # nobody allowed to ask: the half waits
        assert thief.checks == []
        # nor can the thief end it
        ended = thief.end(sent, uniq, COMMIT)
        assert acl_refused(ended) and "topic:Shared" in (ended.remark or "")
        owner.heartbeat()
        assert check(broker) == 1
        assert wait_for(lambda: len(owner.checks) == 1)
        assert thief.checks == []
        assert owner.checks[0][1].body == b"the half's secret body"
    finally:
        owner.close()
        thief.close()
