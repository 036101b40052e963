"""A name server, a broker and its gRPC front end on an event loop in a background thread, for
the gRPC tests: blocking clients (grpc stubs, the remoting client, the official client in a
subprocess) talk to it from the test's thread."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.grpc import GrpcConfig, GrpcFrontEnd
from rocketstore.grpc._pb import definition_pb2 as pb
from rocketstore.grpc._pb import service_pb2 as spb
from rocketstore.namesrv import NameServer
from rocketstore.server import BrokerServer

T = TypeVar("T")

# fast clients for the tests: short invisible times are allowed
TEST_GRPC_CONFIG = GrpcConfig(
    port=0,
    min_invisible_ms=100,
    pop_recheck_ms=500,
    pop_persist_interval_ms=200,
    shutdown_grace_s=0.2,
)


def small_store_config(root: Path, **overrides: Any) -> StoreConfig:
    base = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=8 * 1024 * 1024,
        mapped_file_size_consume_queue=20 * 10_000,
        max_hash_slot_num=1000,
        max_index_num=4000,
        flush_interval_commit_log=10,
        commit_interval_commit_log=10,
    )
    return dataclasses.replace(base, **overrides)


class BrokerThread:
    """``start()`` runs everything; ``call(fn)`` runs a coroutine function on the loop;
    ``stop()`` shuts down in order (gRPC front end, broker, name server) and ends the thread."""

    def __init__(
        self,
        root: Path,
        *,
        grpc_config: GrpcConfig = TEST_GRPC_CONFIG,
        broker_overrides: dict[str, Any] | None = None,
        store_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.root = root
        self.grpc_config = grpc_config
        self.broker_overrides = broker_overrides or {}
        self.store_overrides = store_overrides or {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.namesrv: NameServer
        self.server: BrokerServer
        self.broker: BrokerController
        self.grpc: GrpcFrontEnd
        self.running = False

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def run(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """A plain function on the loop's thread (broker state is the loop's)."""

        async def wrapper() -> T:
            return fn()

        return self.call(wrapper, timeout)

    def start(self) -> BrokerThread:
        if not self.thread.is_alive():
            self.thread.start()

        async def up() -> None:
            self.namesrv = NameServer("127.0.0.1", 0)
            await self.namesrv.start()
            broker_config = BrokerConfig(
                listen_port=0, namesrv_addr=self.namesrv.address, **self.broker_overrides
            )
            self.server = BrokerServer(
                small_store_config(self.root, **self.store_overrides),
                broker_config,
                grpc=self.grpc_config,
            )
            await self.server.start()
            self.broker = self.server.broker
            assert self.server.grpc is not None
            self.grpc = self.server.grpc

        self.call(up)
        self.running = True
        return self

    def stop(self) -> None:
        if self.running:
            self.running = False

            async def down() -> None:
                try:
                    await self.server.shutdown()
                finally:
                    await self.namesrv.close()

            self.call(down)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()

    @property
    def grpc_address(self) -> str:
        return self.grpc.address

    @property
    def namesrv_address(self) -> str:
        return self.namesrv.address


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost and its key (PEM), made with openssl."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


Code = pb.Code
MD = [("x-mq-client-id", "test-client")]
_ids = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


def message(
    topic: str,
    body: bytes,
    *,
    tag: str | None = None,
    keys: tuple[str, ...] = (),
    props: dict[str, str] | None = None,
    message_id: str | None = None,
    deliver_ms: int | None = None,
    group: str | None = None,
) -> pb.Message:
    m = pb.Message(body=body)
    m.topic.name = topic
    sp = m.system_properties
    sp.message_id = message_id if message_id is not None else unique("MSGID-")
    sp.body_encoding = pb.IDENTITY
    sp.message_type = pb.NORMAL
    if tag is not None:
        sp.tag = tag
    sp.keys.extend(keys)
    if deliver_ms is not None:
        sp.delivery_timestamp.FromMilliseconds(deliver_ms)
        sp.message_type = pb.DELAY
    if group is not None:
        sp.message_group = group
        sp.message_type = pb.FIFO
    for k, v in (props or {}).items():
        m.user_properties[k] = v
    return m


def send(stub: Any, *messages: pb.Message, metadata: Any = MD) -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=list(messages)), metadata=metadata)


def send_ok(stub: Any, topic: str, body: bytes, **kw: Any) -> spb.SendResultEntry:
    r = send(stub, message(topic, body, **kw))
    assert r.status.code == Code.OK, r.status
    return r.entries[0]


def receive(
    stub: Any,
    group: str,
    topic: str,
    *,
    batch: int = 32,
    invisible_ms: int | None = 5_000,
    poll_ms: int | None = 300,
    expression: str = "*",
    filter_type: int = pb.TAG,
    timeout: float = 10.0,
    metadata: Any = MD,
    auto_renew: bool = False,
) -> tuple[pb.Status, list[pb.Message], list[str]]:
    """(status, messages, the kinds of the responses in order)."""
    req = spb.ReceiveMessageRequest(batch_size=batch, auto_renew=auto_renew)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.id = 0
    req.filter_expression.type = filter_type  # type: ignore[assignment]
    req.filter_expression.expression = expression
    if invisible_ms is not None:
        req.invisible_duration.FromMilliseconds(invisible_ms)
    if poll_ms is not None:
        req.long_polling_timeout.FromMilliseconds(poll_ms)
    st = pb.Status()
    got: list[pb.Message] = []
    kinds: list[str] = []
    for r in stub.ReceiveMessage(req, metadata=metadata, timeout=timeout):
        kind = r.WhichOneof("content")
        kinds.append(kind)
        if kind == "status":
            st = r.status
        elif kind == "message":
            got.append(r.message)
    return st, got, kinds


def receive_all(
    stub: Any, group: str, topic: str, count: int, *, rounds: int = 40, **kw: Any
) -> tuple[list[pb.Message], list[list[str]]]:
    """``receive`` until ``count`` messages came (each answer takes what had reached the queue
    when it was given): the messages, and the kinds of each answer's responses."""
    got: list[pb.Message] = []
    kinds: list[list[str]] = []
    for _ in range(rounds):
        st, batch, these = receive(stub, group, topic, **kw)
        assert st.code in (pb.Code.OK, pb.Code.MESSAGE_NOT_FOUND), st
        got += batch
        kinds.append(these)
        if len(got) >= count:
            break
    return got, kinds


def ack(stub: Any, group: str, topic: str, *handles: str) -> spb.AckMessageResponse:
    req = spb.AckMessageRequest()
    req.group.name = group
    req.topic.name = topic
    for h in handles:
        req.entries.add(receipt_handle=h, message_id="x")
    return stub.AckMessage(req, metadata=MD)
