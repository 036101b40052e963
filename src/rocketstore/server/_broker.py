"""One broker with its front ends (see the package docstring for the order)."""

from __future__ import annotations

import logging

from ..acl import StaticAcl, admin_accounts
from ..acl._remoting import AclSource
from ..broker._config import BrokerConfig
from ..broker._controller import BrokerController
from ..grpc import GrpcConfig, GrpcFrontEnd
from ..store._clock import SYSTEM_CLOCK, Clock
from ..store._config import StoreConfig

log = logging.getLogger(__name__)


def grpc_default_acl(grpc: GrpcConfig | None) -> AclSource | None:
    """The accounts of a gRPC front end's key list, for every port of its broker when
    broker.conf turns no ACL on (None: no key list)."""
    if grpc is None or grpc.credentials is None:
        return None
    return StaticAcl(admin_accounts(grpc.credentials))


class BrokerServer:
    """A broker and, with ``grpc``, its gRPC front end. ``start`` and ``shutdown`` run on the
    event loop the broker serves from; ``broker`` is the started broker, ``grpc`` the started
    front end (None without one)."""

    def __init__(
        self,
        store_config: StoreConfig,
        config: BrokerConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        grpc: GrpcConfig | None = None,
    ) -> None:
        self.grpc_config = grpc
        self.broker = BrokerController(
            store_config, config, clock=clock, default_acl=grpc_default_acl(grpc)
        )
        self.grpc: GrpcFrontEnd | None = None

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings (its listen port once started, when 0 was asked)."""
        return self.broker.config

    @property
    def store_config(self) -> StoreConfig:
        return self.broker.store_config

    async def start(self) -> None:
        """Start the broker, then its front ends; what started is stopped again when a later
        step fails."""
        await self.broker.start()
        if self.grpc_config is None:
            return
        front = GrpcFrontEnd(self.broker, self.grpc_config)
        try:
            await front.start()
        except BaseException:
            await self.broker.shutdown()
            raise
        self.grpc = front

    async def shutdown(self) -> None:
        """Stop registering, close the front ends, then shut the broker down (its held pulls
        answered, its state persisted, its store flushed)."""
        await self.broker.stop_registering()
        if self.grpc is not None:
            # before the broker's holds and offsets: it answers its waiting receives and
            # commits the pop progress into the consumer offsets the broker persists
            front, self.grpc = self.grpc, None
            try:
                await front.close()
            except Exception:
                log.exception("broker: closing the gRPC front end failed")
        await self.broker.shutdown()
