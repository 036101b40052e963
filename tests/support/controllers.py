"""Helpers of the controller's tests: controllers over either backend, and brokers as a
controller sees them (raw frames through the project's remoting client: the requests a
RocketMQ 5.1.4 broker sends, heartbeats over its own connection, a port that takes the
controller's NOTIFY_BROKER_ROLE_CHANGED)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.controller import ControllerConfig, EtcdBackend, FileBackend, StateBackend
from rocketstore.protocol._controller_bodies import SyncStateSet
from rocketstore.protocol._controller_headers import (
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerHeartbeatRequest,
    ElectMasterRequest,
    GetNextBrokerIdRequest,
    Header,
    RegisterBrokerRequest,
)
from rocketstore.remoting import (
    AsyncRemotingClient,
    Connection,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    ResponseCode,
)
from rocketstore.server import ControllerServer

from .etcd import EtcdCluster

CLUSTER = "DefaultCluster"
_prefixes = itertools.count(1)


def run(main: Callable[[], Awaitable[None]], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(main(), timeout))


async def until(cond: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    """Wait (bounded) for ``cond()`` to hold; fail naming ``what`` when it does not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout} s: {what or cond}")
        await asyncio.sleep(0.02)


class Backends:
    """Controllers' state backends of one kind for one test: ``make()`` gives one more view of
    the same state (another controller, or the same one restarted)."""

    def __init__(self, kind: str, root: Path, etcd: EtcdCluster | None) -> None:
        self.kind = kind
        self.root = root
        self.etcd = etcd
        self.prefix = f"/rocketstore-test/{next(_prefixes)}"

    def config(self, self_id: str = "n0", **overrides: Any) -> ControllerConfig:
        base: dict[str, Any] = {
            "listen_port": 0,
            "self_id": self_id,
            "store_path": str(self.root / "controller"),
            "backend": self.kind,
            "lease_ttl_s": 2,
            "scan_not_active_broker_interval_ms": 100,
            "scan_inactive_master_interval_ms": 100,
            "broker_heartbeat_timeout_ms": 1000,
        }
        if self.etcd is not None:
            base["etcd_endpoints"] = tuple(self.etcd.endpoints)
            base["etcd_prefix"] = self.prefix
        base.update(overrides)
        return ControllerConfig(**base)

    def make(self) -> StateBackend:
        if self.etcd is not None:
            return EtcdBackend(self.etcd.endpoints, "group1", prefix=self.prefix, ttl_s=2)
        return FileBackend(self.root / "controller")

    def server(self, self_id: str = "n0", **overrides: Any) -> ControllerServer:
        return ControllerServer(self.config(self_id, **overrides))


@pytest.fixture(scope="module")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["file", "etcd"])
def backends(request: pytest.FixtureRequest, tmp_path: Path) -> Backends:
    etcd = request.getfixturevalue("etcd_cluster") if request.param == "etcd" else None
    return Backends(request.param, tmp_path, etcd)


class FakeBroker:
    """One broker of group ``name``: its requests and heartbeats go over its own client
    connection (closing it is the broker dying), its port takes the controller's notices."""

    def __init__(self, controller: str, name: str = "broker-a") -> None:
        self.controller = controller
        self.name = name
        self.notices: list[RemotingCommand] = []
        self.server = RemotingServer(
            {int(RequestCode.NOTIFY_BROKER_ROLE_CHANGED): self._notice}, "127.0.0.1", 0
        )
        self.client = AsyncRemotingClient(signer=None)
        self.broker_id: int | None = None

    def _notice(self, cmd: RemotingCommand, conn: Connection) -> None:
        self.notices.append(cmd)

    async def start(self) -> FakeBroker:
        await self.server.start()
        return self

    @property
    def address(self) -> str:
        return self.server.address

    async def call(
        self, code: int, header: Header | dict[str, str] | None = None, body: bytes = b"",
        to: str | None = None,
    ) -> RemotingCommand:  # fmt: skip
        ext = header.to_ext() if isinstance(header, Header) else dict(header or {})
        cmd = RemotingCommand.request(code, ext, body)
        return await self.client.invoke(to or self.controller, cmd, timeout=10.0)

    async def heartbeat(self, epoch: int = 0, max_offset: int = 0, timeout_ms: int = 10_000,
                        priority: int | None = None, to: str | None = None) -> None:  # fmt: skip
        assert self.broker_id is not None
        header = BrokerHeartbeatRequest(
            CLUSTER, self.address, self.name, self.broker_id, epoch, max_offset, max_offset,
            timeout_ms, priority,
        )  # fmt: skip
        cmd = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, header.to_ext(), oneway=True)
        await self.client.invoke_oneway(to or self.controller, cmd)

    async def register(self) -> RemotingCommand:
        """RocketMQ 5.1.4's registration: next id, apply it, register; the last answer."""
        r = await self.call(
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequest(CLUSTER, self.name)
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        broker_id = int(r.ext_fields["nextBrokerId"])
        check = f"{self.address};{1_700_000_000_000 + broker_id}"
        r = await self.call(
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            ApplyBrokerIdRequest(CLUSTER, self.name, broker_id, check),
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        self.broker_id = broker_id
        r = await self.call(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            RegisterBrokerRequest(CLUSTER, self.name, broker_id, self.address),
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        return r

    async def elect(self, designate: bool = False, broker_id: int | None = None,
                    to: str | None = None) -> RemotingCommand:  # fmt: skip
        target = broker_id if broker_id is not None else self.broker_id
        assert target is not None
        header = ElectMasterRequest(CLUSTER, self.name, target, designate)
        return await self.call(RequestCode.CONTROLLER_ELECT_MASTER, header, to=to)

    async def alter(self, members: set[int], master_epoch: int, set_epoch: int) -> RemotingCommand:
        assert self.broker_id is not None
        header = AlterSyncStateSetRequest(self.name, self.broker_id, master_epoch)
        body = SyncStateSet(frozenset(members), set_epoch).encode()
        return await self.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, body)

    async def die(self) -> None:
        """The broker goes away: its connections close."""
        self.client.close()
        await self.server.close()


class RunningGroup:
    """A controller (``config``: ControllerConfig's keywords; ``acl_file``) on a loop thread and,
    after :meth:`group`, a group of two brokers: broker 1 the master, both in the sync state
    set, both beating every ``beat_every_s`` with ``beat`` (epoch, max offset); the brokers
    sign with ``signed`` (an access and a secret key) when given. :meth:`stop` ends all."""

    def __init__(
        self,
        tmp: Path,
        *,
        acl_file: str | None = None,
        signed: tuple[str, str] | None = None,
        beat: tuple[int, int] = (0, 0),
        beat_every_s: float = 1.0,
        **config: Any,
    ) -> None:
        from .remoting import LoopThread

        self.loop = LoopThread()
        controller = ControllerConfig(listen_port=0, store_path=str(tmp / "controller"), **config)
        self.server = ControllerServer(controller, acl_file=acl_file)
        self.loop.run(self.server.start())
        self.brokers: list[FakeBroker] = []
        self.beating: asyncio.Task[None] | None = None
        self.signed = signed
        self.beat = beat
        self.beat_every_s = beat_every_s

    @property
    def address(self) -> str:
        return self.server.address

    def group(self) -> None:
        epoch, max_offset = self.beat

        async def make() -> None:
            a = await FakeBroker(self.address).start()
            b = await FakeBroker(self.address).start()
            if self.signed is not None:
                from rocketstore.remoting._signing import RequestSigner

                for broker in (a, b):
                    broker.client.signer = RequestSigner(*self.signed)
            self.brokers = [a, b]
            await a.register()
            await b.register()
            for broker in self.brokers:
                await broker.heartbeat(epoch=epoch, max_offset=max_offset)
            await until(lambda: self.server.controller.live.is_alive(CLUSTER, "broker-a", 2))
            assert (await a.elect()).code == ResponseCode.SUCCESS
            assert (await a.alter({1, 2}, master_epoch=1, set_epoch=1)).code == ResponseCode.SUCCESS

            async def beat() -> None:
                while True:
                    for broker in self.brokers:
                        await broker.heartbeat(epoch=epoch, max_offset=max_offset)
                    await asyncio.sleep(self.beat_every_s)

            self.beating = asyncio.create_task(beat())

        self.loop.run(make())

    def stop(self) -> None:
        async def stop() -> None:
            if self.beating is not None:
                self.beating.cancel()
            for broker in self.brokers:
                await broker.die()
            await self.server.shutdown()

        try:
            self.loop.run(stop())
        finally:
            self.loop.stop()
