"""An account with PUB on one topic and nothing else (``attackAK1``: defaultTopicPerm DENY,
defaultGroupPerm DENY, topicPerms [PubOnly=PUB]) against a broker and a name server with ACL
on, as raw signed frames: it can write to PubOnly and nowhere else, read nothing, and change
no group, route or config, whatever shape its requests take.

The holes this closes, one test each: a send whose header spells the topic twice (checked on
one spelling, stored under the other), a send into another group's retry or dead-letter topic,
reading any message by its offset (VIEW_MESSAGE_BY_ID, or copied into one's own retry topic
by CONSUMER_SEND_MSG_BACK), other groups' offsets, locks and transactions moved on a signature
alone, and the name server taking route changes from anyone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from rocketstore.acl._table import BROKER, NAMESRV, Access
from rocketstore.remoting import RemotingCommand, ResponseCode
from rocketstore.store.log._record import decode_msg_id
from support.acl_env import (
    ADMIN,
    ATTACKER,
    BROKER_SAMPLES,
    NAMESRV_SAMPLES,
    READER,
    USER,
    World,
    acl_refused,
    acl_world,
    batch_body,
    call,
    lock_body,
    register_body,
    send_v1_ext,
    send_v2_ext,
    wait_loop,
)
from support.waits import wait_dispatched

RC = ResponseCode
SYSTEM_TOPICS = (
    "%RETRY%GSecret",
    "%DLQ%GSecret",
    "%RETRY%GShared",
    "%DLQ%GShared",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield from acl_world(tmp_path_factory.mktemp("acl_world"))


def broker_state(w: World) -> dict[str, Any]:
    """Everything an attacker could move on the broker, but PubOnly's messages, once dispatch
    has taken every message put so far (a send to a new queue is answered before it)."""
    wait_dispatched(w.broker.broker.store)

    def read() -> dict[str, Any]:
        b = w.broker.broker
        store = b.store
        topics = sorted(set(b.topics.all()) | set(SYSTEM_TOPICS))
        offsets = {
            (t, q): store.get_max_offset_in_queue(t, q)
            for t in topics
            if t != "PubOnly"
            for q in range(18)
        }
        consumers = {g: b.consumers.consumer_ids(g) for g in ("GShared", "GSecret", "PG_tx")}
        return {
            "topics": {n: c.to_json() for n, c in b.topics.all().items()},
            "groups": b.groups.encode(),
            "offsets": b.offsets.encode(),
            "config": b.config,
            "queues": offsets,
            "consumers": consumers,
            "producers": sorted(b.producers.producer_table()),
        }

    return w.broker.run(read)


def namesrv_state(w: World) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        ns = w.namesrv
        route = ns.routes.route("Shared")
        return {
            "cluster": ns.routes.cluster_info().encode(),
            "topics": sorted(ns.routes.all_topics()),
            "route": None if route is None else route.encode(),
            "kv": ns.kv.encode_namespace("ORDER_TOPIC_CONFIG"),
            "config": dict(ns.processor.config),
        }

    return w.broker.run(read)


def attacks(w: World, code: int) -> list[tuple[dict[str, str], bytes]]:
    """The attacker's requests of one broker code: the sample aimed at every topic and group
    it has no right to, and the shapes that slipped through before."""
    sample = BROKER_SAMPLES[code]
    out = [
        sample(w, topic, group)
        for topic, group in (
            ("Secret", "GSecret"),
            ("Shared", "GShared"),
            ("PubOnly", "GSecret"),
            ("%RETRY%GSecret", "GSecret"),
            ("%DLQ%GSecret", "GSecret"),
            ("NewTopicOfAttacker", "NewGroupOfAttacker"),
        )
    ]
    if code in (10, 310, 320):
        out += [
            (send_v2_ext("PubOnly", topic="Secret"), b"twice"),
            (send_v2_ext("PubOnly", topic="Secret", m="true"), b"twice"),
            (send_v1_ext("Secret", b="PubOnly"), b"twice"),
        ]
    if code == 33:
        out.append(({"offset": str(w.secret_offset)}, b""))
    return out


def expected_to_pass(code: int, ext: dict[str, str]) -> bool:
    """What the attacker may do: read metadata (any signed account), send to PubOnly."""
    if BROKER[code].access is Access.SIGNED:
        return True
    if code in (10, 310, 320):
        topics = {ext.get("topic"), ext.get("b")} - {None}
        return topics == {"PubOnly"}
    return False


def test_the_attacker_writes_only_to_its_topic_and_reads_nothing(world: World) -> None:
    w = world
    before, ns_before = broker_state(w), namesrv_state(w)
    passed: list[int] = []
    for code in sorted(BROKER):
        for ext, body in attacks(w, code):
            r = call(w.address, code, ext, ATTACKER, body)
            if expected_to_pass(code, ext):
                assert not acl_refused(r), (code, ext, r.remark)
                passed.append(code)
                continue
            # refused by the ACL, or as a bad request (a field spelled twice)
            assert r.code != RC.SUCCESS, (code, ext, r.remark)
            assert acl_refused(r) or "twice" in (r.remark or ""), (code, ext, r.remark)
            assert not r.body or code in (26,), (code, "a refusal carries no body")
    for code in sorted(NAMESRV):
        for topic in ("Shared", "Secret", "PubOnly"):
            ext, body = NAMESRV_SAMPLES[code](w, topic, "GSecret")
            r = call(w.namesrv_address, code, ext, ATTACKER, body)
            if NAMESRV[code].access is Access.SIGNED:
                assert not acl_refused(r), (code, r.remark)
            else:
                assert acl_refused(r), (code, r.code, r.remark)
    wait_loop(w)
    assert broker_state(w) == before
    assert namesrv_state(w) == ns_before
    assert 310 in passed  # its own topic takes its messages
    assert w.broker.run(lambda: w.broker.broker.store.get_max_offset_in_queue("PubOnly", 0)) > 0


def test_a_header_spelling_the_topic_twice_is_refused(world: World) -> None:
    """SEND_BATCH_MESSAGE with b=PubOnly and topic=Secret was let in for PubOnly and stored in
    Secret; so were SEND_MESSAGE_V2 with an extra topic and SEND_MESSAGE with an extra b."""
    w = world
    before = broker_state(w)
    for code, ext, body in (
        (320, send_v2_ext("PubOnly", topic="Secret", m="true"), batch_body(b"one", b"two")),
        (320, send_v2_ext("PubOnly", topic="Secret"), batch_body(b"one")),
        (310, send_v2_ext("PubOnly", topic="Secret"), b"twice"),
        (10, send_v1_ext("Secret", b="PubOnly"), b"twice"),
    ):
        for signer in (ATTACKER, ADMIN):  # a bad request whoever sends it
            r = call(w.address, code, ext, signer, body)
            assert r.code == RC.SYSTEM_ERROR, (code, r.remark)
            assert "<topic> twice" in (r.remark or ""), r.remark
    wait_loop(w)
    assert broker_state(w)["queues"] == before["queues"]


@pytest.mark.parametrize("topic", ["%RETRY%GSecret", "%DLQ%GSecret"])
def test_a_send_to_a_groups_retry_topic_needs_the_group(world: World, topic: str) -> None:
    """SEND_MESSAGE to %RETRY%GSecret without a group field was accepted: the ACL found no
    group to check. The topic's group decides, whatever the header says."""
    w = world
    before = broker_state(w)
    for code, ext in ((10, send_v1_ext(topic)), (310, send_v2_ext(topic, a="GShared"))):
        r = call(w.address, code, ext, ATTACKER, b"into another group's retries")
        assert acl_refused(r) and "group:GSecret" in (r.remark or ""), r.remark
        r = call(w.address, code, ext, USER, b"into another group's retries")
        assert acl_refused(r) and "group:GSecret" in (r.remark or ""), r.remark
    wait_loop(w)
    assert broker_state(w)["queues"] == before["queues"]
    own = call(w.address, 10, send_v1_ext(topic.replace("GSecret", "GShared")), USER, b"own")
    assert not acl_refused(own), own.remark


def test_a_message_is_read_only_with_its_topic(world: World) -> None:
    """VIEW_MESSAGE_BY_ID needed only a signature: a DENY-all account read Secret's bodies."""
    w = world
    for signer in (ATTACKER, USER):
        r = call(w.address, 33, {"offset": str(w.secret_offset)}, signer)
        assert acl_refused(r) and "topic:Secret" in (r.remark or ""), r.remark
        assert b"body of Secret" not in bytes(r.body)
    r = call(w.address, 33, {"offset": str(w.shared_offset)}, USER)
    assert r.code == RC.SUCCESS and b"body of Shared" in bytes(r.body)
    r = call(w.address, 33, {"offset": str(w.secret_offset)}, ADMIN)
    assert r.code == RC.SUCCESS and b"body of Secret" in bytes(r.body)


def test_a_message_is_not_copied_into_ones_own_retry_topic(world: World) -> None:
    """CONSUMER_SEND_MSG_BACK copies the message at an offset into the group's retry topic:
    with one's own group, any message could be read from there."""
    w = world
    before = broker_state(w)
    ext = {"group": "GShared", "offset": str(w.secret_offset), "delayLevel": "0"}
    r = call(w.address, 36, ext, USER)
    assert acl_refused(r) and "topic:Secret" in (r.remark or ""), r.remark
    wait_loop(w)
    assert broker_state(w)["queues"] == before["queues"]


def test_other_groups_state_does_not_move(world: World) -> None:
    """CLONE_GROUP_OFFSET, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ, CLEAN_UNUSED_TOPIC,
    QUERY_CONSUME_QUEUE, QUERY_CONSUMER_OFFSET, RESET_CONSUMER_OFFSET and END_TRANSACTION
    passed on a signature alone."""
    w = world
    commit = {"consumerGroup": "GSecret", "topic": "Secret", "queueId": "0", "commitOffset": "1"}
    assert call(w.address, 15, commit, ADMIN).code == RC.SUCCESS
    before = broker_state(w)
    for code, ext, body in (
        (314, {"srcGroup": "GSecret", "destGroup": "GSecret", "topic": "Secret"}, b""),
        (314, {"srcGroup": "GSecret", "destGroup": "GShared"}, b""),
        (41, {}, lock_body("GSecret", "Secret", w.broker_name, "attacker@1")),
        (42, {}, lock_body("GSecret", "Secret", w.broker_name, "owner@1")),
        (316, {}, b""),
        (321, {"topic": "Secret", "queueId": "0", "index": "0", "count": "1"}, b""),
        (14, {"consumerGroup": "GSecret", "topic": "Secret", "queueId": "0"}, b""),
        (222, {"topic": "Secret", "group": "GSecret", "timestamp": "0", "isForce": "true"}, b""),
        (37, dict(w.half), b""),
    ):
        r = call(w.address, code, ext, ATTACKER, body)
        assert acl_refused(r), (code, r.code, r.remark)
        assert not r.body, code
    wait_loop(w)
    assert broker_state(w) == before
    # the lock the attacker asked for was not taken: the owner gets it
    r = call(w.address, 41, {}, ADMIN, lock_body("GSecret", "Secret", w.broker_name, "owner@1"))
    assert r.code == RC.SUCCESS and json.loads(bytes(r.body))["lockOKMQSet"], r.body


def test_the_name_server_takes_no_route_change_from_anyone(world: World) -> None:
    """An unsigned WIPE_WRITE_PERM_OF_BROKER made a broker read-only in the routes, an unsigned
    PUT_KV_CONFIG pinned a topic's routes, and a fake broker registered itself."""
    from rocketstore.remoting import RemotingClient

    w = world
    reg = NAMESRV_SAMPLES[103](w, "Shared", "")
    registered = RemotingClient(timeout=10, signer=ADMIN)  # a broker's connection stays open
    try:
        request = RemotingCommand.request(103, {**reg[0], "brokerName": "real-broker"}, reg[1])
        r = registered.invoke(w.namesrv_address, request)
        assert r.code == RC.SUCCESS, r.remark
        _route_changes_refused(w, reg)
    finally:
        registered.close()


def _route_changes_refused(w: World, reg: tuple[dict[str, str], bytes]) -> None:
    before = namesrv_state(w)
    assert before["route"] is not None
    for signer in (None, ATTACKER, USER):
        for code, ext, body in (
            (205, {"brokerName": "real-broker"}, b""),
            (100, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Shared", "value": "x:1"}, b""),
            (103, {**reg[0], "brokerAddr": "127.0.0.1:9"}, register_body("Shared")),
            (104, {**NAMESRV_SAMPLES[104](w, "", "")[0], "brokerName": "real-broker"}, b""),
            (216, {"topic": "Shared"}, b""),
            (318, {}, b"orderMessageEnable=true\n"),
        ):
            r = call(w.namesrv_address, code, ext, signer, body)
            assert acl_refused(r), (code, r.remark)
    assert namesrv_state(w) == before
    route = call(w.namesrv_address, 105, {"topic": "Shared"}, USER)
    assert route.code == RC.SUCCESS and b"127.0.0.1:9" not in bytes(route.body)


def test_refusals_answer_and_the_servers_serve_on(world: World) -> None:
    from rocketstore.remoting import RemotingClient

    w = world
    with RemotingClient(timeout=10, signer=ATTACKER) as client:
        for _ in range(5):
            cmd = RemotingCommand.request(33, {"offset": str(w.secret_offset)})
            assert acl_refused(client.invoke(w.address, cmd))
        client.invoke_oneway(w.address, RemotingCommand.request(33, {"offset": "0"}))
        r = client.invoke(w.address, RemotingCommand.request(26, {}))
        assert r.code == RC.SUCCESS


def test_the_stores_own_topics_are_no_way_around(world: World) -> None:
    """SCHEDULE_TOPIC_XXXX and the transaction topics hold other topics' messages (a delayed
    one, a half one): an account that may read every topic but Secret does not read Secret's
    messages there. No default permission covers those topics."""
    w = world
    r = call(w.address, 310, send_v2_ext("Secret", {"DELAY": "4"}), ADMIN, b"delayed secret")
    assert r.code == RC.SUCCESS, r.remark
    delayed = decode_msg_id(r.ext_fields["msgId"])[1]
    wait_loop(w)
    for topic, queue in (("SCHEDULE_TOPIC_XXXX", "3"), ("RMQ_SYS_TRANS_HALF_TOPIC", "0")):
        pull = dict(BROKER_SAMPLES[11](w, topic, "GReader")[0], queueId=queue)
        refused = call(w.address, 11, pull, READER)
        assert acl_refused(refused) and f"topic:{topic}" in (refused.remark or ""), refused
        assert not refused.body
    view = call(w.address, 33, {"offset": str(delayed)}, READER)
    assert acl_refused(view) and "topic:Secret" in (view.remark or ""), view.remark
    assert b"delayed secret" not in bytes(view.body)
    shared = call(w.address, 33, {"offset": str(w.shared_offset)}, READER)
    assert shared.code == RC.SUCCESS and b"body of Shared" in bytes(shared.body)
    assert call(w.address, 33, {"offset": str(delayed)}, ADMIN).code == RC.SUCCESS
