"""The Spark side of the exactly-once tests and benchmark: a child program that runs one
query (its own Spark in local mode and JVM), started in a session of its own and killed whole
(kill -9: the driver, its JVM and Spark's Python workers, which run in process groups of their
own in the same session).

Spark runs local[2,4]: two task slots, and a task that fails (a send timed out on a loaded
machine) is run again, as on a cluster. The child's arguments: ``mode ns src dst where per_trigger [exactly_once [arrow_rows]]``:

    stream     a streaming query reading topic src through the brokers, maxOffsetsPerTrigger
               per_trigger, writing every row into dst (checkpoint ``where``,
               Trigger.availableNow); prints ``ELAPSED <seconds>`` of the query
    batch      a batch job reading src through the brokers into dst (exactlyOnceId ``where``)
    pathbatch  a batch job writing per_trigger rows into the store path src (topic dst,
               exactlyOnceId ``where``)

``exactly_once`` (default true) is the write's exactlyOnce option; ``arrow_rows`` (default
16: many Arrow batches a task, so a task's crash point comes in its middle) is
spark.sql.execution.arrow.maxRecordsPerBatch.

``Child`` starts the program for each run (a run killed at a crash point takes its JVM with
it). ``WarmChild`` keeps one program and its JVM for many runs that are not killed (the child's
``serve`` mode: one run a line of its standard input): a run to the end, a run held at a point
while the test fails the cluster over, a run again from a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHILD = textwrap.dedent(
    """
    import json, os, sys, time, traceback
    from pyspark.sql import SparkSession

    POINTS = ("ROCKETSTORE_SPARK_CRASH", "ROCKETSTORE_SPARK_HOLD", "ROCKETSTORE_SPARK_CRASH_FILE")

    def session():
        # Spark's Python workers (and its lookup of installed data sources) run this Python,
        # not whichever python3 comes first on PATH
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # two task slots, a failed task run again up to 3 times (as another writer)
        b = SparkSession.builder.master("local[2,4]").appName("eos-child")
        for k, v in {
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "2",
        }.items():
            b = b.config(k, v)
        spark = b.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return spark

    def run(spark, mode, ns, src, dst, where, per_trigger, eos="true", arrow_rows="16"):
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", arrow_rows)
        if mode == "stream":
            rows = (
                spark.readStream.format("rocketstore").option("namesrv", ns).option("topics", src)
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_trigger)
                .load().selectExpr(f"'{dst}' AS topic", "body")
            )
            start = time.perf_counter()
            q = (
                rows.writeStream.format("rocketstore").option("namesrv", ns)
                .option("exactlyOnce", eos).option("checkpointLocation", where)
                .trigger(availableNow=True).start()
            )
            q.awaitTermination()
            print("ELAPSED", time.perf_counter() - start, flush=True)
        elif mode == "pathbatch":
            rows = spark.range(0, int(per_trigger), 1, 3).selectExpr(
                f"'{dst}' AS topic", "concat('row-', cast(id AS string)) AS body"
            )
            # writeBuffers=0: puts go straight into the mapped file, so a killed task's rows
            # outlive it and the run after it has a partial partition to complete
            (rows.write.format("rocketstore").option("path", src).option("exactlyOnce", eos)
                .option("writeBuffers", "0").option("exactlyOnceId", where).mode("append").save())
        else:
            rows = (
                spark.read.format("rocketstore").option("namesrv", ns).option("topics", src).load()
                .selectExpr(f"'{dst}' AS topic", "body").repartition(3)
            )
            (rows.write.format("rocketstore").option("namesrv", ns).option("exactlyOnce", eos)
                .option("exactlyOnceId", where).mode("append").save())

    def serve(spark):
        # one run a line of standard input ({"args": [...], "env": {...}}), its end a line
        # "END <0 or 1>"; the points' variables reach the Python workers through the
        # environment the data source is registered with
        from rocketstore.spark import RocketStoreDataSource

        print("READY", flush=True)
        for line in sys.stdin:
            order = json.loads(line)
            for name in POINTS:
                value = order["env"].get(name)
                for env in (os.environ, spark.sparkContext.environment):
                    if value is None:
                        env.pop(name, None)
                    else:
                        env[name] = value
            spark.dataSource.register(RocketStoreDataSource)
            try:
                run(spark, *order["args"])
            except Exception:
                traceback.print_exc()
                print("END 1", flush=True)
            else:
                print("END 0", flush=True)

    spark = session()
    if sys.argv[1] == "serve":
        serve(spark)
    else:
        run(spark, *sys.argv[1:])
    spark.stop()
    """
)

RUN_S = 900.0  # a run of the child on a loaded machine: minutes
KILL_WAIT_S = 60.0


class ChildFailed(AssertionError):
    """The child ended with an error (its log's tail in the message)."""


def _session_of(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[3])


def kill_session(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child and every process of its session, and wait until none is left."""
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        left = [int(p) for p in os.listdir("/proc") if p.isdigit() and _session_of(p) == proc.pid]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
        if not left and proc.poll() is not None:
            return
        assert time.monotonic() < deadline, f"processes {left} outlived SIGKILL"
        time.sleep(0.05)


class _Program:
    """The child program's files in ``tmp``: its script, the marker file a point writes and
    the log of its standard error; ``run_s`` bounds a run."""

    def __init__(self, tmp: Path, run_s: float) -> None:
        self.tmp = tmp
        self.run_s = run_s
        self.script = tmp / "child.py"
        self.script.write_text(CHILD)
        self.marker = tmp / "crashed"
        self.log = tmp / "child.log"
        self.returncode: int | None = None  # of the last run


class Child(_Program):
    """Runs the child program from ``tmp`` (its script, marker file and log there), a
    process for each run; ``returncode`` None after a run that was killed."""

    def __init__(self, tmp: Path, run_s: float = RUN_S) -> None:
        super().__init__(tmp, run_s)

    def _env(self, crash: str | None, hold: str | None) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("ROCKETSTORE_SPARK_CRASH", "ROCKETSTORE_SPARK_HOLD"):
            env.pop(name, None)
        if crash:
            env["ROCKETSTORE_SPARK_CRASH"] = crash
        if hold:
            env["ROCKETSTORE_SPARK_HOLD"] = hold
        env["ROCKETSTORE_SPARK_CRASH_FILE"] = str(self.marker)
        return env

    def run(
        self,
        args: list[str],
        crash: str | None = None,
        *,
        expect_crash: bool = False,
        hold: str | None = None,
        at_hold: Any = None,
        may_fail: bool = False,
    ) -> float | None:
        """Run the child to its end. With ``crash``: wait for it to reach the point and kill
        its session. With ``hold``: when it holds there, call ``at_hold()`` and let it go on.
        Returns the ELAPSED it printed (None when killed or it printed none); a child that
        failed raises ChildFailed unless ``may_fail`` (then None)."""
        self.marker.unlink(missing_ok=True)
        self.returncode = None
        out = self.tmp / "child.out"
        with self.log.open("a") as log, out.open("w") as stdout:
            proc = subprocess.Popen(
                [sys.executable, str(self.script), *args],
                env=self._env(crash, hold),
                stdout=stdout,
                stderr=log,
                start_new_session=True,
            )
            held = False
            try:
                deadline = time.monotonic() + self.run_s
                while time.monotonic() < deadline:
                    if crash and self.marker.exists():
                        kill_session(proc)
                        return None
                    if hold and self.marker.exists():
                        if not held:  # once: a task run again holds there again
                            held = True
                            at_hold()
                        self.marker.unlink()
                    if proc.poll() is not None:
                        break
                    time.sleep(0.1)
                else:
                    raise AssertionError(f"child {args[0]} did not finish (crash {crash})")
            finally:
                kill_session(proc)  # a JVM or Python worker left behind
        self.returncode = proc.returncode
        if proc.returncode != 0 and not may_fail:
            raise ChildFailed(self.log.read_text()[-4000:])
        assert not expect_crash, f"the child finished without reaching {crash}"
        if hold:
            assert held, f"the child finished without reaching {hold}"
        if proc.returncode != 0:
            return None
        for line in out.read_text().splitlines():
            if line.startswith("ELAPSED"):
                return float(line.split()[1])
        return None


def next_batch(checkpoint: Path) -> int:
    """The id of the first micro-batch a streaming query's checkpoint has not committed."""
    commits = checkpoint / "commits"
    if not commits.exists():
        return 0
    return 1 + max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=-1)


class WarmChild(_Program):
    """The child program started once in ``tmp`` (its script, marker file and log there) and
    given one run after another: its Spark, JVM and Python workers stay up between runs.
    ``run`` takes the arguments of ``Child.run`` but ``crash`` (a killed run takes the JVM
    with it: ``Child``). ``close`` ends it (kill -9 of its session)."""

    def __init__(self, tmp: Path, run_s: float = RUN_S) -> None:
        super().__init__(tmp, run_s)
        self.out = tmp / "child.out"  # the runs' ends: "END 0" finished, "END 1" failed
        self._read = 0  # how much of the child's output the runs have read
        with self.log.open("a") as log, self.out.open("w") as stdout:
            self.proc = subprocess.Popen(
                [sys.executable, str(self.script), "serve"],
                stdin=subprocess.PIPE,
                stdout=stdout,
                stderr=log,
                start_new_session=True,
                text=True,
            )
        self._ready = False

    def _lines(self) -> list[str]:
        text = self.out.read_text()
        complete = text[: text.rfind("\n") + 1]
        lines = complete[self._read :].splitlines()
        self._read = len(complete)
        return lines

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.run_s
        while not self._ready:
            self._ready = "READY" in self._lines()
            if self._ready:
                return
            if self.proc.poll() is not None:
                raise ChildFailed(self.log.read_text()[-4000:])
            assert time.monotonic() < deadline, "the child's Spark did not start"
            time.sleep(0.1)

    def run(
        self,
        args: list[str],
        *,
        hold: str | None = None,
        at_hold: Any = None,
        may_fail: bool = False,
    ) -> float | None:
        """One run to its end (``Child.run`` without ``crash``)."""
        self._wait_ready()
        self.marker.unlink(missing_ok=True)
        self.returncode = None
        env = {"ROCKETSTORE_SPARK_CRASH_FILE": str(self.marker)}
        if hold:
            env["ROCKETSTORE_SPARK_HOLD"] = hold
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"args": args, "env": env}) + "\n")
        self.proc.stdin.flush()
        held = False
        elapsed: float | None = None
        deadline = time.monotonic() + self.run_s
        while self.returncode is None:
            assert time.monotonic() < deadline, f"child {args[0]} did not finish"
            if hold and self.marker.exists():
                if not held:  # once: a task run again holds there again
                    held = True
                    at_hold()
                self.marker.unlink()
            for line in self._lines():
                if line.startswith("ELAPSED"):
                    elapsed = float(line.split()[1])
                elif line.startswith("END"):
                    self.returncode = int(line.split()[1])
            if self.returncode is None:
                if self.proc.poll() is not None:
                    raise ChildFailed(self.log.read_text()[-4000:])
                time.sleep(0.1)
        if self.returncode != 0 and not may_fail:
            raise ChildFailed(self.log.read_text()[-4000:])
        if hold:
            assert held, f"the child finished without reaching {hold}"
        return elapsed if self.returncode == 0 else None

    def close(self) -> None:
        kill_session(self.proc)
        if self.proc.stdin is not None:
            self.proc.stdin.close()


@contextlib.contextmanager
def warm_child(tmp: Path) -> Iterator[WarmChild]:
    """A WarmChild in ``tmp``, ended when the block ends."""
    child = WarmChild(tmp)
    try:
        yield child
    finally:
        child.close()
