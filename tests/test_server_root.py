"""The composition root (``rocketstore.server.BrokerServer``): the store, the broker, its remoting
server and its gRPC front end started in order and shut down in order (stop registering, close
the front end, answer held pulls, close the remoting server, persist, shut the store down), the
front end's keys guarding the remoting port from the start, a step that cannot start leaving
nothing running, and the addresses a listen port implies."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from pathlib import Path

import pytest

from rocketstore.broker._config import BrokerConfig
from rocketstore.broker._controller import BrokerController
from rocketstore.grpc import GrpcFrontEnd
from rocketstore.remoting import RemotingServer
from rocketstore.server import BrokerServer
from rocketstore.server._addresses import resolve_addresses
from rocketstore.store._store import MessageStore
from support.grpc_broker import TEST_GRPC_CONFIG, small_store_config


def _server(root: Path, **grpc: object) -> BrokerServer:
    return BrokerServer(
        small_store_config(root),
        BrokerConfig(listen_port=0),
        grpc=TEST_GRPC_CONFIG.replace(**grpc),  # type: ignore[arg-type]
    )


@pytest.mark.sources_only
def test_start_and_shutdown_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def record(cls: type, name: str) -> None:
        original = getattr(cls, name)

        async def wrapper(self: object) -> None:
            calls.append(f"{cls.__name__}.{name}")
            await original(self)

        monkeypatch.setattr(cls, name, wrapper)

    def record_sync(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def wrapper(self: object) -> None:
            calls.append(f"{cls.__name__}.{name}")
            original(self)

        monkeypatch.setattr(cls, name, wrapper)

    record_sync(MessageStore, "start")
    record_sync(MessageStore, "shutdown")
    for cls, name in (
        (BrokerController, "start"),
        (BrokerController, "stop_registering"),
        (BrokerController, "answer_held_pulls"),
        (BrokerController, "shutdown"),
        (RemotingServer, "start"),
        (RemotingServer, "close"),
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
        "MessageStore.start",
        "RemotingServer.start",
        "BrokerController.start",
        "GrpcFrontEnd.start",
        "BrokerController.stop_registering",
        "GrpcFrontEnd.close",
        "BrokerController.answer_held_pulls",
        "RemotingServer.close",
        "BrokerController.shutdown",
        "MessageStore.shutdown",
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
            return server.config.listen_port

        remoting_port = asyncio.run(first())
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", remoting_port), timeout=2).close()

    async def again() -> None:
        server = _server(tmp_path)
        await server.start()
        await server.shutdown()

    asyncio.run(again())


def _taken_port() -> socket.socket:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken


def _assert_released(root: Path) -> None:
    """The store was shut down cleanly (no abort file) and its directory is free again."""
    assert not (root / "abort").exists()
    with MessageStore(small_store_config(root)):
        pass


def test_a_remoting_port_in_use_shuts_the_opened_store_down(tmp_path: Path) -> None:
    """The store opens before the remoting server binds: when the port is taken, start fails
    with the bind error and the store is shut down and unlocked."""
    with _taken_port() as taken:
        port = taken.getsockname()[1]

        async def main() -> None:
            server = BrokerServer(
                small_store_config(tmp_path, ha_listen_port=0),
                BrokerConfig(listen_port=port),
                grpc=TEST_GRPC_CONFIG,
            )
            with pytest.raises(OSError):
                await server.start()
            assert server.grpc is None

        asyncio.run(main())
    _assert_released(tmp_path)


def test_a_broker_that_cannot_start_closes_its_port_and_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker's own start fails once its port listens: the port is closed again, the store
    shut down and unlocked."""

    async def failing_start(self: BrokerController) -> None:
        raise RuntimeError("no start")

    monkeypatch.setattr(BrokerController, "start", failing_start)

    async def main() -> int:
        server = _server(tmp_path)
        with pytest.raises(RuntimeError, match="no start"):
            await server.start()
        assert not server.server.connections
        return server.config.listen_port

    remoting_port = asyncio.run(main())
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", remoting_port), timeout=2).close()
    _assert_released(tmp_path)


def test_the_parts_are_there_only_once_started(tmp_path: Path) -> None:
    server = _server(tmp_path)
    for part in ("broker", "store", "server", "address"):
        with pytest.raises(RuntimeError, match="not"):
            getattr(server, part)
    assert server.config.listen_port == 0

    async def main() -> None:
        await server.start()
        try:
            assert server.config.listen_port > 0
            assert server.address == f"127.0.0.1:{server.config.listen_port}"
            assert server.broker.store is server.store
            assert server.broker.server is server.server
            assert server.store.config is server.store_config
            assert server.store_config.store_port == server.config.listen_port
            with pytest.raises(RuntimeError, match="started already"):
                await server.start()
        finally:
            await server.shutdown()
        assert server.broker.address == server.address  # still readable

    asyncio.run(main())


def test_addresses_follow_the_listen_port(tmp_path: Path) -> None:
    store = small_store_config(tmp_path, ha_listen_port=10912)
    chosen, config = resolve_addresses(
        store, BrokerConfig(listen_host="127.0.0.2", listen_port=0), choose_port=lambda h: 4321
    )
    assert config.listen_port == 4321
    assert (chosen.store_host, chosen.store_port) == (config.advertised_host, 4321)
    assert chosen.ha_enable
    # any free port, on 127.0.0.1 whatever the broker's host: the HA port takes no credentials
    assert (chosen.ha_listen_host, chosen.ha_listen_port) == ("127.0.0.1", 0)

    def never(host: str) -> int:
        raise AssertionError("a port was chosen for a fixed one")

    fixed, config = resolve_addresses(
        dataclasses.replace(store, ha_listen_host="0.0.0.0"),
        BrokerConfig(listen_port=10911),
        choose_port=never,
    )
    assert config.listen_port == 10911 and fixed.store_port == 10911
    assert (fixed.ha_listen_host, fixed.ha_listen_port) == ("0.0.0.0", 10912)
