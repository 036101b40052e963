"""The HA port takes no credentials (as RocketMQ's) and serves the whole commit log to whoever
connects and reports an offset: it binds 127.0.0.1 unless told otherwise, whatever host the
broker's own port listens on (it followed that host before, so opening the broker to the
network opened the log too), and peers that connect and say nothing neither multiply the
master's threads (two a connection, without a limit before) nor keep a slave out."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from support.grpc_broker import BrokerThread

SLAVES_AT_ONCE = 16  # rocketstore.store.ha._service.MAX_CONNECTIONS


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path / "store", broker_overrides={"listen_host": "127.0.0.2"})
    try:
        yield b.start()
    finally:
        b.close()


def ha_port(b: BrokerThread) -> int:
    return int(b.broker.store.ha.listen_port)


def ha_address(b: BrokerThread) -> tuple[str, int]:
    return b.broker.store_config.ha_listen_host, ha_port(b)


def test_the_ha_port_stays_on_this_host(broker: BrokerThread) -> None:
    assert broker.broker.address.startswith("127.0.0.2:")
    assert broker.broker.store_config.ha_listen_host == "127.0.0.1"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", ha_port(broker)), timeout=10).close()
    socket.create_connection(("127.0.0.1", ha_port(broker)), timeout=10).close()


def send_one(b: BrokerThread) -> None:
    ext = {"a": "P", "b": "HaT", "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "0"}
    ext |= {"h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
    with RemotingClient(timeout=10) as client:
        r = client.invoke(b.broker.address, RemotingCommand.request(310, ext, b"replicated"))
    assert r.code == ResponseCode.SUCCESS, r.remark


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One master → slave frame: (offset, bytes)."""

    def exact(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "the master closed the connection"
            out += chunk
        return out

    offset, size = struct.unpack(">qi", exact(12))
    return offset, exact(size)


def test_silent_peers_neither_multiply_threads_nor_keep_a_slave_out(broker: BrokerThread) -> None:
    send_one(broker)
    threads_before = threading.active_count()
    silent = [
        socket.create_connection(ha_address(broker), timeout=10) for _ in range(4 * SLAVES_AT_ONCE)
    ]
    try:
        slave = socket.create_connection(ha_address(broker), timeout=30)
        with slave:  # accepted after every silent one: served all the same
            slave.sendall(struct.pack(">q", 0))  # from the start of the last file
            data = b""
            while b"replicated" not in data:
                _offset, chunk = read_frame(slave)
                data += chunk
            ha = broker.broker.store.ha
            assert ha.connection_count() <= SLAVES_AT_ONCE
            assert threading.active_count() <= threads_before + 2 * SLAVES_AT_ONCE
    finally:
        for sock in silent:
            sock.close()
