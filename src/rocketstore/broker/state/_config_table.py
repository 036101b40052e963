"""What the broker's topic table and subscription-group table share: named configs with a data
version, kept in a fastjson config file ``{"dataVersion":{...},"<table>":{name:config,...}}``
(names sorted), where every change bumps the version (counter + 1, timestamp = now) and
persists the file at once, as RocketMQ does.

Threads: every method may be called from any thread (one lock guards the table).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ...remoting import _fastjson
from ...store._clock import Clock
from ._json_file import ConfigFile, as_int

# GET_ALL_TOPIC_CONFIG's field in which rocketstore's slaves name the master's topic data version
# they copied last (``counter:timestamp``): answered ``unchanged`` with no body while it holds
IF_DATA_VERSION_NOT = "ifDataVersionNot"


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ's DataVersion: a change counter and the time (ms) of the last change."""

    counter: int = 0
    timestamp: int = 0

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(self.counter + 1, now_ms)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @property
    def text(self) -> str:
        """``counter:timestamp`` (``IF_DATA_VERSION_NOT``'s form)."""
        return f"{self.counter}:{self.timestamp}"

    @classmethod
    def from_json(cls, doc: Any) -> DataVersion:
        if not isinstance(doc, Mapping):
            raise ValueError(f"dataVersion is not an object: {doc!r}")
        return cls(
            as_int(doc.get("counter", 0), "counter"), as_int(doc.get("timestamp", 0), "timestamp")
        )


class _Config(Protocol):
    def to_json(self) -> dict[str, Any]: ...


C = TypeVar("C", bound=_Config)


class VersionedConfigTable(Generic[C]):
    """A table of ``C`` by name with its data version and file. The subclass puts its built-in
    entries into ``_table`` and then calls ``_load`` (the file's entries replace or add to them);
    it changes the table under ``_lock`` and calls ``_changed`` (or ``_put`` / ``delete``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        table_key: str,
        parse: Callable[[Any, str], C],
        what: str,
        log: logging.Logger,
        clock: Clock,
    ) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._file = ConfigFile(path)
        self._version = DataVersion(0, clock.now_ms())
        self._table: dict[str, C] = {}
        self._table_key = table_key
        self._parse = parse
        self._what = what
        self._log = log

    def _load(self) -> None:
        """Read the file (or its backup) over the table. ConfigFileError when both are
        damaged."""
        loaded = self._file.load(self._decode_file)
        if loaded is not None:
            table, version = loaded
            self._table.update(table)
            self._version = version

    def _decode_file(self, doc: Any) -> tuple[dict[str, C], DataVersion]:
        if not isinstance(doc, Mapping):
            raise ValueError("not a JSON object")
        table_doc = doc.get(self._table_key, {})
        if not isinstance(table_doc, Mapping):
            raise ValueError(f'"{self._table_key}" is not an object')
        table = {str(k): self._parse(v, str(k)) for k, v in table_doc.items()}
        return table, DataVersion.from_json(doc.get("dataVersion", {}))

    def all(self) -> dict[str, C]:
        """A copy of the whole table."""
        with self._lock:
            return dict(self._table)

    @property
    def data_version(self) -> DataVersion:
        return self._version

    def next_version(self) -> None:
        """Bump the data version though the table did not change (RocketMQ's
        ``dataVersion.nextVersion()``): the name servers take the next registration's table.
        Any thread."""
        with self._lock:
            self._bump()

    def _bump(self) -> None:
        """Bump the data version (without persisting). Caller holds the lock."""
        self._version = self._version.next(self._clock.now_ms())

    def _changed(self) -> None:
        """Bump the data version and persist. Caller holds the lock."""
        self._bump()
        self.persist()

    def _put(self, name: str, config: C) -> None:
        """Create or replace an entry, log it, bump and persist."""
        with self._lock:
            old = self._table.get(name)
            self._table[name] = config
            self._log.info("%s %s: %s -> %s", self._what, name, old, config)
            self._changed()

    def delete(self, name: str) -> bool:
        """Remove an entry; False when there was none."""
        with self._lock:
            if self._table.pop(name, None) is None:
                return False
            self._log.info("deleted %s %s", self._what, name)
            self._changed()
            return True

    def to_json(self) -> dict[str, Any]:
        """The file's document ``{"dataVersion":..,"<table>":{..}}`` (also the body of the
        broker's GET_ALL_* answers)."""
        with self._lock:
            return {
                "dataVersion": self._version.to_json(),
                self._table_key: {
                    name: self._table[name].to_json() for name in sorted(self._table)
                },
            }

    def encode(self, *, pretty: bool = True) -> str:
        """The file text (fastjson pretty format) or, with ``pretty=False``, compact fastjson."""
        return _fastjson.dumps(self.to_json(), pretty=pretty)

    def persist(self) -> None:
        """Write the file atomically (blocks for its fsyncs)."""
        with self._lock:
            self._file.persist(self.encode())
