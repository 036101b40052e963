"""Java programs run by the tests and benchmarks (RocketMQ's own, of each version): the JVM
options they need on Java 17, their command line, and a process whose output goes to a log file
and that is waited for (bounded) until a line of it appears."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from .processes import stop_process

JAVA = shutil.which("java")

# RocketMQ reaches into the JDK's buffers (unmapping, the direct buffer cleaner)
OPENS = [
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
]


def small_options(heap: str = "384m", direct: str = "256m") -> list[str]:
    """JVM options for tests: a small heap, quick to start (the serial collector, the client
    compiler only)."""
    return [
        "-Xms64m",
        f"-Xmx{heap}",
        f"-XX:MaxDirectMemorySize={direct}",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        *OPENS,
    ]


def command(
    classpath: str, main: str, *args: str, opts: Sequence[str], user_home: Path
) -> list[str]:
    """``java OPTS -Duser.home=USER_HOME -cp CLASSPATH MAIN ARGS``."""
    assert JAVA is not None, "no java on PATH"
    return [JAVA, *opts, f"-Duser.home={user_home}", "-cp", classpath, main, *args]


class JavaProcess:
    """``argv`` started with its standard output and error appended to ``log``."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text("utf-8", "replace") if self.log.exists() else ""

    def wait_for(self, text: str, timeout: float) -> None:
        """Until ``text`` is in the log; RuntimeError (with the log's end) when the process
        ends or ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                end = self.output()[-3000:]
                raise RuntimeError(f"no {text!r} within {timeout} s in {self.log}:\n{end}")
            time.sleep(0.1)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        stop_process(self.proc, grace)

    def kill(self) -> None:
        """kill -9."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
