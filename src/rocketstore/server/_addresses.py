"""Where a broker listens: its remoting port (port 0: a free one, chosen before anything starts)
and the store settings that port implies (the address written into every stored record, the
HA port slaves replicate from)."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable

from ..broker._config import BrokerConfig
from ..store._config import StoreConfig


def free_port(host: str) -> int:
    """A TCP port free on ``host`` now (bound and released at once)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def resolve_addresses(
    store_config: StoreConfig,
    config: BrokerConfig,
    *,
    choose_port: Callable[[str], int] = free_port,
) -> tuple[StoreConfig, BrokerConfig]:
    """The store and broker settings a broker starts with. Listen port 0: a port
    ``choose_port(listen_host)`` gives, and any free HA port (brokers in one process must not
    collide); else the configured HA port. The store records the broker's advertised address,
    replicates (HA on) and listens for slaves on the configured HA host: 127.0.0.1 unless told
    otherwise (``--ha-listen``), whatever host the broker listens on, since the HA port takes no
    credentials and serves the whole commit log to whoever connects."""
    ha_port = store_config.ha_listen_port
    if config.listen_port == 0:
        config = dataclasses.replace(config, listen_port=choose_port(config.listen_host))
        ha_port = 0
    ha_host = store_config.ha_listen_host
    store_config = dataclasses.replace(
        store_config,
        store_host=config.advertised_host,
        store_port=config.listen_port,
        ha_enable=True,
        ha_listen_host=ha_host,
        ha_listen_port=ha_port,
    )
    return store_config, config
