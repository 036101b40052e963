"""A broker answers pulls below a queue's minimum offset from the tiered store: a name server
and a BrokerServer (with a tiered directory) on loopback, driven by rocketstore's Producer and
PullConsumer. Retention removes the oldest commit-log files the way the store's cleaner does;
a consumer that walks a queue from offset 0 by nextBeginOffset then gets every message once,
the tier's as the very records the commit log held, and the tags filter applies. An offset the
tier does not hold gets today's answer (OFFSET_ILLEGAL, moved to the queue's minimum)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.client import MessageQueue, Producer, PullConsumer
from rocketstore.client._consumer import FOUND, OFFSET_ILLEGAL
from rocketstore.namesrv import NameServer
from rocketstore.remoting import RemotingClient, RemotingCommand
from rocketstore.server import BrokerServer
from rocketstore.tier._manifest import load_manifest, save_manifest
from support.tier_files import expire_oldest, tier_store, wait_dispatched

TOPIC = "TierPull"
COUNT = 400
TIMEOUT_S = 20.0


class Broker:
    """A name server and a broker with a tiered directory on an event loop thread."""

    def __init__(self, root: Path, tiered: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.store_config = StoreConfig(
            store_path_root_dir=str(root),
            mapped_file_size_commit_log=64 * 1024,
            flush_interval_commit_log=10,
            file_reserved_time=1,
            delete_commit_log_files_interval=0,
            ha_listen_port=0,
        )
        self.tiered = tiered
        self.namesrv: NameServer | None = None
        self.server: BrokerServer | None = None
        try:
            self.run(self._start())
        except BaseException:
            self.stop()
            raise

    async def _start(self) -> None:
        self.namesrv = NameServer(port=0)
        await self.namesrv.start()
        config = BrokerConfig(listen_port=0, namesrv_addr=self.namesrv.address)
        self.server = BrokerServer(self.store_config, config, tiered_dir=str(self.tiered))
        await self.server.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT_S)

    @property
    def ns(self) -> str:
        assert self.namesrv is not None
        return self.namesrv.address

    def stop(self) -> None:
        try:

            async def down() -> None:
                if self.server is not None:
                    await self.server.shutdown()
                if self.namesrv is not None:
                    await self.namesrv.close()

            self.run(down())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "store", tmp_path / "tiered")
    try:
        yield b
    finally:
        b.stop()


def walk(consumer: PullConsumer, mq: MessageQueue, expression: str = "*") -> list[Any]:
    """Every message of the queue from offset 0, following nextBeginOffset."""
    out: list[Any] = []
    offset = 0
    for _ in range(1000):
        r = consumer.pull(mq, offset, 32, expression)
        assert r.status in (FOUND, "NO_MATCHED_MSG", "NO_NEW_MSG"), (offset, r)
        out.extend(r.messages)
        if r.status == "NO_NEW_MSG":
            return out
        assert r.next_begin_offset > offset
        offset = r.next_begin_offset
    raise AssertionError("the walk did not end")


def min_offset(broker: Broker) -> int:
    """GET_MIN_OFFSET of queue 0 of TOPIC."""
    assert broker.server is not None
    request = RemotingCommand.request(31, {"topic": TOPIC, "queueId": "0"})
    with RemotingClient(timeout=5) as client:
        answer = client.invoke(broker.server.address, request)
    assert answer.code == 0, answer.remark
    return int(answer.ext_fields["offset"])


def test_pulls_below_the_minimum_are_answered_from_the_tier(broker: Broker) -> None:
    with Producer(broker.ns, timeout=5.0) as producer:
        for n in range(COUNT):
            r = producer.send(TOPIC, f"m{n}-".encode() * 100, tags=f"t{n // 4 % 2}", keys=f"k{n}")
            assert r.status == "SEND_OK"
    assert broker.server is not None
    store = broker.server.store
    wait_dispatched(store)
    root = broker.store_config.store_path_root_dir
    with PullConsumer(broker.ns, "tier-group", timeout=5.0) as consumer:
        mq = next(q for q in consumer.queues(TOPIC) if q.queue_id == 0)
        before_raw = consumer.pull(mq, 0, 32).raw
        before = walk(consumer, mq)
        tier_store(root, broker.tiered, files=3)
        expire_oldest(store, 3)
        low = store.get_min_offset_in_queue(TOPIC, 0)
        assert low > 32
        assert min_offset(broker) == 0  # the tier's first: pulls from there are served

        first = consumer.pull(mq, 0, 32)
        n = store.config.max_transfer_count_on_message_in_disk  # a pull of cold records
        assert first.status == FOUND and first.next_begin_offset == n
        assert first.raw == before_raw[: len(first.raw)]  # the very records the log held
        assert len(first.messages) == n
        assert first.min_offset == 0 and first.max_offset == store.get_max_offset_in_queue(TOPIC, 0)
        after = walk(consumer, mq)
        assert [tuple(m) for m in after] == [tuple(m) for m in before]
        tagged = walk(consumer, mq, "t1")
        assert [m.body for m in tagged] == [m.body for m in before if m.tags == "t1"]
        assert 0 < len(tagged) < len(before)
        assert any(m.queue_offset < low for m in tagged)

        # the tier loses its last file (a gap above it): those offsets are moved, as before
        manifest = load_manifest(broker.tiered, TOPIC)
        gone = manifest.files.pop()
        save_manifest(broker.tiered, manifest)
        gap = gone.queues[0][1]
        assert gap < low
        moved = consumer.pull(mq, gap, 32)
        assert (moved.status, moved.next_begin_offset) == (OFFSET_ILLEGAL, low)
        assert min_offset(broker) == low  # the tier no longer reaches the commit log
        assert consumer.pull(mq, 0, 32).status == FOUND


def test_a_held_pull_woken_into_a_tier_read_is_answered_by_it() -> None:
    from rocketstore.broker.messaging._pull import _chain
    from rocketstore.remoting import RemotingCommand

    async def run() -> list[Any]:
        loop = asyncio.get_running_loop()
        answer = RemotingCommand.response(0, "FOUND")
        out: list[Any] = []
        for outcome in ("result", "error", "cancel", "done"):
            task: asyncio.Future[Any] = loop.create_future()
            fut: asyncio.Future[Any] = loop.create_future()
            if outcome == "done":
                fut.set_result(None)  # the connection answered already: left alone
            task.add_done_callback(lambda t, f=fut: _chain(t, f))
            if outcome == "result":
                task.set_result(answer)
            elif outcome == "error":
                task.set_exception(RuntimeError("tier read failed"))
            else:
                task.cancel()
            await asyncio.sleep(0)
            if fut.cancelled():
                out.append("cancelled")
            elif fut.exception() is not None:
                out.append(str(fut.exception()))
            else:
                out.append(fut.result())
        return [answer, *out]

    answer, *got = asyncio.run(run())
    assert got == [answer, "tier read failed", "cancelled", None]
