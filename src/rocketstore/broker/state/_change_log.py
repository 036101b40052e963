"""The change log beside a broker config file: one appended line per changed entry, so that a
change costs one small append and one fsync however large the table is.

Files, beside ``<name>`` (``topics.json``, ``subscriptionGroup.json``)::

    config/
      topics.json                  the whole table in RocketMQ's format (what RocketMQ reads)
      topics.json.changes.<n>      changes made after that file was written, oldest n first

A line is ``<crc32 of the JSON, 8 hex digits> <compact JSON>\\n``; the JSON is
``{"v":{"counter":c,"timestamp":t},"k":"<entry name>","c":{<the entry's JSON>}}`` for an entry
created or replaced and the same without ``"c"`` for an entry removed, ``v`` the table's data
version after the change. A change is durable once ``sync`` has returned for it.

Compaction (the table's, see ``_config_table``) ``rotate``\\ s: the current file is synced and
closed and the next change starts file n + 1; the table as it was at the rotation is written
over ``<name>`` (atomically), then ``drop_through`` removes the files up to n. The crash rule:
the table is ``<name>`` with every ``.changes.<n>`` replayed over it in order of n. Replaying a
line that ``<name>`` already holds changes nothing, so a crash at any step of a compaction
loses nothing; a torn last line (a crash during an append whose change was never answered)
fails its CRC and ends the replay of its file.

Threads: any. Appends are serialised by the caller (the table's lock, so lines follow the
table's order); ``sync`` calls share one fsync when they arrive together.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...store._durable import fsync_dir
from ...store._errors import translate_os_errors

log = logging.getLogger(__name__)

_SUFFIX = ".changes."


class ChangeLog:
    """The ``<name>.changes.<n>`` files of the config file at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # the current file: its descriptor, appends, rotation
        self._sync_lock = threading.Lock()  # one fsync at a time; rotation waits for it
        self._fd: int | None = None
        self._number = max(self.numbers(), default=0) + 1  # the file the next append opens
        self._appended = 0  # lines appended since construction
        self._synced = 0  # of those, how many are durable

    def file(self, number: int) -> Path:
        return self.path.with_name(f"{self.path.name}{_SUFFIX}{number}")

    def numbers(self) -> list[int]:
        """The numbers of the change files present, ascending."""
        pattern = re.compile(re.escape(self.path.name + _SUFFIX) + r"([0-9]+)")
        try:
            names = os.listdir(self.path.parent)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := pattern.fullmatch(n)))

    # ---- reading ----------------------------------------------------------------------------

    def replay(self) -> Iterator[dict[str, Any]]:
        """Every good line of every change file, oldest first, as its JSON object. A line that
        fails its CRC or does not parse ends its file (logged)."""
        for number in self.numbers():
            path = self.file(number)
            with translate_os_errors(f"read {path}"):
                raw = path.read_bytes()
            for lineno, line in enumerate(raw.split(b"\n"), 1):
                if not line:
                    continue
                doc = _decode_line(line)
                if doc is None:
                    log.warning("%s: line %d is damaged or torn; its file ends there", path, lineno)
                    break
                yield doc

    # ---- writing ----------------------------------------------------------------------------

    def append(self, doc: dict[str, Any]) -> int:
        """Write one line (not yet durable: see ``sync``); returns its ticket for ``sync``.
        The caller serialises appends. StoreIOError on an OS error."""
        payload = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        line = b"%08x %s\n" % (zlib.crc32(payload), payload)
        with self._lock, translate_os_errors(f"append to {self.file(self._number)}"):
            if self._fd is None:
                path = self.file(self._number)
                path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                fsync_dir(path.parent)  # the new file itself survives a crash
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
            self._appended += 1
            return self._appended

    def sync(self, ticket: int) -> None:
        """Make the line of ``ticket`` (and every one before it) durable. StoreIOError on an OS
        error."""
        with self._sync_lock:
            if self._synced >= ticket:
                return
            with self._lock:
                fd, target = self._fd, self._appended
            if fd is not None:
                with translate_os_errors(f"fsync {self.file(self._number)}"):
                    os.fsync(fd)
            self._synced = max(self._synced, target)

    def rotate(self) -> int:
        """Sync and close the current file; the next append starts a new one. Returns the
        number of the last file the rotation closed (what ``drop_through`` takes once the
        table has been written)."""
        with self._sync_lock, self._lock:
            if self._fd is not None:
                with translate_os_errors(f"fsync {self.file(self._number)}"):
                    os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None
                self._synced = self._appended
                self._number += 1
            return self._number - 1

    def drop_through(self, number: int) -> None:
        """Remove the change files up to ``number`` (their changes are in the config file)."""
        removed = False
        for n in self.numbers():
            if n > number:
                break
            with translate_os_errors(f"remove {self.file(n)}"):
                self.file(n).unlink(missing_ok=True)
            removed = True
        if removed:
            with translate_os_errors(f"fsync {self.path.parent}"):
                fsync_dir(self.path.parent)

    def close(self) -> None:
        with self._sync_lock, self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _decode_line(line: bytes) -> dict[str, Any] | None:
    crc_text, sep, payload = line.partition(b" ")
    if not sep or len(crc_text) != 8:
        return None
    try:
        crc = int(crc_text, 16)
    except ValueError:
        return None
    if zlib.crc32(payload) != crc:
        return None
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("k"), str):
        return None
    return doc
