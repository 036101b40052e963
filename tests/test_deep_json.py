"""A request body nested deeper than Python's recursion limit is bad input like any other body
that does not parse: answered with the decoder's words, logged as one line, and the server keeps
serving. Before, the name server's bodies and the broker's heartbeat and queue-lock bodies
raised RecursionError through the shared JSON decoder, answered and logged (with a traceback)
as an internal error of the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.namesrv import NameServer
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from support.grpc_broker import BrokerThread
from support.remoting import LoopThread

DEEP = b"[" * 200_000 + b"]" * 200_000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path / "store")
    try:
        yield b.start()
    finally:
        b.close()


def ask(address: str, code: int, ext: dict[str, str], body: bytes) -> RemotingCommand:
    with RemotingClient(timeout=30) as client:
        return client.invoke(address, RemotingCommand.request(code, ext, body))


def assert_bad_input(r: RemotingCommand) -> None:
    assert r.code != ResponseCode.SUCCESS
    assert "nested too deeply" in (r.remark or ""), r.remark
    assert "RecursionError" not in (r.remark or "")


@pytest.mark.parametrize("code", [34, 41, 42])  # HEARTBEAT, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ
def test_the_broker_refuses_a_deep_body_as_bad_input(broker: BrokerThread, code: int) -> None:
    address = broker.broker.address
    assert_bad_input(ask(address, code, {}, DEEP))
    assert ask(address, 28, {}, b"").code == ResponseCode.SUCCESS  # GET_BROKER_RUNTIME_INFO


def test_the_name_server_refuses_a_deep_body_as_bad_input() -> None:
    thread = LoopThread()
    namesrv = NameServer("127.0.0.1", 0)
    try:
        thread.run(namesrv.start())
        ext = {"brokerName": "b", "brokerAddr": "127.0.0.1:1", "clusterName": "c"}
        ext |= {"haServerAddr": "127.0.0.1:2", "brokerId": "0", "compressed": "false"}
        assert_bad_input(ask(namesrv.address, 103, ext, DEEP))  # REGISTER_BROKER
        r = ask(namesrv.address, 106, {}, b"")  # GET_BROKER_CLUSTER_INFO
        assert r.code == ResponseCode.SUCCESS
    finally:
        thread.run(namesrv.close())
        thread.stop()
