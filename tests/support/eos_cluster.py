"""A name server and broker groups for the exactly-once tests and benchmark, on a loop thread
of the calling process. The tests check transactions often (timeout 1 s, a round every 0.5 s)
and never give one up; the benchmark runs RocketMQ's defaults (``ROCKETMQ_CHECKS``)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.client import MessageQueue, Producer
from rocketstore.client._admin import AdminClient
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer

BROKERS = ("eos-a", "eos-b")
QUEUES = 2
WAIT_S = 60.0


@dataclass(frozen=True)
class Checks:
    """The brokers' transaction checks: transactionTimeOut, transactionCheckInterval,
    transactionCheckMax."""

    timeout_ms: int = 1_000
    interval_ms: int = 500
    max: int = 10_000


# RocketMQ's defaults
ROCKETMQ_CHECKS = Checks(6_000, 60_000, 15)


class Cluster:
    """A name server and broker groups on a loop thread."""

    def __init__(
        self, root: Path, *, checks: Checks = Checks(), commit_log_size: int = 16 << 20
    ) -> None:
        self.root = root
        self.checks = checks
        self.commit_log_size = commit_log_size
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.servers: dict[str, BrokerServer] = {}
        self.namesrv = NameServer(port=0)
        self.run(self.namesrv.start())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)

    @property
    def ns(self) -> str:
        return self.namesrv.address

    def start(self, name: str) -> None:
        async def start() -> BrokerServer:
            store = StoreConfig(
                store_path_root_dir=str(self.root / name),
                mapped_file_size_commit_log=self.commit_log_size,
                mapped_file_size_consume_queue=20 * 4000,
                ha_listen_port=0,
            )
            config = BrokerConfig(
                listen_port=0,
                namesrv_addr=self.ns,
                broker_name=name,
                transaction_timeout=self.checks.timeout_ms,
                transaction_check_interval=self.checks.interval_ms,
                transaction_check_max=self.checks.max,
            )
            server = BrokerServer(store, config)
            await server.start()
            return server

        self.servers[name] = self.run(start())

    def stop(self) -> None:
        try:
            for name in list(self.servers):
                self.run(self.servers.pop(name).shutdown())
            self.run(self.namesrv.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def create_topic(self, topic: str) -> None:
        with AdminClient(self.ns) as admin:
            for server in self.servers.values():
                admin.create_topic(
                    server.address, topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES
                )
            deadline = time.monotonic() + WAIT_S
            while True:
                route = admin.route(topic)
                if route is not None and set(route.brokers) >= set(self.servers):
                    return
                assert time.monotonic() < deadline, f"no route for {topic}"
                time.sleep(0.05)

    def fill(
        self,
        topic: str,
        rows: int,
        *,
        width: int = 0,
        per_send: int = 16,
        prefix: str | None = None,
    ) -> set[bytes]:
        """``rows`` messages, each body a unique id (``prefix``, default the topic, and the
        row's number; padded to ``width`` bytes), spread over every queue ``per_send`` at a
        time."""
        self.create_topic(topic)
        head = prefix or topic
        bodies = [f"{head}-row-{i:06d}".encode().ljust(width, b".") for i in range(rows)]
        queues = [MessageQueue(topic, b, q) for b in self.servers for q in range(QUEUES)]
        with Producer(self.ns) as p:
            for i, lo in enumerate(range(0, rows, per_send)):
                p.send_batch(topic, bodies[lo : lo + per_send], queue=queues[i % len(queues)])
        return set(bodies)

    def bodies(self, topic: str) -> collections.Counter[bytes]:
        """How often a consumer sees each body of ``topic``."""
        return collections.Counter(bytes(m.body) for m in self.read(topic))

    def read(self, topic: str) -> list[Any]:
        """Every message of ``topic`` a consumer sees (pulled from every queue)."""
        return read_topic(self.ns, topic)


@contextlib.contextmanager
def started_cluster(root: Path, *, decisions: bool = False) -> Iterator[Cluster]:
    """A name server and the groups ``BROKERS`` (with the decision topic when ``decisions``),
    stopped when the block ends, a failed start included."""
    c = Cluster(root)
    try:
        for name in BROKERS:
            c.start(name)
        if decisions:
            from rocketstore.spark._eos import ensure_decision_topic

            with AdminClient(c.ns) as admin:
                ensure_decision_topic(admin)
        yield c
    finally:
        c.stop()


def assert_once(got: collections.Counter[bytes], expected: set[bytes]) -> None:
    """Every id of ``expected`` seen once in ``got`` (how often a consumer saw each body):
    none lost, none duplicated, none unknown."""
    duplicated = {b: n for b, n in got.items() if n > 1}
    lost = expected - set(got)
    extra = set(got) - expected
    assert not duplicated and not lost and not extra, (
        f"{len(lost)} lost, {len(duplicated)} duplicated, {len(extra)} unknown"
    )


def read_once(c: Cluster, topic: str, expected: set[bytes]) -> list[Any]:
    """The messages of ``topic`` a consumer reads, asserted to hold every id of ``expected``
    once and nothing else."""
    msgs = c.read(topic)
    assert_once(collections.Counter(bytes(m.body) for m in msgs), expected)
    return msgs


def read_topic(ns: str, topic: str) -> list[Any]:
    """Every message of ``topic`` a consumer sees: pulled from every readable queue of its
    route from the group's master."""
    out: list[Any] = []
    with AdminClient(ns) as admin:
        route = admin.route(topic)
        assert route is not None, f"no route for {topic}"
        for mq in route.queues(write=False):
            addr = route.master(mq.broker_name)
            assert addr is not None, f"{mq.broker_name} has no master"
            offset = 0
            while True:
                msgs, nxt = admin.pull_messages(addr, mq, offset, 64)
                if not msgs:
                    break
                out.extend(msgs)
                offset = nxt
    return out
