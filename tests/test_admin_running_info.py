"""GET_CONSUMER_RUNNING_INFO (307) and INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) over
loopback: the broker asks the consumer client over the client's own connection (307 as it
came, GET_CONSUMER_STATUS_FROM_CLIENT 221 to each client) and relays or gathers the answers;
a client that is not online, too old, silent or gone is answered as RocketMQ answers. Raw,
through AdminClient and ``rocketstore consumer status``."""

from __future__ import annotations

import asyncio
import json

import pytest

from rocketstore.broker.admin import _consumers as _admin_consumers
from rocketstore.client import ClientError, Producer, PullConsumer
from rocketstore.client._admin import AdminClient
from rocketstore.protocol._admin_bodies import BodyFormatError, MessageQueue
from rocketstore.protocol._consumer_bodies import (
    PROP_CONSUME_TYPE,
    ConsumerRunningInfo,
    ConsumerStatusBody,
    ConsumeStatus,
    ProcessQueueInfo,
)
from rocketstore.protocol._heartbeat import (
    build_subscription,
)
from rocketstore.remoting import AsyncRemotingClient, Connection, RemotingCommand, ResponseCode
from support.cluster import (
    Answer,
    Cluster,
    close_client,
    create_everywhere,
    invoke,
    online_consumer,
    raw_call,
)
from support.waits import wait_until

RC = ResponseCode
TOPIC = "RunningInfoTopic"
GROUP = "G_running"
CLIENT_ID = "127.0.0.1@running-1"


def sample_info() -> ConsumerRunningInfo:
    return ConsumerRunningInfo(
        {PROP_CONSUME_TYPE: "CONSUME_PASSIVELY", "consumerGroup": GROUP},
        [build_subscription(TOPIC, "*").to_json()],
        {
            MessageQueue(TOPIC, "broker-b", 0): ProcessQueueInfo(commit_offset=7),
            MessageQueue(TOPIC, "broker-a", 1): ProcessQueueInfo(commit_offset=3, locked=True),
        },
        {TOPIC: ConsumeStatus(pull_tps=1.5, consume_failed_msgs=2)},
    )


def test_running_info_body_is_written_as_fastjson_writes_it() -> None:
    info = sample_info()
    text = info.encode().decode()
    assert text.startswith(
        '{"mqTable":{{"brokerName":"broker-a","queueId":1,"topic":"RunningInfoTopic"}:'
        '{"cachedMsgCount":0,"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,'
        '"cachedMsgSizeInMiB":0,"commitOffset":3,"droped":false,"lastConsumeTimestamp":0,'
        '"lastLockTimestamp":0,"lastPullTimestamp":0,"locked":true,"transactionMsgCount":0,'
        '"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,"tryUnlockTimes":0},'
    )
    assert (
        '"statusTable":{"RunningInfoTopic":{"consumeFailedMsgs":2,"consumeFailedTPS":0.0,'
        '"consumeOKTPS":0.0,"consumeRT":0.0,"pullRT":0.0,"pullTPS":1.5}},'
        '"subscriptionSet":[{"classFilterMode":false,' in text
    )
    assert ConsumerRunningInfo.decode(info.encode()) == info
    for bad in (b"[]", b'{"mqTable":{{"topic":"T"}:{}}}', b'{"mqTable":{},"statusTable":[]}'):
        with pytest.raises(BodyFormatError):
            ConsumerRunningInfo.decode(bad)
    with pytest.raises(BodyFormatError):
        ConsumerRunningInfo.decode(b'{"statusTable":{"T":{"pullTPS":"fast"}}}')


def test_consumer_status_body() -> None:
    mq = MessageQueue("T", "b", 0)
    body = ConsumerStatusBody({mq: 5}, {"c1": {mq: 4}})
    assert body.encode() == (
        b'{"consumerTable":{"c1":{{"brokerName":"b","queueId":0,"topic":"T"}:4}},'
        b'"messageQueueTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5}}'
    )
    assert ConsumerStatusBody.decode(body.encode()) == body
    with pytest.raises(BodyFormatError):
        ConsumerStatusBody.decode(b'{"messageQueueTable":{{"brokerName":"b","queueId":0}:1}}')


async def _online(
    cluster: Cluster, handlers: dict[int, Answer], client_id: str, version: int = 409
) -> AsyncRemotingClient:
    """A consumer of GROUP registered with both brokers by a heartbeat, answering the
    broker's requests with ``handlers``."""
    return await online_consumer(
        cluster, client_id, GROUP, TOPIC, handlers=handlers, version=version
    )


def test_running_info_relayed_from_the_client(cluster: Cluster, admin: AdminClient) -> None:
    create_everywhere(admin, cluster, TOPIC, queues=2)
    addr = cluster.addr("broker-a")
    ext = {"consumerGroup": GROUP, "clientId": CLIENT_ID, "jstackEnable": "false"}

    # nobody online
    r = raw_call(addr, 307, ext)
    assert (r.code, r.remark) == (
        RC.SYSTEM_ERROR,
        f"The Consumer <{GROUP}> <{CLIENT_ID}> not online",
    )
    with pytest.raises(ClientError, match="not online"):
        admin.consumer_running_info(GROUP, CLIENT_ID)
    r = raw_call(addr, 307, {"consumerGroup": GROUP})
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "the custom field <clientId> is null")

    seen: list[RemotingCommand] = []

    def running_info(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        seen.append(cmd)
        return RemotingCommand.response(RC.SUCCESS, None, None, sample_info().encode())

    client = cluster.run(_online(cluster, {307: running_info}, CLIENT_ID))
    try:
        r = raw_call(addr, 307, ext)
        assert r.code == RC.SUCCESS
        assert ConsumerRunningInfo.decode(r.body) == sample_info()
        assert seen[-1].code == 307 and seen[-1].ext_fields == ext  # forwarded as it came

        info = admin.consumer_running_info(GROUP, CLIENT_ID)
        assert info.mq_table[MessageQueue(TOPIC, "broker-b", 0)].commit_offset == 7
        assert info.status_table[TOPIC].pull_tps == 1.5

        # another client id of the group: not online
        r = raw_call(addr, 307, {**ext, "clientId": "127.0.0.1@other"})
        assert r.code == RC.SYSTEM_ERROR and r.remark.endswith("<127.0.0.1@other> not online")

        result = invoke(
            "consumer", "status", "-n", cluster.namesrv, "-g", GROUP, "-i", CLIENT_ID, "--json"
        )
        assert result.exit_code == 0, result.output
        [doc] = json.loads(result.output)
        assert doc["client_id"] == CLIENT_ID
        assert doc["properties"][PROP_CONSUME_TYPE] == "CONSUME_PASSIVELY"
        assert {(q["broker_name"], q["queue_id"], q["commit_offset"]) for q in doc["queues"]} == {
            ("broker-a", 1, 3),
            ("broker-b", 0, 7),
        }
        assert doc["subscriptions"][0]["topic"] == TOPIC
        assert doc["status"][TOPIC]["pull_tps"] == 1.5
        result = invoke("consumer", "status", "-n", cluster.namesrv, "-g", GROUP)
        assert result.exit_code == 0, result.output
        assert CLIENT_ID in result.output and "CONSUME_PASSIVELY" in result.output
        # every online client of the group, without --client
        result = invoke("consumer", "status", "-n", cluster.namesrv, "-g", GROUP, "--json")
        assert result.exit_code == 0, result.output
        assert [d["client_id"] for d in json.loads(result.output)] == [CLIENT_ID]
    finally:
        cluster.run(close_client(client))
    result = invoke("consumer", "status", "-n", cluster.namesrv, "-g", GROUP, "-i", CLIENT_ID)
    assert result.exit_code == 1 and "not online" in result.output
    assert "Traceback" not in result.output


def test_running_info_refusals(
    cluster: Cluster, admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_everywhere(admin, cluster, TOPIC, queues=2)
    addr = cluster.addr("broker-a")
    ext = {"consumerGroup": GROUP, "clientId": "c-old"}

    # a client too old to be asked
    old = cluster.run(_online(cluster, {}, "c-old", version=70))
    try:
        r = raw_call(addr, 307, ext)
        assert (r.code, r.remark) == (
            RC.SYSTEM_ERROR,
            "The Consumer <c-old> Version <version 70> too low to finish, please upgrade it to "
            "V3_1_8_SNAPSHOT",
        )
    finally:
        cluster.run(close_client(old))

    # a client that does not know the code: its answer is relayed
    plain = cluster.run(_online(cluster, {}, "c-plain"))
    try:
        r = raw_call(addr, 307, {**ext, "clientId": "c-plain"})
        assert r.code == RC.REQUEST_CODE_NOT_SUPPORTED
    finally:
        cluster.run(close_client(plain))

    # a client that never answers
    monkeypatch.setattr(_admin_consumers, "CALL_CLIENT_TIMEOUT_S", 0.3)

    async def silent(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        await asyncio.sleep(5)
        return RemotingCommand.response(RC.SUCCESS)

    mute = cluster.run(_online(cluster, {307: silent}, "c-mute"))
    try:
        r = raw_call(addr, 307, {**ext, "clientId": "c-mute"})
        assert r.code == RC.CONSUME_MSG_TIMEOUT
        assert r.remark.startswith(f"consumer <{GROUP}> <c-mute> Timeout")
    finally:
        cluster.run(close_client(mute))


def test_consumer_status_gathered_from_clients(cluster: Cluster, admin: AdminClient) -> None:
    create_everywhere(admin, cluster, TOPIC, queues=2)
    addr = cluster.addr("broker-a")
    ext = {"topic": TOPIC, "group": GROUP}
    r = raw_call(addr, 223, ext)
    assert (r.code, r.remark) == (
        RC.SYSTEM_ERROR,
        f"No Any Consumer online in the consumer group: [{GROUP}]",
    )
    a0 = MessageQueue(TOPIC, "broker-a", 0)
    b1 = MessageQueue(TOPIC, "broker-b", 1)
    asked: list[RemotingCommand] = []

    def status(offsets: dict[MessageQueue, int]) -> Answer:
        def answer(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
            asked.append(cmd)
            body = ConsumerStatusBody(offsets).encode()
            return RemotingCommand.response(RC.SUCCESS, None, None, body)

        return answer

    one = cluster.run(_online(cluster, {221: status({a0: 5})}, "c-1"))
    two = cluster.run(_online(cluster, {221: status({b1: 9})}, "c-2"))
    three = cluster.run(_online(cluster, {}, "c-3"))  # does not support it: left out
    try:
        r = raw_call(addr, 223, ext)
        assert r.code == RC.SUCCESS
        assert ConsumerStatusBody.decode(r.body).consumers == {"c-1": {a0: 5}, "c-2": {b1: 9}}
        assert {c.code for c in asked} == {221}
        assert all(c.ext_fields == ext for c in asked)
        asked.clear()
        r = raw_call(addr, 223, {**ext, "clientAddr": "c-2"})
        assert ConsumerStatusBody.decode(r.body).consumers == {"c-2": {b1: 9}}
        assert len(asked) == 1

        assert admin.consumer_status(GROUP, TOPIC) == {"c-1": {a0: 5}, "c-2": {b1: 9}}
        assert admin.consumer_status(GROUP, TOPIC, "c-1") == {"c-1": {a0: 5}}
    finally:
        for c in (one, two, three):
            cluster.run(close_client(c))


def test_rocketstore_pull_consumer_answers_the_broker(cluster: Cluster, admin: AdminClient) -> None:
    topic = "RunningInfoOwn"
    group = "G_running_own"
    create_everywhere(admin, cluster, topic, queues=2)
    with Producer(cluster.namesrv) as producer:
        for i in range(3):
            producer.send(topic, b"m%d" % i, queue=MessageQueue(topic, "broker-a", 0))
    a0 = MessageQueue(topic, "broker-a", 0)
    with PullConsumer(cluster.namesrv, group) as consumer:
        client_id = consumer.join_group({topic: "*"})
        assert wait_until(lambda: consumer.pull(a0, 0).status == "FOUND")
        consumer.commit_offset(a0, 3)
        assert client_id in admin.examine_consumer_connection(group).connections[0].client_id

        info = admin.consumer_running_info(group, client_id)
        assert info.properties["consumerGroup"] == group
        assert info.properties[PROP_CONSUME_TYPE] == "CONSUME_ACTIVELY"
        assert [s["topic"] for s in info.subscriptions] == [topic]
        assert info.mq_table[a0].commit_offset == 3 and info.mq_table[a0].last_pull_timestamp > 0
        assert info.status_table[topic].pull_tps > 0

        assert admin.consumer_status(group, topic) == {client_id: {a0: 3}}
        result = invoke("consumer", "status", "-n", cluster.namesrv, "-g", group, "--json")
        assert result.exit_code == 0, result.output
        [doc] = json.loads(result.output)
        assert doc["client_id"] == client_id and doc["queues"][0]["commit_offset"] == 3
    # closed: unregistered from the brokers at once
    r = raw_call(cluster.addr("broker-a"), 307, {"consumerGroup": group, "clientId": client_id})
    assert r.code == RC.SYSTEM_ERROR and r.remark.endswith("not online")
