"""Log files a person can read, laid out as RocketMQ lays out its own.

A server process writes, under its log directory (``logs/`` beside the store unless told):

=============== ======================================================================
``broker.log``   the broker, its processors, the gRPC front end and the ACL
``namesrv.log``  the name server
``controller.log`` RocketMQ 5's controller: its elections, roles and the brokers it watches
``store.log``    the message store (recovery, flush, dispatch, cleaning, replication)
``remoting.log`` connections and frames of the remoting protocol, the project's clients
``stats.log``    one line a minute: puts, gets, their rates and the disk (``StatsLine``)
=============== ======================================================================

Each file rotates at ``max_bytes`` and keeps ``backups`` old files (``broker.log.1`` ...).
Standard error keeps what an operator watching the terminal needs: warnings and errors of
every logger (start-up lines are printed by the server itself).

Levels: ``level`` for every logger of the project; a levels file sets single loggers, one
``name=LEVEL`` a line (``#`` starts a comment), for example ``rocketstore.store=DEBUG``.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store.services._stats import StoreStatistics

ROOT_LOGGER = "rocketstore"
STATS_LOGGER = "rocketstore.stats"
FORMAT = "%(asctime)s %(levelname)-5s %(name)s - %(message)s"

# file name → the loggers (and their children) written there
FILES: Mapping[str, tuple[str, ...]] = {
    "broker.log": ("rocketstore.broker", "rocketstore.grpc", "rocketstore.acl", "rocketstore"),
    "namesrv.log": ("rocketstore.namesrv",),
    "controller.log": ("rocketstore.controller",),
    "store.log": ("rocketstore.store",),
    "remoting.log": ("rocketstore.remoting", "rocketstore.client"),
    "stats.log": (STATS_LOGGER,),
}
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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
    for file_name, names in FILES.items():
        claimed = tuple(c for n in names for c in _children(n, every) if c not in names)
        rotating = logging.handlers.RotatingFileHandler(
            config.directory / file_name,
            maxBytes=config.max_bytes,
            backupCount=config.backups,
            encoding="utf-8",
        )
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
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    return handlers


def default_directory(store: str | os.PathLike[str]) -> Path:
    """``logs/`` beside the store directory."""
    return Path(store).resolve().parent / "logs"


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
