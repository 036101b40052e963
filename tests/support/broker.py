"""A name server and a broker on an event-loop thread of their own (``RunningBroker``), and the
remoting requests tests send it by hand (send, pull, heartbeat)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.namesrv import NameServer
from rocketstore.remoting import RemotingCommand, ResponseCode
from rocketstore.server import BrokerServer

RC = ResponseCode
START_TIMEOUT_S = 20.0


class RunningBroker:
    """A name server and a broker on their own event loop thread. ``stop`` is bounded and runs
    once; the fixture calls it for every broker a test started."""

    def __init__(self, root: Path, *, store: dict[str, Any], broker: dict[str, Any]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.store_config = StoreConfig(
            store_path_root_dir=str(root),
            mapped_file_size_commit_log=1024 * 1024,
            mapped_file_size_consume_queue=20 * 1000,
            message_delay_level="1s 1s 1s 1s 1s 1s",
            flush_interval_commit_log=10,
            **{"ha_listen_port": 0, **store},  # replication (masters): any free port
        )
        self._broker_overrides = broker
        self.namesrv: NameServer | None = None
        self.server: BrokerServer | None = None
        self.controller: BrokerController | None = None
        self._stopped = False
        try:
            self.run(self._start(), START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    async def _start(self) -> None:
        self.namesrv = NameServer(port=0)
        await self.namesrv.start()
        config = BrokerConfig(listen_port=0, namesrv_addr=self.namesrv.address)
        config = dataclasses.replace(config, **self._broker_overrides)
        self.server = BrokerServer(self.store_config, config)
        await self.server.start()
        self.controller = self.server.broker

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def ns(self) -> str:
        assert self.namesrv is not None
        return self.namesrv.address

    @property
    def addr(self) -> str:
        assert self.controller is not None
        return self.controller.address

    @property
    def config_dir(self) -> Path:
        return Path(self.store_config.store_path_root_dir) / "config"

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:

            async def down() -> None:
                if self.server is not None:
                    await self.server.shutdown()
                if self.namesrv is not None:
                    await self.namesrv.close()

            self.run(down(), START_TIMEOUT_S)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()


def send_request(
    topic: str, body: bytes = b"x", *, queue_id: int = 0, properties: str = "", **ext: Any
) -> RemotingCommand:
    fields = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": properties,
        "reconsumeTimes": "0",
        "unitMode": "false",
    }
    fields.update({k: str(v) for k, v in ext.items()})
    return RemotingCommand.request(RC.SUCCESS + 10, fields, body)  # SEND_MESSAGE


def pull_request(
    topic: str,
    queue_id: int,
    offset: int,
    *,
    group: str = "CG",
    expression: str = "*",
    suspend_ms: int = 0,
    max_nums: int = 32,
) -> RemotingCommand:
    flag = 0x4 | (0x2 if suspend_ms else 0)
    return RemotingCommand.request(
        11,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(flag),
            "commitOffset": "0",
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": expression,
            "subVersion": "0",
        },
    )


def heartbeat(client_id: str, group: str, topic: str) -> RemotingCommand:
    body = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}],
                "unitMode": False,
            }
        ],
        "producerDataSet": [],
    }
    return RemotingCommand.request(34, {}, json.dumps(body).encode())
