"""config/delayOffset.json: per delay level, the next logical offset to deliver in queue
``level - 1`` of SCHEDULE_TOPIC_XXXX.

The format is what RocketMQ 4.9.8 writes (fastjson, pretty printed, tab indented, integer map
keys left unquoted, no trailing newline)::

    {
    \t"offsetTable":{1:6,18:0
    \t}
    }

Reading accepts that form and plain JSON (quoted keys, any whitespace). Writing is atomic: the new
text goes to ``delayOffset.json.tmp`` (fsync), the previous good content to
``delayOffset.json.bak`` (tmp + fsync + rename), then the tmp file is renamed over the main file and
the directory is fsynced. A damaged or missing main file is read from ``.bak``.

Threads: one writer at a time (the schedule service's persist, under its lock).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from .._durable import fsync_dir, replace_synced
from .._errors import CorruptFileError, translate_os_errors

log = logging.getLogger(__name__)

DELAY_OFFSET_FILE = "delayOffset.json"
_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def encode_delay_offsets(table: Mapping[int, int]) -> bytes:
    """The file content RocketMQ 4.9.8 writes for ``table`` (levels ascending)."""
    if not table:
        return b'{\n\t"offsetTable":{}\n}'
    entries = ",".join(f"{level}:{table[level]}" for level in sorted(table))
    return ('{\n\t"offsetTable":{' + entries + "\n\t}\n}").encode()


def decode_delay_offsets(text: str) -> dict[int, int]:
    """Parse a delayOffset.json text; CorruptFileError says what is wrong with it."""
    if not text.strip():
        raise CorruptFileError("empty")
    try:
        doc = json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))
    except ValueError as exc:
        raise CorruptFileError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("offsetTable"), dict):
        raise CorruptFileError('no "offsetTable" object')
    table: dict[int, int] = {}
    for key, value in doc["offsetTable"].items():
        try:
            level = int(key)
        except ValueError:
            raise CorruptFileError(f"level {key!r} is not an integer") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise CorruptFileError(f"offset of level {level} is not an integer: {value!r}")
        if level <= 0 or value < 0:
            raise CorruptFileError(f"level {level} / offset {value} out of range")
        table[level] = value
    return table


class DelayOffsetFile:
    """``<config_dir>/delayOffset.json`` with its ``.bak``."""

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(config_dir)
        self.path = self.dir / DELAY_OFFSET_FILE
        self.bak_path = self.dir / (DELAY_OFFSET_FILE + ".bak")

    def _read(self, path: Path) -> dict[int, int] | None:
        """The table in ``path``; None when the file is missing; CorruptFileError if damaged."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorruptFileError(f"{path}: cannot read: {exc}") from exc
        try:
            return decode_delay_offsets(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise CorruptFileError(f"{path}: not UTF-8 text") from None
        except CorruptFileError as exc:
            raise CorruptFileError(f"{path}: {exc}") from None

    def load(self) -> dict[int, int]:
        """The stored table: from the main file, else from ``.bak``; empty when neither exists.

        A damaged main file falls back to ``.bak`` (logged). When both are damaged the damaged
        main file is renamed ``*.corrupt`` and an empty table is returned: delivery restarts at
        each queue's minimum, which repeats messages but loses none.
        """
        try:
            table = self._read(self.path)
            if table is not None:
                return table
            problem = f"{self.path} is missing"
        except CorruptFileError as exc:
            problem = str(exc)
        try:
            bak = self._read(self.bak_path)
        except CorruptFileError as exc:
            bak = None
            problem += f"; {exc}"
        if bak is not None:
            if self.path.exists():
                log.error("%s; delay progress read from %s", problem, self.bak_path)
            return bak
        if self.path.exists():
            corrupt = self.path.with_name(self.path.name + ".corrupt")
            log.error(
                "%s; no usable backup either: kept as %s, delayed messages are delivered from "
                "the start of their queues again (duplicates possible, nothing lost)",
                problem,
                corrupt,
            )
            with contextlib.suppress(OSError):
                os.replace(self.path, corrupt)
        return {}

    def persist(self, table: Mapping[int, int]) -> None:
        """Replace the file atomically, keeping the previous good content in ``.bak``."""
        data = encode_delay_offsets(table)
        with translate_os_errors(f"write {self.path}"):
            self.dir.mkdir(parents=True, exist_ok=True)
            try:
                previous = self.path.read_bytes()
            except FileNotFoundError:
                previous = None
            if previous is not None and previous != data:
                try:
                    decode_delay_offsets(previous.decode("utf-8"))
                except (CorruptFileError, UnicodeDecodeError):
                    previous = None  # never replace a good backup with a damaged file
                if previous is not None:
                    replace_synced(self.bak_path, previous)
            replace_synced(self.path, data)
            fsync_dir(self.dir)
