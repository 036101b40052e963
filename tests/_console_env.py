"""A name server, one broker (ACL on or off) and a console on an event loop in a thread of
their own, for the console's API and browser tests; plain HTTP calls to the console."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from _waits import wait_until
from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.client._admin import AdminClient
from rocketstore.console import ConsoleServer
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer

T = TypeVar("T")
CLUSTER = "ConsoleCluster"
BROKER = "broker-c"

ACL_YML = """\
accounts:
  - accessKey: console-admin
    secretKey: admin-secret-1
    whiteRemoteAddress:
    admin: true
  - accessKey: console-user
    secretKey: user-secret-1
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


async def _wrap(coro: Awaitable[T]) -> T:
    return await coro


class ConsoleEnv:
    """Start with :meth:`open`, stop with :meth:`close` (also after a failed start)."""

    def __init__(self, root: Path, *, acl: bool = False, acl_yml: str = ACL_YML) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.acl = acl
        self.acl_yml = acl_yml
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="console-env")
        self.thread.start()
        self.ns: NameServer | None = None
        self.server: BrokerServer | None = None
        self.console: ConsoleServer | None = None
        self.admin: AdminClient | None = None

    def run(self, coro: Awaitable[T], timeout: float = 20.0) -> T:
        return asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop).result(timeout)

    async def _start(self) -> None:
        self.ns = NameServer("127.0.0.1", 0)
        await self.ns.start()
        acl_file = ""
        if self.acl:
            path = self.root / "plain_acl.yml"
            path.write_text(self.acl_yml)
            acl_file = str(path)
        store_config = StoreConfig(
            store_path_root_dir=str(self.root / BROKER),
            mapped_file_size_commit_log=256 * 1024,
            mapped_file_size_consume_queue=20 * 1000,
            max_hash_slot_num=1000,
            max_index_num=4000,
            flush_interval_commit_log=10,
            commit_interval_commit_log=10,
        )
        self.server = BrokerServer(
            store_config,
            BrokerConfig(
                listen_port=0,
                namesrv_addr=self.ns.address,
                broker_name=BROKER,
                cluster_name=CLUSTER,
                acl_enable=self.acl,
                acl_file=acl_file,
            ),
        )
        await self.server.start()
        self.admin = AdminClient(self.ns.address, signer=None)
        self.console = ConsoleServer(self.admin, "127.0.0.1:0", login=self.acl)
        await self.console.start()

    async def _stop(self) -> None:
        if self.console is not None:
            await self.console.close()
        if self.admin is not None:
            self.admin.close()
        if self.server is not None:
            await self.server.shutdown()
        if self.ns is not None:
            await self.ns.close()

    def open(self) -> ConsoleEnv:
        self.run(self._start())
        assert wait_until(lambda: self.ns is not None and len(self.ns.routes.live_brokers()) == 1)
        return self

    def close(self) -> None:
        try:
            self.run(self._stop(), 30.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    @property
    def broker(self) -> BrokerController | None:
        """The started broker (None before)."""
        return self.server._broker if self.server is not None else None

    @property
    def namesrv(self) -> str:
        assert self.ns is not None
        return self.ns.address

    @property
    def broker_addr(self) -> str:
        assert self.broker is not None
        return self.broker.address

    @property
    def url(self) -> str:
        assert self.console is not None
        return f"http://{self.console.address}"


class Reply:
    def __init__(self, status: int, body: bytes, headers: Any) -> None:
        self.status = status
        self.body = body
        self.headers = headers

    @property
    def doc(self) -> Any:
        return json.loads(self.body)


def http(
    env: ConsoleEnv,
    method: str,
    path: str,
    body: Any = None,
    *,
    cookie: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> Reply:
    """One request to the console; any status comes back as a Reply."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    hdrs = {}
    if body is not None:
        hdrs = {"Content-Type": "application/json", "X-Console": "1"}
    hdrs.update(headers or {})
    if cookie:
        hdrs["Cookie"] = cookie
    req = urllib.request.Request(env.url + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return Reply(r.status, r.read(), r.headers)
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read(), exc.headers)
