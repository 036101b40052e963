"""Client membership learnt from heartbeats (decoded by the protocol room's ``parse_heartbeat``,
``protocol._heartbeat``): consumer groups (RocketMQ's ConsumerManager and ConsumerGroupInfo) and
producer groups (its ProducerManager).

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

Indexed for thousands of clients: a heartbeat costs what its own groups hold (``touch_*`` for a
heartbeat that repeats the last one costs a lookup); a closed channel is found in the groups it
is in, not by a walk of every group; ``scan_not_active`` walks only the channels it expires (the
clients are kept in the order of their last heartbeat, oldest first); a group's client ids
(GET_CONSUMER_LIST_BY_GROUP) are one tuple, made again only when its membership changes.

Threads: every method may be called from any thread (one lock); the broker's event loop is the
usual caller. Expiry uses the clock's monotonic seconds; reported update times its wall clock.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from ...protocol._heartbeat import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from ...store._clock import SYSTEM_CLOCK, Clock

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
        "client_ids",
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
        self.client_ids: tuple[str, ...] | None = None  # made when asked, dropped on a change


class _Ages(Generic[C]):
    """The (group, channel) pairs of a manager in the order of their last heartbeat, oldest
    first, and every channel's groups: what expiry and closed connections walk instead of every
    group. Caller holds the manager's lock."""

    def __init__(self) -> None:
        self._order: OrderedDict[tuple[str, C], ClientRecord[C]] = OrderedDict()
        self._groups_of: dict[C, set[str]] = {}

    def seen(self, group: str, record: ClientRecord[C]) -> None:
        key = (group, record.channel)
        if key in self._order:
            self._order.move_to_end(key)
        else:
            self._order[key] = record
            self._groups_of.setdefault(record.channel, set()).add(group)

    def forget(self, group: str, channel: C) -> None:
        if self._order.pop((group, channel), None) is None:
            return
        groups = self._groups_of.get(channel)
        if groups is not None:
            groups.discard(group)
            if not groups:
                del self._groups_of[channel]

    def groups_of(self, channel: C) -> list[str]:
        return sorted(self._groups_of.get(channel, ()))

    def older_than(self, limit: float) -> list[tuple[str, ClientRecord[C]]]:
        """The pairs last seen before ``limit`` (monotonic seconds), oldest first."""
        out: list[tuple[str, ClientRecord[C]]] = []
        for (group, _channel), record in self._order.items():
            if record.last_seen >= limit:
                break
            out.append((group, record))
        return out


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
        self._ages: _Ages[C] = _Ages()

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
                client = g.clients[channel] = ClientRecord(
                    channel, client_id, language, version, now_ms, mono
                )
                g.client_ids = None
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
                    g.client_ids = None
                client.last_update_ms = now_ms
                client.last_seen = mono
            self._ages.seen(group, client)
            if self._update_subscriptions(group, g, subs):
                changed = True
            g.last_update_ms = now_ms
            return changed

    def touch_consumer(self, group: str, channel: C) -> bool:
        """A heartbeat that repeats the channel's last one: only its time is recorded. False
        when the channel is not (or no longer) in the group: then register it in full."""
        now_ms = self._clock.now_ms()
        mono = self._clock.monotonic()
        with self._lock:
            g = self._groups.get(group)
            client = g.clients.get(channel) if g is not None else None
            if g is None or client is None:
                return False
            client.last_update_ms = now_ms
            client.last_seen = mono
            g.last_update_ms = now_ms
            self._ages.seen(group, client)
            return True

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
            client = self._drop(group, g, channel)
            if client is not None:
                log.info("consumer %s left group %s", client.client_id, group)
            return True

    def _drop(self, name: str, g: _Group[C], channel: C) -> ClientRecord[C] | None:
        """Remove a channel from a group (and an emptied group). Caller holds the lock."""
        client = g.clients.pop(channel, None)
        if client is not None:
            g.client_ids = None
            self._ages.forget(name, channel)
        if not g.clients:
            self._groups.pop(name, None)
        return client

    def on_channel_closed(self, channel: C) -> list[str]:
        """A connection closed: remove it from every group; the groups it was in (each needs
        a notification to its remaining channels)."""
        changed: list[str] = []
        with self._lock:
            for name in self._ages.groups_of(channel):
                g = self._groups.get(name)
                client = self._drop(name, g, channel) if g is not None else None
                if client is None:
                    continue
                changed.append(name)
                log.info("consumer %s of group %s disconnected", client.client_id, name)
        return changed

    def scan_not_active(self, timeout_s: float | None = None) -> dict[str, list[C]]:
        """Drop channels whose last heartbeat is older than ``timeout_s`` (default 120 s);
        group → the dropped channels, for the broker to close. Emptied groups are removed.
        Walks the expired channels only."""
        limit = self.channel_expired_timeout_s if timeout_s is None else timeout_s
        now = self._clock.monotonic()
        expired: dict[str, list[C]] = {}
        with self._lock:
            for name, client in self._ages.older_than(now - limit):
                g = self._groups.get(name)
                if g is not None:
                    self._drop(name, g, client.channel)
                else:
                    self._ages.forget(name, client.channel)
                expired.setdefault(name, []).append(client.channel)
                log.warning(
                    "consumer %s of group %s expired (no heartbeat for %.0f s)",
                    client.client_id,
                    name,
                    now - client.last_seen,
                )
        return expired

    # -- reads -------------------------------------------------------------------------------

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        g = self._groups.get(group)
        return None if g is None else g.subscriptions.get(topic)

    def consumer_ids(self, group: str) -> tuple[str, ...]:
        """The client ids of the group's channels (GET_CONSUMER_LIST_BY_GROUP); () if none.
        The same tuple until the group's membership changes (callers may cache what they make
        of it by its identity)."""
        with self._lock:
            g = self._groups.get(group)
            if g is None:
                return ()
            ids = g.client_ids
            if ids is None:
                ids = g.client_ids = tuple(c.client_id for c in g.clients.values())
            return ids

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
        self._ages: _Ages[C] = _Ages()

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
                client = ClientRecord(channel, client_id, language, version, now_ms, mono)
                clients[channel] = client
                self._by_client_id[client_id] = channel
                self._ages.seen(group, client)
                log.info("producer %s joined group %s", client_id, group)
                return True
            client.last_update_ms = now_ms
            client.last_seen = mono
            self._ages.seen(group, client)
            return False

    def touch_producer(self, group: str, channel: C) -> bool:
        """A heartbeat that repeats the channel's last one; False when the channel is not (or
        no longer) in the group: then register it."""
        now_ms = self._clock.now_ms()
        mono = self._clock.monotonic()
        with self._lock:
            client = self._groups.get(group, {}).get(channel)
            if client is None:
                return False
            client.last_update_ms = now_ms
            client.last_seen = mono
            self._ages.seen(group, client)
            return True

    def _forget(self, group: str, client: ClientRecord[C]) -> None:
        if self._by_client_id.get(client.client_id) == client.channel:
            del self._by_client_id[client.client_id]
        self._ages.forget(group, client.channel)

    def unregister_producer(self, group: str, channel: C) -> bool:
        """A producer leaves (UNREGISTER_CLIENT); False when the channel was not in the group."""
        with self._lock:
            clients = self._groups.get(group)
            if clients is None:
                return False
            client = clients.pop(channel, None)
            if client is not None:
                self._forget(group, client)
                log.info("producer %s left group %s", client.client_id, group)
            if not clients:
                del self._groups[group]
            return client is not None

    def on_channel_closed(self, channel: C) -> list[str]:
        """A connection closed: remove it from every group; the groups it was in."""
        left: list[str] = []
        with self._lock:
            for group in self._ages.groups_of(channel):
                clients = self._groups.get(group, {})
                client = clients.pop(channel, None)
                if client is None:
                    self._ages.forget(group, channel)
                    continue
                self._forget(group, client)
                left.append(group)
                if not clients:
                    self._groups.pop(group, None)
        return left

    def scan_not_active(self, timeout_s: float | None = None) -> dict[str, list[C]]:
        """Drop channels whose last heartbeat is older than ``timeout_s`` (default 120 s);
        group → the dropped channels, for the broker to close."""
        limit = self.channel_expired_timeout_s if timeout_s is None else timeout_s
        now = self._clock.monotonic()
        expired: dict[str, list[C]] = {}
        with self._lock:
            for group, client in self._ages.older_than(now - limit):
                clients = self._groups.get(group, {})
                clients.pop(client.channel, None)
                self._forget(group, client)
                expired.setdefault(group, []).append(client.channel)
                log.warning("producer %s of group %s expired", client.client_id, group)
                if not clients:
                    self._groups.pop(group, None)
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
