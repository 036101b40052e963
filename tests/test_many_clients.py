"""Client bookkeeping with many clients: a group of a thousand consumers, heartbeats that
repeat the last one, channels expiring and closing, GET_CONSUMER_LIST_BY_GROUP over the wire
with hundreds of connections."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from rocketstore import ManualClock
from rocketstore.broker.state._consumer_manager import ConsumerManager, ProducerManager
from rocketstore.protocol._heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    ProducerData,
    build_subscription,
    encode_heartbeat,
)
from rocketstore.remoting import AsyncRemotingClient, RemotingCommand, RequestCode
from support.waits import wait_until

PUSH = ConsumeType.CONSUME_PASSIVELY
CLUSTERING = MessageModel.CLUSTERING
LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
MEMBERS = 1000


def test_a_group_of_a_thousand_consumers() -> None:
    clock = ManualClock()
    m: ConsumerManager[str] = ConsumerManager(clock)
    sub = build_subscription("T", "*", sub_version=1)
    for i in range(MEMBERS):
        assert m.register_consumer("G", f"ch{i}", f"c{i}", PUSH, CLUSTERING, LAST, [sub])
    for i in range(0, MEMBERS, 10):  # every tenth client is in a second group too
        m.register_consumer("H", f"ch{i}", f"c{i}", PUSH, CLUSTERING, LAST, [sub])
    ids = m.consumer_ids("G")
    assert ids == tuple(f"c{i}" for i in range(MEMBERS))
    assert m.consumer_ids("G") is ids  # the same list until the membership changes
    assert not m.register_consumer("G", "ch5", "c5", PUSH, CLUSTERING, LAST, [sub])
    assert m.consumer_ids("G") is ids  # a repeated heartbeat is no change
    assert m.touch_consumer("G", "ch6") and not m.touch_consumer("G", "nobody")

    # a closed channel leaves exactly the groups it was in
    assert m.on_channel_closed("ch10") == ["G", "H"]
    assert m.on_channel_closed("ch11") == ["G"]
    assert m.on_channel_closed("ch11") == []
    after_close = m.consumer_ids("G")
    assert after_close is not ids and len(after_close) == MEMBERS - 2
    assert "c10" not in after_close and "c10" not in m.consumer_ids("H")

    # the first half heartbeats again; then the second half has been silent too long
    clock.advance(100.0)
    for i in range(MEMBERS // 2):
        if i not in (10, 11):
            assert m.touch_consumer("G", f"ch{i}")
    clock.advance(30.0)
    expired = m.scan_not_active()
    silent = {f"ch{i}" for i in range(MEMBERS // 2, MEMBERS)}
    assert set(expired["G"]) == silent
    assert set(expired["H"]) == {f"ch{i}" for i in range(0, MEMBERS, 10)} - {"ch10"}
    assert m.consumer_ids("H") == ()
    assert set(m.consumer_ids("G")) == {f"c{i}" for i in range(MEMBERS // 2)} - {"c10", "c11"}
    assert m.scan_not_active() == {}  # nothing more to expire
    # an expired channel is not touched back in: its next heartbeat registers it in full
    assert not m.touch_consumer("G", f"ch{MEMBERS - 1}")
    assert m.register_consumer("G", f"ch{MEMBERS - 1}", "back", PUSH, CLUSTERING, LAST, [sub])


def test_producers_expire_and_close_by_their_own_groups() -> None:
    clock = ManualClock()
    m: ProducerManager[str] = ProducerManager(clock)
    for i in range(MEMBERS):
        assert m.register_producer(f"P{i % 20}", f"ch{i}", f"p{i}")
    assert m.register_producer("Q", "ch0", "p0")
    assert sorted(m.on_channel_closed("ch0")) == ["P0", "Q"]
    assert m.find_channel("p0") is None
    clock.advance(100.0)
    for i in range(1, MEMBERS, 2):
        assert m.touch_producer(f"P{i % 20}", f"ch{i}")
    clock.advance(30.0)
    expired = m.scan_not_active()
    assert {ch for chans in expired.values() for ch in chans} == {
        f"ch{i}" for i in range(2, MEMBERS, 2)
    }
    assert m.find_channel("p1") == "ch1" and m.find_channel("p2") is None
    assert "Q" not in m.groups()


def _consumer_body(i: int, group: str) -> bytes:
    data = HeartbeatData(
        f"127.0.0.1@many-{i}",
        consumers=(
            ConsumerData(
                group,
                PUSH,
                CLUSTERING,
                LAST,
                (build_subscription("ManyTopic", "*", sub_version=1),),
            ),
        ),
        producers=(ProducerData("ManyProducers"),),
    )
    return encode_heartbeat(data)


def test_consumer_list_with_hundreds_of_connections(cluster: Any) -> None:
    addr = cluster.addr("broker-b")
    broker = cluster.brokers["broker-b"]
    group = "ManyConsumers"
    count = 300

    async def connect() -> list[AsyncRemotingClient]:
        clients = [AsyncRemotingClient(signer=None) for _ in range(count)]

        async def beat(i: int, c: AsyncRemotingClient) -> int:
            cmd = RemotingCommand.request(RequestCode.HEART_BEAT, {}, _consumer_body(i, group))
            r = await c.invoke(addr, cmd, 30.0)
            return r.code

        codes = await asyncio.gather(*(beat(i, c) for i, c in enumerate(clients)))
        assert set(codes) == {0}
        # every client heartbeats again with the same body: only its time is recorded
        codes = await asyncio.gather(*(beat(i, c) for i, c in enumerate(clients)))
        assert set(codes) == {0}
        return clients

    async def consumer_list() -> tuple[int, list[str]]:
        c = AsyncRemotingClient(signer=None)
        try:
            r = await c.invoke(
                addr,
                RemotingCommand.request(
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}
                ),
                30.0,
            )
        finally:
            c.close()
        ids = json.loads(bytes(r.body))["consumerIdList"] if r.code == 0 else []
        return r.code, ids

    clients = cluster.run(connect(), 120.0)
    try:
        code, ids = cluster.run(consumer_list())
        assert code == 0 and sorted(ids) == sorted(f"127.0.0.1@many-{i}" for i in range(count))
        assert len(broker.producers.channels("ManyProducers")) == count
        # a retry topic for the group, created once
        assert broker.topics.select(f"%RETRY%{group}") is not None

        async def close_some() -> None:
            for c in clients[:100]:
                c.close()

        cluster.run(close_some())
        assert wait_until(lambda: len(broker.consumers.consumer_ids(group)) == count - 100, 60.0)
        code, ids = cluster.run(consumer_list())
        assert code == 0 and sorted(ids) == sorted(f"127.0.0.1@many-{i}" for i in range(100, count))
        assert len(broker.producers.channels("ManyProducers")) == count - 100
    finally:

        async def close_all() -> None:
            for c in clients:
                c.close()

        cluster.run(close_all())
    assert wait_until(lambda: broker.consumers.consumer_ids(group) == (), 60.0)
