"""What the metrics collector reads: the ``MetricsSource`` protocol and its plain, frozen data.

A source answers on the event loop's thread, at scrape time. ``BrokerSource`` reads a running
broker; tests hand the collector fakes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Node:
    cluster: str
    node_id: str  # the broker's name, as RocketMQ 5 labels it
    node_type: str = "broker"


@dataclass(frozen=True, slots=True)
class TopicTraffic:
    """Messages stored for a topic since the broker started (``messages_in``), or handed to a
    consumer group (``messages_out``)."""

    topic: str
    messages: int
    bytes: int
    consumer_group: str = ""  # messages out only
    message_type: str = "normal"  # messages in only
    is_system: bool = False


@dataclass(frozen=True, slots=True)
class HistogramData:
    """One labelled histogram: counts per bucket (not cumulative; the last is +Inf)."""

    labels: tuple[tuple[str, str], ...]
    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    """One group on one topic, summed over the topic's queues."""

    topic: str
    consumer_group: str
    ready_messages: int  # max offset minus committed offset
    inflight_messages: int  # popped and not yet acknowledged
    lag_latency_ms: int  # now minus the store time of the oldest unconsumed message; 0: none
    is_retry: bool = False
    is_system: bool = False


@dataclass(frozen=True, slots=True)
class ProducerConnections:
    language: str
    version: str
    count: int


@dataclass(frozen=True, slots=True)
class ConsumerConnections:
    consumer_group: str
    language: str
    version: str
    consume_mode: str  # pull, push
    count: int
    is_system: bool = False


@dataclass(frozen=True, slots=True)
class Storage:
    size_bytes: int  # bytes used on the store's file system (as RocketMQ measures it)
    flush_behind_bytes: int
    dispatch_behind_bytes: int


@dataclass(frozen=True, slots=True)
class StoreFiles:
    """The store's mapped files and the process's open files and mappings, with their limits
    (-1: unknown or unlimited)."""

    mapped_files: int  # store files mapped (commit log, consume queues, index)
    queue_files: int  # consume-queue files
    mapped_queue_files: int  # of them mapped now
    mapped_queue_files_limit: int  # the bound on them (store/log/_mapping_lru.py)
    queue_file_unmaps: int  # idle ones unmapped for the bound since start
    open_files: int
    open_files_limit: int  # the soft RLIMIT_NOFILE
    mappings: int
    max_map_count: int  # vm.max_map_count


@dataclass(frozen=True, slots=True)
class SlaveLag:
    slave: str  # its address as the master sees it
    lag_bytes: int


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """A controller-mode broker's place in its group."""

    role: str  # master, slave, none
    epoch: int  # the master epoch of its role
    sync_state_set_size: int  # a master's SyncStateSet (0 on a slave)
    elections: int  # master epochs it saw change
    role_changes: int
    confirm_offset: int
    fenced: bool  # writes refused: its lease with the controller ran out


class MetricsSource(Protocol):
    """A broker's state for one scrape. Loop thread."""

    def node(self) -> Node: ...

    def messages_in(self) -> Sequence[TopicTraffic]: ...

    def messages_out(self) -> Sequence[TopicTraffic]: ...

    def message_sizes(self) -> Sequence[HistogramData]: ...

    def rpc_latency(self) -> Sequence[HistogramData]: ...

    def consumer_lags(self) -> Sequence[ConsumerLag]: ...

    def producer_connections(self) -> Sequence[ProducerConnections]: ...

    def consumer_connections(self) -> Sequence[ConsumerConnections]: ...

    def topic_number(self) -> int: ...

    def consumer_group_number(self) -> int: ...

    def storage(self) -> Storage: ...

    def store_files(self) -> StoreFiles: ...

    def slave_lags(self) -> Sequence[SlaveLag]: ...

    def ha_refused_peers(self) -> int:
        """Peers the HA port refused: no proof, an unknown id, or one that is connected."""
        ...

    def replica(self) -> ReplicaState | None:
        """Controller mode: the broker's role and epoch (None: not in controller mode)."""
        ...

    def not_ready(self) -> Sequence[str]:
        """Why the broker is not ready (empty: ready)."""
        ...


class NamesrvSource(Protocol):
    def live_brokers(self) -> int: ...

    def not_ready(self) -> Sequence[str]: ...
