"""Shared fixtures of the rocketstore test suite."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from rocketstore import ManualClock, MessageStore, StoreConfig
from rocketstore.store.log._mapped_file import MappedFile

SMALL_FILE = 64 * 1024

# Every JVM the tests start (Spark's drivers, executors and standalone daemons, RocketMQ's
# programs) compiles with the client compiler only and collects with the serial collector:
# short runs on small data, started by the dozen, for which the server compiler's and the
# parallel collector's threads cost about a third of the CPU a Spark start takes. The JVMs
# print a line naming these options on their standard error.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# no per-example deadline: a test asserts no duration, and a loaded machine takes its time
settings.register_profile("rocketstore", deadline=None)
settings.load_profile("rocketstore")


# the seconds each unit of ``--dist loadfile`` (a test file, or the files sharing the local
# SparkSession) took in the runs before, kept in pytest's cache (.pytest_cache)
UNIT_SECONDS = "rocketstore/unit-seconds"


def _unit(nodeid: str, spark_files: set[str]) -> str:
    """The unit a test runs in with ``--dist loadfile`` (see pytest_xdist_make_scheduler)."""
    path = nodeid.split("::", 1)[0]
    return "local SparkSession" if path in spark_files else path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hand out first the units that took longest in the runs before (pytest's cache), and
    where a unit has no such figure yet, first the modules of the long runs (Spark's, each
    starting a JVM, and the slow ones), so that none of them starts last on an otherwise idle
    pytest-xdist worker (scripts/test runs a file on one worker: ``--dist loadfile``). Skip
    ``sources_only`` tests where mypyc's modules are loaded: they replace methods of compiled
    classes, which cannot be replaced. scripts/test runs them on the sources."""
    long_modules = {
        getattr(item, "module", None)
        for item in items
        if item.get_closest_marker("spark") or item.get_closest_marker("slow")
    }
    cache = getattr(config, "cache", None)
    seconds: dict[str, float] = cache.get(UNIT_SECONDS, {}) if cache is not None else {}
    spark_files = _local_spark_files()

    def longest_first(item: pytest.Item) -> float:
        known = seconds.get(_unit(item.nodeid, spark_files))
        if known is not None:
            return -float(known)
        return -math.inf if getattr(item, "module", None) in long_modules else 0.0

    items.sort(key=longest_first)  # stable: a unit's tests stay together, in their order
    from rocketstore._speedups import compiled_glue

    if not compiled_glue():
        return
    skip = pytest.mark.skip(
        reason="replaces methods of a compiled class; runs with ROCKETSTORE_NO_EXTENSIONS=1"
    )
    for item in items:
        if item.get_closest_marker("sources_only") is not None:
            item.add_marker(skip)


_unit_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each unit's seconds (set-up, call and tear-down of its tests)."""
    unit = _unit(report.nodeid, _spark_files_once())
    _unit_seconds[unit] = _unit_seconds.get(unit, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Keep the units' seconds of this run for the next one's order (pytest-xdist's controller
    or a run without workers; the units this run did not run keep their figures)."""
    config = session.config
    cache = getattr(config, "cache", None)
    if cache is None or hasattr(config, "workerinput") or not _unit_seconds:
        return
    seconds = dict(cache.get(UNIT_SECONDS, {}))
    seconds.update({unit: round(s, 2) for unit, s in _unit_seconds.items()})
    cache.set(UNIT_SECONDS, seconds)


@functools.cache
def _spark_files_once() -> frozenset[str]:
    return frozenset(_local_spark_files())


def _local_spark_files() -> set[str]:
    """The test files whose tests take the local SparkSession (the ``spark`` fixture), as
    pytest-xdist names them (relative to the repository)."""
    here = Path(__file__).resolve().parent
    takes = re.compile(r"\bspark: Any\b")
    return {
        f"{here.name}/{path.name}"
        for path in here.glob("test_*.py")
        if takes.search(path.read_text(encoding="utf-8"))
    }


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the files that take the local SparkSession as one unit: they
    run on one worker, one after another, in one JVM (a JVM a worker otherwise, each started
    and warmed up anew). The units go out in the order of the collection (the longest first:
    pytest_collection_modifyitems), not pytest-xdist's default of the most tests first, which
    put the Spark files of a few long tests each last. Other modes are pytest-xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False
    from xdist.scheduler import LoadFileScheduling

    spark_files = _local_spark_files()

    class SparkTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "local SparkSession" if path in spark_files else path

    return SparkTogether(config, log)


@pytest.fixture(autouse=True)
def _audit_refusals_forgotten() -> Iterator[None]:
    """The audit log counts a source's repeated refusals instead of writing them (per process,
    for a minute): each test starts with every refusal of its own written in full."""
    from rocketstore.acl._audit import REFUSALS

    REFUSALS.clear()
    yield


@pytest.fixture(autouse=True)
def _project_logging_restored() -> Iterator[None]:
    """A command run in-process (``broker``, ``serve``) installs the project's log files on the
    ``rocketstore`` logger and stops it propagating; put that logger back after every test, so
    later tests see the project's records through ``caplog``."""
    root = logging.getLogger("rocketstore")
    handlers, level, propagate = list(root.handlers), root.level, root.propagate
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    root.propagate = propagate


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., StoreConfig]:
    """A StoreConfig in ``tmp_path/store`` with 64 KiB commit-log files; keywords override."""

    def make(**overrides: Any) -> StoreConfig:
        base = StoreConfig(
            store_path_root_dir=str(tmp_path / "store"),
            mapped_file_size_commit_log=SMALL_FILE,
            flush_interval_commit_log=10,
            commit_interval_commit_log=10,
        )
        return dataclasses.replace(base, **overrides)

    return make


@pytest.fixture
def open_store(make_config: Callable[..., StoreConfig]) -> Iterator[Callable[..., MessageStore]]:
    """Open (load + start) a MessageStore; every store opened is shut down after the test."""
    opened: list[MessageStore] = []

    def open_(
        config: StoreConfig | None = None, *, clock: Any = None, **overrides: Any
    ) -> MessageStore:
        cfg = config if config is not None else make_config(**overrides)
        store = MessageStore(cfg, clock=clock) if clock is not None else MessageStore(cfg)
        store.load()
        store.start()
        opened.append(store)
        return store

    yield open_
    for store in reversed(opened):
        store.shutdown()


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()


LOCAL_MASTER = "local[2]"
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.shuffle.partitions": "2",
}


def spark_session(master: str, conf: dict[str, str] | None = None) -> Any:
    """The process's SparkSession on ``master`` (no UI, UTC, loopback driver, Python filter
    pushdown on): the running one when it runs there, else a new one, the running one stopped
    first (a process has one SparkContext at a time)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    running = SparkContext._active_spark_context
    if running is not None:
        if running.master == master:
            return SparkSession.builder.getOrCreate()
        SparkSession.builder.getOrCreate().stop()
    builder = SparkSession.builder.master(master).appName("rocketstore-tests")
    for key, value in {**SESSION_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="session")
def _spark_process() -> Iterator[None]:
    """Stops whichever SparkSession runs when the test session ends."""
    yield
    if "pyspark" in sys.modules:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()


@pytest.fixture
def spark(_spark_process: None) -> Any:
    """The local SparkSession of the Spark tests (local[2]; one for every test that asks,
    started again only after a test ran on the standalone cluster); the tests using it are
    skipped when pyspark is missing."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    return spark_session(LOCAL_MASTER)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory, _spark_process: None) -> Iterator[Any]:
    """A Spark standalone cluster (a master and two workers of one core each, every one a JVM,
    on 127.0.0.1) for the tests that run on it (``tests/support/spark_cluster.py``); its logs stay in
    the session's temporary directory."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from support.spark_cluster import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1)
    try:
        cluster.start()
        yield cluster
    finally:
        from pyspark import SparkContext

        running = SparkContext._active_spark_context
        if running is not None and running.master == cluster.url:
            running.stop()  # the application ends: the workers stop its executors
        cluster.stop()


@pytest.fixture
def synced_ranges(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every ``MappedFile.sync_range`` call (a sync outside the flushes, for data written
    below the flushed position), as (store offset, end); the syncs still happen."""
    synced: list[tuple[int, int]] = []
    original = MappedFile.sync_range

    def recording(self: MappedFile, start: int, end: int) -> None:
        synced.append((self.from_offset + start, self.from_offset + end))
        original(self, start, end)

    monkeypatch.setattr(MappedFile, "sync_range", recording)
    return synced


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A name server and two registered brokers (support.cluster's Cluster), one for each
    test module that asks for it; a module may define its own ``cluster`` instead."""
    from support.cluster import started_cluster

    with started_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture(scope="session")
def rmq4(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The official RocketMQ 4.x client (support.interop's Rmq4Client, the ``rocketmq`` 0.4.4
    package in a cached virtualenv of its own); the tests using it skip where it cannot be
    installed."""
    from support.interop import rmq4_client

    return rmq4_client(tmp_path_factory.mktemp("rmq4-home"))


@pytest.fixture(scope="module")
def warm_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The exactly-once tests' child Spark program kept up for a module (support.eos_spark's
    WarmChild): the runs the test does not kill go to it one after another."""
    pytest.importorskip("pyspark")
    from support.eos_spark import warm_child

    with warm_child(tmp_path_factory.mktemp("eos-warm")) as child:
        yield child


@pytest.fixture(scope="module")
def failover_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A controller-mode group of two broker processes for a module's exactly-once queries
    across failovers (support.eos_failover)."""
    from support.eos_failover import failover_group as started

    with started(tmp_path_factory.mktemp("eos-failover")) as group:
        yield group


@pytest.fixture
def admin(cluster: Any) -> Iterator[Any]:
    """An AdminClient of ``cluster``'s name server."""
    from rocketstore.client._admin import AdminClient

    with AdminClient(cluster.namesrv) as a:
        yield a
