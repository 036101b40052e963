"""Consumer offsets: per ``topic@group``, the next offset to consume in each queue, persisted in
``config/consumerOffset.json``.

The file is what RocketMQ 4.9.8 writes (fastjson pretty format; queue ids are Java integers, so
they are written unquoted)::

    {
    \t"offsetTable":{
    \t\t"TopicA@G1":{0:250,1:248,2:251,3:250
    \t\t},
    \t\t"%RETRY%G1@G1":{0:0
    \t\t}
    \t}
    }

Commits only change memory and set ``dirty``; the broker persists every 5 s
(flushConsumerOffsetInterval) with ``persist_if_dirty`` in a worker thread, never on its event
loop, and at shutdown with ``persist``: a table that did not change is not written again, and
one that did is copied under the lock and encoded and written outside it (tmp file, fsync,
rename: a crash mid-write leaves the previous whole file). Push
consumers commit every queue every few seconds, changed or not: a commit of the stored value does
not make the table dirty, so an idle broker does not rewrite the file.

Threads: every method may be called from any thread (one lock guards the table); ``persist``
encodes under the lock and writes outside it, so commits never wait for an fsync.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...protocol._json_values import as_int
from ...remoting import _fastjson
from ...remoting._limits import LogLimiter
from ._json_file import ConfigFile

log = logging.getLogger(__name__)
_moved_back_log = LogLimiter(log)  # each commit a client sends may move back: a few a minute

CONSUMER_OFFSET_FILE = "consumerOffset.json"
TOPIC_GROUP_SEPARATOR = "@"


def _key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def _split(key: str) -> tuple[str, str] | None:
    """(topic, group) of a ``topic@group`` key; None for a key that does not split in two
    (RocketMQ keeps such keys but never matches them by topic or group)."""
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _decode_file(doc: Any) -> dict[str, dict[int, int]]:
    if not isinstance(doc, Mapping):
        raise ValueError("not a JSON object")
    table_doc = doc.get("offsetTable", {})
    if not isinstance(table_doc, Mapping):
        raise ValueError('"offsetTable" is not an object')
    table: dict[str, dict[int, int]] = {}
    for key, queues in table_doc.items():
        if not isinstance(queues, Mapping):
            raise ValueError(f"offsets of {key!r} are not an object")
        table[str(key)] = {
            as_int(qid, f"{key} queue id"): as_int(off, f"{key} offset")
            for qid, off in queues.items()
        }
    return table


def _document(table: dict[str, dict[int, int]]) -> dict[str, Any]:
    return {"offsetTable": {key: dict(sorted(table[key].items())) for key in sorted(table)}}


class ConsumerOffsetManager:
    """The broker's consumer offset table (RocketMQ's ConsumerOffsetManager), loaded at
    construction. Raises ConfigFileError when ``consumerOffset.json`` and its backup are both
    damaged."""

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()  # one snapshot written at a time, in order
        self._file = ConfigFile(Path(config_dir) / CONSUMER_OFFSET_FILE)
        self._table: dict[str, dict[int, int]] = self._file.load(_decode_file) or {}
        self._dirty = False

    # -- offsets -----------------------------------------------------------------------------

    def commit_offset(
        self, client_host: str, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        """Store ``offset`` as the group's next offset in the queue. A commit below the stored
        offset is applied but logged (a consumer went back, e.g. after a reset)."""
        key = _key(topic, group)
        with self._lock:
            queues = self._table.get(key)
            if queues is None:
                self._table[key] = {queue_id: offset}
                self._dirty = True
                return
            old = queues.get(queue_id)
            if old == offset:
                return
            queues[queue_id] = offset
            self._dirty = True
        if old is not None and offset < old:
            _moved_back_log.log(
                logging.WARNING,
                "consumer offset moved back: client %s %s queue %d: %d -> %d",
                client_host,
                key,
                queue_id,
                old,
                offset,
            )

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The stored offset, or -1 when the group has none for that queue."""
        queues = self._table.get(_key(topic, group))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        """queue id → offset for the group on the topic (empty when none)."""
        with self._lock:
            return dict(self._table.get(_key(topic, group), {}))

    def queue_ids(self, group: str, topic: str) -> list[int]:
        """The queue ids the group has offsets for on the topic, ascending."""
        with self._lock:
            return sorted(self._table.get(_key(topic, group), {}))

    def clone_offsets(self, src_group: str, dest_group: str, topic: str) -> bool:
        """Copy a group's offsets on a topic to another group; False when there are none."""
        with self._lock:
            queues = self._table.get(_key(topic, src_group))
            if queues is None:
                return False
            self._table[_key(topic, dest_group)] = dict(queues)
            self._dirty = True
            return True

    # -- lookups by topic / group ------------------------------------------------------------

    def groups_by_topic(self, topic: str) -> set[str]:
        """The groups with offsets on the topic (whichGroupByTopic)."""
        with self._lock:
            keys = list(self._table)
        return {tg[1] for tg in map(_split, keys) if tg is not None and tg[0] == topic}

    def topics_by_group(self, group: str) -> set[str]:
        """The topics the group has offsets on (whichTopicByConsumer)."""
        with self._lock:
            keys = list(self._table)
        return {tg[0] for tg in map(_split, keys) if tg is not None and tg[1] == group}

    def table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole table (``topic@group`` → queue id → offset)."""
        with self._lock:
            return {key: dict(queues) for key, queues in self._table.items()}

    # -- removal -----------------------------------------------------------------------------

    def _remove_where(self, match: Callable[[str, str], bool]) -> list[str]:
        with self._lock:
            gone = [k for k in self._table if (tg := _split(k)) is not None and match(*tg)]
            for key in gone:
                del self._table[key]
            if gone:
                self._dirty = True
        for key in gone:
            log.warning("removed consumer offsets %s", key)
        return gone

    def remove_offsets(self, group: str, topic: str) -> bool:
        """Forget one group's offsets on one topic; False when there were none."""
        return bool(self._remove_where(lambda t, g: t == topic and g == group))

    def remove_group(self, group: str) -> list[str]:
        """Forget every offset of a group (removeOffset); the removed ``topic@group`` keys."""
        return self._remove_where(lambda _t, g: g == group)

    def remove_topic(self, topic: str) -> list[str]:
        """Forget every group's offsets on a topic (the topic was deleted); the removed keys."""
        return self._remove_where(lambda t, _g: t == topic)

    def scan_unsubscribed_topics(
        self,
        is_subscribed: Callable[[str, str], bool],
        min_offset_in_queue: Callable[[str, int], int],
    ) -> list[str]:
        """RocketMQ's scanUnsubscribedTopic: drop the offsets of a (topic, group) that no online
        consumer subscribes (``is_subscribed(group, topic)`` is False) and whose every stored
        offset is at or below the queue's minimum (``min_offset_in_queue(topic, queue_id)``),
        i.e. nothing would be lost. Returns the removed keys."""
        with self._lock:
            snapshot = {k: dict(v) for k, v in self._table.items()}
        gone: list[str] = []
        for key, queues in snapshot.items():
            tg = _split(key)
            if tg is None or not queues:
                continue
            topic, group = tg
            if is_subscribed(group, topic):
                continue
            if all(off <= min_offset_in_queue(topic, qid) for qid, off in queues.items()):
                gone.append(key)
        if gone:
            with self._lock:
                for key in gone:
                    self._table.pop(key, None)
                self._dirty = True
            for key in gone:
                log.warning("removed offsets of unsubscribed %s", key)
        return gone

    # -- persistence -------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """Whether the table changed since it was last persisted (or loaded)."""
        return self._dirty

    def to_json(self) -> dict[str, Any]:
        """The file's document, keys and queue ids sorted."""
        with self._lock:
            snapshot = {key: dict(queues) for key, queues in self._table.items()}
        return _document(snapshot)

    def encode(self, *, pretty: bool = True) -> str:
        return _fastjson.dumps(self.to_json(), pretty=pretty)

    def persist(self) -> None:
        """Write ``consumerOffset.json`` atomically (blocks for the encoding and its fsyncs:
        call it off the event loop). The table is copied under the lock (a copy of its dicts,
        no encoding), so commits on the loop wait for no more than that. A failed write leaves
        the table dirty."""
        with self._persist_lock:
            with self._lock:
                self._dirty = False
                snapshot = {key: dict(queues) for key, queues in self._table.items()}
            try:
                self._file.persist(_fastjson.dumps(_document(snapshot), pretty=True))
            except BaseException:
                self._dirty = True
                raise

    def persist_if_dirty(self) -> bool:
        """``persist`` when something changed; True when the file was written."""
        if not self._dirty:
            return False
        self.persist()
        return True
