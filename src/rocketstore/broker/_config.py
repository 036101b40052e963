"""Broker configuration: RocketMQ's BrokerConfig (the settings that are not the store's), in
snake_case, frozen. ``BrokerConfig.from_store_config`` picks them out of the keys of a
broker.conf that StoreConfig kept in ``extra``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..remoting import ServerLimits
from ..remoting._limits import DEFAULT_LIMITS
from ..remoting._signing import inner_credentials, parse_session_credentials
from ..remoting._tls import MODES as HA_TLS_MODES
from ..remoting._tls import TlsServerConfig
from ..store._config import StoreConfig
from ..store._errors import StoreConfigError

MASTER_ID = 0
_TOPIC_NAME = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
DEFAULT_STORE_HOST = "127.0.0.1"  # StoreConfig.store_host's default

_CONF_KEYS = {
    "brokerName": "broker_name",
    "brokerClusterName": "cluster_name",
    "brokerId": "broker_id",
    "namesrvAddr": "namesrv_addr",
    "listenPort": "listen_port",
    "brokerIP1": "broker_ip",
    "autoCreateTopicEnable": "auto_create_topic_enable",
    "autoCreateSubscriptionGroup": "auto_create_subscription_group",
    "traceTopicEnable": "trace_topic_enable",
    "msgTraceTopicName": "msg_trace_topic_name",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "brokerPermission": "broker_permission",
    "longPollingEnable": "long_polling_enable",
    "shortPollingTimeMills": "short_polling_time_mills",
    "flushConsumerOffsetInterval": "flush_consumer_offset_interval",
    "registerNameServerPeriod": "register_name_server_period",
    "forceRegister": "force_register",
    "slaveReadEnable": "slave_read_enable",
    "serverMaxFrameSize": "max_frame_size",
    "maxReconsumeTimes": "max_reconsume_times",
    "rejectTransactionMessage": "reject_transaction_message",
    "transactionTimeOut": "transaction_timeout",
    "transactionCheckMax": "transaction_check_max",
    "transactionCheckInterval": "transaction_check_interval",
    "aclEnable": "acl_enable",
    "serverMaxConnections": "max_connections",
    "serverMaxBufferedBytes": "max_buffered_bytes",
    "controllerAddr": "controller_addr",
    "brokerHeartbeatInterval": "broker_heartbeat_interval",
    "controllerHeartBeatTimeoutMills": "controller_heart_beat_timeout_mills",
    "syncBrokerMetadataPeriod": "sync_broker_metadata_period",
    "checkSyncStateSetPeriod": "check_sync_state_set_period",
    "syncControllerMetadataPeriod": "sync_controller_metadata_period",
    "brokerElectionPriority": "broker_election_priority",
    "controllerLeaseMills": "controller_lease_mills",
    "innerClientAuthenticationCredentials": "inner_client_credentials",
    "haAuthEnabled": "ha_auth_enabled",
    "haTlsMode": "ha_tls_mode",
    "authenticationEnabled": "authentication_enabled",
    "authorizationEnabled": "authorization_enabled",
    "authenticationProvider": "authentication_provider",
    "authorizationProvider": "authorization_provider",
    "authenticationMetadataProvider": "authentication_metadata_provider",
    "authorizationMetadataProvider": "authorization_metadata_provider",
    "authenticationStrategy": "authentication_strategy",
    "authorizationStrategy": "authorization_strategy",
    "initAuthenticationUser": "init_authentication_user",
    "authenticationWhitelist": "authentication_whitelist",
    "authorizationWhitelist": "authorization_whitelist",
    "migrateAuthFromV1Enabled": "migrate_auth_from_v1_enabled",
}
# the implementations RocketMQ 5.3 names in these keys; rocketstore has one of each (its own)
AUTH_IMPLEMENTATIONS = {
    "authentication_provider": "DefaultAuthenticationProvider",
    "authorization_provider": "DefaultAuthorizationProvider",
    "authentication_metadata_provider": "LocalAuthenticationMetadataProvider",
    "authorization_metadata_provider": "LocalAuthorizationMetadataProvider",
    "authentication_strategy": "AuthenticationStrategy",  # Stateless or Stateful
    "authorization_strategy": "AuthorizationStrategy",
}


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    broker_id: int = MASTER_ID
    listen_host: str = "127.0.0.1"
    listen_port: int = 10911
    broker_ip: str = ""  # the address clients reach; "" → listen_host (127.0.0.1 if wildcard)
    namesrv_addr: str = ""  # "host:port;host:port"
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    # the topic clients with message trace on write their traces to, made at start (1 queue)
    # when trace_topic_enable; without it the first trace a client sends creates it, as any
    # topic is created on a send (autoCreateTopicEnable)
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    broker_permission: int = 6
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    flush_consumer_offset_interval: int = 5000
    register_name_server_period: int = 30_000
    # the periodic registration sends the whole topic table even when the name server says
    # (QUERY_DATA_VERSION) that it holds the broker's current version; RocketMQ's default is
    # true, here false: a table of many topics is sent only when it changed
    force_register: bool = False
    slave_read_enable: bool = False
    max_frame_size: int = 16 * 1024 * 1024
    max_reconsume_times: int = 16
    reject_transaction_message: bool = False
    # a half message younger than this (ms) is not checked yet
    transaction_timeout: int = 6_000
    # checks of one half message before it is given up
    transaction_check_max: int = 15
    # ms between two rounds of transaction checks
    transaction_check_interval: int = 60_000
    # ACL on every port: the accounts of acl_file ("" → $ROCKETMQ_HOME/conf/plain_acl.yml)
    acl_enable: bool = False
    acl_file: str = ""
    # connections the remoting server accepts; beyond them, new ones are closed at once
    max_connections: int = 10_000
    # unsent answers and large frames all connections may hold (see remoting.ServerLimits)
    max_buffered_bytes: int = 256 * 1024 * 1024
    # the broker.conf the broker was started with ("": none); UPDATE_BROKER_CONFIG writes to it
    config_file: str = ""
    # controller mode (RocketMQ 5): the role comes from the controllers at controller_addr
    # ("host:port;host:port"); heartbeats every broker_heartbeat_interval ms, declared dead by
    # them after controller_heart_beat_timeout_mills; the role and SyncStateSet are asked for
    # every sync_broker_metadata_period ms (a master: every heartbeat interval, renewing its
    # lease); a master checks its SyncStateSet every check_sync_state_set_period ms
    enable_controller_mode: bool = False
    controller_addr: str = ""
    broker_heartbeat_interval: int = 1000
    controller_heart_beat_timeout_mills: int = 10_000
    sync_broker_metadata_period: int = 5000
    check_sync_state_set_period: int = 5000
    sync_controller_metadata_period: int = 10_000
    broker_election_priority: int = (1 << 31) - 1
    # not a RocketMQ setting: how long a master acknowledges writes after the controller last
    # confirmed it (0: 80 % of controller_heart_beat_timeout_mills, the time the controllers
    # wait before they may elect another master)
    controller_lease_mills: int = 0
    # the account the broker's own clients sign with (its registrations with the name servers,
    # a slave's copying of its master, the gRPC front end's route reads), as RocketMQ 5's
    # innerClientAuthenticationCredentials: {"accessKey": "...", "secretKey": "..."}; "": the
    # environment's (see ``inner_credentials``)
    inner_client_credentials: str = field(default="", repr=False)
    # not a RocketMQ setting: slaves prove the inner account's secret on the HA port (both
    # protocols; see store/ha/_auth.py and docs/security.md); None: on with acl_enable. Off
    # (false) for a group with RocketMQ brokers in it, which cannot prove it
    ha_auth_enabled: bool | None = None
    # not a RocketMQ setting: TLS on the HA port (disabled, permissive, enforcing; see
    # store/ha/_tls.py), with the remoting port's certificate, key, client-certificate rule
    # and trust; a slave speaks TLS to its master unless disabled. Disabled for a group with
    # RocketMQ brokers in it, which speak plain HA
    ha_tls_mode: str = "disabled"
    # ACL 2.0 (RocketMQ 5.3): users and ACLs in config/auth.json; authentication (requests
    # signed by a user) and authorisation (the user's ACL) switched separately; with either
    # on, plain ACL's file is read only to migrate it (migrate_auth_from_v1_enabled)
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    # RocketMQ's implementation classes: empty or RocketMQ's defaults (there is one of each)
    authentication_provider: str = ""
    authorization_provider: str = ""
    authentication_metadata_provider: str = ""
    authorization_metadata_provider: str = ""
    authentication_strategy: str = ""
    authorization_strategy: str = ""
    # request codes let in without authentication / authorisation ("10,310": comma-separated)
    authentication_whitelist: str = ""
    authorization_whitelist: str = ""
    # a Super user made at start when it does not exist: {"username": "...", "password": "..."}
    init_authentication_user: str = field(default="", repr=False)
    # at start, each plain_acl.yml account that is not a user yet becomes one, with its ACL
    migrate_auth_from_v1_enabled: bool = False
    # the remoting port's TLS (RocketMQ's tls.server.mode and files; see remoting._tls)
    tls: TlsServerConfig = field(default_factory=TlsServerConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise StoreConfigError(f"listen_port out of range: {self.listen_port}")
        if self.broker_id < 0 and not self.enable_controller_mode:
            raise StoreConfigError(f"broker_id must be >= 0, got {self.broker_id}")
        if self.enable_controller_mode and not self.controller_addr.strip():
            raise StoreConfigError("enableControllerMode=true needs controllerAddr")
        for name in (
            "broker_heartbeat_interval",
            "controller_heart_beat_timeout_mills",
            "sync_broker_metadata_period",
            "check_sync_state_set_period",
            "sync_controller_metadata_period",
        ):
            if getattr(self, name) <= 0:
                raise StoreConfigError(f"{name} must be positive")
        if self.controller_lease_mills < 0:
            raise StoreConfigError("controller_lease_mills must not be negative")
        if self.default_topic_queue_nums <= 0:
            raise StoreConfigError("default_topic_queue_nums must be positive")
        if self.transaction_check_interval <= 0 or self.transaction_timeout < 0:
            raise StoreConfigError(
                "transaction_check_interval must be positive and transaction_timeout not negative"
            )
        if not _TOPIC_NAME.fullmatch(self.msg_trace_topic_name):
            raise StoreConfigError(
                f"msgTraceTopicName {self.msg_trace_topic_name!r} is not a topic name "
                "(^[%|a-zA-Z0-9_-]+$, at most 127 characters)"
            )
        if self.max_connections < 1 or self.max_buffered_bytes < 1024 * 1024:
            raise StoreConfigError(
                "max_connections must be positive and max_buffered_bytes at least 1 MiB"
            )
        if self.ha_tls_mode not in HA_TLS_MODES:
            raise StoreConfigError(
                f"haTlsMode {self.ha_tls_mode!r} is not one of {', '.join(HA_TLS_MODES)}"
            )
        if self.inner_client_credentials:
            parse_credentials(self.inner_client_credentials)
        for name, default in AUTH_IMPLEMENTATIONS.items():
            value = getattr(self, name).strip()
            if value and not value.rsplit(".", 1)[-1].endswith(default):
                raise StoreConfigError(
                    f"{name}: {value!r} is not supported (RocketMQ's {default} is built in)"
                )
        if self.init_authentication_user:
            parse_init_user(self.init_authentication_user)
        parse_codes(self.authentication_whitelist, "authenticationWhitelist")
        parse_codes(self.authorization_whitelist, "authorizationWhitelist")

    @property
    def auth_enabled(self) -> bool:
        """Whether ACL 2.0 is in force (authentication or authorisation on)."""
        return self.authentication_enabled or self.authorization_enabled

    def inner_credentials(self, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
        """(access key, secret key) the broker's own clients sign with:
        ``innerClientAuthenticationCredentials`` when set, else the environment's
        ROCKETSTORE_INNER_CLIENT_ACCESS_KEY and ROCKETSTORE_INNER_CLIENT_SECRET_KEY; None when
        neither (the clients then sign with ROCKETSTORE_ACCESS_KEY's account, if any).
        StoreConfigError when only one of the two variables is set."""
        try:
            return inner_credentials(self.inner_client_credentials, env)
        except ValueError as exc:
            raise StoreConfigError(str(exc)) from None

    def server_limits(self) -> ServerLimits:
        """The remoting server's limits from these settings."""
        total = self.max_buffered_bytes
        return ServerLimits(
            max_connections=self.max_connections,
            max_buffered_total=total,
            max_buffered_per_connection=min(DEFAULT_LIMITS.max_buffered_per_connection, total),
        )

    @property
    def acl_path(self) -> str | None:
        """The ACL file in force (None: ACL off)."""
        if not self.acl_enable:
            return None
        if self.acl_file:
            return self.acl_file
        from ..acl import default_acl_path

        return str(default_acl_path())

    @property
    def ha_auth(self) -> bool:
        """Whether the HA port asks slaves for the inner account's proof: haAuthEnabled, else
        whether ACL (1.0's aclEnable, or 2.0's authentication or authorisation) is on."""
        if self.ha_auth_enabled is not None:
            return self.ha_auth_enabled
        return self.acl_enable or self.auth_enabled

    @property
    def lease_s(self) -> float:
        """How long a controller-mode master acknowledges writes after its standing was last
        confirmed (seconds)."""
        ms = self.controller_lease_mills or self.controller_heart_beat_timeout_mills * 0.8
        return ms / 1000.0

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.replace(",", ";").split(";") if a.strip()]

    @property
    def advertised_host(self) -> str:
        if self.broker_ip:
            return self.broker_ip
        return "127.0.0.1" if self.listen_host in ("0.0.0.0", "", "::") else self.listen_host

    @classmethod
    def from_store_config(cls, store: StoreConfig, **overrides: Any) -> BrokerConfig:
        """Broker settings from a broker.conf's keys (``store.extra``), then ``overrides``."""
        values: dict[str, Any] = {}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key, raw in store.extra:
            name = _CONF_KEYS.get(key)
            if name is None:
                continue
            values[name] = _parse(fields[name].type, raw, key)
        # brokerIP1 and listenPort are read into the store's settings (the store host written
        # into every record); they are the broker's too
        if store.store_port != 10911:
            values.setdefault("listen_port", store.store_port)
        if store.store_host != DEFAULT_STORE_HOST:
            values.setdefault("broker_ip", store.store_host)
        if store.enable_controller_mode:
            values.setdefault("enable_controller_mode", True)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def parse_credentials(text: str) -> tuple[str, str]:
    """(access key, secret key) of ``{"accessKey": "...", "secretKey": "..."}`` (RocketMQ 5's
    SessionCredentials JSON); StoreConfigError when it is not that."""
    try:
        return parse_session_credentials(text)
    except ValueError as exc:
        raise StoreConfigError(str(exc)) from None


def broker_conf_keys() -> frozenset[str]:
    """The broker.conf keys the broker reads besides the store's settings."""
    return frozenset(_CONF_KEYS)


def ignored_keys(store: StoreConfig) -> list[str]:
    """The keys of a broker.conf that neither the store nor the broker acts on."""
    return [key for key, _ in store.extra if key not in _CONF_KEYS]


def _parse(kind: Any, raw: str, key: str) -> Any:
    text = str(raw).strip()
    try:
        if kind in (bool, "bool"):
            return text.lower() == "true"
        if kind == "bool | None":
            if text.lower() not in ("true", "false"):
                raise StoreConfigError(f"{key}: not true or false: {raw!r}")
            return text.lower() == "true"
        if kind in (int, "int"):
            return int(text)
    except ValueError:
        raise StoreConfigError(f"{key}: not a number: {raw!r}") from None
    return text


def parse_init_user(text: str) -> tuple[str, str]:
    """(username, password) of ``initAuthenticationUser``'s ``{"username": "...",
    "password": "..."}``; StoreConfigError when it is not that."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise StoreConfigError(
            'initAuthenticationUser: expected {"username": "...", "password": "..."}'
        )
    username, password = doc.get("username"), doc.get("password")
    if not isinstance(username, str) or not isinstance(password, str) or not username.strip():
        raise StoreConfigError("initAuthenticationUser: username and password must be text")
    if not password.strip():
        raise StoreConfigError("initAuthenticationUser: the password is blank")
    return username, password


def parse_codes(text: str, key: str) -> frozenset[int]:
    """The request codes of a comma-separated list (RocketMQ's whitelists); StoreConfigError
    naming ``key`` for an item that is not one."""
    codes = set()
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            codes.add(int(item))
        except ValueError:
            raise StoreConfigError(f"{key}: {item!r} is not a request code") from None
    return frozenset(codes)
