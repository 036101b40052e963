"""The name server's KV config (RocketMQ 4.9.8's KVConfigManager): string values by namespace
and key, set and read by admin tools (PUT_KV_CONFIG, GET_KV_CONFIG, DELETE_KV_CONFIG,
GET_KVLIST_BY_NAMESPACE). The ``ORDER_TOPIC_CONFIG`` namespace holds, by topic, the order
configuration (``brokerName:queueNums;...``) the name server adds to a topic's route when
``orderMessageEnable`` is on, and sends to each broker that registers.

The file, RocketMQ's ``kvConfig.json`` (``~/namesrv/kvConfig.json`` for RocketMQ), compact
fastjson, maps in Java's HashMap order::

    {"configTable":{"ORDER_TOPIC_CONFIG":{"T":"broker-a:4"},"ns":{"k":"v"}}}

Every change rewrites it whole: ``kvConfig.json.tmp`` written and fsynced, renamed over the
file, the directory fsynced. A file that is not such JSON stops :meth:`KVConfigManager.load`
with KVConfigError (the name server does not start over it and lose it). Without a path the
table lives in memory only.

Event-loop thread (the name server's handlers); a write blocks for two fsyncs of a small file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from ..protocol._java_order import java_order
from ..remoting import _fastjson
from ..store._durable import fsync_dir, replace_synced

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
KV_CONFIG_FILE = "kvConfig.json"


class KVConfigError(ValueError):
    """A kvConfig.json that cannot be read as RocketMQ's KV config."""


def _java_ordered(table: Mapping[str, str]) -> dict[str, str]:
    return {k: table[k] for k in java_order(table)}


class KVConfigManager:
    """Namespace → key → value, persisted to ``path`` (None: in memory only)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file, if there is one (a missing or blank file is an empty table);
        KVConfigError when it is not KV config JSON, OSError when it cannot be read."""
        if self.path is None:
            return
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        if not raw.strip():
            return
        try:
            doc = _fastjson.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise KVConfigError(f"{self.path}: not JSON: {exc}") from None
        table = doc.get("configTable") if isinstance(doc, dict) else None
        if not isinstance(table, dict) or not all(
            isinstance(kv, dict) and all(isinstance(v, str) for v in kv.values())
            for kv in table.values()
        ):
            raise KVConfigError(
                f'{self.path}: not a KV config ({{"configTable":{{namespace:{{key:value}}}}}}); '
                "move it away to start with an empty table"
            )
        self._table = {str(ns): {str(k): v for k, v in kv.items()} for ns, kv in table.items()}
        log.info("load KV config table OK: %d namespaces from %s", len(self._table), self.path)

    def encode(self) -> bytes:
        """The file's text: ``{"configTable":{...}}``."""
        table = {ns: _java_ordered(self._table[ns]) for ns in java_order(self._table)}
        return _fastjson.dumps({"configTable": table}).encode("utf-8")

    def persist(self) -> None:
        """Write the table to the file (nothing without a path); OSError when it cannot."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_synced(self.path, self.encode())
        fsync_dir(self.path.parent)

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set a value (creating the namespace) and persist."""
        kv = self._table.get(namespace)
        if kv is None:
            kv = self._table[namespace] = {}
            log.info("putKVConfig create new Namespace %s", namespace)
        prev = kv.get(key)
        kv[key] = value
        log.info(
            "putKVConfig %s config item, Namespace: %s Key: %s Value: %s",
            "update" if prev is not None else "create new",
            namespace,
            key,
            value,
        )
        self.persist()

    def delete(self, namespace: str, key: str) -> None:
        """Remove a value (nothing when absent; an emptied namespace stays, as RocketMQ's
        does) and persist."""
        kv = self._table.get(namespace)
        if kv is not None:
            value = kv.pop(key, None)
            log.info(
                "deleteKVConfig delete a config item, Namespace: %s Key: %s Value: %s",
                namespace,
                key,
                value,
            )
        self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        kv = self._table.get(namespace)
        return None if kv is None else kv.get(key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """The namespace's values in Java's HashMap order; None when it does not exist."""
        kv = self._table.get(namespace)
        return None if kv is None else _java_ordered(kv)

    def encode_namespace(self, namespace: str) -> bytes | None:
        """The namespace as a KVTable body (``{"table":{...}}``); None when it does not
        exist."""
        kv = self.namespace(namespace)
        return None if kv is None else _fastjson.dumps({"table": kv}).encode("utf-8")
