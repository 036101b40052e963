"""The broker's request processors over loopback: a NameServer and a BrokerController on an event
loop in a background thread, driven by rocketstore's own client (Producer, PullConsumer) and by
raw remoting requests. Sends (auto-created topics, refused topics and queues, batches), pull
statuses and long polling, consumer offsets and their file, client membership and
NOTIFY_CONSUMER_IDS_CHANGED, send-back into the retry topic and the DLQ, and a slave's refusal.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import ManualClock
from rocketstore.broker.clients._queue_locks import LOCK_MAX_LIVE_MS, QueueKey, QueueLocks
from rocketstore.broker.state._consumer_offset import ConsumerOffsetManager
from rocketstore.client import ClientError, MessageQueue, Producer, PullConsumer
from rocketstore.client._consumer import FOUND, NO_MATCHED_MSG, NO_NEW_MSG, OFFSET_ILLEGAL
from rocketstore.client._route import parse_route
from rocketstore.remoting import (
    AsyncRemotingClient,
    Connection,
    RemotingClient,
    RemotingCommand,
)
from support.broker import RC, RunningBroker, heartbeat, pull_request, send_request
from support.waits import wait_dispatched, wait_until

BROKER = "broker-a"


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., RunningBroker]]:
    started: list[RunningBroker] = []

    def start(
        name: str = "b", *, store: dict[str, Any] | None = None, **broker: Any
    ) -> RunningBroker:
        running = RunningBroker(tmp_path / name, store=store or {}, broker=broker)
        started.append(running)
        return running

    yield start
    for running in reversed(started):
        running.stop()


@pytest.fixture
def broker(start_broker: Callable[..., RunningBroker]) -> RunningBroker:
    return start_broker()


@pytest.fixture
def client() -> Iterator[RemotingClient]:
    with RemotingClient(timeout=5.0) as c:
        yield c


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def wait_routed(b: RunningBroker, topic: str) -> None:
    """Wait for the name server to route ``topic`` (a topic created by a send is registered at
    once, but the registration travels on its own connection)."""
    with RemotingClient() as c:
        request = RemotingCommand.request

        def routed() -> bool:
            return bool(c.invoke(b.ns, request(105, {"topic": topic})).code == RC.SUCCESS)

        assert wait_for(routed, 3.0), f"{topic} is not routed"


# ---- sending ----------------------------------------------------------------------------------


def test_an_auto_created_topic_is_routed_at_once(broker: RunningBroker) -> None:
    with Producer(broker.ns) as producer:
        r = producer.send("T_auto", b"hello", tags="A")
    assert r.status == "SEND_OK"
    assert r.queue.broker_name == BROKER

    with RemotingClient() as c:

        def route() -> Any:
            answer = c.invoke(broker.ns, RemotingCommand.request(105, {"topic": "T_auto"}))
            return answer if answer.code == RC.SUCCESS else None

        answer = wait_for(route, 3.0)  # well before the 30 s registration period
    assert answer is not None
    parsed = parse_route("T_auto", answer.body)
    assert parsed.master(BROKER) == broker.addr
    assert [q.queue_id for q in parsed.queues(write=True)] == [0, 1, 2, 3]


def test_unknown_topic_without_auto_creation(
    start_broker: Callable[..., RunningBroker], client: RemotingClient
) -> None:
    b = start_broker(auto_create_topic_enable=False)
    r = client.invoke(b.addr, send_request("T_unknown"))
    assert r.code == RC.TOPIC_NOT_EXIST
    assert "T_unknown" in (r.remark or "")


def test_refused_topics_and_queues(broker: RunningBroker, client: RemotingClient) -> None:
    r = client.invoke(broker.addr, send_request("bad topic!"))
    assert r.code == RC.SYSTEM_ERROR
    assert "illegal characters" in (r.remark or "")
    r = client.invoke(broker.addr, send_request("x" * 128))
    assert r.code == RC.SYSTEM_ERROR
    r = client.invoke(broker.addr, send_request("SCHEDULE_TOPIC_XXXX"))
    assert r.code == RC.NO_PERMISSION
    assert client.invoke(broker.addr, send_request("T_q", queue_id=0)).code == RC.SUCCESS
    r = client.invoke(broker.addr, send_request("T_q", queue_id=99))
    assert r.code == RC.SYSTEM_ERROR
    assert "queueId[99] is illegal" in (r.remark or "")


def test_batch_send_reads_back_in_order(broker: RunningBroker) -> None:
    bodies = [f"batch-{i}".encode() for i in range(5)]
    with Producer(broker.ns) as producer:
        mq = MessageQueue("T_batch", BROKER, 0)
        producer.send("T_batch", b"first", queue=mq)  # creates the topic
        r = producer.send_batch("T_batch", bodies, tags="B", queue=mq)
    assert r.status == "SEND_OK"
    assert r.queue_offset == 1
    assert len(r.offset_msg_id.split(",")) == len(bodies)
    assert len(r.msg_id.split(",")) == len(bodies)
    wait_dispatched(broker.controller.store)
    with PullConsumer(broker.ns, "CG_batch") as consumer:
        got = consumer.pull(mq, 1, 32)
    assert got.status == FOUND
    assert [m.body for m in got.messages] == bodies
    assert [m.queue_offset for m in got.messages] == [1, 2, 3, 4, 5]
    assert {m.tags for m in got.messages} == {"B"}
    assert [m.properties["UNIQ_KEY"] for m in got.messages] == r.msg_id.split(",")


def test_the_c_plus_plus_batch_flag_is_a_batch(
    broker: RunningBroker, client: RemotingClient
) -> None:
    from rocketstore.client._producer import encode_batch

    body = encode_batch([(b"one", {"TAGS": "T"}), (b"two", {"TAGS": "T"})])
    r = client.invoke(broker.addr, send_request("T_cbatch", body, batch="1"))
    assert r.code == RC.SUCCESS
    wait_routed(broker, "T_cbatch")
    wait_dispatched(broker.controller.store)  # a send to a new queue is answered before dispatch
    with PullConsumer(broker.ns, "CG_cbatch") as consumer:
        got = consumer.pull(MessageQueue("T_cbatch", BROKER, 0), 0, 32)
    assert [m.body for m in got.messages] == [b"one", b"two"]


def test_a_slave_refuses_sends(
    start_broker: Callable[..., RunningBroker], client: RemotingClient
) -> None:
    b = start_broker("slave", store={"broker_role": "SLAVE"}, broker_id=1)
    r = client.invoke(b.addr, send_request("T_slave"))
    assert r.code == RC.SERVICE_NOT_AVAILABLE
    back = RemotingCommand.request(36, {"group": "G", "offset": "0", "delayLevel": "0"})
    assert client.invoke(b.addr, back).code == RC.NO_PERMISSION


# ---- pulling ----------------------------------------------------------------------------------


def test_pull_statuses(broker: RunningBroker) -> None:
    with Producer(broker.ns) as producer:
        mq = MessageQueue("T_pull", BROKER, 0)
        for i in range(3):
            producer.send("T_pull", f"m{i}".encode(), tags="TagA", queue=mq)
    wait_dispatched(broker.controller.store)
    with PullConsumer(broker.ns, "CG_pull") as consumer:
        empty = consumer.pull(MessageQueue("T_pull", BROKER, 1), 0)
        assert (empty.status, empty.next_begin_offset) == (NO_NEW_MSG, 0)
        found = consumer.pull(mq, 0)
        assert found.status == FOUND
        assert [m.body for m in found.messages] == [b"m0", b"m1", b"m2"]
        assert (found.next_begin_offset, found.min_offset, found.max_offset) == (3, 0, 3)
        assert consumer.pull(mq, 3).status == NO_NEW_MSG  # the next one, not there yet
        moved = consumer.pull(mq, 50)
        # far past the end: corrected to the minimum when that is 0 (RocketMQ's rule)
        assert (moved.status, moved.next_begin_offset) == (OFFSET_ILLEGAL, 0)
        no_match = consumer.pull(mq, 0, 32, "TagZ")
        assert no_match.status == NO_MATCHED_MSG
        assert no_match.next_begin_offset == 3  # the unmatched messages are skipped
        assert consumer.pull(mq, 1, 1).messages[0].body == b"m1"


def test_pull_refusals(broker: RunningBroker, client: RemotingClient) -> None:
    r = client.invoke(broker.addr, pull_request("T_none", 0, 0))
    assert r.code == RC.TOPIC_NOT_EXIST
    client.invoke(broker.addr, send_request("T_refuse"))
    r = client.invoke(broker.addr, pull_request("T_refuse", 7, 0))
    assert r.code == RC.SYSTEM_ERROR
    sql = pull_request("T_refuse", 0, 0)
    sql.ext_fields["expressionType"] = "SQL92"
    assert client.invoke(broker.addr, sql).code == RC.SYSTEM_ERROR
    # no subscription flag and no heartbeat: the group has no subscription to go by
    bare = pull_request("T_refuse", 0, 0)
    bare.ext_fields["sysFlag"] = "0"
    assert client.invoke(broker.addr, bare).code == RC.SUBSCRIPTION_NOT_EXIST
    # a subscription of separators only does not parse (RocketMQ's "subString split error")
    r = client.invoke(broker.addr, pull_request("T_refuse", 0, 0, expression="||"))
    assert r.code == RC.SUBSCRIPTION_PARSE_FAILED


def test_a_held_pull_is_answered_when_a_message_arrives(
    broker: RunningBroker, client: RemotingClient
) -> None:
    client.invoke(broker.addr, send_request("T_hold", b"m0"))
    wait_dispatched(broker.controller.store)  # a send to a new queue is answered before dispatch

    def arrive() -> None:
        with RemotingClient() as other:
            other.invoke(broker.addr, send_request("T_hold", b"m1"))

    timer = threading.Timer(0.3, arrive)
    began = time.monotonic()
    timer.start()
    try:
        r = client.invoke(
            broker.addr, pull_request("T_hold", 0, 1, suspend_ms=120_000), timeout=180
        )
    finally:
        timer.join()
    took = time.monotonic() - began
    assert r.code == RC.SUCCESS
    assert r.ext_fields["nextBeginOffset"] == "2"
    assert 0.25 <= took < 60  # held, then woken by the arrival, long before its 120 s


def test_a_held_pull_times_out_without_messages(
    broker: RunningBroker, client: RemotingClient
) -> None:
    client.invoke(broker.addr, send_request("T_idle", b"m0"))
    wait_dispatched(broker.controller.store)  # a send to a new queue is answered before dispatch
    began = time.monotonic()
    r = client.invoke(broker.addr, pull_request("T_idle", 0, 1, suspend_ms=800), timeout=60)
    took = time.monotonic() - began
    assert r.code == RC.PULL_NOT_FOUND
    assert r.ext_fields["nextBeginOffset"] == "1"
    assert took >= 0.7  # held its 800 ms


def test_held_pulls_are_answered_at_shutdown(
    start_broker: Callable[..., RunningBroker], client: RemotingClient
) -> None:
    b = start_broker("held")
    client.invoke(b.addr, send_request("T_down", b"m0"))
    wait_dispatched(b.controller.store)  # a send to a new queue is answered before dispatch
    answers: list[RemotingCommand | BaseException] = []

    def pull() -> None:
        try:
            with RemotingClient(timeout=300) as c:
                answers.append(c.invoke(b.addr, pull_request("T_down", 0, 1, suspend_ms=240_000)))
        except BaseException as exc:
            answers.append(exc)

    t = threading.Thread(target=pull)
    t.start()
    assert wait_until(lambda: b.controller.holds.held_count == 1)
    began = time.monotonic()
    b.stop()
    t.join(120)
    assert time.monotonic() - began < 120  # answered by the shutdown, not at its 240 s
    assert len(answers) == 1
    [answer] = answers
    assert isinstance(answer, RemotingCommand)
    assert answer.code == RC.PULL_NOT_FOUND


# ---- consumer offsets -------------------------------------------------------------------------


def test_consumer_offsets_round_trip_and_persist(
    start_broker: Callable[..., RunningBroker], client: RemotingClient
) -> None:
    b = start_broker("offsets")
    for i in range(3):
        client.invoke(b.addr, send_request("T_off", f"m{i}".encode(), queue_id=1))
    wait_dispatched(b.controller.store)
    query = {"consumerGroup": "CG_off", "topic": "T_off", "queueId": "1"}
    r = client.invoke(b.addr, RemotingCommand.request(14, dict(query)))
    # never committed, and the queue's start still in memory: start from 0
    assert (r.code, r.ext_fields.get("offset")) == (RC.SUCCESS, "0")
    r = client.invoke(b.addr, RemotingCommand.request(15, {**query, "commitOffset": "2"}))
    assert r.code == RC.SUCCESS
    r = client.invoke(b.addr, RemotingCommand.request(14, dict(query)))
    assert (r.code, r.ext_fields.get("offset")) == (RC.SUCCESS, "2")
    # a pull with the commit-offset flag stores the consumer's offset too
    pull = pull_request("T_off", 1, 2, group="CG_off")
    pull.ext_fields.update(sysFlag=str(0x4 | 0x1), commitOffset="3")
    assert client.invoke(b.addr, pull).code == RC.SUCCESS
    r = client.invoke(b.addr, RemotingCommand.request(14, dict(query)))
    assert r.ext_fields.get("offset") == "3"
    wait_routed(b, "T_off")
    with PullConsumer(b.ns, "CG_off") as consumer:
        assert consumer.fetch_consumer_offset(MessageQueue("T_off", BROKER, 1)) == 3
    client.close()
    b.stop()
    assert ConsumerOffsetManager(b.config_dir).query_offsets("CG_off", "T_off") == {1: 3}
    text = (b.config_dir / "consumerOffset.json").read_text()
    assert '"T_off@CG_off"' in text


def test_queue_offsets_and_search(broker: RunningBroker, client: RemotingClient) -> None:
    before = int(time.time() * 1000)
    for i in range(3):
        client.invoke(broker.addr, send_request("T_qo", f"m{i}".encode()))
    wait_routed(broker, "T_qo")
    wait_dispatched(broker.controller.store)
    with PullConsumer(broker.ns, "CG_qo") as consumer:
        mq = MessageQueue("T_qo", BROKER, 0)
        assert (consumer.min_offset(mq), consumer.max_offset(mq)) == (0, 3)
        assert consumer.search_offset(mq, before - 60_000) == 0


# ---- clients and groups -----------------------------------------------------------------------


def test_heartbeat_then_consumer_list(broker: RunningBroker, client: RemotingClient) -> None:
    r = client.invoke(broker.addr, RemotingCommand.request(38, {"consumerGroup": "CG_hb"}))
    assert r.code == RC.SYSTEM_ERROR  # nobody yet
    assert client.invoke(broker.addr, heartbeat("client-1", "CG_hb", "T_hb")).code == RC.SUCCESS
    r = client.invoke(broker.addr, RemotingCommand.request(38, {"consumerGroup": "CG_hb"}))
    assert r.code == RC.SUCCESS
    assert json.loads(r.body)["consumerIdList"] == ["client-1"]
    wait_routed(broker, "%RETRY%CG_hb")  # the group's retry topic exists and is routed
    unregister = {"clientID": "client-1", "consumerGroup": "CG_hb"}
    assert client.invoke(broker.addr, RemotingCommand.request(35, unregister)).code == RC.SUCCESS
    r = client.invoke(broker.addr, RemotingCommand.request(38, {"consumerGroup": "CG_hb"}))
    assert r.code == RC.SYSTEM_ERROR


def test_members_are_told_when_their_group_changes(broker: RunningBroker) -> None:
    group = "CG_notify"

    async def main() -> None:
        notices: asyncio.Queue[RemotingCommand] = asyncio.Queue()

        def on_notify(cmd: RemotingCommand, _conn: Connection) -> None:
            notices.put_nowait(cmd)

        first = AsyncRemotingClient({40: on_notify})
        second = AsyncRemotingClient()
        try:
            assert (await first.invoke(broker.addr, heartbeat("a", group, "T_n"))).code == 0
            while not notices.empty():  # its own joining may be announced to it
                notices.get_nowait()
            assert (await second.invoke(broker.addr, heartbeat("b", group, "T_n"))).code == 0
            notice = await asyncio.wait_for(notices.get(), 5)
            assert notice.code == 40
            assert notice.ext_fields["consumerGroup"] == group
            assert notice.is_oneway
            r = await first.invoke(
                broker.addr, RemotingCommand.request(38, {"consumerGroup": group})
            )
            assert sorted(json.loads(r.body)["consumerIdList"]) == ["a", "b"]
            # the second member goes away: the first hears of it again
            second.close()
            notice = await asyncio.wait_for(notices.get(), 5)
            assert notice.ext_fields["consumerGroup"] == group
        finally:
            first.close()
            second.close()

    asyncio.run(asyncio.wait_for(main(), 20))


# ---- retries and dead letters -----------------------------------------------------------------


def pull_one(consumer: PullConsumer, mq: MessageQueue, timeout: float = 60.0) -> Any:
    """The first message of ``mq``, waiting for it to appear (a retry waits out its delay)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            r = consumer.pull(mq, 0, 1)
        except ClientError as exc:  # the topic's route may reach the name server a moment late
            assert exc.code == RC.TOPIC_NOT_EXIST
        else:
            if r.status == FOUND:
                return r.messages[0]
        assert time.monotonic() < deadline, f"nothing in {mq} after {timeout} s"
        time.sleep(0.1)


def test_send_back_goes_to_retry_then_to_the_dlq(
    broker: RunningBroker, client: RemotingClient
) -> None:
    group = "CG_back"
    with Producer(broker.ns) as producer:
        producer.send(
            "T_back", b"fail me", tags="TagF", keys=["k1"], queue=MessageQueue("T_back", BROKER, 0)
        )
    wait_dispatched(broker.controller.store)  # a send to a new queue is answered before dispatch
    with PullConsumer(broker.ns, group) as consumer:
        [original] = consumer.pull(MessageQueue("T_back", BROKER, 0), 0).messages

        def back(msg: Any, **ext: str) -> RemotingCommand:
            fields = {
                "group": group,
                "offset": str(msg.commitlog_offset),
                "delayLevel": "0",
                "originMsgId": msg.msg_id,
                "originTopic": msg.topic,
                **ext,
            }
            return client.invoke(broker.addr, RemotingCommand.request(36, fields))

        assert back(original, maxReconsumeTimes="1").code == RC.SUCCESS
        retry = pull_one(consumer, MessageQueue(f"%RETRY%{group}", BROKER, 0))
        assert retry.body == b"fail me"
        assert retry.reconsume_times == 1
        assert retry.tags == "TagF"
        assert retry.properties["RETRY_TOPIC"] == "T_back"
        assert retry.properties["UNIQ_KEY"] == original.properties["UNIQ_KEY"]
        assert retry.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
        assert retry.properties["DELAY"] == "3"  # 3 + reconsume times 0

        # reconsumed once, and once is the limit: a dead letter
        assert back(retry, maxReconsumeTimes="1").code == RC.SUCCESS
        dead = pull_one(consumer, MessageQueue(f"%DLQ%{group}", BROKER, 0), 3.0)
        assert dead.body == b"fail me"
        assert dead.reconsume_times == 2
        assert dead.properties["RETRY_TOPIC"] == "T_back"
        assert dead.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
        assert "DELAY" not in dead.properties
        # a negative delay level sends straight to the DLQ
        assert back(original, delayLevel="-1").code == RC.SUCCESS
        r = consumer.pull(MessageQueue(f"%DLQ%{group}", BROKER, 0), 1)
        assert [m.reconsume_times for m in r.messages] == [1]
    bad = RemotingCommand.request(36, {"group": group, "offset": "999999999", "delayLevel": "0"})
    assert client.invoke(broker.addr, bad).code == RC.SYSTEM_ERROR


# ---- orderly consumers' queue locks -----------------------------------------------------------


def lock_body(group: str, client_id: str, *queue_ids: int, topic: str = "T_lock") -> bytes:
    mqs = [{"topic": topic, "brokerName": BROKER, "queueId": q} for q in queue_ids]
    return json.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": mqs}).encode()


def test_queue_locks_over_the_wire(broker: RunningBroker, client: RemotingClient) -> None:
    def lock(client_id: str, *queue_ids: int) -> list[int]:
        r = client.invoke(
            broker.addr, RemotingCommand.request(41, {}, lock_body("G", client_id, *queue_ids))
        )
        assert r.code == RC.SUCCESS
        return sorted(q["queueId"] for q in json.loads(r.body)["lockOKMQSet"])

    assert lock("a", 0, 1) == [0, 1]
    assert lock("b", 1, 2) == [2]  # queue 1 is a's
    assert lock("a", 0, 1) == [0, 1]  # renewed
    unlock = RemotingCommand.request(42, {}, lock_body("G", "a", 1))
    assert client.invoke(broker.addr, unlock).code == RC.SUCCESS
    assert lock("b", 1) == [1]
    bad = RemotingCommand.request(41, {}, b"{not json")
    assert client.invoke(broker.addr, bad).code == RC.SYSTEM_ERROR


def test_a_queue_lock_lapses_without_renewal() -> None:
    clock = ManualClock()
    locks = QueueLocks(clock)
    mq = QueueKey("T", BROKER, 0)
    assert locks.try_lock("G", [mq], "a") == [mq]
    clock.advance(LOCK_MAX_LIVE_MS / 1000 - 1)
    assert locks.try_lock("G", [mq], "b") == []
    assert locks.holder("G", mq) == "a"
    clock.advance(2)
    assert locks.holder("G", mq) is None
    assert locks.try_lock("G", [mq], "b") == [mq]
    assert locks.try_lock("other group", [mq], "a") == [mq]  # locks are per group
    locks.unlock("G", [mq], "a")  # not a's any more: nothing happens
    assert locks.holder("G", mq) == "b"


def test_a_compressed_body_is_inflated_by_the_consumer(
    broker: RunningBroker, client: RemotingClient
) -> None:
    import zlib

    plain = b"compress me " * 1000
    r = client.invoke(broker.addr, send_request("T_zip", zlib.compress(plain), sysFlag=1))
    assert r.code == RC.SUCCESS
    wait_routed(broker, "T_zip")
    wait_dispatched(broker.controller.store)  # a send to a new queue is answered before dispatch
    with PullConsumer(broker.ns, "CG_zip") as consumer:
        [msg] = consumer.pull(MessageQueue("T_zip", BROKER, 0), 0).messages
    assert msg.body == plain
    assert msg.sys_flag & 1 == 0


def test_a_send_is_stored_without_wait_in_java_order(
    broker: RunningBroker, client: RemotingClient
) -> None:
    """Stored as RocketMQ 4.9's broker stores a send: its HashMap's order, CLUSTER added,
    WAIT left out."""
    from rocketstore.protocol._java_order import java_order

    text = "\x02".join(
        f"{k}\x01{v}"
        for k, v in (("KEYS", "order-1"), ("UNIQ_KEY", "7F0000014F2A18B4AAC2"), ("WAIT", "true"))
    )
    r = client.invoke(broker.addr, send_request("TProps", b"body", properties=text, TAGS="x"))
    assert r.code == 0, r.remark
    offset = int(r.ext_fields["queueOffset"])
    wait_dispatched(broker.controller.store)

    async def stored_properties() -> dict[str, str]:
        got = broker.controller.store.get_message("g", "TProps", 0, offset, 1)
        return dict(got.messages[0].properties)

    stored = broker.run(stored_properties())
    assert "WAIT" not in stored
    names = ["KEYS", "UNIQ_KEY", "WAIT", "CLUSTER"]
    assert list(stored) == [k for k in java_order(names) if k != "WAIT"]
