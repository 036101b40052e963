"""Connections that say nothing, or nothing an ACL takes, cannot keep clients out of a remoting
port: a connection is established by its first whole frame (with ACL on: by a request that
authenticates), one that is not within the handshake timeout is closed, and when every place
is taken a new connection takes the place of the one waiting longest. Before, a peer that
opened max_connections sockets and sent nothing (or one unsigned request each) kept every
client out for as long as it held them; their only limit was the 120 s idle timeout, which a
byte now and then kept away."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.acl import AclFile
from rocketstore.namesrv import NameServer
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode, ServerLimits
from support.acl_env import ACL_YML, ADMIN, ATTACKER, USER, acl_refused
from support.grpc_broker import BrokerThread
from support.remoting import LoopThread, closed_by_peer, raw_connect
from support.waits import wait_until

PLACES = 12  # max_connections of the servers here


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    b = BrokerThread(
        tmp_path / "store",
        broker_overrides={"acl_enable": True, "acl_file": str(acl), "max_connections": PLACES},
    )
    try:
        yield b.start()
    finally:
        b.close()


def unsigned_request() -> bytes:
    return RemotingCommand.request(26, {}).encode()  # GET_BROKER_CONFIG, unsigned


def fill(address: str) -> list[socket.socket]:
    """Every place of the server taken: half by silent sockets, half by sockets that send one
    unsigned request (refused by the ACL) and then nothing."""
    socks = [raw_connect(address) for _ in range(PLACES)]
    for sock in socks[PLACES // 2 :]:
        sock.sendall(unsigned_request())
    return socks


def served(address: str, code: int, signer: object) -> bool:
    with RemotingClient(timeout=30, signer=signer) as client:
        r = client.invoke(address, RemotingCommand.request(code, {}))
    return r.code == ResponseCode.SUCCESS


def test_silent_and_unsigned_connections_keep_no_client_out(broker: BrokerThread) -> None:
    address = broker.broker.address
    flood = fill(address)
    try:
        server = broker.broker.server
        assert wait_until(lambda: broker.run(lambda: len(server.connections)) == PLACES)
        assert served(address, 26, USER)  # a place made for it
        assert served(address, 26, ADMIN)
        # a signed account that is refused a permission is a client all the same: it stays
        with RemotingClient(timeout=30, signer=ATTACKER) as attacker:
            refused = attacker.invoke(
                address, RemotingCommand.request(30, {"topic": "Secret", "queueId": "0"})
            )
            assert acl_refused(refused)
            for sock in flood:  # every one of the flood's sockets is closed in the end
                assert closed_by_peer(sock)
            again = attacker.invoke(address, RemotingCommand.request(26, {}))
            assert again.code == ResponseCode.SUCCESS
        stats = broker.run(server.statistics)
        assert stats.closed_unestablished >= PLACES
    finally:
        for sock in flood:
            sock.close()


def test_a_name_server_with_acl_keeps_its_places_for_clients(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    thread = LoopThread()
    namesrv = NameServer(
        "127.0.0.1", 0, acl=AclFile(acl), limits=ServerLimits(max_connections=PLACES)
    )
    flood: list[socket.socket] = []
    try:
        thread.run(namesrv.start())
        flood = fill(namesrv.address)
        assert wait_until(lambda: thread.call(lambda: len(namesrv.server.connections)) == PLACES)
        assert served(namesrv.address, 106, USER)  # GET_BROKER_CLUSTER_INFO
        assert all(closed_by_peer(sock) for sock in flood)
    finally:
        for sock in flood:
            sock.close()
        thread.run(namesrv.close())
        thread.stop()
