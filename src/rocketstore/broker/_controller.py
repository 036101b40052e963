"""The broker: a message store behind the remoting protocol, with the state RocketMQ's broker
keeps beside it (topic configs, subscription groups, consumer offsets, client membership,
held pulls) and its registration with the name servers.

``BrokerController`` builds the broker's state over a store it is given and the request
processors (``handlers``); the processors live in modules of their own, each handed the
controller as the few pieces of ``_services.py`` it names. The controller builds no store and no
server: ``rocketstore.server`` (the composition root) opens the store, builds the remoting server
over ``handlers()``, adds front ends and runs the lifecycle (see docs/layers.md). ``start`` and
the shutdown steps are coroutines on the broker's event loop; the store's own threads keep
running beside it.

Shutdown steps, in the root's order: ``stop_registering`` (unregister, stop copying a master's
state), a front end over the broker closes, ``answer_held_pulls``, the remoting server closes,
``shutdown`` (periodic tasks stopped; offsets, topics and groups persisted), the store shuts
down (flush, abort file removed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..acl import _audit as audit
from ..remoting import Connection, RemotingError, RemotingServer, ext_int, ext_str
from ..remoting._client import FROM_ENV, Signer
from ..remoting._signing import signer_from_env
from ..store._clock import SYSTEM_CLOCK, Clock
from ..store._config import StoreConfig
from ..store._durable import is_disk_full
from ..store._store import MessageStore
from ._config import BrokerConfig
from .admin._admin import AdminProcessor
from .admin._auth import AuthAdminProcessor
from .admin._clients import ClientAdminProcessor
from .admin._config import ConfigAdminProcessor
from .admin._consumers import ConsumerAdminProcessor
from .admin._queue import QueueAdminProcessor
from .admin._tier import TierAdminProcessor
from .clients._clients import ClientProcessor
from .clients._offsets import OffsetProcessor
from .clients._queue_locks import QueueLockProcessor
from .messaging._end_transaction import EndTransactionProcessor
from .messaging._pull import PullProcessor
from .messaging._query import QueryProcessor
from .messaging._send import SendProcessor
from .messaging._send_back import SendBackProcessor
from .messaging._send_frame import SendFramePath
from .messaging._transaction import TransactionService
from .replication._replicas_processor import ReplicasProcessor
from .replication._slave_sync import SlaveSynchronizer, SlaveSyncProcessor
from .state._consumer_manager import ConsumerManager, ProducerManager
from .state._consumer_offset import ConsumerOffsetManager
from .state._long_poll import PullRequestHoldService
from .state._pop import PopState
from .state._stats import BrokerStats, seconds_to_next_midnight
from .state._subscription_group import SubscriptionGroupManager
from .state._topic_config import TopicConfig, TopicConfigManager, validate_topic

if TYPE_CHECKING:
    from ..acl._auth_store import AuthStore
    from ..acl._remoting import AclSource
    from ..tier._read import TierReader
    from .replication._replicas import ReplicasManager, RoleChange

log = logging.getLogger(__name__)

SCAN_CHANNELS_INTERVAL_S = 10.0
LAST_COPY_TIMEOUT_S = 1.0  # a promoted slave's last copy of its old master's state, each request


def load_auth(config: BrokerConfig, config_dir: Path) -> AuthStore:
    """ACL 2.0's users and ACLs of a broker (``config_dir/auth.json``), with the Super users
    broker.conf names made when missing (initAuthenticationUser, the inner client's
    credentials) and, with migrateAuthFromV1Enabled, plain_acl.yml's accounts migrated.
    AclConfigError when a file cannot be used."""
    from ..acl import AclConfigError, default_acl_path
    from ..acl import load_acl as load_plain
    from ..acl._auth_eval import AuthSettings
    from ..acl._auth_migrate import migrate
    from ..acl._auth_model import SUPER, User
    from ..acl._auth_store import AuthStore
    from ._config import parse_codes, parse_credentials, parse_init_user

    settings = AuthSettings(
        config.authentication_enabled,
        config.authorization_enabled,
        config.cluster_name,
        parse_codes(config.authentication_whitelist, "authenticationWhitelist"),
        parse_codes(config.authorization_whitelist, "authorizationWhitelist"),
    )
    auth = AuthStore(config_dir, settings)
    made: list[User] = []
    if config.init_authentication_user:
        name, password = parse_init_user(config.init_authentication_user)
        made.append(User(name, password, SUPER))
    if config.inner_client_credentials:
        ak, sk = parse_credentials(config.inner_client_credentials)
        made.append(User(ak, sk, SUPER))
    auth.ensure_users(made)
    if config.migrate_auth_from_v1_enabled:
        path = Path(config.acl_file) if config.acl_file else default_acl_path()
        if not path.exists():
            raise AclConfigError(f"migrateAuthFromV1Enabled=true but {path} does not exist")
        users, acls = migrate(load_plain(path), (u.username for u in auth.list_users()))
        created = auth.ensure_users(users)
        for acl in acls:
            if acl.username in created:
                auth.put_acl(acl)
        if created:
            log.info("ACL 2.0: migrated %s from %s", ", ".join(created), path)
    return auth


def load_acl(config: BrokerConfig, default: AclSource | None = None) -> AclSource | None:
    """The ACL of broker.conf's aclEnable (or --acl-file), else ``default`` (the key list of a
    gRPC front end's config): one set of accounts for every port (with ACL 2.0 on, its users
    and ACLs instead: ``load_auth``). AclConfigError when the file cannot be used."""
    from ..acl import AclConfigError, AclFile

    path = config.acl_path
    if path is not None:
        if not config.acl_file and not Path(path).exists():
            raise AclConfigError(
                f"aclEnable=true but {path} does not exist (set ROCKETMQ_HOME or give "
                "--acl-file PATH)"
            )
        return AclFile(path)
    return default


class BrokerController:
    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        acl: AclSource | None = None,
        tier: TierReader | None = None,
        inner_signer: Signer | None = FROM_ENV,
        auth: AuthStore | None = None,
    ) -> None:
        """The broker's state over ``store``, open and started, its config carrying the
        broker's address (``rocketstore.server`` builds both): topic configs, subscription
        groups, consumer offsets, client membership, held pulls, transactions. ``acl``: the
        accounts every port checks (None: no ACL; see ``load_acl``). ``tier``: the tiered
        store pulls below a queue's minimum are answered from (None: none). ``inner_signer``:
        what the broker's own clients sign with (default: ROCKETSTORE_ACCESS_KEY's account, if
        any; see ``BrokerConfig.inner_credentials``). Built on the event loop the broker serves
        from (held pulls are woken there)."""
        self.config = config
        self.clock = clock
        self.store = store
        self.store_config: StoreConfig = store.config
        self.config_dir = Path(self.store_config.store_path_root_dir) / "config"
        # the remoting server serving the handlers (set by the composition root: attach_server)
        self.server: RemotingServer
        self.registrar: Any = None
        self._last_increment_version: Any = None  # the data version of the last increment
        self.slave_sync: SlaveSynchronizer | None = None
        # controller mode: the broker's place in its group, given by the controllers
        self.replicas: ReplicasManager | None = None
        self._slave_register_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # "host:port" of the gRPC front end serving this broker (set by the front end)
        self.grpc_endpoint: str | None = None
        self._started = False
        # the receipts of the gRPC front end serving this broker (set by it), for the metrics
        self.pop_state: PopState | None = None
        # the ACL every port checks (None: off); see rocketstore.acl
        self.acl: AclSource | None = acl
        # plain sends served from their frames (set by ``handlers`` where the compiled header
        # scanner is built; the composition root hands it to the remoting server)
        self.send_frame_path: SendFramePath | None = None
        self._tier = tier
        self.inner_signer: Signer | None = (
            signer_from_env() if inner_signer is FROM_ENV else inner_signer
        )
        # messages handed to consumers, request latency (see rocketstore.metrics)
        self.stats = BrokerStats()
        self.config_dir.mkdir(parents=True, exist_ok=True)
        # ACL 2.0's users and ACLs, changed by the admin requests (in force when ``acl`` is it)
        self.auth: AuthStore = auth if auth is not None else load_auth(config, self.config_dir)
        self.topics = TopicConfigManager(
            self.config_dir,
            broker_name=config.broker_name,
            cluster_name=config.cluster_name,
            auto_create_topic_enable=config.auto_create_topic_enable,
            default_topic_queue_nums=config.default_topic_queue_nums,
            trace_topic_enable=config.trace_topic_enable,
            msg_trace_topic_name=config.msg_trace_topic_name,
            clock=self.clock,
        )
        self.groups = SubscriptionGroupManager(
            self.config_dir,
            auto_create_subscription_group=config.auto_create_subscription_group,
            clock=self.clock,
        )
        self.offsets = ConsumerOffsetManager(self.config_dir)
        self.consumers: ConsumerManager[Connection] = ConsumerManager(self.clock)
        self.producers: ProducerManager[Connection] = ProducerManager(self.clock)
        self.holds = PullRequestHoldService(asyncio.get_running_loop())
        self.transactions = TransactionService(
            self,
            timeout_ms=config.transaction_timeout,
            check_max=config.transaction_check_max,
            check_interval_ms=config.transaction_check_interval,
        )
        self.end_transaction = EndTransactionProcessor(self)
        self.transactions.checkers.append(self.end_transaction.check)
        self.clients = ClientProcessor(self)
        # the hold service is the listener itself: no frame of the broker's between the put
        # path and it, a message
        self.store.set_message_arriving_listener(self.holds.notify_arriving)

    # ---- lifecycle --------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The address clients reach the broker at (written into every stored record)."""
        return f"{self.config.advertised_host}:{self.config.listen_port}"

    def tier_reader(self) -> TierReader | None:
        """The tiered store of this broker's messages (None: none)."""
        return self._tier

    def enable_acl(self, source: AclSource) -> None:
        """Check every remoting request against ``source`` from now on (a gRPC front end
        attached with its own keys after the start: the remoting port is no way around them).
        Loop thread; once."""
        from ..acl._remoting import RemotingAcl

        if self.acl is not None:
            raise RuntimeError("the broker's ACL is already on")
        self.acl = source
        handlers = self.server.handlers  # the connections' table too: guarded at once
        handlers.update(RemotingAcl(source).guard_all(handlers))
        self.server.authenticated = True  # for the connections accepted from now on

    def handlers(self) -> dict[int, Any]:
        """The request handlers of the remoting port, by request code, behind the ACL when it
        is on. The composition root serves them; called once."""
        handlers: dict[int, Any] = {}
        sender = SendProcessor(self)
        self.send_frame_path = SendFramePath(sender, self, self.stats)
        for processor in (
            sender,
            PullProcessor(self),
            OffsetProcessor(self),
            self.clients,
            SendBackProcessor(self),
            SlaveSyncProcessor(self),
            QueueLockProcessor(self),
            AdminProcessor(self),
            ClientAdminProcessor(self),
            ConfigAdminProcessor(self),
            ConsumerAdminProcessor(self),
            QueueAdminProcessor(self),
            QueryProcessor(self),
            TierAdminProcessor(self),
            AuthAdminProcessor(self),
            ReplicasProcessor(self),
            self.end_transaction,
        ):
            handlers.update(processor.handlers())
        if self.acl is not None:
            from ..acl._remoting import RemotingAcl

            handlers = RemotingAcl(self.acl).guard_all(handlers)
        return handlers

    @property
    def started(self) -> bool:
        """Whether ``start`` ran (and ``shutdown`` has not)."""
        return self._started

    def attach_server(self, server: RemotingServer) -> None:
        """The remoting server serving ``handlers()``, started: the ACL turned on later guards
        its table (``enable_acl``). Loop thread; before ``start``."""
        self.server = server

    async def start(self) -> None:
        """The broker's own work, once its port listens: the periodic tasks, a slave's copying
        of its master's state or a master's transaction checks, the name-server registration.
        Loop thread; ``stop_registering`` and ``shutdown`` stop what started, also after a
        failure here."""
        config = self.config
        self._tasks.append(asyncio.create_task(self._persist_offsets_periodically()))
        self._tasks.append(asyncio.create_task(self._scan_channels_periodically()))
        self._tasks.append(asyncio.create_task(self._record_daily_totals()))
        if config.enable_controller_mode:
            await self._start_replicas()
        elif self.store_config.broker_role == "SLAVE":
            self.slave_sync = SlaveSynchronizer(self)
            self.slave_sync.start()
        else:
            self.transactions.start()
        if config.namesrv_addrs and not config.enable_controller_mode:
            await self._start_registrar()
        self._started = True
        log.info("broker %s listening on %s", config.broker_name, self.address)
        if self.acl is not None:
            what = "ACL 2.0" if config.auth_enabled else config.acl_path or "key list"
            log.info("broker %s: ACL on (%s)", config.broker_name, what)

    async def _start_replicas(self) -> None:
        """Controller mode: register with the controllers and take the role they give; the
        name-server registration starts with the first role."""
        from .replication._replicas import ReplicasManager

        self.replicas = ReplicasManager(
            self.config,
            self.store,
            address=self.address,
            signer=self.inner_signer,  # the controllers check it as they check ACL
            on_role=self._on_role,
            on_fence=lambda _fenced: self.topic_changed(),  # registered again, under its id
            clock=self.clock,
        )
        await self.replicas.start()

    async def _on_role(self, change: RoleChange) -> None:
        """A role from the controller (the store has switched already): the services of the
        role, and a registration with the name servers under it (broker id 0 for the master)
        so that clients route writes to the new master. Loop thread."""
        self.topics.next_version()
        if change.role == "MASTER":
            if self.slave_sync is not None:
                slave_sync, self.slave_sync = self.slave_sync, None
                await self._last_copy(slave_sync)
                await slave_sync.close()
            await asyncio.to_thread(self._adopt_topics_of_log)
            self.transactions.start()
            broker_id = 0
        else:
            await self.transactions.close()
            if self.slave_sync is None:
                self.slave_sync = SlaveSynchronizer(self)
                self.slave_sync.start()
            self.slave_sync.set_master(change.master_address)
            broker_id = change.broker_id
        if not self.config.namesrv_addrs:
            return
        if self.registrar is None:
            await self._start_registrar(broker_id, self._registration_id)
        else:
            self.registrar.broker_id = broker_id
            await self.registrar.registered()
        if change.role == "SLAVE":
            self._learn_master_ha_address()

    async def _last_copy(self, slave_sync: SlaveSynchronizer) -> None:
        """A slave being promoted copies its old master's state once more when it can still be
        reached (an administrator moving the role; a master that died is not waited for)."""
        try:
            if await slave_sync.sync_all(timeout_s=LAST_COPY_TIMEOUT_S):
                log.info(
                    "broker %s: copied the state of %s before taking over as master",
                    self.config.broker_name,
                    slave_sync.master_addr,
                )
        except (RemotingError, ValueError) as exc:
            log.info(
                "broker %s: the old master %s cannot give its state (%s): the topics come "
                "from the log",
                self.config.broker_name,
                slave_sync.master_addr,
                exc,
            )

    def _adopt_topics_of_log(self) -> None:
        """Every topic the store holds gets a topic config before this broker registers as
        master: a slave promoted before it copied a topic's config still serves the topic's
        messages. The topics are those of its consume queues and of its log's topic-queue
        table (rebuilt over every record of the log when the store became master); a topic's
        queue count is the highest queue id held + 1. Worker thread (the topic table
        persists)."""
        held: dict[str, int] = {}
        keys = [
            (topic, queue_id)
            for topic, by_id in list(self.store.consume_queues.queues.items())
            for queue_id in list(by_id)
        ]
        keys += list(self.store.commit_log.topic_queue_table)
        for topic, queue_id in keys:
            held[topic] = max(held.get(topic, 0), queue_id + 1)
        added = []
        configs = []
        for topic, queues in sorted(held.items()):
            if self.topics.select(topic) is not None:
                continue
            try:
                validate_topic(topic)
            except ValueError:
                continue
            configs.append(TopicConfig(topic, queues, queues))
            added.append(f"{topic} ({queues} queues)")
        self.topics.update_all(configs)  # one fsync for them all
        if added:
            log.warning(
                "broker %s: topics its log holds but its topic table lacked, added on becoming "
                "master: %s",
                self.config.broker_name,
                ", ".join(added),
            )

    def _registration_id(self) -> int:
        """The id to register with the name servers under: 0 only while this broker is a master
        the controller has confirmed (its lease valid), else its id in the group — a master
        paused or cut off that wakes up must not take the route back from its successor."""
        replicas = self.replicas
        if replicas is None:
            return self.config.broker_id
        switch = self.store.ha.switch
        if replicas.role == "MASTER" and switch is not None and switch.in_sync.lease_valid():
            return 0
        return max(replicas.broker_id, 0)

    def _learn_master_ha_address(self) -> None:
        """A new slave registers again (every 0.2 s for 5 s, then every second) until the
        name servers name its master's HA address (the new master registers as master at
        about the same time)."""
        if self._slave_register_task is not None and not self._slave_register_task.done():
            return

        async def until_known() -> None:
            replicas = self.replicas
            tries = 0
            while replicas is not None and replicas.role == "SLAVE":
                if replicas.master_ha_address and self.store.ha.master_address:
                    return
                tries += 1
                await asyncio.sleep(0.2 if tries <= 25 else 1.0)
                if self.registrar is not None:
                    await self.registrar.registered()

        self._slave_register_task = asyncio.create_task(until_known())

    async def _start_registrar(
        self, broker_id: int | None = None, broker_id_of: Callable[[], int] | None = None
    ) -> None:
        from .replication._outer_api import NamesrvRegistrar

        config = self.config
        self.registrar = NamesrvRegistrar(
            config.namesrv_addrs,
            cluster=config.cluster_name,
            broker_name=config.broker_name,
            broker_id=config.broker_id if broker_id is None else broker_id,
            broker_addr=self.address,
            ha_server_addr=f"{config.advertised_host}:{self._ha_port()}",
            topic_configs_provider=self.topic_configs_for_registration,
            period_s=config.register_name_server_period / 1000.0,
            on_registered=self._on_registered,
            broker_id_of=broker_id_of,
            signer=self.inner_signer,
            force_register=config.force_register,
            version_provider=lambda: self.topics.data_version.to_json(),
        )
        await self.registrar.start()

    def _on_registered(self, result: Any) -> None:
        """A slave without a configured master replicates from the HA address the name server
        reports for its group's master (RocketMQ's updateHaMasterAddress)."""
        if self.replicas is not None:
            self.replicas.learn_master_ha_address(
                getattr(result, "ha_server_addr", None), getattr(result, "master_addr", None)
            )
            return
        if self.store_config.broker_role != "SLAVE":
            return
        if not self.store_config.ha_master_address and getattr(result, "ha_server_addr", None):
            self.store.ha.update_master_address(result.ha_server_addr)
        if self.slave_sync is not None:
            self.slave_sync.set_master(getattr(result, "master_addr", None))

    def _ha_port(self) -> int:
        """The port slaves replicate from: the one the store's HA service bound (the configured
        port may be 0, any free port)."""
        ha = getattr(self.store, "ha", None)
        bound = getattr(ha, "listen_port", 0)
        return int(bound) if bound else self.store_config.ha_listen_port

    def topic_configs_for_registration(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The data version and every topic's config as the name servers get them (any
        thread)."""
        version = self.topics.data_version.to_json()
        return version, self._registered_configs(self.topics.all().values())

    def _registered_configs(self, configs: Iterable[TopicConfig]) -> dict[str, Any]:
        perm = self.config.broker_permission
        if perm & 0x6 != 0x6:  # not readable and writable: the broker's permission on each
            configs = [c.replace(perm=perm) for c in configs]
        return {c.topic_name: c.to_json() for c in configs}

    async def stop_registering(self) -> None:
        """The first step of a shutdown: unregister from the name servers, stop copying a
        master's state. Loop thread; a second call does nothing."""
        if self._slave_register_task is not None:
            self._slave_register_task.cancel()
            self._slave_register_task = None
        if self.replicas is not None:
            replicas, self.replicas = self.replicas, None
            await replicas.close()
        if self.registrar is not None:
            registrar, self.registrar = self.registrar, None
            with contextlib.suppress(Exception):
                await registrar.close()
        if self.slave_sync is not None:
            await self.slave_sync.close()
            self.slave_sync = None

    async def answer_held_pulls(self) -> None:
        """The second step of a shutdown, before the remoting server closes: stop the
        transaction checks, answer the held pulls (their answers written before the
        connections close). Loop thread."""
        await self.transactions.close()
        self.holds.wake_all()
        await asyncio.sleep(0)  # let the woken pulls write their answers

    async def shutdown(self) -> None:
        """The last step before the store shuts down, once the remoting server is closed: stop
        the periodic tasks and persist offsets, topics and groups (a failure is logged, the
        others are still persisted). Loop thread."""
        self._started = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self.store.set_message_arriving_listener(None)
        for persist in (self.offsets.persist, self.topics.persist, self.groups.persist):
            try:
                persist()
            except Exception as exc:
                if is_disk_full(exc):  # one line: the disk is full, not a bug
                    log.error("broker: persisting state at shutdown failed: %s", exc)
                else:
                    log.exception("broker: persisting state at shutdown failed")
        log.info("broker %s stopped", self.config.broker_name)

    # ---- shared behaviour -------------------------------------------------------------------

    def create_topic_for_send(self, topic: str, ext: dict[str, Any]) -> TopicConfig | None:
        """A topic a producer sends to before it exists: created from the default topic when
        auto-creation allows (RocketMQ's createTopicInSendMessageMethod), then registered
        with the name servers at once."""
        default_topic = ext_str(ext, "defaultTopic") or "TBW102"
        nums = ext_int(ext, "defaultTopicQueueNums", self.config.default_topic_queue_nums)
        sys_flag = ext_int(ext, "sysFlag", 0) or 0
        config = self.topics.create_in_send(
            topic, default_topic, nums or self.config.default_topic_queue_nums, sys_flag
        )
        if config is not None:
            self.topic_changed(config)
        return config

    def create_topic_for_send_back(
        self, topic: str, queue_nums: int, perm: int, sys_flag: int = 0
    ) -> TopicConfig:
        """A group's retry or DLQ topic, created when first needed and then registered with the
        name servers at once (consumers learn its route on their next route refresh, not after
        the broker's next periodic registration). Loop thread."""
        created = self.topics.select(topic) is None
        config = self.topics.create_in_send_back(topic, queue_nums, perm, sys_flag)
        if created:
            self.topic_changed(config)
        return config

    def topic_changed(self, config: TopicConfig | None = None) -> None:
        """Tell the name servers now, not at the next period: of ``config`` alone (a topic
        created or changed: an incremental registration), or of the whole table (None). Loop
        thread.

        Each increment carries a data version of its own: two changes made close together in
        worker threads can both read the later one's version, and a name server takes a
        master's topics only from a registration whose version differs from the last it had;
        the second is then sent under a version bumped here."""
        if self.registrar is None:
            return
        if config is None:
            self.registrar.register_now()
            return
        version = self.topics.data_version
        if version == self._last_increment_version:
            self.topics.next_version()
            version = self.topics.data_version
        self._last_increment_version = version
        self.registrar.register_topics(version.to_json(), self._registered_configs([config]))

    async def register_topics_now(self) -> None:
        """A registration round with every name server that began after this call, awaited
        (each bounded by the registration timeout; failures are logged; the round
        ``topic_changed`` asked for serves too): what a new topic's creator waits for
        before it answers, as RocketMQ's broker registers before answering a heartbeat that
        created a retry topic. Loop thread."""
        if self.registrar is not None:
            await self.registrar.registered(whole=False)

    async def _persist_offsets_periodically(self) -> None:
        """Persist the consumer offsets every interval when they changed, in a worker thread
        (a table of many groups and queues takes a while to encode). A full disk is told once,
        in one line, until a persist works again (any other failure each time, with its
        traceback)."""
        interval = self.config.flush_consumer_offset_interval / 1000.0
        disk_full = False
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.offsets.persist_if_dirty)
            except Exception as exc:
                if not is_disk_full(exc):
                    log.exception("broker: persisting consumer offsets failed")
                elif not disk_full:
                    log.error("broker: persisting consumer offsets failed (retried): %s", exc)
                disk_full = is_disk_full(exc)
            else:
                if disk_full:
                    log.info("broker: consumer offsets persisted again")
                disk_full = False

    async def _record_daily_totals(self) -> None:
        """At each local midnight, the store's put and get totals (brokerStatus's morning
        figures), as RocketMQ's broker records them."""
        while True:
            await asyncio.sleep(seconds_to_next_midnight(self.clock.now_ms() / 1000) + 0.5)
            stats = await asyncio.to_thread(self.store.statistics)
            self.stats.daily.record(stats.put_message_times_total, stats.get_transferred_total)

    async def _scan_channels_periodically(self) -> None:
        while True:
            await asyncio.sleep(SCAN_CHANNELS_INTERVAL_S)
            for group, channels in self.consumers.scan_not_active().items():
                for channel in channels:
                    channel.close()
                self.clients.notify_ids_changed(group)
            for channels in self.producers.scan_not_active().values():
                for channel in channels:
                    channel.close()
            audit.flush()  # the counts of repeated refusals whose interval is over
