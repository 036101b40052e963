"""Which brokers are alive: the table of their heartbeats (RocketMQ 5.1.4's
DefaultBrokerHeartbeatManager).

A broker in controller mode sends BROKER_HEARTBEAT (one-way) to every controller it knows,
active or not, about once a second, with its epoch, max offset, confirm offset, election
priority and how long the controller should wait for the next one (``heartbeatTimeoutMills``,
10 s when it names none, at most 10 minutes). A broker is alive while its last heartbeat is
younger than that. The table holds at most ``MAX_BROKERS`` brokers: heartbeats of new ones
beyond that are dropped (a client inventing brokers cannot grow it without bound). It
stops being alive when the scan finds it expired (``expire``) or when the connection its
heartbeats came over closes (``closed``): a broker killed outright is known dead at once.

Each controller keeps its own table from the heartbeats it receives; nothing of it is stored.

Loop thread only (the controller's event loop). Times from the injected clock's monotonic().
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..protocol._controller_headers import BrokerHeartbeatRequest
from ..store._clock import Clock

DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000  # RocketMQ's DEFAULT_BROKER_CHANNEL_EXPIRED_TIME
MAX_HEARTBEAT_TIMEOUT_MS = 600_000  # a heartbeat asking to live longer lives this long
MAX_BROKERS = 65_536  # brokers the table holds; heartbeats of further new ones are dropped
NO_PRIORITY = (1 << 31) - 1  # a broker naming no election priority comes last

BrokerKey = tuple[str, str, int]  # cluster, broker name, broker id


@dataclass(slots=True)
class BrokerLive:
    """What the last heartbeats of one broker said. ``epoch`` / ``max_offset`` /
    ``confirm_offset`` only move forward: to a higher epoch, or a higher offset in the same
    epoch (as RocketMQ keeps them)."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str
    last_seen: float  # monotonic seconds
    timeout_s: float
    connection: object | None
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    election_priority: int = NO_PRIORITY

    @property
    def key(self) -> BrokerKey:
        return (self.cluster, self.broker_name, self.broker_id)


class BrokerLiveTable:
    """The heartbeats of the brokers, by (cluster, broker name, broker id)."""

    def __init__(
        self, clock: Clock, default_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS
    ) -> None:
        self.clock = clock
        self.default_timeout_ms = default_timeout_ms
        self._table: dict[BrokerKey, BrokerLive] = {}

    def heartbeat(self, header: BrokerHeartbeatRequest, connection: object | None) -> bool | None:
        """Record a heartbeat (its ``broker_id`` not None); True when the broker is new here,
        None when it is new and the table is full (the heartbeat dropped)."""
        assert header.broker_id is not None
        key = (header.cluster_name, header.broker_name, header.broker_id)
        now = self.clock.monotonic()
        timeout_ms = header.heartbeat_timeout_mills
        if timeout_ms is None:
            timeout_ms = self.default_timeout_ms
        timeout_ms = max(0, min(timeout_ms, MAX_HEARTBEAT_TIMEOUT_MS))
        epoch = -1 if header.epoch is None else header.epoch
        max_offset = -1 if header.max_offset is None else header.max_offset
        confirm = -1 if header.confirm_offset is None else header.confirm_offset
        priority = NO_PRIORITY if header.election_priority is None else header.election_priority
        live = self._table.get(key)
        if live is None:
            if len(self._table) >= MAX_BROKERS:
                return None
            self._table[key] = BrokerLive(
                header.cluster_name,
                header.broker_name,
                header.broker_id,
                header.broker_addr,
                now,
                timeout_ms / 1000.0,
                connection,
                epoch,
                max_offset,
                confirm,
                priority,
            )
            return True
        live.last_seen = now
        live.timeout_s = timeout_ms / 1000.0
        live.election_priority = priority
        live.address = header.broker_addr
        live.connection = connection
        if epoch > live.epoch or (epoch == live.epoch and max_offset > live.max_offset):
            live.epoch = epoch
            live.max_offset = max_offset
            live.confirm_offset = confirm
        return False

    def get(self, cluster: str, broker_name: str, broker_id: int) -> BrokerLive | None:
        return self._table.get((cluster, broker_name, broker_id))

    def is_alive(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        live = self._table.get((cluster, broker_name, broker_id))
        return live is not None and live.last_seen + live.timeout_s >= self.clock.monotonic()

    def alive_checker(self, cluster: str, broker_name: str) -> Callable[[int], bool]:
        """``is_alive`` for one group's broker ids."""
        return lambda broker_id: self.is_alive(cluster, broker_name, broker_id)

    def info_getter(self, cluster: str, broker_name: str) -> Callable[[int], BrokerLive | None]:
        return lambda broker_id: self.get(cluster, broker_name, broker_id)

    def expire(self) -> list[BrokerLive]:
        """Drop the brokers whose last heartbeat is older than their timeout; returns them."""
        now = self.clock.monotonic()
        gone = [v for v in self._table.values() if v.last_seen + v.timeout_s < now]
        for live in gone:
            del self._table[live.key]
        return gone

    def closed(self, connection: object) -> list[BrokerLive]:
        """Drop the brokers whose heartbeats came over ``connection`` (it closed); returns them."""
        gone = [v for v in self._table.values() if v.connection is connection]
        for live in gone:
            del self._table[live.key]
        return gone

    def active_counts(self) -> dict[tuple[str, str], int]:
        """(cluster, broker name) → how many of its brokers are alive."""
        counts: dict[tuple[str, str], int] = {}
        for live in self._table.values():
            if self.is_alive(live.cluster, live.broker_name, live.broker_id):
                group = (live.cluster, live.broker_name)
                counts[group] = counts.get(group, 0) + 1
        return counts

    def __len__(self) -> int:
        return len(self._table)
