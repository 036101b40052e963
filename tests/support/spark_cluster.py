"""A Spark standalone cluster for tests, started from pyspark's own launcher: a master and
workers, each a JVM of its own (``bin/spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``), on 127.0.0.1 with ports the system picks.

Each daemon runs in a process group of its own with its output in ``<root>/<name>.log``; a
worker's executors are its children, in its group, and write under ``<root>/<name>-work/`` (their
Python workers end with them). ``stop()`` ends every group (SIGTERM, then SIGKILL) and leaves the
logs for a failure's post-mortem; a daemon also gets SIGTERM when the test process dies. Start-up is bounded: a daemon that does not say it is up within
the limit fails the start, naming its log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = "Successfully registered with master"
# the daemon gets SIGTERM when the test process dies (Linux's parent-death signal survives exec),
# so a killed test run leaves no cluster behind
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """``start()`` a master and ``workers`` workers of ``cores`` cores and ``memory`` each."""

    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    daemon_memory: str = "256m"
    url: str = ""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_LOG_DIR=str(self.root),
            PYSPARK_PYTHON=sys.executable,
        )
        env.pop("SPARK_CONF_DIR", None)
        return env

    def _launch(self, name: str, *args: str) -> None:
        log = (self.root / f"{name}.log").open("ab")
        try:
            self.procs[name] = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _DIE_WITH_PARENT,
                    str(spark_home() / "bin" / "spark-class"),
                    *args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.root,
                start_new_session=True,
            )
        finally:
            log.close()

    def _log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def _wait(self, name: str, ready: str | re.Pattern[str], deadline: float) -> str:
        """The log of daemon ``name`` once it shows ``ready``."""
        while True:
            text = self._log(name)
            if isinstance(ready, re.Pattern):
                if ready.search(text) is not None:
                    return text
            elif ready in text:
                return text
            proc = self.procs[name]
            if proc.poll() is not None:
                raise RuntimeError(
                    f"spark {name} exited ({proc.returncode}); see {self.root / name}.log"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"spark {name} not up in time; see {self.root / name}.log")
            time.sleep(0.2)

    def start(self, timeout_s: float = 300.0) -> StandaloneCluster:
        """Start the master, then the workers; return once every worker has registered."""
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        host = ("--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        self._launch("master", MASTER_CLASS, *host)
        match = _MASTER_URL.search(self._wait("master", _MASTER_URL, deadline))
        assert match is not None
        self.url = match.group(1)
        for n in range(self.workers):
            work = self.root / f"worker{n}-work"
            work.mkdir(exist_ok=True)
            self._launch(
                f"worker{n}",
                WORKER_CLASS,
                *host,
                *("--cores", str(self.cores), "--memory", self.memory),
                *("--work-dir", str(work)),
                self.url,
            )
        for n in range(self.workers):
            self._wait(f"worker{n}", _REGISTERED, deadline)
        return self

    def stop(self, grace_s: float = 20.0) -> None:
        """End every daemon's process group (executors and Python workers included)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in self.procs.values() if _group_alive(p.pid)]
            for proc in alive:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace_s
            while any(_group_alive(p.pid) for p in alive) and time.monotonic() < deadline:
                for proc in alive:
                    proc.poll()  # reap the daemon itself
                time.sleep(0.1)
        for proc in self.procs.values():
            proc.wait(5)
        self.procs.clear()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
