"""Helpers of the interop tests: the official RocketMQ 4.x client in a virtualenv of its own, and
rocketstore servers run as subprocesses.

- ``rmq4_python()`` makes (once, then reuses) a virtualenv with ``rocketmq==0.4.4`` under
  ``~/.cache/rocketstore-interop/rmq4`` (``ROCKETSTORE_INTEROP_CACHE`` moves it) and returns its
  interpreter; it raises ``InteropUnavailable`` only when pip cannot install the package.
- ``Rmq4Client`` runs tests/support/rmq4_client.py with that interpreter, bounded in time, and returns
  the JSON lines it printed.
- ``ServerProcess.serve`` starts ``rocketstore serve`` (name server and broker in one process) on
  loopback, ``ServerProcess.namesrv`` / ``ServerProcess.broker`` start them apart; each waits for
  the listen lines. ``stop`` sends SIGTERM, then SIGKILL after a grace time; ``kill`` is kill -9.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import processes
from .ports import free_port

RMQ4_REQUIREMENT = "rocketmq==0.4.4"
INSTALL_TIMEOUT_S = 300.0
CLIENT_SCRIPT = Path(__file__).with_name("rmq4_client.py")
_OK_MARKER = ".rocketstore-interop-ok"


class InteropUnavailable(Exception):
    """The official client could not be installed (no registry, no wheel for this machine)."""


def cache_dir() -> Path:
    root = os.environ.get("ROCKETSTORE_INTEROP_CACHE") or "~/.cache/rocketstore-interop"
    return Path(root).expanduser()


def _run(
    args: Sequence[str | os.PathLike[str]], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def rmq4_python() -> Path:
    """The interpreter of the cached virtualenv holding ``rocketmq`` 0.4.4, made when missing.

    A lock file keeps two test processes from building it at once; a marker file written last
    tells a finished virtualenv from one an interrupted run left half made (rebuilt)."""
    venv = cache_dir() / "rmq4"
    python = venv / "bin" / "python"
    marker = venv / _OK_MARKER
    if marker.exists() and python.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / "rmq4.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        try:
            made = _run([sys.executable, "-m", "venv", venv], 120)
            if made.returncode == 0:
                pip = [python, "-m", "pip"]
            else:  # no ensurepip here: an empty venv, filled by this interpreter's pip
                made = _run([sys.executable, "-m", "venv", "--without-pip", venv], 120)
                if made.returncode != 0:
                    raise InteropUnavailable(f"cannot make a virtualenv: {made.stderr[-500:]}")
                pip = [sys.executable, "-m", "pip", "--python", python]
            installed = _run(
                [*pip, "install", "--disable-pip-version-check", "-q", RMQ4_REQUIREMENT],
                INSTALL_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise InteropUnavailable(f"installing {RMQ4_REQUIREMENT} timed out") from exc
        if installed.returncode != 0:
            raise InteropUnavailable(
                f"pip cannot install {RMQ4_REQUIREMENT}: {installed.stderr[-800:]}"
            )
        check = _run([python, "-c", "import rocketmq.client"], 60)
        if check.returncode != 0:
            raise InteropUnavailable(f"rocketmq does not load: {check.stderr[-800:]}")
        marker.write_text(RMQ4_REQUIREMENT + "\n")
    return python


class ClientError(AssertionError):
    """A client script failed or ran out of time (its output is in the message)."""


class Rmq4Client:
    """Runs tests/support/rmq4_client.py commands with the official client; the C++ library's log files
    go under ``home`` (its HOME), and every run is bounded by ``timeout``."""

    def __init__(self, python: Path, home: Path) -> None:
        self.python = python
        self.home = home
        home.mkdir(parents=True, exist_ok=True)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["HOME"] = str(self.home)
        return env

    def command(self, command: str, namesrv: str, group: str, topic: str, **opts: Any) -> list[str]:
        args = [str(self.python), str(CLIENT_SCRIPT), command]
        args += ["--namesrv", namesrv, "--group", group, "--topic", topic]
        for name, value in opts.items():
            flag = "--" + name.replace("_", "-")
            if value is True:
                args.append(flag)
            elif isinstance(value, list) and all(isinstance(item, str) for item in value):
                for item in value:  # a repeatable option
                    args += [flag, str(item)]
            elif value is not None and value is not False:
                args += [flag, value if isinstance(value, str) else json.dumps(value)]
        return args

    def run(
        self, command: str, namesrv: str, group: str, topic: str, *, timeout: float, **opts: Any
    ) -> list[dict[str, Any]]:
        """Run one command to its end; its JSON lines. ClientError on failure or time-out."""
        args = self.command(command, namesrv, group, topic, **opts)
        try:
            done = subprocess.run(
                args,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=self.home,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClientError(
                f"{command} ran out of its {timeout} s; output so far:\n{_text(exc.stdout)}\n"
                f"{_text(exc.stderr)[-2000:]}"
            ) from None
        if done.returncode != 0:
            raise ClientError(
                f"{command} exited with {done.returncode}:\n{done.stdout}\n{done.stderr[-2000:]}"
            )
        return parse_lines(done.stdout)

    def start(
        self, command: str, namesrv: str, group: str, topic: str, **opts: Any
    ) -> subprocess.Popen[str]:
        """Start a command; the caller reads its stdout and ends it (``stop_process``)."""
        return subprocess.Popen(
            self.command(command, namesrv, group, topic, **opts),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=self.home,
            env=self._env(),
            stdin=subprocess.DEVNULL,
        )


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def parse_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> int:
    """SIGTERM, then SIGKILL when it has not ended after ``grace`` seconds, and its pipes
    closed; its exit status."""
    status = processes.stop_process(proc, grace)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
    return status


_NAMESRV_LINE = re.compile(r"^name server listening on (\S+)$", re.M)
_BROKER_LINE = re.compile(r"^broker \S+ \(.*\) listening on ([^,\s]+),", re.M)


class ServerProcess:
    """One ``rocketstore`` server process; its stdout and stderr go to ``log``."""

    def __init__(self, args: list[str], log: Path, *, want_namesrv: bool, want_broker: bool):
        self.args = args
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115  (closed in stop / kill)
        self.proc = subprocess.Popen(
            args, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self.namesrv: str | None = None
        self.broker: str | None = None
        self._want_namesrv = want_namesrv
        self._want_broker = want_broker

    # ---- starting ---------------------------------------------------------------------------

    @staticmethod
    def _command() -> list[str]:
        return [sys.executable, "-c", "from rocketstore.cli import main; main()"]

    @classmethod
    def serve(
        cls,
        store: Path,
        log: Path,
        *,
        conf: Path | None = None,
        flush: str | None = None,
        namesrv_port: int = 0,
        broker_port: int = 0,
        timeout: float = 30.0,
        extra: Sequence[str] = (),
    ) -> ServerProcess:
        """``rocketstore serve`` on 127.0.0.1 (port 0: chosen by the server); ``extra``: more
        of its flags."""
        args = [*cls._command(), "serve", "--store", str(store)]
        args += ["--namesrv-listen", f"127.0.0.1:{namesrv_port}"]
        args += ["--listen", f"127.0.0.1:{broker_port}", "--grpc-listen", ""]
        # replication's port chosen by the server: the listen port + 1 may be taken by another
        # process's connection between a stop and a restart on the same port
        args += ["--ha-listen", "127.0.0.1:0"]
        if conf is not None:
            args += ["-c", str(conf)]
        if flush is not None:
            args += ["--flush", flush]
        args += list(extra)
        server = cls(args, log, want_namesrv=True, want_broker=True)
        return server._wait_started(timeout)

    @classmethod
    def namesrv_only(cls, log: Path, *, port: int = 0, timeout: float = 30.0) -> ServerProcess:
        args = [*cls._command(), "namesrv", "--listen", f"127.0.0.1:{port}"]
        args += ["--log-dir", str(log.parent / "namesrv-logs")]
        return cls(args, log, want_namesrv=True, want_broker=False)._wait_started(timeout)

    @classmethod
    def broker_only(
        cls,
        store: Path,
        namesrv: str,
        log: Path,
        *,
        port: int = 0,
        conf: Path | None = None,
        flush: str | None = None,
        timeout: float = 30.0,
    ) -> ServerProcess:
        args = [*cls._command(), "broker", "--store", str(store), "--namesrv", namesrv]
        args += ["--listen", f"127.0.0.1:{port}"]
        # replication's port: the listen port + 1 unless told, which may be taken here
        args += ["--ha-listen", f"127.0.0.1:{free_port() if port else 0}"]
        if conf is not None:
            args += ["-c", str(conf)]
        if flush is not None:
            args += ["--flush", flush]
        server = cls(args, log, want_namesrv=False, want_broker=True)
        return server._wait_started(timeout)

    def _wait_started(self, timeout: float) -> ServerProcess:
        deadline = time.monotonic() + timeout
        while True:
            text = self.output()
            ns = _NAMESRV_LINE.search(text)
            br = _BROKER_LINE.search(text)
            self.namesrv = ns.group(1) if ns else None
            self.broker = br.group(1) if br else None
            if (not self._want_namesrv or ns) and (not self._want_broker or br):
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"server did not start ({self.args}):\n{text[-3000:]}")
            time.sleep(0.05)

    # ---- running and ending -----------------------------------------------------------------

    def output(self) -> str:
        try:
            return self.log.read_text("utf-8", "replace")
        except FileNotFoundError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def audit(self) -> str:
        """The server's audit log (logs/store/ beside its log): a line per refusal."""
        path = self.log.parent / "logs" / "store" / "audit.log"
        return path.read_text("utf-8") if path.exists() else ""

    def stop(self, grace: float = 15.0) -> int:
        """SIGTERM (a clean shutdown), SIGKILL after ``grace`` seconds; the exit status."""
        try:
            return stop_process(self.proc, grace)
        finally:
            self._out.close()

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        self.proc.wait(10)
        self._out.close()


def namesrv_of(server: ServerProcess) -> str:
    """The address of the name server ``server`` runs."""
    assert server.namesrv is not None
    return server.namesrv


def rmq4_client(home: Path) -> Rmq4Client:
    """The official 4.x client with its C++ library's files under ``home``; the test skips
    when the client cannot be installed."""
    import pytest

    try:
        python = rmq4_python()
    except InteropUnavailable as exc:
        pytest.skip(str(exc))
    return Rmq4Client(python, home)


@contextlib.contextmanager
def servers() -> Iterator[list[ServerProcess]]:
    """A list to put started servers in; each is stopped on the way out, whatever happened."""
    started: list[ServerProcess] = []
    try:
        yield started
    finally:
        for server in reversed(started):
            if server.running:
                server.stop()
