"""``rocketstore message view -i ID``: an offset message id of a broker the name server knows is
read from that broker by offset; any other id (the client's message id, UNIQ_KEY, which also
decodes as an address and an offset) is looked up in the topic's index on the topic's brokers.
No connection is made to an address that neither the name server nor the user named."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from rocketstore.cli import main as cli_main
from rocketstore.store.log._record import decode_msg_id
from support.interop import ServerProcess

TOPIC = "ViewTopic"
# the client's id of a message sent from 1.0.0.127 (pid, random part, time, counter): as an
# offset message id it names the broker 1.0.0.127:<something>, which nobody runs
FOREIGN_ID = "0100007F1A2B3C4D5E6F000100020003"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("view")
    proc = ServerProcess.serve(root / "store", root / "serve.log")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def dialed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every address a connection is opened to; any but loopback is refused without a packet."""
    seen: list[str] = []
    real = socket.create_connection

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        seen.append(f"{address[0]}:{address[1]}")
        if address[0] != "127.0.0.1":
            raise ConnectionRefusedError(f"test: no connection to {address[0]}")
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    return seen


def run(*args: str) -> Any:
    return CliRunner().invoke(cli_main, list(args), catch_exceptions=False)


def send(namesrv: str, body: str, *extra: str) -> dict[str, Any]:
    r = run("produce", "--namesrv", namesrv, "--topic", TOPIC, *extra, body)
    assert r.exit_code == 0, r.output
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def view(*args: str) -> Any:
    """The view, retried for a few seconds while the broker indexes the message."""
    deadline = time.monotonic() + 15
    while True:
        r = run("message", "view", *args, "--json")
        if r.exit_code == 0 or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_offset_message_id(server: ServerProcess, dialed: list[str]) -> None:
    assert server.namesrv is not None and server.broker is not None
    sent = send(server.namesrv, "by offset")
    assert decode_msg_id(sent["offset_msg_id"])[0] == server.broker
    r = view("-n", server.namesrv, "-i", sent["offset_msg_id"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["body"] == "by offset" and doc["msg_id"] == sent["msg_id"]
    assert set(dialed) <= {server.namesrv, server.broker}


def test_client_message_id(server: ServerProcess, dialed: list[str]) -> None:
    assert server.namesrv is not None and server.broker is not None
    sent = send(server.namesrv, "by client id")
    r = view("-n", server.namesrv, "-t", TOPIC, "-i", sent["msg_id"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["body"] == "by client id" and doc["offset_msg_id"] == sent["offset_msg_id"]
    assert set(dialed) <= {server.namesrv, server.broker}


def test_an_unnamed_address_is_not_dialed(server: ServerProcess, dialed: list[str]) -> None:
    assert server.namesrv is not None and server.broker is not None
    assert decode_msg_id(FOREIGN_ID)[0].startswith("1.0.0.127:")
    sent = send(server.namesrv, "from afar", "--property", f"UNIQ_KEY={FOREIGN_ID}")
    assert sent["msg_id"] == FOREIGN_ID
    r = view("-n", server.namesrv, "-t", TOPIC, "-i", FOREIGN_ID)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["body"] == "from afar"
    # without the topic: one line saying what is missing, and still no connection out
    r = run("message", "view", "-n", server.namesrv, "-i", FOREIGN_ID)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert "which no name server knows" in r.stderr and "topic" in r.stderr
    assert all(not a.startswith("1.0.0.127") for a in dialed), dialed
    assert set(dialed) <= {server.namesrv, server.broker}
    # an id nobody sent
    r = run("message", "view", "-n", server.namesrv, "-t", TOPIC, "-i", "0100007F" + "0" * 24)
    assert r.exit_code == 1 and "no message of topic ViewTopic" in r.stderr
