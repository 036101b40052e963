"""One controller on its own port (standalone, or beside a name server in the same process, as
RocketMQ 5's ``enableControllerInNamesrv`` runs it: the controller answers on its own port).

Order::

    start      listen address resolved (port 0: a free one)
               state backend built (file: controllerStorePath; etcd: the endpoints)
               controller started: backend opened, leadership taken if free, its scans
               remoting server over the controller's handlers (ACL guard included), listening;
               connection closes reported to the controller (a broker's death)
               (a failing step stops what started: the backend closed, its lock released)
    shutdown   remoting server closed (no more requests)
               controller stopped: scans stopped, leadership given up (etcd: at once, so
               another controller takes over without waiting for the lease), backend closed
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from ..acl import Account, PlainAcl, RequestSigner, WithAccounts
from ..acl._file import AclFile
from ..acl._remoting import RemotingAcl
from ..acl._table import CONTROLLER
from ..controller import (
    Controller,
    ControllerConfig,
    ControllerConfigError,
    ControllerProcessor,
    EtcdBackend,
    FileBackend,
    StateBackend,
)
from ..controller._notify import RoleNotifier
from ..remoting import RemotingServer
from ..remoting._client import Signer
from ..remoting._signing import signer_from_env
from ..remoting._tls import TlsServerConfig
from ..store._clock import SYSTEM_CLOCK, Clock
from ._addresses import free_port

log = logging.getLogger(__name__)


def build_backend(config: ControllerConfig, clock: Clock = SYSTEM_CLOCK) -> StateBackend:
    """The state backend ``config`` names."""
    if config.backend == "etcd":
        return EtcdBackend(
            list(config.etcd_endpoints),
            config.group,
            prefix=config.etcd_prefix,
            ttl_s=config.lease_ttl_s,
            clock=clock,
            security=config.etcd_security(),
        )
    return FileBackend(config.store_dir)


class ControllerServer:
    """A controller serving RocketMQ 5's controller requests on ``config``'s listen address.
    ``acl_file``: a plain_acl.yml every request is checked against (None: no ACL);
    ``inner_account``: an account of the process's own added to it (``serve``'s: its broker
    signs with it). The notices to brokers are signed with the configured inner account
    (``innerClientAuthenticationCredentials``), else ``inner_account``, else
    ROCKETSTORE_ACCESS_KEY's. ``start`` / ``shutdown`` on the event loop it serves from;
    ``controller`` and ``address`` once started."""

    def __init__(
        self,
        config: ControllerConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        backend: StateBackend | None = None,
        acl_file: str | None = None,
        inner_account: Account | None = None,
        tls: TlsServerConfig | None = None,
    ) -> None:
        self.config = config
        self.inner_account = inner_account
        self.tls = tls  # its remoting port's TLS (RocketMQ's tls.server.mode)
        self.clock = clock
        self._backend = backend
        self.acl_file = acl_file
        self._controller: Controller | None = None
        self._remoting: RemotingServer | None = None
        self._acl: RemotingAcl | None = None
        self._running = False

    @property
    def controller(self) -> Controller:
        if self._controller is None:
            raise RuntimeError("the controller is not started")
        return self._controller

    @property
    def acl_rules(self) -> Callable[[], PlainAcl] | None:
        """The rules in force on the controller's port (None: ACL off): /metrics takes an
        admin account of them."""
        return self._acl.source.current if self._acl is not None else None

    @property
    def address(self) -> str:
        return self.config.address

    async def start(self) -> None:
        if self._running:
            raise RuntimeError("the controller server was started already")
        config = self.config
        if config.listen_port == 0:
            config = dataclasses.replace(config, listen_port=free_port(config.listen_host))
            self.config = config
        acl = None
        if self.acl_file:
            source: AclFile | WithAccounts = AclFile(self.acl_file)
            if self.inner_account is not None:
                source = WithAccounts(source, [self.inner_account])
            acl = RemotingAcl(source, CONTROLLER)
            self._acl = acl
            if config.backend == "etcd" and not config.etcd_authenticated:
                if not config.etcd_insecure:
                    raise ControllerConfigError(
                        "ACL is on but the etcd backend has no credentials: whoever reaches "
                        "etcd could change the broker groups around the controller's ACL; "
                        "give controllerEtcdUser (--etcd-user) and its password "
                        "(controllerEtcdPassword, --etcd-password-file or "
                        "ROCKETSTORE_ETCD_PASSWORD) or a client certificate, or accept it with "
                        "controllerEtcdInsecure=true (--etcd-insecure)"
                    )
                log.warning(
                    "controller: ACL is on but the etcd backend runs without credentials "
                    "(controllerEtcdInsecure): etcd's own access control is all that guards "
                    "the broker groups' state"
                )
        backend = self._backend if self._backend is not None else build_backend(config, self.clock)
        controller = Controller(
            config, backend, clock=self.clock, notifier=RoleNotifier(signer=self._signer(acl))
        )
        self._running = True
        try:
            await controller.start(config.address)
            self._controller = controller
            handlers = ControllerProcessor(controller).handlers()
            if acl is not None:
                handlers = acl.guard_all(handlers)
            remoting = RemotingServer(
                handlers,
                config.listen_host,
                config.listen_port,
                name="controller",
                authenticated=acl is not None,
                tls=self.tls,
            )
            remoting.close_listeners.append(controller.connection_closed)
            await remoting.start()
            self._remoting = remoting
            log.info(
                "controller %s of %s listening on %s (%s backend)",
                config.self_id,
                config.group,
                config.address,
                backend.kind,
            )
        except BaseException:
            if self._controller is None:
                self._controller = controller
            try:
                await self.shutdown()
            except Exception:
                log.exception("controller: stopping after a failed start failed")
            raise

    def _signer(self, acl: RemotingAcl | None) -> Signer | None:
        """What the notices to brokers are signed with."""
        credentials = self.config.inner_credentials()
        if credentials is None and self.inner_account is not None:
            credentials = (self.inner_account.access_key, self.inner_account.secret_key)
        if credentials is not None:
            return RequestSigner(*credentials)
        if acl is not None:
            log.info(
                "controller: no innerClientAuthenticationCredentials: the notices to brokers "
                "are signed with ROCKETSTORE_ACCESS_KEY's account, if any (brokers with ACL on "
                "refuse unsigned ones and learn their role by asking)"
            )
        return signer_from_env()

    async def shutdown(self) -> None:
        """Close the remoting server, then stop the controller (leadership given up, backend
        closed). Once; a second call does nothing."""
        if not self._running:
            return
        self._running = False
        if self._controller is not None:
            self._controller.quiesce()
        if self._remoting is not None:
            try:
                await self._remoting.close()
            except Exception:
                log.exception("controller: closing the remoting server failed")
        if self._controller is not None:
            await self._controller.stop()
