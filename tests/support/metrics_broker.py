"""A name server, a broker and its /metrics endpoint on an event loop in a thread of their own,
for the tests that read a real broker's metrics and statistics after traffic over loopback."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.broker.state._topic_config import TopicConfig
from rocketstore.metrics import MetricsServer, start_metrics
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer

from .remoting import LoopThread

WAIT_S = 20.0


class Running:
    """Started by :func:`running_broker`. ``store``: StoreConfig fields of the broker's store
    (beside its root); ``topic``: a topic of 4 queues the name server routes before the first
    send, else none is made."""

    def __init__(self, root: Path, *, topic: str | None = None, **store: Any) -> None:
        self.loop = LoopThread()
        self.root = root
        self.topic = topic
        self.store_config = StoreConfig(store_path_root_dir=str(root), ha_listen_port=0, **store)
        self.namesrv = NameServer(port=0)
        self.server: BrokerServer | None = None
        self.metrics: MetricsServer | None = None

    @property
    def broker(self) -> BrokerController:
        assert self.server is not None
        return self.server.broker

    @property
    def flush(self) -> str:
        return self.store_config.flush_disk_type

    @property
    def url(self) -> str:
        assert self.metrics is not None
        return f"http://{self.metrics.address}"

    async def start(self) -> None:
        await self.namesrv.start()
        config = BrokerConfig(listen_port=0, namesrv_addr=self.namesrv.address)
        self.server = BrokerServer(self.store_config, config)
        await self.server.start()
        if self.topic is not None:
            topic = TopicConfig(self.topic, 4, 4)
            self.broker.topics.update(topic)
            self.broker.topic_changed(topic)
            await self.broker.register_topics_now()  # the name server routes it before a send
        self.metrics = await start_metrics(self.broker, "127.0.0.1:0", namesrv=self.namesrv)

    async def stop(self) -> None:
        if self.metrics is not None:
            await self.metrics.close()
        if self.server is not None:
            await self.server.shutdown()
        await self.namesrv.close()

    def scrape(self) -> list[tuple[str, dict[str, str], float]]:
        """Every sample of a scrape of /metrics: (name, labels, value)."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            text = response.read().decode()
        return [
            (s.name, s.labels, s.value)
            for f in text_string_to_metric_families(text)
            for s in f.samples
        ]


@contextlib.contextmanager
def running_broker(root: Path, *, topic: str | None = None, **store: Any) -> Iterator[Running]:
    """A started :class:`Running` (its arguments), stopped when the block ends."""
    r = Running(root, topic=topic, **store)
    try:
        r.loop.run(r.start(), WAIT_S)
        yield r
    finally:
        with contextlib.suppress(Exception):
            r.loop.run(r.stop(), WAIT_S)
        r.loop.stop()
