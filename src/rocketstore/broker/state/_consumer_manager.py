"""Client membership learnt from heartbeats: consumer groups (RocketMQ's ConsumerManager and
ConsumerGroupInfo) and producer groups (its ProducerManager). The heartbeat body's parser,
``parse_heartbeat``, lives in ``_heartbeat`` and is re-exported here.

A group has the channels (client connections) of its online consumers and one subscription table
(topic → SubscriptionData) that every heartbeat of the group replaces. A channel is any hashable
object the front end chooses (a connection, a gRPC client id); nothing here touches the network.

The broker tells a group's consumers to rebalance (NOTIFY_CONSUMER_IDS_CHANGED) when its
membership changes: ``register_consumer`` returns True for a new channel, a newly subscribed or an
unsubscribed topic (a higher ``subVersion`` of the same topic replaces it silently, as in
RocketMQ); ``unregister_consumer`` returns True whenever the group exists; ``on_channel_closed``
returns the groups the channel left. ``scan_not_active`` (every 10 s in RocketMQ) drops channels
without a heartbeat for 120 s and returns them by group, so the broker can close them; RocketMQ
does not notify the rest of such a group.

Producers are kept so the broker can reach one again: a transaction check goes to one of a group's
channels (``ProducerManager.available_channel``), a reply message to a client id
(``find_channel``).

Threads: every method may be called from any thread (one lock); the broker's event loop is the
usual caller. Expiry uses the clock's monotonic seconds; reported update times its wall clock.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from ...store._clock import SYSTEM_CLOCK, Clock
from ._heartbeat import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from ._heartbeat import HeartbeatData as HeartbeatData
from ._heartbeat import parse_heartbeat as parse_heartbeat

log = logging.getLogger(__name__)

C = TypeVar("C", bound=Hashable)

CHANNEL_EXPIRED_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class ClientChannelInfo(Generic[C]):
    """One client connection of a group (a snapshot)."""

    channel: C
    client_id: str
    language: str
    version: int
    last_update_ms: int


class ClientRecord(Generic[C]):
    """A client connection as the managers keep it (mutable; read it through snapshot())."""

    __slots__ = ("channel", "client_id", "language", "last_seen", "last_update_ms", "version")

    def __init__(
        self, channel: C, client_id: str, language: str, version: int, now_ms: int, mono: float
    ) -> None:
        self.channel = channel
        self.client_id = client_id
        self.language = language
        self.version = version
        self.last_update_ms = now_ms
        self.last_seen = mono

    def snapshot(self) -> ClientChannelInfo[C]:
        return ClientChannelInfo(
            self.channel, self.client_id, self.language, self.version, self.last_update_ms
        )


@dataclass(frozen=True, slots=True)
class ConsumerGroupInfo(Generic[C]):
    """A snapshot of one consumer group (GET_CONSUMER_CONNECTION_LIST's content)."""

    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: Mapping[str, SubscriptionData]
    clients: tuple[ClientChannelInfo[C], ...]
    last_update_ms: int


class _Group(Generic[C]):
    __slots__ = (
        "clients",
        "consume_from_where",
        "consume_type",
        "last_update_ms",
        "message_model",
        "subscriptions",
    )

    def __init__(
        self,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        now_ms: int,
    ) -> None:
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.clients: dict[C, ClientRecord[C]] = {}
        self.last_update_ms = now_ms


class ConsumerManager(Generic[C]):
    """Online consumers by group."""

    def __init__(
        self,
        clock: Clock = SYSTEM_CLOCK,
        channel_expired_timeout_s: float = CHANNEL_EXPIRED_TIMEOUT_S,
    ) -> None:
        self._clock = clock
        self.channel_expired_timeout_s = channel_expired_timeout_s
        self._lock = threading.Lock()
        self._groups: dict[str, _Group[C]] = {}

    def register_consumer(
        self,
        group: str,
        channel: C,
        client_id: str,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        subscriptions: Iterable[SubscriptionData],
        *,
        language: str = "JAVA",
        version: int = 0,
    ) -> bool:
        """Record a consumer's heartbeat for ``group``; True when the group's membership changed
        (new channel, topic added or removed): the broker then notifies the group's channels."""
        now_ms = self._clock.now_ms()
        mono = self._clock.monotonic()
        subs = list(subscriptions)
        with self._lock:
            g = self._groups.get(group)
            if g is None:
                g = self._groups[group] = _Group(
                    consume_type, message_model, consume_from_where, now_ms
                )
            g.consume_type = consume_type
            g.message_model = message_model
            g.consume_from_where = consume_from_where
            changed = False
            client = g.clients.get(channel)
            if client is None:
                g.clients[channel] = ClientRecord(
                    channel, client_id, language, version, now_ms, mono
                )
                changed = True
                log.info("consumer %s joined group %s (%s)", client_id, group, consume_type.name)
            else:
                if client.client_id != client_id:
                    log.error(
                        "channel of group %s changed its client id: %s -> %s",
                        group,
                        client.client_id,
                        client_id,
                    )
                    client.client_id = client_id
                    client.language = language
                    client.version = version
                client.last_update_ms = now_ms
                client.last_seen = mono
            if self._update_subscriptions(group, g, subs):
                changed = True
            g.last_update_ms = now_ms
            return changed

    @staticmethod
    def _update_subscriptions(group: str, g: _Group[C], subs: list[SubscriptionData]) -> bool:
        changed = False
        for sub in subs:
            old = g.subscriptions.get(sub.topic)
            if old is None:
                g.subscriptions[sub.topic] = sub
                changed = True
                log.info("group %s subscribed %s: %s", group, sub.topic, sub.sub_string)
            elif sub.sub_version > old.sub_version:
                g.subscriptions[sub.topic] = sub
        wanted = {sub.topic for sub in subs}
        for topic in [t for t in g.subscriptions if t not in wanted]:
            del g.subscriptions[topic]
            changed = True
            log.warning("group %s no longer subscribes %s", group, topic)
        return changed

    def unregister_consumer(self, group: str, channel: C) -> bool:
        """A consumer leaves (UNREGISTER_CLIENT). True when the group exists, which is when
        RocketMQ notifies its remaining channels; an emptied group is removed."""
        with self._lock:
            g = self._groups.get(group)
            if g is None:
                return False
            client = g.clients.pop(channel, None)
            if client is not None:
                log.info("consumer %s left group %s", client.client_id, group)
            if not g.clients:
                del self._groups[group]
            return True

    def on_channel_closed(self, channel: C) -> list[str]:
        """A connection closed: remove it from every group; the groups it was in (each needs
        a notification to its remaining channels)."""
        changed: list[str] = []
        with self._lock:
            for name, g in list(self._groups.items()):
                client = g.clients.pop(channel, None)
                if client is None:
                    continue
                changed.append(name)
                log.info("consumer %s of group %s disconnected", client.client_id, name)
                if not g.clients:
                    del self._groups[name]
        return changed

    def scan_not_active(self, timeout_s: float | None = None) -> dict[str, list[C]]:
        """Drop channels whose last heartbeat is older than ``timeout_s`` (default 120 s);
        group → the dropped channels, for the broker to close. Emptied groups are removed."""
        limit = self.channel_expired_timeout_s if timeout_s is None else timeout_s
        now = self._clock.monotonic()
        expired: dict[str, list[C]] = {}
        with self._lock:
            for name, g in list(self._groups.items()):
                for channel, client in list(g.clients.items()):
                    if now - client.last_seen > limit:
                        del g.clients[channel]
                        expired.setdefault(name, []).append(channel)
                        log.warning(
                            "consumer %s of group %s expired (no heartbeat for %.0f s)",
                            client.client_id,
                            name,
                            now - client.last_seen,
                        )
                if not g.clients:
                    del self._groups[name]
        return expired

    # -- reads -------------------------------------------------------------------------------

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        g = self._groups.get(group)
        return None if g is None else g.subscriptions.get(topic)

    def consumer_ids(self, group: str) -> list[str]:
        """The client ids of the group's channels (GET_CONSUMER_LIST_BY_GROUP); [] if none."""
        with self._lock:
            g = self._groups.get(group)
            return [] if g is None else [c.client_id for c in g.clients.values()]

    def channels(self, group: str) -> list[C]:
        with self._lock:
            g = self._groups.get(group)
            return [] if g is None else list(g.clients)

    def find_channel(self, group: str, client_id: str) -> C | None:
        with self._lock:
            g = self._groups.get(group)
            if g is not None:
                for client in g.clients.values():
                    if client.client_id == client_id:
                        return client.channel
            return None

    def group_info(self, group: str) -> ConsumerGroupInfo[C] | None:
        with self._lock:
            g = self._groups.get(group)
            if g is None:
                return None
            return ConsumerGroupInfo(
                group,
                g.consume_type,
                g.message_model,
                g.consume_from_where,
                MappingProxyType(dict(g.subscriptions)),
                tuple(c.snapshot() for c in g.clients.values()),
                g.last_update_ms,
            )

    def groups(self) -> list[str]:
        with self._lock:
            return list(self._groups)

    def groups_by_topic(self, topic: str) -> set[str]:
        """The online groups subscribing to ``topic`` (queryTopicConsumeByWho)."""
        with self._lock:
            return {name for name, g in self._groups.items() if topic in g.subscriptions}


class ProducerManager(Generic[C]):
    """Online producers by group."""

    def __init__(
        self,
        clock: Clock = SYSTEM_CLOCK,
        channel_expired_timeout_s: float = CHANNEL_EXPIRED_TIMEOUT_S,
    ) -> None:
        self._clock = clock
        self.channel_expired_timeout_s = channel_expired_timeout_s
        self._lock = threading.Lock()
        self._groups: dict[str, dict[C, ClientRecord[C]]] = {}
        self._by_client_id: dict[str, C] = {}
        self._round_robin = itertools.count()

    def register_producer(
        self, group: str, channel: C, client_id: str, *, language: str = "JAVA", version: int = 0
    ) -> bool:
        """Record a producer's heartbeat; True when the channel is new to the group."""
        now_ms = self._clock.now_ms()
        mono = self._clock.monotonic()
        with self._lock:
            clients = self._groups.setdefault(group, {})
            client = clients.get(channel)
            if client is None:
                clients[channel] = ClientRecord(channel, client_id, language, version, now_ms, mono)
                self._by_client_id[client_id] = channel
                log.info("producer %s joined group %s", client_id, group)
                return True
            client.last_update_ms = now_ms
            client.last_seen = mono
            return False

    def _forget(self, client: ClientRecord[C]) -> None:
        if self._by_client_id.get(client.client_id) == client.channel:
            del self._by_client_id[client.client_id]

    def unregister_producer(self, group: str, channel: C) -> bool:
        """A producer leaves (UNREGISTER_CLIENT); False when the channel was not in the group."""
        with self._lock:
            clients = self._groups.get(group)
            if clients is None:
                return False
            client = clients.pop(channel, None)
            if client is not None:
                self._forget(client)
                log.info("producer %s left group %s", client.client_id, group)
            if not clients:
                del self._groups[group]
            return client is not None

    def on_channel_closed(self, channel: C) -> list[str]:
        """A connection closed: remove it from every group; the groups it was in."""
        left: list[str] = []
        with self._lock:
            for group, clients in list(self._groups.items()):
                client = clients.pop(channel, None)
                if client is None:
                    continue
                self._forget(client)
                left.append(group)
                if not clients:
                    del self._groups[group]
        return left

    def scan_not_active(self, timeout_s: float | None = None) -> dict[str, list[C]]:
        """Drop channels whose last heartbeat is older than ``timeout_s`` (default 120 s);
        group → the dropped channels, for the broker to close."""
        limit = self.channel_expired_timeout_s if timeout_s is None else timeout_s
        now = self._clock.monotonic()
        expired: dict[str, list[C]] = {}
        with self._lock:
            for group, clients in list(self._groups.items()):
                for channel, client in list(clients.items()):
                    if now - client.last_seen > limit:
                        del clients[channel]
                        self._forget(client)
                        expired.setdefault(group, []).append(channel)
                        log.warning("producer %s of group %s expired", client.client_id, group)
                if not clients:
                    del self._groups[group]
        return expired

    def channels(self, group: str) -> list[C]:
        with self._lock:
            return list(self._groups.get(group, {}))

    def find_channel(self, client_id: str) -> C | None:
        """The channel of a producer by client id (reply messages)."""
        return self._by_client_id.get(client_id)

    def available_channel(
        self, group: str, is_usable: Callable[[C], bool] | None = None
    ) -> C | None:
        """One of the group's channels, round robin, skipping those ``is_usable`` refuses
        (getAvailableChannel, for transaction checks); None when there is none."""
        with self._lock:
            channels = list(self._groups.get(group, {}))
        if not channels:
            return None
        start = next(self._round_robin)
        for i in range(len(channels)):
            channel = channels[(start + i) % len(channels)]
            if is_usable is None or is_usable(channel):
                return channel
        return None

    def groups(self) -> list[str]:
        with self._lock:
            return list(self._groups)

    def producer_table(self) -> dict[str, list[ClientChannelInfo[C]]]:
        """group → its producers (GET_PRODUCER_CONNECTION_LIST / getProducerTable)."""
        with self._lock:
            return {g: [c.snapshot() for c in cs.values()] for g, cs in self._groups.items()}
