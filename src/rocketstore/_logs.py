"""Log files a person can read, laid out as RocketMQ lays out its own.

A server process writes, under its log directory (``logs/<store's name>/`` beside the store
unless told):

=============== ======================================================================
``broker.log``   the broker, its processors, the gRPC front end and the ACL
``namesrv.log``  the name server
``controller.log`` RocketMQ 5's controller: its elections, roles and the brokers it watches
``store.log``    the message store (recovery, flush, dispatch, cleaning, replication)
``remoting.log`` connections and frames of the remoting protocol, the project's clients
``stats.log``    one line a minute: puts, gets, their rates and the disk (``StatsLine``)
``audit.log``    the ACL: every refusal, every admin request that changes state
                 (``rocketstore.acl._audit``); written whatever the level
=============== ======================================================================

Each file rotates at ``max_bytes`` and keeps ``backups`` old files (``broker.log.1`` ...).
Standard error keeps what an operator watching the terminal needs: warnings and errors of
every logger (start-up lines are printed by the server itself).

Levels: ``level`` for every logger of the project; a levels file sets single loggers, one
``name=LEVEL`` a line (``#`` starts a comment), for example ``rocketstore.store=DEBUG``.

A log file that cannot be written (a full disk, a directory taken away) loses the lines it
cannot take and says so on standard error at most once a minute, one line, no traceback
(``WriteFailures``): a server on a full disk keeps serving and its terminal stays readable.

``fatal.log``: the Python stacks of every thread when the process dies of a fatal signal
(SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL), written by ``faulthandler`` (``enable_fatal_stacks``;
the servers turn it on). Disk blocks are reserved for it ahead, so the stacks of a process that
dies on a full disk still get written.
"""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import logging.handlers
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store.services._stats import StoreStatistics

ROOT_LOGGER = "rocketstore"
STATS_LOGGER = "rocketstore.stats"
AUDIT_LOGGER = "rocketstore.audit"
FORMAT = "%(asctime)s %(levelname)-5s %(name)s - %(message)s"

# file name → the loggers (and their children) written there
FILES: Mapping[str, tuple[str, ...]] = {
    "broker.log": ("rocketstore.broker", "rocketstore.grpc", "rocketstore.acl", "rocketstore"),
    "namesrv.log": ("rocketstore.namesrv",),
    "controller.log": ("rocketstore.controller",),
    "store.log": ("rocketstore.store",),
    "remoting.log": ("rocketstore.remoting", "rocketstore.client"),
    "stats.log": (STATS_LOGGER,),
    "audit.log": (AUDIT_LOGGER,),
}
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FATAL_LOG = "fatal.log"
FATAL_LOG_RESERVE = 256 * 1024  # disk blocks kept ahead for the stacks of a fatal signal


class LogConfigError(ValueError):
    """A log level, levels file or log directory that cannot be used."""


@dataclass(frozen=True, slots=True)
class LogConfig:
    directory: Path
    level: str = "INFO"
    levels_file: Path | None = None
    max_bytes: int = 128 * 1024 * 1024
    backups: int = 10
    stderr_level: str = "WARNING"


def read_levels(path: Path) -> dict[str, int]:
    """``name=LEVEL`` lines of a levels file; LogConfigError names the first bad line."""
    levels: dict[str, int] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LogConfigError(f"cannot read the levels file {path}: {exc.strerror}") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, level = (part.strip() for part in line.partition("="))
        if not sep or not name or level.upper() not in LEVELS:
            raise LogConfigError(
                f"{path}:{number}: expected name=LEVEL with LEVEL one of {', '.join(LEVELS)}"
            )
        levels[name] = logging.getLevelName(level.upper())
    return levels


class _Only(logging.Filter):
    """Passes records of the given loggers and their children, minus those claimed by a more
    specific file (``rocketstore`` itself only catches what no other file takes)."""

    def __init__(self, names: tuple[str, ...], claimed: tuple[str, ...]) -> None:
        super().__init__()
        self.names = names
        self.claimed = claimed

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if any(name == c or name.startswith(c + ".") for c in self.claimed):
            return False
        return any(name == n or name.startswith(n + ".") for n in self.names)


class WriteFailures:
    """Tells standard error that log lines were lost, at most once an ``interval``::

        rocketstore: cannot write the log file logs/store.log: [Errno 28] No space left on
        device; 212 log lines lost in the last 60 s (said at most once a minute)

    Shared by the files of one ``configure``; called from whichever thread logged the line
    (a lock-free count: a race may miscount a line, never loses the report)."""

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._next = float("-inf")
        self.lost = 0  # lines lost since the last report
        self.reports = 0

    def failed(self, path: str, exc: BaseException | None, lines: int = 1) -> None:
        """A write of ``path`` failed with ``exc``, losing ``lines`` log lines."""
        self.lost += lines
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self.interval
        lost, self.lost = self.lost, 0
        why = f"{exc}" if exc is not None else "unknown error"
        self.reports += 1
        try:
            sys.stderr.write(
                f"rocketstore: cannot write the log file {path}: {why}; {lost:,} log "
                f"line{'s' if lost != 1 else ''} lost since the last report (said at most "
                f"once every {self.interval:g} s)\n"
            )
            sys.stderr.flush()
        except (OSError, ValueError):  # standard error is gone too: nothing to tell
            pass


class _LogFile(logging.handlers.RotatingFileHandler):
    """A rotating log file whose failed writes go to ``WriteFailures`` instead of a
    traceback on standard error for every line."""

    def __init__(self, path: Path, config: LogConfig, failures: WriteFailures) -> None:
        super().__init__(
            path, maxBytes=config.max_bytes, backupCount=config.backups, encoding="utf-8"
        )
        self.failures = failures

    _emitting = False

    def emit(self, record: logging.LogRecord) -> None:
        self._emitting = True  # (under the handler's lock)
        try:
            super().emit(record)
        finally:
            self._emitting = False

    def handleError(self, record: logging.LogRecord) -> None:
        self.failures.failed(self.baseFilename, sys.exc_info()[1])

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            if self._emitting:  # the line being written is lost: handleError counts it
                raise
            self.failures.failed(self.baseFilename, exc, lines=0)

    def close(self) -> None:
        try:
            super().close()
        except OSError as exc:  # the file is closed all the same
            self.failures.failed(self.baseFilename, exc, lines=0)


def _children(prefix: str, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in names if n != prefix and n.startswith(prefix + "."))


def configure(config: LogConfig) -> list[logging.Handler]:
    """Install the files and standard error on the project's root logger (replacing what an
    earlier call installed); returns the handlers. LogConfigError when the level, the levels
    file or the directory cannot be used."""
    if config.level.upper() not in LEVELS:
        raise LogConfigError(f"log level {config.level!r}: use one of {', '.join(LEVELS)}")
    levels = read_levels(config.levels_file) if config.levels_file else {}
    try:
        config.directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LogConfigError(f"cannot make the log directory {config.directory}: {exc}") from None
    root = logging.getLogger(ROOT_LOGGER)
    for old in [h for h in root.handlers if getattr(h, "_rocketstore_logs", False)]:
        root.removeHandler(old)
        old.close()
    formatter = logging.Formatter(FORMAT)
    every = tuple(n for names in FILES.values() for n in names)
    handlers: list[logging.Handler] = []
    failures = WriteFailures()
    for file_name, names in FILES.items():
        claimed = tuple(c for n in names for c in _children(n, every) if c not in names)
        try:
            rotating = _LogFile(config.directory / file_name, config, failures)
        except OSError as exc:
            raise LogConfigError(f"cannot open the log file {file_name}: {exc}") from None
        rotating.addFilter(_Only(names, claimed))
        handlers.append(rotating)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(config.stderr_level.upper())
    handlers.append(err)
    for handler in handlers:
        handler.setFormatter(formatter)
        handler._rocketstore_logs = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(config.level.upper())
    root.propagate = False
    logging.getLogger(STATS_LOGGER).setLevel(logging.INFO)
    logging.getLogger(AUDIT_LOGGER).setLevel(logging.INFO)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    return handlers


_FALLOC_FL_KEEP_SIZE = 1


def _reserve_ahead(fd: int, size: int) -> None:
    """Give the ``size`` bytes after the end of the file disk blocks without changing its size
    (Linux's fallocate with FALLOC_FL_KEEP_SIZE); appends then need no new blocks. Best
    effort: nothing happens where that call is missing or the disk is full."""
    try:
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError, TypeError):
        return
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong)
    try:
        end = os.fstat(fd).st_size
    except OSError:
        return
    fallocate(fd, _FALLOC_FL_KEEP_SIZE, end, size)


def enable_fatal_stacks(directory: Path) -> Path:
    """From now on, a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL) writes the
    Python stack of every thread to ``directory/fatal.log`` before the process dies
    (``faulthandler``). The file is opened now and kept open, with disk blocks reserved ahead
    for the stacks. Returns its path; LogConfigError when it cannot be opened. Main thread,
    at start-up."""
    global _fatal_fd
    path = directory / FATAL_LOG
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise LogConfigError(f"cannot open {path}: {exc}") from None
    _reserve_ahead(fd, FATAL_LOG_RESERVE)
    header = (
        f"--- pid {os.getpid()} started {time.strftime('%Y-%m-%d %H:%M:%S')}: the Python stacks "
        "of a fatal signal follow this line ---\n"
    )
    try:
        os.write(fd, header.encode())
    except OSError:  # a full disk with nothing reserved: the stacks may still fit later
        pass
    faulthandler.enable(file=fd, all_threads=True)
    if _fatal_fd is not None:  # enabled before: the new file takes over
        os.close(_fatal_fd)
    _fatal_fd = fd
    return path


_fatal_fd: int | None = None


def default_directory(store: str | os.PathLike[str]) -> Path:
    """``logs/<store's name>/`` beside the store directory: the brokers of stores under one
    directory (``/data/b1``, ``/data/b2``) each write their own (``/data/logs/b1``, ...)."""
    path = Path(store).resolve()
    return path.parent / "logs" / path.name


class StatsLine:
    """The periodic one-line summary of ``stats.log``: puts and messages got since start and
    their rates over the last interval, the commit log's size, the disk it uses and how far
    dispatch is behind. ``statistics`` is the store's ``statistics`` (a StoreStatistics
    snapshot); call ``line()`` once an interval, from one thread."""

    def __init__(self, statistics: Callable[[], StoreStatistics], clock: Callable[[], float]):
        self._statistics = statistics
        self._clock = clock
        self._last: tuple[float, int, int] | None = None

    def line(self) -> str:
        s = self._statistics()
        now = self._clock()
        puts, gets = s.put_message_times_total, s.get_transferred_total
        then, puts_then, gets_then = self._last or (now, puts, gets)
        self._last = (now, puts, gets)
        seconds = now - then
        put_rate = (puts - puts_then) / seconds if seconds > 0 else 0.0
        get_rate = (gets - gets_then) / seconds if seconds > 0 else 0.0
        disk = f"{s.commit_log_disk_ratio:.0%}" if s.commit_log_disk_ratio >= 0 else "?"
        return (
            f"puts {puts} ({put_rate:.1f}/s), got {gets} ({get_rate:.1f}/s), commit log "
            f"{s.commit_log_max_offset - s.commit_log_min_offset} bytes, disk {disk} used, "
            f"dispatch behind {s.dispatch_behind_bytes} bytes"
        )
