"""A name server, one broker (ACL on or off) and a console on an event loop in a thread of
their own, for the console's API and browser tests; plain HTTP calls to the console."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.client import Producer
from rocketstore.client._admin import AdminClient
from rocketstore.client._trace import TRACE_TOPIC, TraceContext, encode_trace, trace_keys
from rocketstore.console import ConsoleServer
from rocketstore.namesrv import NameServer
from rocketstore.remoting import RemotingClient, RemotingCommand
from rocketstore.server import BrokerServer

from .acl_env import ATTACKER_ACCOUNT
from .waits import wait_until

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
  - accessKey: console-reader
    secretKey: reader-secret-1
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""

# an administrator and an account denied every topic and group but PubOnly's sending: what an
# account that may not read is refused (test_console_acl, test_console_floods)
ATTACKER_ACL_YML = f"""\
accounts:
  - accessKey: console-admin
    secretKey: admin-secret-1
    admin: true
{ATTACKER_ACCOUNT}"""


async def _wrap(coro: Awaitable[T]) -> T:
    return await coro


class ConsoleEnv:
    """Start with :meth:`open`, stop with :meth:`close` (also after a failed start)."""

    def __init__(
        self,
        root: Path,
        *,
        acl: bool = False,
        slave: bool = False,
        trace_topic: bool = False,
        acl_yml: str = ACL_YML,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.acl = acl
        self.acl_yml = acl_yml
        self.with_slave = slave
        self.trace_topic = trace_topic
        self.slave: BrokerServer | None = None
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
        self.server = self._broker("master", 0, acl_file)
        await self.server.start()
        if self.with_slave:
            self.slave = self._broker("slave", 1, acl_file)
            await self.slave.start()
        self.admin = AdminClient(self.ns.address, signer=None)
        self.console = ConsoleServer(self.admin, "127.0.0.1:0", login=self.acl)
        await self.console.start()

    def _broker(self, role: str, broker_id: int, acl_file: str) -> BrokerServer:
        assert self.ns is not None
        store_config = StoreConfig(
            store_path_root_dir=str(self.root / (BROKER if broker_id == 0 else f"{BROKER}-{role}")),
            mapped_file_size_commit_log=256 * 1024,
            mapped_file_size_consume_queue=20 * 1000,
            max_hash_slot_num=1000,
            max_index_num=4000,
            flush_interval_commit_log=10,
            commit_interval_commit_log=10,
            broker_role="SLAVE" if broker_id else "ASYNC_MASTER",
            ha_listen_port=0,
        )
        return BrokerServer(
            store_config,
            BrokerConfig(
                listen_port=0,
                namesrv_addr=self.ns.address,
                broker_name=BROKER,
                broker_id=broker_id,
                cluster_name=CLUSTER,
                acl_enable=self.acl,
                acl_file=acl_file,
                trace_topic_enable=self.trace_topic,
            ),
        )

    async def _stop(self) -> None:
        if self.console is not None:
            await self.console.close()
        if self.admin is not None:
            self.admin.close()
        if self.slave is not None:
            await self.slave.shutdown()
        if self.server is not None:
            await self.server.shutdown()
        if self.ns is not None:
            await self.ns.close()

    def open(self) -> ConsoleEnv:
        self.run(self._start())
        brokers = 2 if self.with_slave else 1
        assert wait_until(
            lambda: self.ns is not None and len(self.ns.routes.live_brokers()) == brokers
        )
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


@contextlib.contextmanager
def opened(root: Path, **kwargs: Any) -> Iterator[ConsoleEnv]:
    """A ConsoleEnv in ``root`` (``kwargs``: ConsoleEnv's), open while the block runs."""
    env = ConsoleEnv(root, **kwargs)
    try:
        yield env.open()
    finally:
        env.close()


def sign_in(env: ConsoleEnv, ak: str, sk: str) -> str:
    """Sign in as ``ak``; the session's cookie (name=value)."""
    r = http(env, "POST", "/api/login", {"accessKey": ak, "secretKey": sk})
    assert r.status == 200, r.body
    return str(r.headers["Set-Cookie"]).split(";")[0]


@contextlib.contextmanager
def producer_online(env: ConsoleEnv, group: str, client_id: str) -> Iterator[None]:
    """A producer of ``group`` connected to the broker while the block runs (its heartbeat,
    as RocketMQ's clients send it, over a connection kept open)."""
    heartbeat = {
        "clientID": client_id,
        "consumerDataSet": [],
        "producerDataSet": [{"groupName": group}],
    }
    with RemotingClient(timeout=5) as client:
        r = client.invoke(
            env.broker_addr, RemotingCommand.request(34, {}, json.dumps(heartbeat).encode())
        )
        assert r.code == 0, r.remark
        yield


def write_traces(env: ConsoleEnv, contexts: list[TraceContext]) -> None:
    """What a trace-enabled client's trace dispatcher sends: the contexts' text in one message
    to RMQ_SYS_TRACE_TOPIC, keyed by the traced message's id and keys."""
    keys = sorted({k for c in contexts for k in trace_keys(c)})
    data = "".join(encode_trace(c) for c in contexts).encode()
    with Producer(env.namesrv, "_INNER_TRACE_PRODUCER-console-test") as p:
        assert p.send(TRACE_TOPIC, data, keys=keys).status == "SEND_OK"
