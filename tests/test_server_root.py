"""The composition root (``rocketstore.server.BrokerServer``): a broker and its gRPC front end
started in order and shut down in order (stop registering, close the front end, then the
broker), the front end's keys guarding the remoting port from the start, and a front end that
cannot start leaving nothing running."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from _grpc_broker import TEST_GRPC_CONFIG, small_store_config
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.grpc import GrpcFrontEnd
from rocketstore.server import BrokerServer


def _server(root: Path, **grpc: object) -> BrokerServer:
    return BrokerServer(
        small_store_config(root),
        BrokerConfig(listen_port=0),
        grpc=TEST_GRPC_CONFIG.replace(**grpc),  # type: ignore[arg-type]
    )


def test_start_and_shutdown_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def record(cls: type, name: str) -> None:
        original = getattr(cls, name)

        async def wrapper(self: object) -> None:
            calls.append(f"{cls.__name__}.{name}")
            await original(self)

        monkeypatch.setattr(cls, name, wrapper)

    for cls, name in (
        (BrokerController, "start"),
        (BrokerController, "stop_registering"),
        (BrokerController, "shutdown"),
        (GrpcFrontEnd, "start"),
        (GrpcFrontEnd, "close"),
    ):
        record(cls, name)

    async def main() -> None:
        server = _server(tmp_path)
        await server.start()
        assert server.grpc is not None and server.grpc.port > 0
        assert server.broker.grpc_endpoint == server.grpc.address
        await server.shutdown()
        assert server.grpc is None
        await server.shutdown()  # twice: nothing more

    asyncio.run(main())
    assert calls == [
        "BrokerController.start",
        "GrpcFrontEnd.start",
        "BrokerController.stop_registering",
        "GrpcFrontEnd.close",
        "BrokerController.shutdown",
        "BrokerController.stop_registering",  # shutdown's own, a no-op after the first
        "BrokerController.stop_registering",
        "BrokerController.shutdown",
    ]


def test_the_front_ends_keys_guard_the_remoting_port_from_the_start(tmp_path: Path) -> None:
    async def main() -> None:
        server = _server(tmp_path, credentials={"ak": "sk"})
        await server.start()
        try:
            assert server.broker.acl is not None
            assert server.broker.acl.current().account("ak") is not None
        finally:
            await server.shutdown()
        plain = _server(tmp_path / "plain")
        await plain.start()
        try:
            assert plain.broker.acl is None
        finally:
            await plain.shutdown()

    asyncio.run(main())


def test_a_front_end_that_cannot_start_leaves_nothing_running(tmp_path: Path) -> None:
    """The gRPC port is taken: start fails, the broker it started is shut down (its remoting
    port closed, its store unlocked), so the same store starts again at once."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def first() -> int:
            server = _server(tmp_path, port=port)
            with pytest.raises(OSError, match="cannot bind"):
                await server.start()
            assert server.grpc is None
            return server.broker.config.listen_port

        remoting_port = asyncio.run(first())
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", remoting_port), timeout=2).close()

    async def again() -> None:
        server = _server(tmp_path)
        await server.start()
        await server.shutdown()

    asyncio.run(again())
