"""Log files laid out as RocketMQ's: one file a component, rotation, levels from a file, the
periodic stats line."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore._logs import (
    AUDIT_LOGGER,
    FILES,
    ROOT_LOGGER,
    STATS_LOGGER,
    LogConfig,
    LogConfigError,
    StatsLine,
    configure,
    default_directory,
    read_levels,
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger(ROOT_LOGGER)
    handlers, level, propagate = list(root.handlers), root.level, root.propagate
    touched = ["rocketstore.store", "rocketstore.store.log", STATS_LOGGER, AUDIT_LOGGER]
    levels = {n: logging.getLogger(n).level for n in touched}
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.setLevel(level)
    root.propagate = propagate
    for n, lv in levels.items():
        logging.getLogger(n).setLevel(lv)


def _flush() -> None:
    for h in logging.getLogger(ROOT_LOGGER).handlers:
        h.flush()


def test_each_component_writes_its_own_file(tmp_path: Path, restore_logging: None) -> None:
    configure(LogConfig(tmp_path / "logs", level="INFO"))
    for name in (
        "rocketstore.broker.messaging._send",
        "rocketstore.grpc._service",
        "rocketstore.namesrv._server",
        "rocketstore.controller._controller",
        "rocketstore.store.log._commit_log",
        "rocketstore.remoting._connection",
        "rocketstore.client._consumer",
        "rocketstore._serve",
    ):
        logging.getLogger(name).info("hello from %s", name)
    logging.getLogger(STATS_LOGGER).info("puts 1")
    logging.getLogger(AUDIT_LOGGER).info("DENY account=x")
    _flush()
    text = {p.name: p.read_text() for p in (tmp_path / "logs").iterdir()}
    assert sorted(text) == [
        "audit.log",
        "broker.log",
        "controller.log",
        "namesrv.log",
        "remoting.log",
        "stats.log",
        "store.log",
    ]
    assert "DENY account=x" in text["audit.log"]
    assert "rocketstore.controller._controller" in text["controller.log"]
    assert "rocketstore.broker.messaging._send" in text["broker.log"]
    assert "rocketstore.grpc._service" in text["broker.log"]
    assert "rocketstore._serve" in text["broker.log"]
    assert "rocketstore.namesrv._server" in text["namesrv.log"]
    assert "rocketstore.store.log._commit_log" in text["store.log"]
    assert "rocketstore.remoting._connection" in text["remoting.log"]
    assert "rocketstore.client._consumer" in text["remoting.log"]
    assert "puts 1" in text["stats.log"]
    # one record, one file
    for name, body in text.items():
        others = "".join(v for k, v in text.items() if k != name)
        for line in body.splitlines():
            assert line.split(" - ", 1)[1] not in others


def test_stderr_keeps_warnings_only(
    tmp_path: Path, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(LogConfig(tmp_path, level="INFO"))
    logging.getLogger("rocketstore.store").info("quiet detail")
    logging.getLogger("rocketstore.broker").warning("disk almost full")
    logging.getLogger(STATS_LOGGER).info("puts 7")
    err = capsys.readouterr().err
    assert "disk almost full" in err
    assert "quiet detail" not in err and "puts 7" not in err


def test_levels_from_a_file(tmp_path: Path, restore_logging: None) -> None:
    levels = tmp_path / "levels"
    levels.write_text("# store internals\nrocketstore.store.log = DEBUG\n\n")
    configure(LogConfig(tmp_path / "logs", level="WARNING", levels_file=levels))
    logging.getLogger("rocketstore.store.log._flush").debug("flushed 4 pages")
    logging.getLogger("rocketstore.store.queue._reput").info("dispatched")
    _flush()
    store_log = (tmp_path / "logs" / "store.log").read_text()
    assert "flushed 4 pages" in store_log and "dispatched" not in store_log


@pytest.mark.parametrize(
    "text", ["rocketstore.store\n", "rocketstore.store=LOUD\n", "=DEBUG\n", "a=b=c\n"]
)
def test_a_bad_levels_file_names_its_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "levels"
    path.write_text("# fine\n" + text)
    with pytest.raises(LogConfigError, match=r"levels:2: expected name=LEVEL"):
        read_levels(path)


def test_bad_settings_are_errors(tmp_path: Path, restore_logging: None) -> None:
    with pytest.raises(LogConfigError, match="log level"):
        configure(LogConfig(tmp_path, level="CHATTY"))
    with pytest.raises(LogConfigError, match="cannot read the levels file"):
        configure(LogConfig(tmp_path, levels_file=tmp_path / "missing"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(LogConfigError, match="cannot make the log directory"):
        configure(LogConfig(tmp_path / "file" / "logs"))


def test_files_rotate(tmp_path: Path, restore_logging: None) -> None:
    configure(LogConfig(tmp_path, level="INFO", max_bytes=2_000, backups=2))
    log = logging.getLogger("rocketstore.store")
    for i in range(200):
        log.info("line %d %s", i, "x" * 40)
    _flush()
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("store.log"))
    assert names == ["store.log", "store.log.1", "store.log.2"]
    assert all((tmp_path / n).stat().st_size <= 2_000 for n in names)
    assert "line 199" in (tmp_path / "store.log").read_text()


def test_configure_twice_replaces_its_handlers(tmp_path: Path, restore_logging: None) -> None:
    before = len(logging.getLogger(ROOT_LOGGER).handlers)
    configure(LogConfig(tmp_path / "a"))
    configure(LogConfig(tmp_path / "b"))
    assert (
        len(logging.getLogger(ROOT_LOGGER).handlers) == before + len(FILES) + 1
    )  # a file handler each, and standard error


def test_default_directory_is_beside_the_store(tmp_path: Path) -> None:
    assert default_directory(tmp_path / "store") == (tmp_path / "logs" / "store").resolve()
    # stores under one directory: a directory of logs each
    b1, b2 = default_directory(tmp_path / "b1"), default_directory(tmp_path / "b2")
    assert b1 != b2 and b1.parent == b2.parent == (tmp_path / "logs").resolve()


def test_stats_line_counts_and_rates(tmp_path: Path) -> None:
    now = [100.0]
    with MessageStore(
        StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1 << 20)
    ) as store:
        line = StatsLine(store.statistics, lambda: now[0])
        assert line.line().startswith("puts 0 (0.0/s), got 0 (0.0/s), commit log ")
        for _ in range(30):
            assert store.put_message(Message("T", b"x" * 100, 0)).ok
        now[0] += 10.0
        second = line.line()
        s = store.statistics()
        size = s.commit_log_max_offset - s.commit_log_min_offset
    assert size >= 30 * 100
    assert second.startswith(f"puts 30 (3.0/s), got 0 (0.0/s), commit log {size} bytes, disk ")
    assert second.endswith(" bytes") and "% used" in second


def test_servers_write_a_stats_line_every_interval(tmp_path: Path, restore_logging: None) -> None:
    import asyncio

    from rocketstore.broker._config import BrokerConfig
    from rocketstore.server import BrokerServer, run_servers
    from support.grpc_broker import small_store_config

    configure(LogConfig(tmp_path / "logs"))
    server = BrokerServer(small_store_config(tmp_path / "store"), BrokerConfig(listen_port=0))

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_servers(
                None,
                [server],
                announce=lambda _line: None,
                stop=stop,
                metrics_listen="",
                stats_interval=0.2,
            )
        )
        stats_log = tmp_path / "logs" / "stats.log"
        for _ in range(300):  # two intervals' lines (bounded: a busy machine is slower)
            _flush()
            if stats_log.exists() and len(stats_log.read_text().splitlines()) >= 2:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await task

    asyncio.run(main())
    _flush()
    stats = (tmp_path / "logs" / "stats.log").read_text().splitlines()
    assert len(stats) >= 2, stats
    assert all("broker broker-a: puts 0 (0.0/s), got 0 (0.0/s)" in line for line in stats)
    assert "broker broker-a listening" in (tmp_path / "logs" / "broker.log").read_text()


def test_serve_writes_its_log_files(tmp_path: Path) -> None:
    """`rocketstore serve` makes logs/store/ beside the store, says where, and writes there."""
    import signal
    import subprocess
    import sys
    import time

    store = tmp_path / "data" / "store"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(store)),
            *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
            *("--grpc-listen", "", "--metrics-listen", ""),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "broker " in line and "listening" in line:
                break
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    logs = tmp_path / "data" / "logs" / "store"
    assert f"logs in {logs}" in "".join(lines)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "broker broker-a listening" in (logs / "broker.log").read_text()
    assert {p.name for p in logs.iterdir()} >= {"broker.log", "namesrv.log", "store.log"}


# ---- log files that cannot be written; the stacks of a fatal signal -------------------------


def test_a_log_file_that_cannot_be_written_says_so_once_a_minute(
    tmp_path: Path, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every write of store.log fails with ENOSPC (the file is /dev/full): the lines are lost,
    standard error gets one line a minute saying how many, never a traceback."""
    from rocketstore._logs import WriteFailures

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "store.log").symlink_to("/dev/full")
    now = [1000.0]
    handlers = configure(LogConfig(logs, level="INFO"))
    failures = next(h.failures for h in handlers if hasattr(h, "failures"))
    assert isinstance(failures, WriteFailures)
    failures._clock = lambda: now[0]  # a minute passes when the test says so
    log = logging.getLogger("rocketstore.store")
    for i in range(50):
        log.info("line %d", i)
    err = capsys.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err
    said = [line for line in err.splitlines() if "cannot write the log file" in line]
    assert len(said) == 1
    assert "store.log" in said[0] and "No space left on device" in said[0]
    assert "1 log line lost" in said[0]
    now[0] += 59.0
    log.info("still failing")
    assert "cannot write" not in capsys.readouterr().err
    now[0] += 1.0
    log.info("a minute later")
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "51 log lines lost since the last report" in said[0]
    logging.getLogger("rocketstore.broker").info("the other files are written")
    _flush()
    assert "the other files are written" in (logs / "broker.log").read_text()


def test_a_fatal_signal_leaves_the_python_stacks_in_the_log_directory(tmp_path: Path) -> None:
    """A name server killed by SIGSEGV: fatal.log in its log directory has every thread's
    Python stack (the same for broker and serve: the servers' shared log set-up turns it on)."""
    import signal
    import subprocess
    import sys
    import time

    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketstore.cli", "namesrv", "--listen", "127.0.0.1:0"),
            *("--kv-config", str(tmp_path / "kv.json"), "--log-dir", str(logs)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or "listening" in line:
                break
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGSEGV)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert proc.returncode == -signal.SIGSEGV
    fatal = (logs / "fatal.log").read_text()
    assert f"pid {proc.pid} started" in fatal
    after = fatal.split("Fatal Python error: Segmentation fault", 1)[1]
    assert "Current thread" in after and 'File "' in after and "run_forever" in after
