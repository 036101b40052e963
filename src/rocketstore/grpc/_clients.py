"""The gRPC clients a front end knows: their settings (from Telemetry), heartbeats and
termination, and the settings the broker answers with.

A client opens a Telemetry stream and sends its Settings (a producer's publishing: topics; a
consumer's subscription: group and filter expressions). The broker remembers them by client id
(the ``x-mq-client-id`` header) and answers with the settings it wants the client to use:

- producers: a retry policy (3 attempts, exponential backoff) and the largest body the broker
  stores (``max_message_size``), message types checked against the route's accept list;
- consumers: the receive batch size, the longest long poll, ``fifo`` when the group is
  orderly (consumeMessageOrderly), and the group's retry
  policy (``retryMaxTimes`` + 1 attempts, backing off along the broker's delay levels).

A client id is a name the client picks, not a credential. With ACL on, the first account that
uses an id holds it (``claim``) while the id is in use (a call within ``CLIENT_EXPIRY_MS``, or a
Telemetry stream open under it): another account's call under that id is refused, so it cannot
open a stream that the broker's transaction checks (which carry the half message) go down,
replace the holder's settings, or end the holder's session and release what it received.

Loop thread only.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from ..broker._services import HasGroups, HasStoreConfig, HasTopics
from ..store._clock import Clock
from ._checks import check_group, check_topic, settings_topics
from ._config import GrpcConfig
from ._convert import Code, GrpcError
from ._pb import definition_pb2 as pb

PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
# a client not heard from for this long is forgotten
CLIENT_EXPIRY_MS = 120_000

_CONSUMER_TYPES = (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER)


class ClientsContext(HasGroups, HasStoreConfig, HasTopics, Protocol):
    """What the gRPC client registry uses of the broker."""


@dataclass(slots=True)
class ClientInfo:
    client_id: str
    client_type: int
    group: str | None
    settings: pb.Settings | None
    last_seen_ms: int


class ClientRegistry:
    def __init__(self, broker: ClientsContext, config: GrpcConfig, clock: Clock) -> None:
        self._broker = broker
        self._config = config
        self._clock = clock
        self._clients: dict[str, ClientInfo] = {}
        # client id → (the access key holding it, when it was last used: ms)
        self._claims: dict[str, tuple[str, int]] = {}

    def claim(self, client_id: str, access_key: str) -> bool:
        """Whether the account ``access_key`` may act as ``client_id``: True when the id is
        free or already the account's (it is the account's from now on, for
        CLIENT_EXPIRY_MS after this call), False when another account holds it."""
        now = self._clock.now_ms()
        held = self._claims.get(client_id)
        if held is not None and held[0] != access_key and held[1] >= now - CLIENT_EXPIRY_MS:
            return False
        self._claims[client_id] = (access_key, now)
        return True

    def get(self, client_id: str) -> ClientInfo | None:
        return self._clients.get(client_id)

    def all(self) -> dict[str, ClientInfo]:
        return dict(self._clients)

    # ---- Telemetry ---------------------------------------------------------------------------

    def update_settings(self, client_id: str, settings: pb.Settings) -> pb.Settings:
        """Remember a client's settings; the settings the broker answers with. GrpcError for
        settings without publishing or subscription, with a bad topic or group, or naming
        more than ``max_settings_topics`` topics."""
        count = settings_topics(settings)
        if count > self._config.max_settings_topics:
            raise GrpcError(
                Code.BAD_REQUEST,
                f"settings name {count:,} topics, at most {self._config.max_settings_topics:,}",
            )
        kind = settings.WhichOneof("pub_sub")
        group: str | None = None
        if kind == "publishing":
            for topic in settings.publishing.topics:
                check_topic(topic, self._broker.topics)
        elif kind == "subscription":
            group = check_group(settings.subscription.group)
            for entry in settings.subscription.subscriptions:
                check_topic(entry.topic, self._broker.topics)
        else:
            raise GrpcError(Code.BAD_REQUEST, "settings have neither publishing nor subscription")
        self._clients[client_id] = ClientInfo(
            client_id, settings.client_type, group, settings, self._clock.now_ms()
        )
        return self.answer(settings)

    def answer(self, settings: pb.Settings) -> pb.Settings:
        """The broker's settings for a client that sent ``settings``."""
        out = pb.Settings()
        out.CopyFrom(settings)
        out.metric.on = False
        out.metric.ClearField("endpoints")
        if settings.WhichOneof("pub_sub") == "publishing":
            policy = out.backoff_policy
            policy.Clear()
            policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            policy.exponential_backoff.initial.FromMilliseconds(PRODUCER_BACKOFF_INITIAL_MS)
            policy.exponential_backoff.max.FromMilliseconds(PRODUCER_BACKOFF_MAX_MS)
            policy.exponential_backoff.multiplier = PRODUCER_BACKOFF_MULTIPLIER
            out.publishing.max_body_size = self._broker.store_config.max_message_size
            out.publishing.validate_message_type = True
            return out
        sub = out.subscription
        sub.receive_batch_size = self._config.receive_batch_size
        sub.long_polling_timeout.FromMilliseconds(self._config.max_long_polling_ms)
        group_config = self._broker.groups.find_or_create(sub.group.name)
        sub.fifo = group_config is not None and group_config.consume_message_orderly
        retry_max_times = group_config.retry_max_times if group_config is not None else 16
        policy = out.backoff_policy
        policy.Clear()
        policy.max_attempts = retry_max_times + 1
        for ms in self._broker.store_config.delay_levels_ms():
            policy.customized_backoff.next.add().FromMilliseconds(ms)
        return out

    # ---- Heartbeat / NotifyClientTermination -------------------------------------------------

    def heartbeat(self, client_id: str, client_type: int, group: pb.Resource | None) -> None:
        """A client's heartbeat: UNRECOGNIZED_CLIENT_TYPE for a type the broker does not serve,
        ILLEGAL_CONSUMER_GROUP for a consumer with a bad group."""
        info = self._clients.get(client_id)
        if client_type == pb.CLIENT_TYPE_UNSPECIFIED and info is not None:
            client_type = info.client_type
        group_name: str | None = None
        if client_type in _CONSUMER_TYPES:
            if group is None:
                raise GrpcError(Code.ILLEGAL_CONSUMER_GROUP, "a consumer heartbeat needs a group")
            group_name = check_group(group)
        elif client_type != pb.PRODUCER:
            raise GrpcError(
                Code.UNRECOGNIZED_CLIENT_TYPE,
                f"client type {pb.ClientType.Name(client_type)} is not served",  # type: ignore[arg-type]
            )
        now = self._clock.now_ms()
        if info is None:
            self._clients[client_id] = ClientInfo(client_id, client_type, group_name, None, now)
        else:
            info.last_seen_ms = now
            info.client_type = client_type
            if group_name is not None:
                info.group = group_name

    def terminate(self, client_id: str) -> bool:
        """Forget a client; False when it was not known."""
        return self._clients.pop(client_id, None) is not None

    def expire(self, streaming: Collection[str] = ()) -> list[str]:
        """Forget clients not heard from for CLIENT_EXPIRY_MS; their ids. The ids in
        ``streaming`` (an open Telemetry stream each) stay claimed by their accounts."""
        limit = self._clock.now_ms() - CLIENT_EXPIRY_MS
        gone = [cid for cid, info in self._clients.items() if info.last_seen_ms < limit]
        for cid in gone:
            del self._clients[cid]
        now = self._clock.now_ms()
        for cid, (owner, seen) in list(self._claims.items()):
            if cid in streaming:
                self._claims[cid] = (owner, now)
            elif seen < limit:
                del self._claims[cid]
        return gone

    def touch(self, client_id: str) -> None:
        info = self._clients.get(client_id)
        if info is not None:
            info.last_seen_ms = self._clock.now_ms()
