"""A slave promoted in controller mode serves every topic its log holds: a topic created on the
master and replicated, then the master gone before the slave copied the topic's config — the new
master knows the topic (from its consume queues) before it registers, and its messages are
read from it. And the slave's copy is prompt: the master answers GET_ALL_TOPIC_CONFIG
``unchanged`` while the slave holds its version, so a slave asks every second and copies a
new topic without waiting for its ten-second round; a master that ignores the version (a
RocketMQ one) is copied with the rounds only.

Every wait is a bounded poll (the brokers' loop thread is test_replicas's Group)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rocketstore.broker.replication._slave_sync import SlaveSynchronizer
from rocketstore.client import MessageQueue, Producer, PullConsumer
from rocketstore.client._admin import AdminClient
from rocketstore.remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    ResponseCode,
)
from support.replicas import GROUP, Group
from support.waits import wait_until

TOPIC = "PromotedTopic"
QUEUES = 4


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Group]:
    g = Group(tmp_path)
    try:
        g.start_broker("b1")
        g.start_broker("b2")
        assert wait_until(g.whole, 60, poll=0.1), g.sync_state()
        yield g
    finally:
        g.close()


def _send_all(namesrv: str, count: int) -> int:
    acked = 0
    deadline = time.monotonic() + 60
    with Producer(namesrv, "promotion-test", timeout=3.0) as producer:
        while acked < count and time.monotonic() < deadline:
            try:
                r = producer.send(TOPIC, f"m-{acked}".encode())
            except Exception:
                time.sleep(0.1)
                continue
            if r.status == "SEND_OK":
                acked += 1
    return acked


def _held(group: Group, name: str) -> int:
    store = group.brokers[name].store
    return sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES))


def test_a_slave_promoted_before_copying_a_topic_serves_it(pair: Group) -> None:
    master = pair.master()
    assert master is not None
    slave = "b2" if master == "b1" else "b1"
    slave_broker = pair.brokers[slave].broker

    async def stop_copying() -> None:  # the slave has not copied the topic yet
        sync = slave_broker.slave_sync
        assert sync is not None
        slave_broker.slave_sync = None
        await sync.close()

    pair.run(stop_copying())
    with AdminClient(pair.namesrv.address) as admin:
        admin.create_topic(pair.brokers[master].broker.address, TOPIC,
                           read_queue_nums=QUEUES, write_queue_nums=QUEUES)  # fmt: skip
    assert _send_all(pair.namesrv.address, 12) == 12
    assert wait_until(lambda: _held(pair, slave) == 12, 30, poll=0.05)
    assert slave_broker.topics.select(TOPIC) is None  # its messages, not its config

    pair.stop_broker(master)
    assert wait_until(lambda: pair.role(slave) == "MASTER", 60, poll=0.05)
    config = slave_broker.topics.select(TOPIC)
    assert config is not None and config.read_queue_nums == QUEUES

    bodies = []
    with PullConsumer(pair.namesrv.address, "promotion-reader") as consumer:
        for queue_id in range(QUEUES):
            mq = MessageQueue(TOPIC, GROUP, queue_id)
            r = None

            def pulled(mq: MessageQueue = mq) -> bool:
                nonlocal r
                try:
                    r = consumer.pull(mq, 0, 32)
                except Exception:
                    return False
                return r.status in ("FOUND", "NO_NEW_MSG")

            assert wait_until(pulled, 30, poll=0.1), r
            assert r is not None
            bodies += [m.body.decode() for m in r.messages]
    assert sorted(bodies) == sorted(f"m-{i}" for i in range(12))


def test_the_slave_copies_a_new_topic_on_the_masters_version(pair: Group) -> None:
    master = pair.master()
    assert master is not None
    slave = "b2" if master == "b1" else "b1"
    master_broker = pair.brokers[master].broker
    address = master_broker.address

    def ask(version: str | None) -> RemotingCommand:
        ext = {} if version is None else {"ifDataVersionNot": version}
        with RemotingClient(timeout=10) as client:
            return client.invoke(
                address, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, ext)
            )

    first = ask(None)
    assert first.code == ResponseCode.SUCCESS
    version = json.loads(first.body)["dataVersion"]
    held = f"{version['counter']}:{version['timestamp']}"
    same = ask(held)
    assert same.code == ResponseCode.SUCCESS and same.ext_fields.get("unchanged") == "true"
    assert not same.body
    assert json.loads(ask("0:0").body)["topicConfigTable"]  # another version: the table

    with AdminClient(pair.namesrv.address) as admin:
        admin.create_topic(address, TOPIC, read_queue_nums=2, write_queue_nums=2)
    moved = ask(held)
    assert TOPIC in json.loads(moved.body)["topicConfigTable"]
    slave_broker = pair.brokers[slave].broker
    assert wait_until(lambda: slave_broker.topics.select(TOPIC) is not None, 30, poll=0.05)


class _Topics:
    def __init__(self) -> None:
        self.table: dict[str, Any] = {}

    def select(self, name: str) -> Any:
        return self.table.get(name)

    def update(self, config: Any) -> None:
        self.table[config.topic_name] = config

    def update_all(self, configs: Any) -> None:
        for config in configs:
            self.update(config)


def test_a_master_that_ignores_the_version_is_copied_every_round_only() -> None:
    """A RocketMQ master sends its whole table whatever version the slave names: the slave
    notices (the same version back) and stops asking every second."""
    table = {
        "dataVersion": {"counter": 3, "timestamp": 1700000000000},
        "topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 2, "writeQueueNums": 2}},
    }
    asked: list[dict[str, str]] = []

    def answer(cmd: RemotingCommand, conn: Any) -> RemotingCommand:
        asked.append(dict(cmd.ext_fields))
        return RemotingCommand.response(ResponseCode.SUCCESS, None, {}, json.dumps(table).encode())

    async def main() -> None:
        master = RemotingServer({int(RequestCode.GET_ALL_TOPIC_CONFIG): answer}, "127.0.0.1", 0)
        await master.start()
        broker = SimpleNamespace(
            inner_signer=None,
            topics=_Topics(),
            offsets=SimpleNamespace(dirty=False),
            groups=SimpleNamespace(get=lambda name: None, put_all=lambda configs, key: None),
        )
        sync = SlaveSynchronizer(broker)  # type: ignore[arg-type]
        sync.master_addr = master.address
        try:
            assert await sync.sync_topics()  # the first copy: no version named
            assert broker.topics.select("T") is not None and "ifDataVersionNot" not in asked[0]
            assert await sync.sync_topics()  # named, and the whole table came back anyway
            assert asked[1]["ifDataVersionNot"] == "3:1700000000000"
            assert not sync.checks
            assert not await sync.sync_topics() and len(asked) == 2  # not asked again
        finally:
            await sync.close()
            await master.close()

    asyncio.run(asyncio.wait_for(main(), 30))
