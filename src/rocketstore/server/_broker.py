"""One broker with its front ends (see the package docstring for the order)."""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .._extras import install_hint
from ..acl import Account, RequestSigner, StaticAcl, WithAccounts, _audit, admin_accounts
from ..acl._remoting import AclSource
from ..broker._config import BrokerConfig, broker_conf_keys, ignored_keys
from ..broker._controller import BrokerController, load_acl, load_auth
from ..grpc import GrpcConfig, GrpcFrontEnd
from ..remoting import RemotingServer
from ..remoting._client import FROM_ENV
from ..remoting._tls import ENV_CA, TlsConfigError, TlsMode, client_context_for
from ..store._clock import SYSTEM_CLOCK, Clock
from ..store._config import StoreConfig
from ..store._errors import StoreConfigError
from ..store._store import MessageStore
from ..store.ha import HAGuard
from ..store.ha._tls import HATls
from ._addresses import resolve_addresses

if TYPE_CHECKING:
    from ..tier._read import TierReader
    from ..tier._service import TierService

log = logging.getLogger(__name__)


def grpc_default_acl(grpc: GrpcConfig | None) -> AclSource | None:
    """The accounts of a gRPC front end's key list, for every port of its broker when
    broker.conf turns no ACL on (None: no key list)."""
    if grpc is None or grpc.credentials is None:
        return None
    return StaticAcl(admin_accounts(grpc.credentials))


def _tier_service(store: MessageStore, config: StoreConfig, clock: Clock) -> TierService | None:
    """With ``tiered_dir`` set: the tiering service of ``store``, its covered offset gating the
    commit log's retention (set before the store starts its cleaner)."""
    if not config.tiered_dir:
        return None
    try:
        from ..tier._service import TierService
    except ImportError as exc:
        raise StoreConfigError(
            f"tieredDir needs pyarrow ({exc}): {install_hint('spark', ('pyarrow', 'numpy'))}"
        ) from None
    tier = TierService(config, settled=store.flushed_phy_offset, clock=clock)
    store.set_tiered_below(tier.covered)
    return tier


def ignored_keys_warning(keys: list[str]) -> str:
    """The start-up warning for broker.conf keys nothing acts on: RocketMQ's settings that
    rocketstore does not support, then keys neither knows (typos, most likely), each with the
    known key it is closest to."""
    from ..broker.admin._config_keys import ROCKETMQ_KEYS

    store_keys = {
        f.name.split("_")[0] + "".join(w.capitalize() for w in f.name.split("_")[1:])
        for f in dataclasses.fields(StoreConfig)
    }
    known = sorted(ROCKETMQ_KEYS | broker_conf_keys() | store_keys)
    parts = []
    unsupported = [k for k in keys if k in ROCKETMQ_KEYS]
    if unsupported:
        parts.append("broker configuration keys ignored (not supported): " + ", ".join(unsupported))
    unknown = []
    for key in (k for k in keys if k not in ROCKETMQ_KEYS):
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
        unknown.append(f"{key} (did you mean {close[0]}?)" if close else key)
    if unknown:
        parts.append(
            "unknown broker configuration keys ignored (neither RocketMQ's nor rocketstore's): "
            + ", ".join(unknown)
        )
    return "; ".join(parts)


def ha_tls(config: BrokerConfig, env: Mapping[str, str] | None = None) -> HATls | None:
    """The HA port's TLS (``haTlsMode``), with the remoting port's files: the master serves
    with the broker's certificate and key and asks slaves for theirs as the remoting port asks
    clients (``tls.server.need.client.auth``, against ``tls.server.trustCertPath``); a slave
    offers the same certificate and checks its master's against that trust, else against
    ROCKETSTORE_TLS_CA, else not at all (the remoting client's default). None: plain.
    StoreConfigError for files that cannot be read."""
    mode = cast(TlsMode, config.ha_tls_mode)  # one of MODES: BrokerConfig checks it
    if mode == "disabled":
        return None
    tls = config.tls
    if not (tls.cert_path and tls.key_path):
        raise StoreConfigError(
            f"haTlsMode={mode} needs the broker's certificate and key "
            "(tls.server.certPath / tls.server.keyPath, --tls-cert / --tls-key)"
        )
    ca = tls.trust_cert_path or (os.environ if env is None else env).get(ENV_CA, "")
    try:
        server = dataclasses.replace(tls, mode=mode).context()
        client = client_context_for(ca, tls.cert_path, tls.key_path)
    except TlsConfigError as exc:
        raise StoreConfigError(f"haTlsMode: {exc}") from None
    return HATls(mode, server, client)


def ha_guard(
    store_config: StoreConfig, config: BrokerConfig, credentials: tuple[str, str] | None
) -> HAGuard:
    """Who may replicate from this broker's store, and who it is to its master: with
    ``config.ha_auth`` the inner account's proof; refusals go to the audit log either way.
    Without an inner account: StoreConfigError for a store that must replicate (a slave, a
    SYNC_MASTER, controller mode), and an HA port no slave can prove itself to (warned of) for
    an ASYNC_MASTER."""
    name = config.broker_name

    def audit(source: str, account: str, claimed: str, reason: str) -> None:
        log.warning("broker %s: HA port refused %s (%s): %s", name, source, claimed, reason)
        _audit.refused(
            account=account,
            source=source,
            request="HA handshake",
            resource=f"broker:{name} {claimed}",
            reason=reason,
        )

    needs = store_config.enable_controller_mode or store_config.broker_role != "ASYNC_MASTER"
    tls = ha_tls(config)
    if not config.ha_auth:
        return HAGuard(None, name, config.broker_id, audit, tls=tls)
    if credentials is None and not needs:
        log.warning(
            "broker %s: ACL is on and no inner account is configured: the HA port takes no "
            "slave (set innerClientAuthenticationCredentials to replicate, or haAuthEnabled=false)",
            name,
        )
        return HAGuard(None, name, config.broker_id, audit, closed=True, tls=tls)
    if credentials is None:
        raise StoreConfigError(
            "haAuthEnabled (on with ACL) needs the inner account the group's brokers "
            "share: innerClientAuthenticationCredentials, or ROCKETSTORE_INNER_CLIENT_ACCESS_KEY "
            "and ROCKETSTORE_INNER_CLIENT_SECRET_KEY (haAuthEnabled=false replicates "
            "without proof, as RocketMQ)"
        )
    return HAGuard(credentials, name, config.broker_id, audit, tls=tls)


class BrokerServer:
    """A broker and, with ``grpc``, its gRPC front end. ``start`` and ``shutdown`` run on the
    event loop the broker serves from. Once started: ``store`` is the open store, ``broker``
    the broker over it, ``server`` its remoting server (these three stay readable after the
    shutdown), ``grpc`` the front end (None without one, and after the shutdown)."""

    def __init__(
        self,
        store_config: StoreConfig,
        config: BrokerConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        grpc: GrpcConfig | None = None,
        tiered_dir: str | None = None,
        inner_account: Account | None = None,
    ) -> None:
        self.grpc_config = grpc
        # the tiered store pulls below the consume queues are answered from: this, else the
        # store config's (empty: none); the store's tiering service writes the store config's
        self._tiered_dir = tiered_dir
        # the process's own account (``serve``: shared with its name server): accepted by this
        # broker's ACL, and signing its own clients unless broker.conf names their account
        self._inner_account = inner_account
        self._store_config = store_config
        self._config = config
        self._clock = clock
        self._store: MessageStore | None = None
        self._broker: BrokerController | None = None
        self._remoting: RemotingServer | None = None
        self.grpc: GrpcFrontEnd | None = None
        self.tier: TierService | None = None
        self._running = False

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings (its listen port once started, when 0 was asked)."""
        return self._config

    @property
    def store_config(self) -> StoreConfig:
        """The store's settings (with the broker's address and HA port once started)."""
        return self._store_config

    @property
    def broker(self) -> BrokerController:
        if self._broker is None:
            raise RuntimeError("the broker is not started")
        return self._broker

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            raise RuntimeError("the broker's store is not open")
        return self._store

    @property
    def server(self) -> RemotingServer:
        """The remoting server (the broker's port)."""
        if self._remoting is None:
            raise RuntimeError("the broker's remoting server is not started")
        return self._remoting

    @property
    def address(self) -> str:
        """The address clients reach the broker at."""
        return self.broker.address

    async def start(self) -> None:
        """Open the store, build the broker over it, serve its handlers on the remoting port,
        start the broker's own work (periodic tasks, slave sync or transaction checks, the
        name-server registration), then the front ends. When a step fails, what started is
        stopped again (the store shut down, its directory released) and the error raised."""
        if self._store is not None:
            raise RuntimeError("the broker server was started already")
        store_config, config = resolve_addresses(self._store_config, self._config)
        self._store_config, self._config = store_config, config
        ignored = ignored_keys(store_config)
        if ignored:
            log.warning("%s", ignored_keys_warning(ignored))
        acl = None if config.auth_enabled else load_acl(config, grpc_default_acl(self.grpc_config))
        inner = self._inner_account
        # what the broker's own clients sign with: broker.conf's (or the environment's) inner
        # account, else the process's own, else ROCKETSTORE_ACCESS_KEY's (FROM_ENV)
        credentials = config.inner_credentials()
        if credentials is None and inner is not None:
            credentials = (inner.access_key, inner.secret_key)
        inner_signer = FROM_ENV if credentials is None else RequestSigner(*credentials)
        guard = ha_guard(store_config, config, credentials)
        store = MessageStore(store_config, clock=self._clock, ha_guard=guard)
        tier = _tier_service(store, store_config, self._clock)
        await asyncio.to_thread(store.__enter__)  # load, recover, start
        self._store = store
        self._running = True
        try:
            # ACL 2.0's users and ACLs, in the store's config directory (read, and the users
            # broker.conf names made, once this process owns the store)
            auth = await asyncio.to_thread(
                load_auth, config, Path(store_config.store_path_root_dir) / "config"
            )
            if config.auth_enabled:
                acl = auth
            if acl is not None and inner is not None:
                acl = WithAccounts(acl, [inner])
            if tier is not None:
                tier.start()
                self.tier = tier
            tiered = self._tiered_dir or store_config.tiered_dir
            reader: TierReader | None = None
            if tiered:
                from ..tier._read import TierReader  # pyarrow: only with a tier

                reader = TierReader(tiered)
            broker = self._broker = BrokerController(
                store,
                config,
                clock=self._clock,
                acl=acl,
                tier=reader,
                inner_signer=inner_signer,
                auth=auth,
            )
            remoting = RemotingServer(
                broker.handlers(),
                config.listen_host,
                config.listen_port,
                max_frame=config.max_frame_size,
                name=f"broker {config.broker_name}",
                limits=config.server_limits(),
                authenticated=broker.acl is not None,
                tls=config.tls,
            )
            if broker.send_frame_path is not None:
                remoting.frame_path = broker.send_frame_path.serve
            remoting.close_listeners.append(broker.clients.on_connection_closed)
            await remoting.start()
            self._remoting = remoting
            broker.attach_server(remoting)
            await broker.start()
            if self.grpc_config is not None:
                front = GrpcFrontEnd(broker, self.grpc_config)
                await front.start()
                self.grpc = front
        except BaseException:
            try:
                await self.shutdown()
            except Exception:
                log.exception("broker %s: stopping after a failed start failed", config.broker_name)
            raise

    async def shutdown(self) -> None:
        """Stop registering, close the front ends, answer the broker's held pulls, close the
        remoting server, persist the broker's state, shut the store down (flushed, the abort
        file removed). A failing step is logged and the next ones still run; the store's own
        failure is raised. Once; a second call does nothing."""
        if not self._running:
            return
        self._running = False
        broker, store = self._broker, self._store
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        if broker is not None:
            steps.append(("stopping the registration", broker.stop_registering))
        if self.grpc is not None:
            # before the broker's holds and offsets: it answers its waiting receives and
            # commits the pop progress into the consumer offsets the broker persists
            steps.append(("closing the gRPC front end", self.grpc.close))
            self.grpc = None
        if broker is not None:
            steps.append(("answering held pulls", broker.answer_held_pulls))
        if self._remoting is not None:
            steps.append(("closing the remoting server", self._remoting.close))
        if broker is not None:
            steps.append(("persisting the broker's state", broker.shutdown))
        for what, step in steps:
            try:
                await step()
            except Exception:
                log.exception("broker %s: %s failed", self._config.broker_name, what)
        if self.tier is not None:  # before the store: a range in progress is abandoned
            await asyncio.to_thread(self.tier.stop)
            self.tier = None
        if store is not None:
            await asyncio.to_thread(store.shutdown)
