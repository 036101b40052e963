"""What a request processor may use of the broker: one small protocol per piece of state or
service. A processor (remoting or gRPC) names the pieces it needs by composing them::

    class OffsetContext(HasOffsets, HasStore, Protocol): ...

    class OffsetProcessor:
        def __init__(self, broker: OffsetContext) -> None: ...

and the type checker keeps it to them. ``BrokerController`` has every piece; a test may hand a
processor any object that has the few it names.

This module imports the broker's state modules and the store, never a processor, the
controller or a front end: processors import it, it imports nothing above them. The
transaction service's piece, ``HasTransactions``, is in ``_transaction.py`` beside the service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..acl._auth_store import AuthStore
from ..acl._remoting import AclSource
from ..remoting import Connection
from ..remoting._client import Signer
from ..store._clock import Clock
from ..store._config import StoreConfig
from ..store._store import MessageStore
from ._config import BrokerConfig
from .state._consumer_manager import ConsumerManager, ProducerManager
from .state._consumer_offset import ConsumerOffsetManager
from .state._long_poll import PullRequestHoldService
from .state._pop import PopState
from .state._stats import BrokerStats
from .state._subscription_group import SubscriptionGroupManager
from .state._topic_config import TopicConfig, TopicConfigManager

if TYPE_CHECKING:  # the tier reads Parquet (the spark extra); a broker without a tier needs none
    from ..tier._read import TierReader


class HasConfig(Protocol):
    """broker.conf's broker settings (``broker_name``, ``broker_permission``, ...)."""

    @property
    def config(self) -> BrokerConfig: ...


class HasStoreConfig(Protocol):
    """The store's settings as the broker started it (``broker_role``, the root dir, ...)."""

    @property
    def store_config(self) -> StoreConfig: ...


class HasClock(Protocol):
    @property
    def clock(self) -> Clock: ...


class HasStore(Protocol):
    """The started message store (puts, gets, queries)."""

    @property
    def store(self) -> MessageStore: ...


class HasTier(Protocol):
    """The tiered store the broker answers pulls below the consume queues' minimum from."""

    def tier_reader(self) -> TierReader | None: ...


class HasTopics(Protocol):
    @property
    def topics(self) -> TopicConfigManager: ...


class HasGroups(Protocol):
    @property
    def groups(self) -> SubscriptionGroupManager: ...


class HasOffsets(Protocol):
    @property
    def offsets(self) -> ConsumerOffsetManager: ...


class HasConsumers(Protocol):
    """Group membership from heartbeats (remoting connections)."""

    @property
    def consumers(self) -> ConsumerManager[Connection]: ...


class HasProducers(Protocol):
    @property
    def producers(self) -> ProducerManager[Connection]: ...


class HasHolds(Protocol):
    """Held (long-poll) pulls, woken when a message arrives."""

    @property
    def holds(self) -> PullRequestHoldService: ...


class TopicCreation(Protocol):
    """Topics created on demand, and the name servers told of them at once."""

    def create_topic_for_send(self, topic: str, ext: dict[str, Any]) -> TopicConfig | None: ...

    def create_topic_for_send_back(
        self, topic: str, queue_nums: int, perm: int, sys_flag: int = 0
    ) -> TopicConfig: ...

    def topic_changed(self, config: TopicConfig | None = None) -> None: ...

    async def register_topics_now(self) -> None: ...


class HasEndpoints(Protocol):
    """Where the broker's front ends are reached: ``grpc_endpoint`` is set by a gRPC front end
    serving this broker (None: none), and ``pop_state`` to the receipts it keeps (for the
    broker's statistics)."""

    @property
    def address(self) -> str: ...

    grpc_endpoint: str | None
    pop_state: PopState | None


class HasStats(Protocol):
    """The broker's counters of what it served (messages out by topic and group, request
    latency), read by the metrics."""

    @property
    def stats(self) -> BrokerStats: ...


class HasInnerClient(Protocol):
    """How the broker's own clients sign (registrations, a slave's copying of its master, the
    gRPC front end's route reads): None signs nothing."""

    @property
    def inner_signer(self) -> Signer | None: ...


class HasAuth(Protocol):
    """ACL 2.0's users and ACLs (served by the admin requests whether or not they are in
    force)."""

    @property
    def auth(self) -> AuthStore: ...


class HasAcl(Protocol):
    """The ACL every port of the broker checks (None: off), and turning it on later."""

    @property
    def acl(self) -> AclSource | None: ...

    def enable_acl(self, source: AclSource) -> None: ...
