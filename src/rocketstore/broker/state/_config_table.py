"""What the broker's topic table and subscription-group table share: named configs with a data
version, kept in a fastjson config file ``{"dataVersion":{...},"<table>":{name:config,...}}``
(names sorted), where every change bumps the version (counter + 1, timestamp = now) and is
durable before the call returns, as in RocketMQ.

A change to one entry costs one line appended to the file's change log and one fsync
(``_change_log``), not a rewrite of the whole table: the table is written whole (compacted)
in a background thread once the log holds as many changes as half the table (at least
``COMPACT_MIN_CHANGES``), at load when a log is found, and by ``persist`` (the broker's
shutdown), so after a clean stop the file alone holds the table, as RocketMQ reads it.

Threads: every method may be called from any thread (one lock guards the table; an fsync is
waited for outside it).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ...protocol._json_values import as_int
from ...remoting import _fastjson
from ...store._clock import Clock
from ._change_log import ChangeLog
from ._json_file import ConfigFile

COMPACT_MIN_CHANGES = 256  # the fewest logged changes that start a compaction
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
    entries into ``_table`` and then calls ``_load`` (the file's entries, then its change
    log's, replace or add to them); it changes entries under ``_lock`` with ``_set`` /
    ``_remove`` and makes them durable with ``_commit`` after releasing the lock (or uses
    ``_put`` / ``delete``). A caller holding the lock never waits for ``persist`` (the
    compaction takes its own lock first, then this one)."""

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
        self._changes = ChangeLog(self._file.path)
        self._version = DataVersion(0, clock.now_ms())
        self._table: dict[str, C] = {}
        self._table_key = table_key
        self._parse = parse
        self._what = what
        self._log = log
        self._since_compaction = 0  # lines in the change log
        self._compact_lock = threading.Lock()  # one compaction at a time, in order
        self._compactor: threading.Thread | None = None
        self.compactions = 0
        self._file_present = False  # whether the file holds the table (the log adds to it)
        self._compact: tuple[DataVersion, str] | None = None  # encode(pretty=False), by version

    def _load(self) -> None:
        """Read the file (or its backup) over the table, then replay its change log; a log
        found is compacted into the file at once. ConfigFileError when the file and its backup
        are both damaged."""
        loaded = self._file.load(self._decode_file)
        if loaded is not None:
            table, version = loaded
            self._table.update(table)
            self._version = version
        replayed = 0
        for doc in self._changes.replay():
            name = str(doc["k"])
            try:
                version = DataVersion.from_json(doc.get("v", {}))
                config = self._parse(doc["c"], name) if "c" in doc else None
            except (ValueError, TypeError, KeyError) as exc:
                self._log.warning(
                    "%s change log: skipped a change of %s: %s", self._what, name, exc
                )
                continue
            if config is None:
                self._table.pop(name, None)
            else:
                self._table[name] = config
            self._version = version
            replayed += 1
        if replayed or self._changes.numbers():
            self._log.info("%s table: %d logged changes replayed", self._what, replayed)
            self.persist()
        self._file_present = loaded is not None or replayed > 0

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

    def __len__(self) -> int:
        return len(self._table)

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

    def _set(self, name: str, config: C) -> int:
        """Create or replace an entry, bump the version and log the change; returns the
        ticket ``_commit`` takes. Caller holds the lock."""
        self._table[name] = config
        return self._log_change(name, config)

    def _remove(self, name: str) -> int:
        """Remove an entry (present), bump the version and log the change; returns the ticket
        ``_commit`` takes. Caller holds the lock."""
        del self._table[name]
        return self._log_change(name, None)

    def _log_change(self, name: str, config: C | None) -> int:
        self._bump()
        doc: dict[str, Any] = {"v": self._version.to_json(), "k": name}
        if config is not None:
            doc["c"] = config.to_json()
        self._since_compaction += 1
        return self._changes.append(doc)

    def _commit(self, ticket: int) -> None:
        """Wait until the change of ``ticket`` is durable (one fsync, shared with the changes
        committed at the same time); start a compaction when the log has grown enough. Call it
        without holding the lock."""
        self._changes.sync(ticket)
        if not self._file_present:
            # the first change writes the whole table, built-in entries too, as RocketMQ's
            # first write does: the change log only ever adds to a whole file
            self.persist()
        elif self._since_compaction >= max(COMPACT_MIN_CHANGES, len(self._table) // 2):
            self._compact_in_background()

    def _put(self, name: str, config: C) -> None:
        """Create or replace an entry, log it, bump and make it durable."""
        with self._lock:
            old = self._table.get(name)
            ticket = self._set(name, config)
            self._log.info("%s %s: %s -> %s", self._what, name, old, config)
        self._commit(ticket)

    def put_all(self, configs: list[C], name_of: Callable[[C], str]) -> None:
        """Create or replace many entries with one fsync (a slave copying its master's
        table)."""
        if not configs:
            return
        with self._lock:
            ticket = 0
            for config in configs:
                ticket = self._set(name_of(config), config)
        self._log.info("%s table: %d entries created or replaced", self._what, len(configs))
        self._commit(ticket)

    def delete(self, name: str) -> bool:
        """Remove an entry; False when there was none."""
        with self._lock:
            if name not in self._table:
                return False
            ticket = self._remove(name)
            self._log.info("deleted %s %s", self._what, name)
        self._commit(ticket)
        return True

    def to_json(self) -> dict[str, Any]:
        """The file's document ``{"dataVersion":..,"<table>":{..}}`` (also the body of the
        broker's GET_ALL_* answers)."""
        with self._lock:
            return self._document(dict(self._table), self._version)

    def _document(self, table: dict[str, C], version: DataVersion) -> dict[str, Any]:
        return {
            "dataVersion": version.to_json(),
            self._table_key: {name: table[name].to_json() for name in sorted(table)},
        }

    def encode(self, *, pretty: bool = True) -> str:
        """The file text (fastjson pretty format) or, with ``pretty=False``, compact fastjson
        (kept until the data version changes: a slave asks for it every 10 s)."""
        if pretty:
            return _fastjson.dumps(self.to_json(), pretty=True)
        cached = self._compact
        version = self._version
        if cached is None or cached[0] != version:
            with self._lock:
                version = self._version
                doc = self._document(dict(self._table), version)
            cached = self._compact = (version, _fastjson.dumps(doc, pretty=False))
        return cached[1]

    def persist(self) -> None:
        """Write the whole file atomically and drop the change log it then holds (blocks for
        the encoding and the fsyncs)."""
        with self._compact_lock:
            with self._lock:
                table, version = dict(self._table), self._version
                last = self._changes.rotate()
                self._since_compaction = 0
            self._file.persist(_fastjson.dumps(self._document(table, version), pretty=True))
            self._changes.drop_through(last)
            self._file_present = True
            self.compactions += 1

    def _compact_in_background(self) -> None:
        with self._lock:
            running = self._compactor
            if running is not None and running.is_alive():
                return
            self._compactor = threading.Thread(
                target=self._compact_quietly, name=f"compact-{self._file.path.name}", daemon=True
            )
            self._compactor.start()

    def _compact_quietly(self) -> None:
        try:
            self.persist()
        except Exception:
            # the change log keeps every change; the next compaction tries again
            self._log.exception("%s table: writing %s failed", self._what, self._file.path)

    def wait_compacted(self) -> None:
        """Wait for a background compaction that is running (tests, shutdown)."""
        compactor = self._compactor
        if compactor is not None:
            compactor.join()
