"""The network commands' failures as a user meets them: one ``error:`` line with a hint on
standard error, exit status 1, no traceback, for a name server that is not there (refused or
silent), a broker given as the name server, an unknown topic, and a topic or group name the
brokers would refuse. Servers are ``rocketstore serve`` subprocesses on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from rocketstore.cli import main as cli_main
from support.interop import ServerProcess

HINT = "the name server listens on 9876 by default"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("serve")
    proc = ServerProcess.serve(root / "store", root / "serve.log")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A broker that does not create topics on a send."""
    root = tmp_path_factory.mktemp("strict")
    conf = root / "broker.conf"
    conf.write_text("autoCreateTopicEnable=false\n")
    proc = ServerProcess.serve(root / "store", root / "serve.log", conf=conf)
    try:
        yield proc
    finally:
        proc.stop()


def run(*args: str, stdin: str | None = None) -> Any:
    return CliRunner().invoke(cli_main, list(args), input=stdin, catch_exceptions=False)


def failed_with(result: Any, *needles: str) -> str:
    """The one error line of a failed command, checked for ``needles``."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return str(lines[0])


def refused_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed: connections are refused


def test_no_name_server_there() -> None:
    ns = refused_address()
    for args in (
        ["produce", "--namesrv", ns, "--topic", "T", "hello"],
        ["consume", "--namesrv", ns, "--topic", "T", "--timeout", "1"],
        ["topic", "list", "-n", ns],
        ["topic", "route", "-n", ns, "-t", "T"],
        ["cluster", "list", "-n", ns],
        ["consumer", "progress", "-n", ns, "-g", "G"],
        ["message", "query", "-n", ns, "-t", "T", "-k", "k"],
    ):
        line = failed_with(run(*args), f"no name server answered at {ns}", "refused")
        assert "rocketstore serve" in line and HINT in line


def test_broker_out_of_reach(server: ServerProcess) -> None:
    assert server.namesrv is not None
    broker = refused_address()
    failed_with(
        run("topic", "create", "-n", server.namesrv, "-t", "T", "-b", broker),
        f"cannot connect to {broker}",
        "a broker out of reach",
    )


def test_silent_name_server_times_out() -> None:
    with socket.socket() as silent:  # accepts (the kernel's backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        ns = f"127.0.0.1:{silent.getsockname()[1]}"
        line = failed_with(run("consume", "--namesrv", ns, "--topic", "T", "--timeout", "1"))
    assert f"no name server answered at {ns}" in line and "no response in" in line


def test_broker_given_as_name_server(server: ServerProcess) -> None:
    assert server.broker is not None
    broker = server.broker
    for args in (
        ["produce", "--namesrv", broker, "--topic", "T", "hello"],
        ["consume", "--namesrv", broker, "--topic", "T", "--timeout", "1"],
        ["topic", "list", "-n", broker],
        ["topic", "route", "-n", broker, "-t", "T"],
        ["topic", "create", "-n", broker, "-t", "T"],
        ["cluster", "list", "-n", broker],
        ["group", "list", "-n", broker],
    ):
        failed_with(run(*args), f"{broker} is a broker, not a name server ({HINT})")


def test_unknown_topic(server: ServerProcess, strict_server: ServerProcess) -> None:
    assert server.namesrv is not None and strict_server.namesrv is not None
    failed_with(
        run("consume", "--namesrv", server.namesrv, "--topic", "NoSuchTopic", "--timeout", "1"),
        "topic NoSuchTopic does not exist",
        "rocketstore topic create -t NoSuchTopic",
    )
    failed_with(run("topic", "route", "-n", server.namesrv, "-t", "NoSuchTopic"), "NoSuchTopic")
    # produce as the official client does: the broker creates the topic when it allows it ...
    made = run("produce", "--namesrv", server.namesrv, "--topic", "MadeOnSend", "hello")
    assert made.exit_code == 0, made.output
    assert '"status": "SEND_OK"' in made.stdout
    # ... and otherwise says that the topic does not exist
    line = failed_with(
        run("produce", "--namesrv", strict_server.namesrv, "--topic", "NotMade", "hello"),
        "topic NotMade does not exist",
        "rocketstore topic create -t NotMade",
    )
    assert "autoCreateTopicEnable=false" in line


@pytest.mark.parametrize(
    ("option", "name", "reason"),
    [
        ("--topic", "bad topic", "contains illegal characters"),
        ("--topic", "T" * 128, "is longer than 127"),
        ("--group", "bad/group", "contains illegal characters"),
        ("--group", "G" * 256, "is longer than 255"),
    ],
)
def test_invalid_names(server: ServerProcess, option: str, name: str, reason: str) -> None:
    assert server.namesrv is not None
    ns = server.namesrv
    kind = option.strip("-")
    base = {"--topic": "Fine", "--group": "fine"}
    base[option] = name
    for command in (["produce", "hello"], ["consume", "--timeout", "1"]):
        args = [command[0], "--namesrv", ns, "--topic", base["--topic"], "--group", base["--group"]]
        failed_with(run(*args, *command[1:]), f"the {kind} name {name!r} {reason}")
    admin = (
        ["topic", "create", "-n", ns, "-t", name]
        if kind == "topic"
        else ["group", "update", "-n", ns, "-g", name]
    )
    failed_with(run(*admin), f"the {kind} name {name!r} {reason}")


def test_subprocess_has_no_traceback() -> None:
    ns = refused_address()
    done = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli", "consume", "--namesrv", ns, "--topic", "T"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: no name server")
