"""The metric families, built at scrape time from ``MetricsSource`` s (one per broker of the
process) and an optional ``NamesrvSource``.

Names and labels are RocketMQ 5.1's (its broker, remoting and store metrics as its Prometheus
exporter shows them); every broker family carries ``cluster``, ``node_type`` and ``node_id``
(the broker's name). Families of rocketstore's own start with ``rocketstore_``.

Family                                  type       labels beyond the node's
rocketmq_messages_in_total              counter    topic, message_type, is_system
rocketmq_throughput_in_total            counter    topic, message_type, is_system
rocketmq_messages_out_total             counter    topic, consumer_group, is_system
rocketmq_throughput_out_total           counter    topic, consumer_group, is_system
rocketmq_message_size                   histogram  topic, message_type, is_system
rocketmq_rpc_latency                    histogram  protocol_type, request_code, response_code,
                                                   is_long_polling, result
rocketmq_consumer_ready_messages        gauge      topic, consumer_group, is_retry, is_system
rocketmq_consumer_inflight_messages     gauge      (the same)
rocketmq_consumer_lag_latency           gauge      (the same), milliseconds
rocketmq_producer_connections           gauge      language, version, protocol_type
rocketmq_consumer_connections           gauge      consumer_group, language, version,
                                                   consume_mode, protocol_type, is_system
rocketmq_topic_number                   gauge      -
rocketmq_consumer_group_number          gauge      -
rocketmq_storage_size                   gauge      storage_type, storage_medium
rocketmq_storage_flush_behind_bytes     gauge      storage_type, storage_medium
rocketmq_storage_dispatch_behind_bytes  gauge      storage_type, storage_medium
rocketstore_ha_slave_lag_bytes          gauge      slave
rocketstore_mapped_files                gauge      -  (store files mapped: commit log, queues, index)
rocketstore_consume_queue_files         gauge      state (mapped, all)
rocketstore_consume_queue_mapped_limit  gauge      -  (at most this many mapped; idle ones unmapped)
rocketstore_consume_queue_unmaps_total  counter    -  (idle files unmapped for the limit)
rocketstore_process_open_files          gauge      -
rocketstore_process_open_files_limit    gauge      -  (soft RLIMIT_NOFILE; -1 unlimited)
rocketstore_process_mappings            gauge      -
rocketstore_process_max_map_count       gauge      -  (vm.max_map_count)
rocketstore_ha_refused_peers_total      counter    -  (no proof, an unknown or connected id)
rocketstore_replica_role                gauge      role (master, slave, none): 1 for the role held
rocketstore_replica_master_epoch        gauge      -  (controller mode, as the next five)
rocketstore_replica_sync_state_set_size gauge      -  (a master's SyncStateSet; 0 on a slave)
rocketstore_replica_confirm_offset      gauge      -
rocketstore_replica_fenced              gauge      -  (1: writes refused, the lease ran out)
rocketstore_replica_elections_total     counter    -  (master epochs seen to change)
rocketstore_replica_role_changes_total  counter    -
rocketstore_namesrv_live_brokers        gauge      (none)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ._source import HistogramData, MetricsSource, NamesrvSource, Node, ReplicaState

if TYPE_CHECKING:
    from prometheus_client.core import Metric

NODE_LABELS = ("cluster", "node_type", "node_id")
PROTOCOL_REMOTING = "remoting"
STORAGE_LABELS = ("storage_type", "storage_medium")
STORAGE_VALUES = ("local", "disk")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _node(node: Node) -> list[str]:
    return [node.cluster, node.node_type, node.node_id]


def _float_text(bound: float) -> str:
    return repr(float(bound))


class RocketMQCollector:
    """A prometheus_client custom collector (``collect()``); ``describe()`` is empty, so the
    registry does not call ``collect`` at registration."""

    def __init__(
        self, brokers: Sequence[MetricsSource], namesrv: NamesrvSource | None = None
    ) -> None:
        self.brokers = list(brokers)
        self.namesrv = namesrv

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        def counter(name: str, doc: str, labels: Sequence[str]) -> Any:
            return CounterMetricFamily(name, doc, labels=[*NODE_LABELS, *labels])

        def gauge(name: str, doc: str, labels: Sequence[str], unit: str = "") -> Any:
            return GaugeMetricFamily(name, doc, labels=[*NODE_LABELS, *labels], unit=unit)

        in_labels = ("topic", "message_type", "is_system")
        out_labels = ("topic", "consumer_group", "is_system")
        lag_labels = ("topic", "consumer_group", "is_retry", "is_system")
        messages_in = counter("rocketmq_messages_in_total", "Messages stored", in_labels)
        throughput_in = counter("rocketmq_throughput_in_total", "Bytes stored", in_labels)
        messages_out = counter(
            "rocketmq_messages_out_total", "Messages handed to consumers", out_labels
        )
        throughput_out = counter(
            "rocketmq_throughput_out_total", "Bytes handed to consumers", out_labels
        )
        message_size = HistogramMetricFamily(
            "rocketmq_message_size",
            "Sizes of the messages sent",
            labels=[*NODE_LABELS, *in_labels],
        )
        rpc_labels = ("request_code", "response_code", "is_long_polling", "result")
        rpc_latency = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Milliseconds from a request's arrival to its response",
            labels=[*NODE_LABELS, "protocol_type", *rpc_labels],
        )
        ready = gauge("rocketmq_consumer_ready_messages", "Messages not yet consumed", lag_labels)
        inflight = gauge(
            "rocketmq_consumer_inflight_messages",
            "Messages received and not yet acknowledged",
            lag_labels,
        )
        lag_latency = gauge(
            "rocketmq_consumer_lag_latency",
            "Milliseconds since the oldest unconsumed message was stored",
            lag_labels,
        )
        producers = gauge(
            "rocketmq_producer_connections",
            "Producer connections",
            ("language", "version", "protocol_type"),
        )
        consumers = gauge(
            "rocketmq_consumer_connections",
            "Consumer connections",
            ("consumer_group", "language", "version", "consume_mode", "protocol_type", "is_system"),
        )
        topics = gauge("rocketmq_topic_number", "Topics", ())
        groups = gauge("rocketmq_consumer_group_number", "Subscription groups", ())
        storage_size = gauge(
            "rocketmq_storage_size", "Bytes used on the store's file system", STORAGE_LABELS
        )
        flush_behind = gauge(
            "rocketmq_storage_flush_behind_bytes",
            "Commit log bytes written and not yet flushed",
            STORAGE_LABELS,
        )
        dispatch_behind = gauge(
            "rocketmq_storage_dispatch_behind_bytes",
            "Commit log bytes not yet dispatched to the consume queues",
            STORAGE_LABELS,
        )
        slave_lag = gauge(
            "rocketstore_ha_slave_lag_bytes",
            "Bytes a slave has not yet acknowledged",
            ("slave",),
        )
        mapped_files = gauge("rocketstore_mapped_files", "Store files mapped", ())
        queue_files = gauge("rocketstore_consume_queue_files", "Consume-queue files", ("state",))
        queue_limit = gauge(
            "rocketstore_consume_queue_mapped_limit",
            "Consume-queue files that may be mapped at once (idle ones are unmapped beyond it)",
            (),
        )
        queue_unmaps = counter(
            "rocketstore_consume_queue_unmaps_total",
            "Idle consume-queue files unmapped for the limit",
            (),
        )
        open_files = gauge("rocketstore_process_open_files", "Open files of the process", ())
        open_limit = gauge(
            "rocketstore_process_open_files_limit", "The process's open-file limit (soft)", ()
        )
        mappings = gauge("rocketstore_process_mappings", "Memory mappings of the process", ())
        max_maps = gauge(
            "rocketstore_process_max_map_count", "The kernel's mapping limit (vm.max_map_count)", ()
        )
        ha_refused = counter(
            "rocketstore_ha_refused_peers",
            "Peers the HA port refused (no proof, an unknown or connected replica id)",
            (),
        )
        replicas: list[tuple[list[str], ReplicaState]] = []
        for source in self.brokers:
            node = _node(source.node())
            for t in source.messages_in():
                labels = [*node, t.topic, t.message_type, _bool(t.is_system)]
                messages_in.add_metric(labels, t.messages)
                throughput_in.add_metric(labels, t.bytes)
            for t in source.messages_out():
                labels = [*node, t.topic, t.consumer_group, _bool(t.is_system)]
                messages_out.add_metric(labels, t.messages)
                throughput_out.add_metric(labels, t.bytes)
            for h in source.message_sizes():
                _add_histogram(message_size, node, in_labels, h)
            for h in source.rpc_latency():
                _add_histogram(rpc_latency, [*node, PROTOCOL_REMOTING], rpc_labels, h)
            for lag in source.consumer_lags():
                labels = [
                    *node,
                    lag.topic,
                    lag.consumer_group,
                    _bool(lag.is_retry),
                    _bool(lag.is_system),
                ]
                ready.add_metric(labels, lag.ready_messages)
                inflight.add_metric(labels, lag.inflight_messages)
                lag_latency.add_metric(labels, lag.lag_latency_ms)
            for p in source.producer_connections():
                producers.add_metric([*node, p.language, p.version, PROTOCOL_REMOTING], p.count)
            for c in source.consumer_connections():
                labels = [
                    *node,
                    c.consumer_group,
                    c.language,
                    c.version,
                    c.consume_mode,
                    PROTOCOL_REMOTING,
                    _bool(c.is_system),
                ]
                consumers.add_metric(labels, c.count)
            topics.add_metric(node, source.topic_number())
            groups.add_metric(node, source.consumer_group_number())
            storage = source.storage()
            storage_size.add_metric([*node, *STORAGE_VALUES], storage.size_bytes)
            flush_behind.add_metric([*node, *STORAGE_VALUES], storage.flush_behind_bytes)
            dispatch_behind.add_metric([*node, *STORAGE_VALUES], storage.dispatch_behind_bytes)
            files = source.store_files()
            mapped_files.add_metric(node, files.mapped_files)
            queue_files.add_metric([*node, "mapped"], files.mapped_queue_files)
            queue_files.add_metric([*node, "all"], files.queue_files)
            queue_limit.add_metric(node, files.mapped_queue_files_limit)
            queue_unmaps.add_metric(node, files.queue_file_unmaps)
            open_files.add_metric(node, files.open_files)
            open_limit.add_metric(node, files.open_files_limit)
            mappings.add_metric(node, files.mappings)
            max_maps.add_metric(node, files.max_map_count)
            for s in source.slave_lags():
                slave_lag.add_metric([*node, s.slave], s.lag_bytes)
            ha_refused.add_metric(node, source.ha_refused_peers())
            replica = source.replica()
            if replica is not None:
                replicas.append((node, replica))
        if self.brokers:
            yield from (
                messages_in,
                throughput_in,
                messages_out,
                throughput_out,
                message_size,
                rpc_latency,
                ready,
                inflight,
                lag_latency,
                producers,
                consumers,
                topics,
                groups,
                storage_size,
                flush_behind,
                dispatch_behind,
                mapped_files,
                queue_files,
                queue_limit,
                queue_unmaps,
                open_files,
                open_limit,
                mappings,
                max_maps,
                slave_lag,
                ha_refused,
            )
        if replicas:
            yield from _replica_families(replicas, gauge, counter)
        if self.namesrv is not None:
            live = GaugeMetricFamily(
                "rocketstore_namesrv_live_brokers", "Brokers registered with the name server"
            )
            live.add_metric([], self.namesrv.live_brokers())
            yield live


def _replica_families(
    replicas: list[tuple[list[str], ReplicaState]], gauge: Any, counter: Any
) -> Iterator[Metric]:
    role = gauge("rocketstore_replica_role", "The role the controller gave the broker", ("role",))
    epoch = gauge("rocketstore_replica_master_epoch", "The master epoch of the broker's role", ())
    size = gauge(
        "rocketstore_replica_sync_state_set_size", "Replicas in a master's SyncStateSet", ()
    )
    confirm = gauge(
        "rocketstore_replica_confirm_offset", "How far the SyncStateSet holds the log", ()
    )
    fenced = gauge("rocketstore_replica_fenced", "Writes refused: the master's lease ran out", ())
    elections = counter("rocketstore_replica_elections", "Master epoch changes seen", ())
    changes = counter("rocketstore_replica_role_changes", "Role changes of the broker", ())
    for node, r in replicas:
        for name in ("master", "slave", "none"):
            role.add_metric([*node, name], 1 if r.role == name else 0)
        epoch.add_metric(node, r.epoch)
        size.add_metric(node, r.sync_state_set_size)
        confirm.add_metric(node, r.confirm_offset)
        fenced.add_metric(node, 1 if r.fenced else 0)
        elections.add_metric(node, r.elections)
        changes.add_metric(node, r.role_changes)
    yield from (role, epoch, size, confirm, fenced, elections, changes)


def _add_histogram(family: Any, labels: list[str], names: Sequence[str], h: HistogramData) -> None:
    """Bucket counts made cumulative, with the +Inf bucket, as the exposition wants them;
    ``h``'s labels in the order of ``names``."""
    values = dict(h.labels)
    buckets: list[tuple[str, float]] = []
    total = 0
    for bound, count in zip((*h.bounds, float("inf")), h.counts, strict=True):
        total += count
        buckets.append(("+Inf" if bound == float("inf") else _float_text(bound), total))
    family.add_metric([*labels, *(values[n] for n in names)], buckets, sum_value=h.sum)
