"""Brokers (masters of their own groups) and a name server on an event-loop thread, for the
Spark source's tests against running brokers."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.client._admin import AdminClient
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer

BROKERS = ("broker-a", "broker-b")
QUEUES = 4
WAIT_S = 30.0


class Brokers:
    """A name server and broker groups (masters) on an event loop thread."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.controllers: dict[str, BrokerServer] = {}
        self.namesrv: NameServer | None = None
        self.run(self._start_namesrv())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)

    async def _start_namesrv(self) -> None:
        self.namesrv = NameServer(port=0)
        await self.namesrv.start()

    @property
    def ns(self) -> str:
        assert self.namesrv is not None
        return self.namesrv.address

    def start(self, name: str) -> BrokerServer:
        async def start() -> BrokerServer:
            store = StoreConfig(
                store_path_root_dir=str(self.root / name),
                mapped_file_size_commit_log=4 << 20,
                mapped_file_size_consume_queue=20 * 2000,
                max_transfer_count_on_message_in_memory=2048,
                max_transfer_bytes_on_message_in_memory=4 << 20,
                ha_listen_port=0,
            )
            config = BrokerConfig(listen_port=0, namesrv_addr=self.ns, broker_name=name)
            c = BrokerServer(store, config)
            await c.start()
            return c

        c: BrokerServer = self.run(start())
        self.controllers[name] = c
        return c

    def stop_broker(self, name: str) -> None:
        c = self.controllers.pop(name, None)
        if c is not None:
            self.run(c.shutdown())

    def stop(self) -> None:
        try:
            for name in list(self.controllers):
                self.stop_broker(name)
            if self.namesrv is not None:
                self.run(self.namesrv.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def create_topic(b: Brokers, topic: str, names: tuple[str, ...] = BROKERS) -> None:
    with AdminClient(b.ns) as admin:
        for name in names:
            addr = b.controllers[name].address
            admin.create_topic(addr, topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    deadline = time.monotonic() + WAIT_S
    with AdminClient(b.ns) as admin:  # the name server learns the route from the brokers
        while True:
            route = admin.route(topic)
            if route is not None and set(route.brokers) >= set(names):
                return
            assert time.monotonic() < deadline, f"no route for {topic}"
            time.sleep(0.05)
