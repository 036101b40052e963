"""The name server's state (RocketMQ 4.9.8's RouteInfoManager): which broker groups serve which
topics, where each group's brokers are, and which brokers are alive.

Tables::

    topic queues   topic       → {broker name → QueueData}
    broker groups  broker name → cluster + {broker id → address}    (id 0 = master)
    clusters       cluster     → {broker name}
    live brokers   address     → last heard from, DataVersion, channel, HA server address
    filter servers address     → [filter server address]

Rules kept from RocketMQ:

- A registration updates the queue data of the topics it lists only when it comes from a master
  (broker id 0) and that master's DataVersion differs from the one it last registered with, or
  the address is new to its group. A slave's topics never change the routes; a slave learns its
  master's address and HA address from the answer.
- One address holds one broker id in a group: a slave re-registering as the master (or the
  other way) drops its old id.
- A broker not heard from for 120 s is removed (:meth:`scan_not_active_brokers`, run every
  10 s); so is a broker whose connection closes (:meth:`on_channel_destroy`). Removing a
  group's last broker removes the group from its cluster and its queue data from every topic;
  a topic left with no queue data is gone. Removing a master whose slaves remain keeps the
  group's queue data: the route then lists only the slaves.
- Retry topics (``%RETRY%<group>``) are topics like any other: the broker creates them when a
  consumer group first sends a heartbeat and registers them; until then they have no route.
- Maps and lists come out in the order Java's HashMaps would give (see ``_java_order``), so
  bodies are RocketMQ's byte for byte; broker addresses in ascending id order.

Indexed for many topics: a route is one lookup by topic; the topics of a broker group are
indexed by its name (a group that goes takes its topics with it without a walk of every topic);
the list of every topic is kept in RocketMQ's order until a topic comes or goes. A registration
costs what its table holds: an incremental one (a broker's new topic alone) one entry.

Pure logic, no I/O: time comes from the injected clock (``monotonic``), a channel is any object
(the name server passes its connections) compared by identity. Not thread-safe: the name server
calls it from its event loop thread only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..protocol._java_order import java_order
from ..protocol._namesrv_bodies import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerResult,
    TopicConfigWrapper,
    TopicRouteData,
)
from ..store._clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

BROKER_CHANNEL_EXPIRED_SECONDS = 120.0
PERM_WRITE = 0x2  # PermName
PERM_READ = 0x4

# initial capacities of RocketMQ's tables (they decide the HashMap iteration order)
_TOPIC_TABLE_CAPACITY = 1024
_BROKER_TABLE_CAPACITY = 128
_CLUSTER_TABLE_CAPACITY = 32


@dataclass(slots=True)
class _LiveBroker:
    last_update: float  # clock.monotonic()
    data_version: DataVersion
    channel: object | None
    ha_server_addr: str | None


@dataclass(slots=True)
class _BrokerGroup:
    cluster: str
    broker_name: str
    addrs: dict[int, str]

    def snapshot(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(sorted(self.addrs.items())))


class RouteInfoManager:
    """The route tables. Event-loop thread only (no locks)."""

    def __init__(
        self, clock: Clock = SYSTEM_CLOCK, *, expiry_s: float = BROKER_CHANNEL_EXPIRED_SECONDS
    ) -> None:
        self.clock = clock
        self.expiry_s = expiry_s
        self._topic_queues: dict[str, dict[str, QueueData]] = {}
        # broker name → the topics it has queue data of (the index of _topic_queues by broker)
        self._topics_of: dict[str, set[str]] = {}
        # changes whenever a topic comes or goes (what cached topic lists are checked against)
        self.topics_generation = 0
        self._all_topics: tuple[int, list[str]] | None = None
        self._groups: dict[str, _BrokerGroup] = {}
        self._clusters: dict[str, dict[str, None]] = {}  # insertion-ordered sets
        self._live: dict[str, _LiveBroker] = {}
        self._filter_servers: dict[str, list[str]] = {}

    # ---- registration -----------------------------------------------------------------------

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str | None,
        topic_configs: TopicConfigWrapper | None,
        filter_servers: Sequence[str] | None = None,
        channel: object | None = None,
    ) -> RegisterBrokerResult:
        """Record a broker's registration (also its heartbeat: it re-registers every 30 s).
        For a slave, the result carries its master's address and HA address when the master
        is registered."""
        self._clusters.setdefault(cluster, {})[broker_name] = None
        group = self._groups.get(broker_name)
        first = group is None
        if group is None:
            group = self._groups[broker_name] = _BrokerGroup(cluster, broker_name, {})
        for other_id in [i for i, a in group.addrs.items() if a == broker_addr and i != broker_id]:
            del group.addrs[other_id]
        old_addr = group.addrs.get(broker_id)
        group.addrs[broker_id] = broker_addr
        first = first or old_addr is None
        if broker_id == MASTER_ID and old_addr != broker_addr:
            log.info(
                "cluster %s broker %s: master address %s -> %s",
                group.cluster,
                broker_name,
                old_addr,
                broker_addr,
            )

        version = topic_configs.data_version if topic_configs is not None else DataVersion()
        if topic_configs is not None and broker_id == MASTER_ID:
            if first or self.is_topic_config_changed(broker_addr, version):
                for name, config in topic_configs.topic_config_table.items():
                    self._update_queue_data(
                        str(config.get("topicName", name)),
                        QueueData.from_topic_config(broker_name, config),
                    )

        previous = self._live.get(broker_addr)
        self._live[broker_addr] = _LiveBroker(
            self.clock.monotonic(), version, channel, ha_server_addr
        )
        if previous is None:
            log.info("new broker registered: %s, HA server %s", broker_addr, ha_server_addr)

        if filter_servers is not None:
            if filter_servers:
                self._filter_servers[broker_addr] = list(filter_servers)
            else:
                self._filter_servers.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master_addr = group.addrs.get(MASTER_ID)
            if master_addr is not None:
                master = self._live.get(master_addr)
                if master is not None:
                    return RegisterBrokerResult(master.ha_server_addr, master_addr)
        return RegisterBrokerResult()

    def _update_queue_data(self, topic: str, queue_data: QueueData) -> None:
        self._topics_of.setdefault(queue_data.broker_name, set()).add(topic)
        queues = self._topic_queues.get(topic)
        if queues is None:
            self._topic_queues[topic] = {queue_data.broker_name: queue_data}
            self.topics_generation += 1
            log.info("new topic registered: %s %s", topic, queue_data)
            return
        old = queues.get(queue_data.broker_name)
        queues[queue_data.broker_name] = queue_data
        if old is not None and old != queue_data:
            log.info("topic %s changed: %s -> %s", topic, old, queue_data)

    def unregister_broker(
        self, cluster: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        """A broker shutting down: forget it at once (its group, cluster entry and queue data
        too when it was the group's last broker)."""
        self._live.pop(broker_addr, None)
        self._filter_servers.pop(broker_addr, None)
        group = self._groups.get(broker_name)
        if group is None:
            return
        group.addrs.pop(broker_id, None)
        if group.addrs:
            return
        del self._groups[broker_name]
        names = self._clusters.get(cluster)
        if names is not None:
            names.pop(broker_name, None)
            if not names:
                del self._clusters[cluster]
        self._remove_topics_of(broker_name)
        log.info("unregistered broker group %s (last broker %s)", broker_name, broker_addr)

    # ---- liveness ---------------------------------------------------------------------------

    def is_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        """Whether ``data_version`` differs from the one ``broker_addr`` last registered with
        (True for a broker not registered)."""
        live = self._live.get(broker_addr)
        return live is None or live.data_version != data_version

    def data_version(self, broker_addr: str) -> DataVersion | None:
        live = self._live.get(broker_addr)
        return live.data_version if live is not None else None

    def touch(self, broker_addr: str) -> None:
        """A sign of life from a registered broker (QUERY_DATA_VERSION with no change)."""
        live = self._live.get(broker_addr)
        if live is not None:
            live.last_update = self.clock.monotonic()

    def scan_not_active_brokers(self) -> list[tuple[str, object | None]]:
        """Remove every broker not heard from for longer than ``expiry_s``; returns the removed
        (address, channel) pairs so that the caller closes the channels."""
        now = self.clock.monotonic()
        expired = [
            (addr, live.channel)
            for addr, live in self._live.items()
            if live.last_update + self.expiry_s < now
        ]
        for addr, _ in expired:
            log.warning("broker %s expired: not heard from for %.0f s", addr, self.expiry_s)
            self._live.pop(addr, None)
            self._remove_broker_addr(addr)
        return expired

    def on_channel_destroy(self, channel: object, remote_addr: str | None = None) -> str | None:
        """A connection closed: remove the broker that registered on it (or, when none did, the
        broker registered as ``remote_addr``). Returns the address removed, if any."""
        found = next((a for a, live in self._live.items() if live.channel is channel), None)
        if found is None:
            if not remote_addr or (
                remote_addr not in self._live
                and not any(remote_addr in g.addrs.values() for g in self._groups.values())
            ):
                return None
            found = remote_addr
        else:
            log.info("broker %s: connection closed, removing it at once", found)
        self._live.pop(found, None)
        self._remove_broker_addr(found)
        return found

    def _remove_broker_addr(self, broker_addr: str) -> None:
        self._filter_servers.pop(broker_addr, None)
        group = next((g for g in self._groups.values() if broker_addr in g.addrs.values()), None)
        if group is None:
            return
        for broker_id in [i for i, a in group.addrs.items() if a == broker_addr][:1]:
            del group.addrs[broker_id]
        if group.addrs:
            return
        del self._groups[group.broker_name]
        for cluster, names in list(self._clusters.items()):
            if group.broker_name in names:
                del names[group.broker_name]
                if not names:
                    del self._clusters[cluster]
                break
        self._remove_topics_of(group.broker_name)

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic in self._topics_of.pop(broker_name, ()):
            queues = self._topic_queues.get(topic)
            if queues is not None and queues.pop(broker_name, None) is not None and not queues:
                del self._topic_queues[topic]
                self.topics_generation += 1

    def _forget_queue_data(self, topic: str, broker_name: str) -> None:
        """Drop one broker group's queue data of a topic (and the topic when it was the
        last)."""
        queues = self._topic_queues.get(topic)
        if queues is None or queues.pop(broker_name, None) is None:
            return
        topics = self._topics_of.get(broker_name)
        if topics is not None:
            topics.discard(topic)
        if not queues:
            del self._topic_queues[topic]
            self.topics_generation += 1

    # ---- queries ----------------------------------------------------------------------------

    def route(self, topic: str) -> TopicRouteData | None:
        """The topic's route, or None when no live broker group has it."""
        queues = self._topic_queues.get(topic)
        if not queues:
            return None
        names = java_order(queues)
        broker_datas = [self._groups[n].snapshot() for n in names if n in self._groups]
        if not broker_datas:
            return None
        filters: dict[str, list[str]] = {}
        if self._filter_servers:
            for data in broker_datas:
                for addr in data.broker_addrs.values():
                    servers = self._filter_servers.get(addr)
                    if servers is not None:
                        filters[addr] = list(servers)
        return TopicRouteData(
            tuple(queues[n] for n in names),
            tuple(broker_datas),
            {addr: filters[addr] for addr in java_order(filters)},
        )

    def cluster_info(self) -> ClusterInfo:
        """Every broker group by name and every cluster's broker names."""
        groups = {
            name: self._groups[name].snapshot()
            for name in java_order(self._groups, _BROKER_TABLE_CAPACITY)
        }
        clusters = {
            cluster: java_order(self._clusters[cluster])
            for cluster in java_order(self._clusters, _CLUSTER_TABLE_CAPACITY)
        }
        return ClusterInfo(groups, clusters)

    def all_topics(self) -> list[str]:
        """Every topic with a route (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), in RocketMQ's
        order; computed again only after a topic came or went (do not change the list)."""
        cached = self._all_topics
        if cached is None or cached[0] != self.topics_generation:
            ordered = java_order(java_order(self._topic_queues, _TOPIC_TABLE_CAPACITY))
            cached = self._all_topics = (self.topics_generation, ordered)
        return cached[1]

    def topic_queue_datas(self, topic: str) -> Mapping[str, QueueData]:
        """The queue data of ``topic`` by broker name (a copy; empty when unknown)."""
        return dict(self._topic_queues.get(topic, {}))

    def channel_of(self, broker_addr: str) -> object | None:
        """The connection ``broker_addr`` last registered over (None when not registered)."""
        live = self._live.get(broker_addr)
        return live.channel if live is not None else None

    def live_brokers(self) -> list[str]:
        """The addresses of the brokers registered and not expired."""
        return list(self._live)

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """WIPE_WRITE_PERM_OF_BROKER (``writable`` False: the write bit of the broker group's
        queue data cleared on every topic) or ADD_WRITE_PERM_OF_BROKER (True: read and write,
        as RocketMQ sets it); returns how many topics the group has. Kept until the broker
        registers a changed topic table."""
        count = 0
        for topic in self._topics_of.get(broker_name, ()):
            queues = self._topic_queues[topic]
            old = queues.get(broker_name)
            if old is None:
                continue
            perm = old.perm & ~PERM_WRITE if not writable else PERM_READ | PERM_WRITE
            queues[broker_name] = dataclasses.replace(old, perm=perm)
            count += 1
        return count

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Forget a topic's queue data: everywhere, or only that of ``cluster``'s brokers."""
        if not cluster:
            for name in list(self._topic_queues.get(topic, ())):
                self._forget_queue_data(topic, name)
            return
        names = self._clusters.get(cluster)
        if topic not in self._topic_queues or not names:
            return
        for name in list(names):
            self._forget_queue_data(topic, name)
