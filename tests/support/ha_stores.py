"""Stores replicating over HA inside the test process: the small files and quick HA timers the
HA tests share, an opener that shuts every store it opened down (slaves first), and the
audit a store's ``HAGuard`` reports refusals to."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rocketstore import MessageStore, StoreConfig
from rocketstore.store.ha import HAGuard
from rocketstore.store.ha._auth import OPEN

GROUP = "broker-a"
INNER = ("innerAK", "inner-secret-0123456789")


class Audit:
    """The refusals a guard reported."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str, str]] = []

    def __call__(self, source: str, account: str, claimed: str, reason: str) -> None:
        self.lines.append((source, account, claimed, reason))

    def reasons(self) -> list[str]:
        return [line[3] for line in self.lines]


def ha_config(root: Path, **over: Any) -> StoreConfig:
    """Small files and quick HA timers on a free HA port; ``over`` replaces any setting."""
    base = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 200,
        max_hash_slot_num=1000,
        max_index_num=4000,
        ha_listen_port=0,
        ha_send_heartbeat_interval=200,
        ha_housekeeping_interval=3000,
        ha_reconnect_interval=100,
        sync_flush_timeout=1000,
    )
    return dataclasses.replace(base, **over)


@contextlib.contextmanager
def ha_stores(root: Path, **defaults: Any) -> Iterator[Callable[..., MessageStore]]:
    """``open(name, guard, **over)``: a started store under ``root / name`` with
    ``ha_config``'s settings, then ``defaults``, then ``over`` (``guard`` by default lets
    every peer replicate); each is shut down on the way out, slaves before masters."""
    opened: list[MessageStore] = []

    def open_(name: str, guard: HAGuard = OPEN, **over: Any) -> MessageStore:
        s = MessageStore(ha_config(root / name, **{**defaults, **over}), ha_guard=guard)
        s.load()
        s.start()
        opened.append(s)
        return s

    try:
        yield open_
    finally:
        for s in sorted(opened, key=lambda s: s.config.broker_role != "SLAVE"):
            s.shutdown()
