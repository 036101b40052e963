"""`pip install .` without extras has no numpy, pyarrow or pyspark: the
servers still import, start, store a message and hand it out (the README's first command), and
every command that needs no extra runs in a child process where those packages cannot be
imported: the store commands (put, get, query, stats, inspect), the client commands (produce,
consume) and every admin command against a `rocketstore serve` started the same way. What
needs an extra (a tiered store, Parquet, Spark) is refused in one line that says what to
install, never with a traceback.

A test's commands run one after another in one such child (``BaseCli``), each with its own
empty standard input and its own output and error files, as a process of its own would; a
Python start for each of some forty commands would cost more than the commands do."""

from __future__ import annotations

import json
import re
import select
import signal
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore._extras import EXTRAS
from support.processes import read_until

BLOCKED = ("numpy", "pyarrow", "pyspark")
COMMAND_S = 120.0  # one command on a loaded machine
BLOCKER = textwrap.dedent(
    f"""
    import sys

    class NoExtras:  # what a base install lacks cannot be imported
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, NoExtras())
    """
)
RUN_CLI = BLOCKER + "\nfrom rocketstore.cli import main\nmain(prog_name='rocketstore')\n"
# one command a line of standard input (JSON: its arguments, its output and error files); its
# exit status a line of standard output. A command's output and error go to its files at the
# file descriptors, so that a stream a module took earlier (a log handler's) writes there too;
# what a command would read from its standard input is empty.
RUN_COMMANDS = BLOCKER + textwrap.dedent(
    """
    import json, os, sys, traceback
    from rocketstore.cli import main

    orders = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    saved = os.dup(1), os.dup(2)
    for line in orders:
        args, out, err = json.loads(line)
        with open(out, "wb") as o, open(err, "wb") as e:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(o.fileno(), 1); os.dup2(e.fileno(), 2)
            try:
                main(args=args, prog_name="rocketstore")
                status = 0
            except SystemExit as exc:  # as Python's own exit of a process would end
                status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
                if exc.code is not None and not isinstance(exc.code, int):
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
                status = 1
            finally:
                sys.stdout.flush(); sys.stderr.flush()
                os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        answers.write(json.dumps(status) + "\\n"); answers.flush()
    """
)

SCRIPT = BLOCKER + textwrap.dedent(
    """
    import asyncio
    from rocketstore import StoreConfig
    from rocketstore.broker._config import BrokerConfig
    from rocketstore.cli import main  # noqa: F401  every command group imports
    from rocketstore.client import MessageQueue, Producer, PullConsumer
    from rocketstore.namesrv import NameServer
    from rocketstore.server import BrokerServer

    async def up(root):
        ns = NameServer("127.0.0.1", 0)
        await ns.start()
        config = BrokerConfig(listen_port=0, namesrv_addr=ns.address, broker_name="b")
        server = BrokerServer(StoreConfig(store_path_root_dir=root), config)
        await server.start()
        return ns, server

    async def down(ns, server):
        await server.shutdown()
        await ns.close()

    loop = asyncio.new_event_loop()
    import threading
    threading.Thread(target=loop.run_forever, daemon=True).start()
    run = lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result(30)
    ns, server = run(up(sys.argv[1]))
    try:
        with Producer(ns.address, timeout=5.0) as producer:
            sent = producer.send("Base", b"hello", queue=MessageQueue("Base", "b", 0))
        assert sent.status == "SEND_OK", sent
        with PullConsumer(ns.address, "G", timeout=5.0) as consumer:
            got = consumer.pull(MessageQueue("Base", "b", 0), 0, 8)
        assert [m.body for m in got.messages] == [b"hello"], got
        assert not [m for m in sys.modules if m.split(".")[0] in ("numpy", "pyarrow")]
    finally:
        run(down(ns, server))
    print("ok")
    """
)


def test_the_servers_run_without_the_extras(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


class BaseCli:
    """``rocketstore ARGS`` in a child process of a base install (the extras unimportable),
    one command after another in one child (RUN_COMMANDS); ``close()`` ends it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runs = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RUN_COMMANDS],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.runs += 1
        out, err = self.tmp / f"cli{self.runs}.out", self.tmp / f"cli{self.runs}.err"
        self.proc.stdin.write(json.dumps([list(args), str(out), str(err)]) + "\n")
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], COMMAND_S)
        assert ready, f"{args} did not end within {COMMAND_S} s"
        line = self.proc.stdout.readline()
        assert line, f"the commands' process ended (status {self.proc.wait(30)}) in {args}"
        return subprocess.CompletedProcess(
            [sys.executable, "-c", RUN_CLI, *args],
            json.loads(line),
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
        )

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[BaseCli]:
    """The commands' child process of a base install."""
    commands = tmp_path / "commands"
    commands.mkdir()
    runner = BaseCli(commands)
    try:
        yield runner
    finally:
        runner.close()


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """The output of a command that must succeed."""
    assert done.returncode == 0, (done.args[3:], done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def refused(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The error line of a command that must be refused in one clear line."""
    assert done.returncode == 1, (done.args[3:], done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    for needle in needles:
        assert needle in done.stderr, (needle, done.stderr)
    return done.stderr


def test_the_extras_hint_names_what_pyproject_installs() -> None:
    """The hints' package lists are pyproject's extras (no version bounds)."""
    root = Path(__file__).resolve().parent.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra, packages in EXTRAS.items():
        declared = {re.split(r"[<>=!~\[ ]", p, maxsplit=1)[0] for p in extras[extra]}
        assert set(packages) == declared, extra
    hints = [p for p in (root / "src").rglob("*.py") if "rocketstore[" in p.read_text()]
    assert not hints, f"hints naming a package that is not published: {hints}"


def test_the_store_commands_run_without_the_extras(tmp_path: Path, cli: BaseCli) -> None:
    store = str(tmp_path / "store")
    put = json.loads(
        ok(cli("put", "--store", store, "--create", "--topic", "T", "--key", "k1", "hello"))
    )
    assert put["status"] == "PUT_OK"
    got = [
        json.loads(x)
        for x in ok(cli("get", "--store", store, "T", "0", "0", "--json")).splitlines()
    ]
    assert got[0]["body"] == "hello" and got[-1]["messages"] == 1
    assert put["msg_id"] in ok(cli("query", "--store", store, "--topic", "T", "--key", "k1"))
    assert put["msg_id"] in ok(cli("query", "--store", store, "--id", put["msg_id"]))
    stats = json.loads(ok(cli("stats", "--store", store, "--json")))
    assert stats["topics"]["T"]["messages"] == 1
    report = json.loads(ok(cli("inspect", store, "--json")))
    assert report["errors"] == [] and report["commit_log"]["records"] == 1

    # what needs an extra says what to install where the user is
    tiered = tmp_path / "tiered"
    tiered.mkdir()
    for command in (
        ["get", "--store", store, "T", "0", "0", "--tiered-dir", str(tiered)],
        ["query", "--store", store, "--topic", "T", "--key", "k1", "--tiered-dir", str(tiered)],
        ["tier", "--store", store, "--tiered-dir", str(tiered)],
    ):
        line = refused(cli(*command), "pip install pyarrow numpy", "pip install '.[spark]'")
        assert "rocketstore[" not in line
    refused(  # export and import run without Spark: they need pyarrow and numpy
        cli("export", "--store", store, "--topic", "T", "--to", str(tmp_path / "out")),
        "pip install pyarrow numpy",
    )
    refused(
        cli("export", "--store", store, "--to", str(tmp_path / "out"), "--spark"),
        "pip install pyspark pyarrow numpy",
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, list[str]]]:
    """`rocketstore serve` of a base install on free ports: (name server, broker, its lines)."""
    args = ["serve", "--store", str(tmp_path / "store"), "--namesrv-listen", "127.0.0.1:0"]
    args += ["--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"]
    args += ["--console-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
    err = (tmp_path / "serve.err").open("w")  # its warnings, never a full pipe
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_CLI, *args], stdout=subprocess.PIPE, stderr=err, text=True
    )
    try:
        lines = read_until(proc, r"^console on ")
        text = "\n".join(lines)
        namesrv = re.search(r"name server listening on (\S+)", text)
        broker = re.search(r"broker broker-a .* listening on (\S+),", text)
        assert namesrv and broker, text
        yield namesrv.group(1), broker.group(1), lines
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
        err.close()


def test_the_client_and_admin_commands_run_without_the_extras(
    served: tuple[str, str, list[str]], cli: BaseCli
) -> None:
    ns, broker, lines = served
    assert any(line.startswith("metrics on http://127.0.0.1:") for line in lines), lines
    n = ["--namesrv", ns]
    ok(cli("topic", "create", *n, "-t", "Base", "-c", "DefaultCluster"))
    assert "Base" in ok(cli("topic", "list", *n))
    assert broker in ok(cli("topic", "route", *n, "-t", "Base"))
    sent = ok(cli("produce", *n, "--topic", "Base", "--key", "k1", "hello"))
    assert "SEND_OK" in sent
    got = ok(
        cli("consume", *n, "--topic", "Base", "--group", "GBase", "--from-beginning",
            "--max-messages", "1", "--timeout", "30", "--json"),
    )  # fmt: skip
    assert json.loads(got.splitlines()[0])["body"] == "hello"
    assert "broker-a" in ok(cli("cluster", "list", *n))
    ok(cli("group", "update", *n, "-g", "GBase", "-c", "DefaultCluster"))
    assert "GBase" in ok(cli("group", "list", *n))
    ok(cli("consumer", "progress", *n, "-g", "GBase"))
    refused(cli("consumer", "connection", *n, "-g", "GBase"), "not online")
    refused(cli("consumer", "status", *n, "-g", "GBase"), "not online")
    ok(cli("consumer", "reset-offset", *n, "-g", "GBase", "-t", "Base", "--time", "0"))
    ok(cli("consumer", "clone-offset", *n, "-s", "GBase", "-d", "GOther", "-t", "Base"))
    refused(cli("producer", "connection", *n, "-g", "PNone", "-t", "Base"), "no producer")
    found = ok(cli("message", "query", *n, "-t", "Base", "-k", "k1", "--json"))
    msg_id = json.loads(found)[0]["msg_id"]
    assert "hello" in ok(cli("message", "view", *n, "-t", "Base", "-i", msg_id))
    assert "listenPort" in ok(cli("broker-config", "get", *n, "-b", broker))
    ok(cli("broker-config", "update", *n, "-b", broker, "-k", "longPollingEnable", "-v", "true"))
    ok(cli("namesrv-config", "get", *n))
    ok(cli("broker-stats", *n, "-b", broker, "--name", "TOPIC_PUT_NUMS", "--key", "Base"))
    ok(cli("broker-perm", "wipe", *n, "-b", "broker-a"))
    ok(cli("broker-perm", "add", *n, "-b", "broker-a"))
    ok(cli("kv", "put", *n, "-s", "NS", "-k", "a", "-v", "1"))
    assert "1" in ok(cli("kv", "get", *n, "-s", "NS", "-k", "a"))
    assert "a" in ok(cli("kv", "list", *n, "-s", "NS"))
    ok(cli("kv", "delete", *n, "-s", "NS", "-k", "a"))
    ok(cli("group", "delete", *n, "-g", "GOther", "-c", "DefaultCluster"))
    ok(cli("topic", "delete", *n, "-t", "Base", "-c", "DefaultCluster"))
