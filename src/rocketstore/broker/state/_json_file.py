"""RocketMQ's broker config files: fastjson text, read leniently, written atomically.

RocketMQ writes ``topics.json``, ``subscriptionGroup.json`` and ``consumerOffset.json`` with
fastjson in pretty format, map keys that are Java integers written *unquoted*
(``remoting._fastjson`` writes and reads that text: ``dumps(obj, pretty=True)``,
``loads_lenient``); RocketMQ's tools read both that and strict JSON.

:class:`ConfigFile` is one such file with its ``.bak``. ``persist`` writes ``<name>.tmp`` and
fsyncs it, keeps the previous good file as ``<name>.bak`` (a hard link, so nothing is copied),
renames the tmp file over the main one and fsyncs the directory: a crash at any point leaves a
whole main file or a whole ``.bak``. ``load`` falls back to ``.bak`` when the main file is missing,
empty or damaged; when a damaged file has no usable backup it raises :class:`ConfigFileError`.

Threads: a ConfigFile may be used from any thread; ``persist`` calls are serialised by its lock.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ...remoting._fastjson import loads_lenient
from ...store._durable import fsync_dir, write_synced
from ...store._errors import StoreIOError, translate_os_errors
from .._errors import ConfigFileError

log = logging.getLogger(__name__)

T = TypeVar("T")


class ConfigFile:
    """One config file (``path``) with its ``path.bak`` and ``path.tmp``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.bak_path = self.path.with_name(self.path.name + ".bak")
        self.tmp_path = self.path.with_name(self.path.name + ".tmp")
        self._lock = threading.Lock()
        # Whether the main file holds good content (so it may become the backup): True after a
        # successful load or persist, False when load found it damaged, None when not yet known.
        self._main_good: bool | None = None

    def _read(self, path: Path, decode: Callable[[Any], T]) -> tuple[T | None, str | None]:
        """(value, None) for good content, (None, None) for a missing or blank file,
        (None, problem) for a damaged one."""
        try:
            with translate_os_errors(f"read {path}"):
                raw = path.read_bytes()
        except StoreIOError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                return None, None
            raise
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None, f"{path}: not UTF-8 text"
        if not text.strip():
            return None, None
        try:
            return decode(loads_lenient(text)), None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return None, f"{path}: {exc}"

    def load(self, decode: Callable[[Any], T]) -> T | None:
        """The decoded content of the main file, else of ``.bak``; None when neither has any.

        ``decode`` turns the parsed JSON into the caller's value and raises ValueError (or
        TypeError / KeyError) for content of the wrong shape. A damaged main file with a good
        backup is logged and the backup is used; with no usable backup ConfigFileError is raised.
        A file that exists but cannot be read raises StoreIOError.
        """
        value, problem = self._read(self.path, decode)
        if value is not None:
            self._main_good = True
            return value
        self._main_good = False if problem else None
        bak, bak_problem = self._read(self.bak_path, decode)
        if bak is not None:
            if problem:
                log.error("%s; read %s instead", problem, self.bak_path)
            elif self.path.exists():
                log.warning("%s is empty; read %s instead", self.path, self.bak_path)
            return bak
        if problem or bak_problem:
            detail = "; ".join(p for p in (problem, bak_problem) if p)
            raise ConfigFileError(
                f"{detail}; no usable copy of {self.path.name} (move the damaged file away to "
                "start with an empty table)"
            )
        return None

    def persist(self, text: str) -> None:
        """Replace the file with ``text`` atomically, keeping the previous good file as ``.bak``.

        Blocks for two fsyncs (file and directory). Raises StoreIOError on an OS error.
        """
        data = text.encode("utf-8")
        with self._lock, translate_os_errors(f"write {self.path}"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_synced(self.tmp_path, data)
            if self._main_is_good():
                self._keep_backup()
            os.replace(self.tmp_path, self.path)
            fsync_dir(self.path.parent)
            self._main_good = True

    def _main_is_good(self) -> bool:
        if self._main_good is not None:
            return self._main_good and self.path.exists()
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return False
        except (OSError, UnicodeDecodeError):
            return False
        try:
            loads_lenient(text)
        except ValueError:
            return False
        return bool(text.strip())

    def _keep_backup(self) -> None:
        """Make ``.bak`` the current main file: a hard link (no copy), or a synced copy where
        the file system has no links."""
        bak_tmp = self.bak_path.with_name(self.bak_path.name + ".tmp")
        try:
            bak_tmp.unlink()
        except FileNotFoundError:
            pass
        try:
            os.link(self.path, bak_tmp)
        except OSError:
            write_synced(bak_tmp, self.path.read_bytes())
        os.replace(bak_tmp, self.bak_path)
