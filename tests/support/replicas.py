"""RocketMQ 5's controller mode in one process: a controller, a name server and the brokers
of one group on a loop thread, for the replication tests."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.client._controller import ControllerAdmin
from rocketstore.controller import ControllerConfig
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer, ControllerServer

GROUP = "broker-a"


class Group:
    """A controller, a name server and brokers of one group, on a loop thread; ``broker``:
    settings of every broker (BrokerConfig's fields) beyond the group's own."""

    def __init__(
        self, root: Path, *, lease_ms: int = 0, broker: dict[str, Any] | None = None
    ) -> None:
        self.root = root
        self.lease_ms = lease_ms
        self.broker_settings = dict(broker or {})
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.namesrv = NameServer(port=0)
        self.run(self.namesrv.start())
        self.controller: ControllerServer | None = None
        self.controller_port = 0
        self.start_controller()
        self.brokers: dict[str, BrokerServer] = {}

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start_controller(self) -> None:
        config = ControllerConfig(
            listen_port=self.controller_port,
            store_path=str(self.root / "controller"),
            scan_not_active_broker_interval_ms=100,
            scan_inactive_master_interval_ms=100,
            broker_heartbeat_timeout_ms=4000,
        )
        self.controller = ControllerServer(config)
        self.run(self.controller.start())
        self.controller_port = int(self.controller.address.rpartition(":")[2])

    def stop_controller(self) -> None:
        assert self.controller is not None
        self.run(self.controller.shutdown())
        self.controller = None

    @property
    def controller_addr(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

    def start_broker(self, name: str) -> BrokerServer:
        store = StoreConfig(
            store_path_root_dir=str(self.root / name),
            mapped_file_size_commit_log=256 * 1024,
            broker_role="SLAVE",
            sync_flush_timeout=2000,
            enable_controller_mode=True,
            all_ack_in_sync_state_set=True,
            min_in_sync_replicas=2,
            ha_send_heartbeat_interval=300,
            ha_listen_port=0,
        )
        config = BrokerConfig(
            listen_port=0,
            namesrv_addr=self.namesrv.address,
            broker_id=-1,
            enable_controller_mode=True,
            controller_addr=self.controller_addr,
            controller_heart_beat_timeout_mills=4000,
            controller_lease_mills=self.lease_ms,
            sync_broker_metadata_period=500,
            check_sync_state_set_period=500,
            **self.broker_settings,
        )
        server = BrokerServer(store, config)
        self.run(server.start())
        self.brokers[name] = server
        return server

    def stop_broker(self, name: str) -> None:
        self.run(self.brokers.pop(name).shutdown())

    def replicas(self, name: str) -> Any:
        r = self.brokers[name].broker.replicas
        assert r is not None
        return r

    def role(self, name: str) -> str:
        return str(self.replicas(name).role)

    def master(self) -> str | None:
        found = [n for n in self.brokers if self.role(n) == "MASTER"]
        return found[0] if len(found) == 1 else None

    def sync_state(self) -> Any:
        with ControllerAdmin(self.controller_addr) as admin:
            return admin.sync_state([GROUP]).table.get(GROUP)

    def whole(self) -> bool:
        info = self.sync_state()
        return (
            info is not None
            and len(info.in_sync_replicas) == len(self.brokers)
            and self.master() is not None
        )

    def close(self) -> None:
        for name in list(self.brokers):
            try:
                self.stop_broker(name)
            except Exception:
                pass
        if self.controller is not None:
            self.run(self.controller.shutdown())
        self.run(self.namesrv.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
