"""BrokerSource: a running ``BrokerContext`` as a ``MetricsSource``; NamesrvCount: a name
server as a ``NamesrvSource``. The only module of the metrics package that knows the broker's
internals.

Where each figure comes from:

- messages / bytes in: the store's put counts per stored topic since start (retry and DLQ topics
  left out, as RocketMQ does; a delayed message counts under SCHEDULE_TOPIC_XXXX as ``delay``,
  a transaction's half message under RMQ_SYS_TRANS_HALF_TOPIC as ``transaction``);
- messages / bytes out, message sizes, request latency: the broker's ``BrokerStats``;
- ready messages: what GET_CONSUME_STATS (``consumer progress``) counts as the group's lag on
  the topic (one reckoning, ``broker.state._consume_progress``: every read queue, a queue the
  group never committed on behind by all its messages), less what the gRPC front end popped and
  has not had acknowledged yet (in flight);
  lag latency: now minus the store time of the first unconsumed message, looked up for at most
  ``max_lag_lookups`` queues a scrape (the others count as no lag);
- inflight: messages popped through the gRPC front end and not yet acknowledged;
- storage: the store's file system's used bytes (RocketMQ's storage size), the commit log's
  bytes written and not flushed, and its dispatch lag; HA: each slave's unacknowledged bytes;
- store files: ``MessageStore.file_statistics()`` (mapped files, the consume-queue mapping
  bound and its unmaps, the process's open files and mappings against their limits).

Loop thread.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..broker._services import (
    HasAcl,
    HasConfig,
    HasConsumers,
    HasEndpoints,
    HasGroups,
    HasOffsets,
    HasProducers,
    HasStats,
    HasStore,
    HasStoreConfig,
    HasTopics,
)
from ..broker.state._consume_progress import consume_progress
from ..broker.state._stats import code_name
from ..broker.state._subscription_group import is_system_group
from ..broker.state._topic_config import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
)
from ..protocol._heartbeat import ConsumeType
from ..remoting import RequestCode, ResponseCode
from ._source import (
    ConsumerConnections,
    ConsumerLag,
    HistogramData,
    Node,
    ProducerConnections,
    ReplicaState,
    SlaveLag,
    Storage,
    StoreFiles,
    TopicTraffic,
)

if TYPE_CHECKING:
    from ..broker.replication._replicas import ReplicasManager
    from ..broker.state._stats import Histogram
    from ..namesrv import NameServer
    from ..remoting import RemotingServer


class BrokerContext(
    HasAcl,
    HasConfig,
    HasStoreConfig,
    HasStore,
    HasTopics,
    HasGroups,
    HasOffsets,
    HasConsumers,
    HasProducers,
    HasEndpoints,
    HasStats,
    Protocol,
):
    """What the metrics read of a running broker: its state, its remoting server's handler
    table (to time requests), its name-server registration (readiness) and its ACL (who may
    read /metrics)."""

    @property
    def server(self) -> RemotingServer: ...

    @property
    def registrar(self) -> Any: ...

    @property
    def started(self) -> bool: ...

    @property
    def replicas(self) -> ReplicasManager | None: ...


MAX_LAG_LOOKUPS = 256


def _excluded(topic: str) -> bool:
    return topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def _histogram(labels: tuple[tuple[str, str], ...], h: Histogram) -> HistogramData:
    return HistogramData(labels, h.bounds, tuple(h.counts), h.sum)


def instrument(broker: BrokerContext) -> None:
    """Time every remoting request of the broker from now on (its handler table, which its
    connections share, wrapped in place). Loop thread; once."""
    handlers = broker.server.handlers
    handlers.update(broker.stats.timed_handlers(handlers))


class BrokerSource:
    def __init__(self, broker: BrokerContext, *, max_lag_lookups: int = MAX_LAG_LOOKUPS) -> None:
        self.broker = broker
        self.max_lag_lookups = max_lag_lookups

    def _is_system_topic(self, topic: str) -> bool:
        return self.broker.topics.is_system_topic(topic)

    def node(self) -> Node:
        config = self.broker.config
        return Node(config.cluster_name, config.broker_name)

    def messages_in(self) -> Sequence[TopicTraffic]:
        out = []
        for topic, puts in self.broker.store.statistics().topics.items():
            if _excluded(topic):
                continue
            kind = {SCHEDULE_TOPIC: "delay", TRANS_HALF_TOPIC: "transaction"}.get(topic, "normal")
            out.append(
                TopicTraffic(
                    topic,
                    puts.messages,
                    puts.bytes,
                    message_type=kind,
                    is_system=self._is_system_topic(topic),
                )
            )
        return out

    def messages_out(self) -> Sequence[TopicTraffic]:
        return [
            TopicTraffic(
                topic,
                traffic.messages,
                traffic.size,
                consumer_group=group,
                is_system=self._is_system_topic(topic) or is_system_group(group),
            )
            for (topic, group), traffic in self.broker.stats.out.items()
            if not _excluded(topic)
        ]

    def message_sizes(self) -> Sequence[HistogramData]:
        return [
            _histogram(
                (
                    ("topic", topic),
                    ("message_type", kind),
                    ("is_system", "true" if self._is_system_topic(topic) else "false"),
                ),
                h,
            )
            for (topic, kind), h in self.broker.stats.message_size.items()
        ]

    def rpc_latency(self) -> Sequence[HistogramData]:
        return [
            _histogram(
                (
                    ("request_code", code_name(request, RequestCode)),
                    ("response_code", code_name(response, ResponseCode)),
                    ("is_long_polling", "true" if held else "false"),
                    ("result", result),
                ),
                h,
            )
            for (request, response, held, result), h in self.broker.stats.rpc_latency.items()
        ]

    def _popped(self) -> tuple[dict[tuple[str, str], dict[int, int]], Counter[tuple[str, str]]]:
        """(topic, group) → queue id → the gRPC front end's pop progress (every offset below it
        handed out), and (topic, group) → messages popped and not yet acknowledged."""
        progress: dict[tuple[str, str], dict[int, int]] = {}
        inflight: Counter[tuple[str, str]] = Counter()
        pop = self.broker.pop_state
        if pop is not None:
            for (group, topic, queue_id), offset in pop.progress_table().items():
                progress.setdefault((topic, group), {})[queue_id] = offset
                inflight[(topic, group)] += len(pop.in_flight(group, topic, queue_id))
        return progress, inflight

    def consumer_lags(self) -> Sequence[ConsumerLag]:
        """Per (topic, group): the messages not yet consumed, reckoned as GET_CONSUME_STATS
        does (``consume_progress``: every read queue, a queue without a committed offset behind
        by all its messages), less the messages popped and not yet acknowledged, which count as
        in flight instead. The pairs: each group's topics with committed offsets, and those it
        pops from."""
        broker = self.broker
        store = broker.store
        now_ms = int(time.time() * 1000)
        popped, inflight = self._popped()
        pairs = set(popped)
        for key in broker.offsets.table():
            topic, sep, group = key.partition("@")
            if sep:
                pairs.add((topic, group))
        lookups = self.max_lag_lookups
        out = []
        for topic, group in sorted(pairs):
            if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                continue
            ready = 0
            oldest: int | None = None
            pop_progress = popped.get((topic, group), {})
            queues = consume_progress(
                store, broker.topics, broker.offsets, broker.consumers, group, topic
            )
            for q in queues:
                consumed = max(q.consumer_offset, pop_progress.get(q.queue_id, 0))
                behind = q.broker_offset - consumed
                if behind <= 0:
                    continue
                ready += behind
                if lookups > 0:
                    lookups -= 1
                    first = max(consumed, store.get_min_offset_in_queue(topic, q.queue_id))
                    ts = store.get_message_store_timestamp(topic, q.queue_id, first)
                    if ts > 0 and (oldest is None or ts < oldest):
                        oldest = ts
            out.append(
                ConsumerLag(
                    topic,
                    group,
                    ready,
                    inflight.get((topic, group), 0),
                    max(0, now_ms - oldest) if oldest is not None else 0,
                    is_retry=topic.startswith(RETRY_GROUP_TOPIC_PREFIX),
                    is_system=self._is_system_topic(topic) or is_system_group(group),
                )
            )
        return out

    def producer_connections(self) -> Sequence[ProducerConnections]:
        counts: Counter[tuple[str, str]] = Counter()
        for clients in self.broker.producers.producer_table().values():
            for c in clients:
                counts[(c.language.lower(), str(c.version))] += 1
        return [ProducerConnections(lang, ver, n) for (lang, ver), n in sorted(counts.items())]

    def consumer_connections(self) -> Sequence[ConsumerConnections]:
        out = []
        consumers = self.broker.consumers
        for group in sorted(consumers.groups()):
            info = consumers.group_info(group)
            if info is None:
                continue
            mode = "pull" if info.consume_type is ConsumeType.CONSUME_ACTIVELY else "push"
            counts = Counter((c.language.lower(), str(c.version)) for c in info.clients)
            for (lang, ver), n in sorted(counts.items()):
                out.append(ConsumerConnections(group, lang, ver, mode, n, is_system_group(group)))
        return out

    def topic_number(self) -> int:
        return len(self.broker.topics.all())

    def consumer_group_number(self) -> int:
        return len(self.broker.groups.all())

    def storage(self) -> Storage:
        store = self.broker.store
        try:
            usage = shutil.disk_usage(self.broker.store_config.store_path_root_dir)
            used = usage.total - usage.free
        except OSError:
            used = 0
        return Storage(
            used,
            max(0, store.get_max_phy_offset() - store.flushed_phy_offset()),
            store.dispatch_behind_bytes(),
        )

    def store_files(self) -> StoreFiles:
        f = self.broker.store.file_statistics()
        return StoreFiles(
            f.mapped_files,
            f.queue_files,
            f.mapped_queue_files,
            f.mapped_queue_files_bound,
            f.queue_file_evictions,
            f.open_files,
            f.open_files_limit,
            f.mappings,
            f.max_map_count,
        )

    def slave_lags(self) -> Sequence[SlaveLag]:
        ha = self.broker.store.statistics().ha
        if ha is None:
            return []
        return [SlaveLag(s.address, s.lag_bytes) for s in ha.slaves]

    def ha_refused_peers(self) -> int:
        ha = self.broker.store.statistics().ha
        return ha.refused_peers if ha is not None else 0

    def replica(self) -> ReplicaState | None:
        replicas = self.broker.replicas
        ha = self.broker.store.ha.switch
        if replicas is None or ha is None:
            return None
        s = ha.replica_statistics()
        return ReplicaState(
            replicas.role.lower(),
            replicas.master_epoch,
            len(s.sync_state_set) if replicas.role == "MASTER" else 0,
            replicas.elections_seen,
            replicas.role_changes,
            s.confirm_offset,
            bool(s.fenced),
        )

    def not_ready(self) -> Sequence[str]:
        broker = self.broker
        name = broker.config.broker_name
        if not broker.started:
            return [f"broker {name}: not started"]
        reasons = []
        if not broker.store.running_flags.is_writeable():
            reasons.append(f"broker {name}: store not writable ({broker.store.running_flags!r})")
        if broker.config.namesrv_addrs:
            registrar = broker.registrar
            if registrar is None or registrar.last_result is None:
                reasons.append(f"broker {name}: not yet registered with a name server")
        return reasons


class NamesrvCount:
    def __init__(self, namesrv: NameServer) -> None:
        self.namesrv = namesrv

    def live_brokers(self) -> int:
        return len(self.namesrv.routes.live_brokers())

    def not_ready(self) -> Sequence[str]:
        return []
