"""How many connections the servers of one process may hold together.

Every connection is an open file, and so is every commit-log file of the store (one each;
consume-queue and index files keep none once mapped, and consume-queue files are mapped within
a bound, store/log/_mapping_lru.py), every log file and every pipe of the loop. A process
that has opened as many files as its limit (RLIMIT_NOFILE) can open none more: its servers
accept nobody, and its store can start no new file. So the servers' connections together stay
within half the limit, and the other half is the store's and the rest's::

    open-file limit (soft)  ─┬─ half: connections of every server of the process
                             │    remoting servers (broker, name server, controller): counted
                             │    as they are accepted, each server within its own
                             │    max_connections too
                             │    gRPC front ends: the cap each passes to gRPC, reserved whole
                             └─ half: the store's files, logs, pipes, ...

``raise_open_files_limit`` raises the soft limit to the hard one first, as the JVM does for
RocketMQ's broker (the composition root calls it before it starts anything).

Any thread: the counts are read under a lock; a server's own connections change on its loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Sized
from typing import Protocol

log = logging.getLogger(__name__)

FALLBACK_LIMIT = 1024  # where the limit cannot be read


class _Server(Protocol):
    @property
    def connections(self) -> Sized: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...

    def waiting_since(self) -> float | None: ...

    def replace_unestablished(self) -> bool: ...


def open_files_limit() -> int:
    """The soft limit of open files of this process (FALLBACK_LIMIT where unknown or
    unlimited)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not a Unix
        return FALLBACK_LIMIT
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return FALLBACK_LIMIT * 1024
    return int(soft)


def raise_open_files_limit() -> int:
    """Raise the soft limit of open files to the hard limit (as the JVM does at start); the
    soft limit after. Any thread."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not a Unix
        return open_files_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # a hard limit too high for the kernel
            log.info("open-file limit stays at %s: %s", soft, exc)
    return open_files_limit()


class ProcessConnections:
    """The connections of every server of this process, against ``allowance()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: weakref.WeakSet[_Server] = weakref.WeakSet()
        self._reserved: dict[int, int] = {}  # id(owner) → connections reserved whole

    def allowance(self) -> int:
        """How many connections the servers may hold together: half the open-file limit."""
        return max(1, open_files_limit() // 2)

    def add(self, server: _Server) -> None:
        with self._lock:
            self._servers.add(server)

    def remove(self, server: _Server) -> None:
        with self._lock:
            self._servers.discard(server)

    def reserve(self, owner: object, wanted: int) -> int:
        """Reserve up to ``wanted`` connections for ``owner`` (a gRPC front end, whose server
        keeps its own cap): a quarter of what is left at most, and at least one. Returns how
        many; ``release(owner)`` gives them back."""
        with self._lock:
            left = self.allowance() - self._in_use()
            granted = max(1, min(wanted, left // 4))
            self._reserved[id(owner)] = granted
            return granted

    def replace_unestablished(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Close the connection that has waited longest without being established among the
        servers that run on ``loop`` (the caller's), to make a place for a new one; False
        when they have none. Loop thread."""
        with self._lock:
            servers = [s for s in self._servers if s.loop is loop]
        waiting = [(t, i) for i, s in enumerate(servers) if (t := s.waiting_since()) is not None]
        if not waiting:
            return False
        return servers[min(waiting)[1]].replace_unestablished()

    def release(self, owner: object) -> None:
        with self._lock:
            self._reserved.pop(id(owner), None)

    def _in_use(self) -> int:
        return sum(len(s.connections) for s in self._servers) + sum(self._reserved.values())

    def in_use(self) -> int:
        """Connections open and reserved now."""
        with self._lock:
            return self._in_use()

    def full(self) -> bool:
        """Whether one more connection would go beyond the allowance."""
        return self.in_use() >= self.allowance()


PROCESS_CONNECTIONS = ProcessConnections()
