"""The controller's settings: RocketMQ 5.1.4's ControllerConfig where it has them (its names in
a controller.conf or namesrv.conf, snake_case here), frozen, and the backend's own.

RocketMQ's keys read::

    controllerDLegerGroup        the controllers' group name (GET_METADATA_INFO's group; the
                                 etcd keys' second part)                   default group1
    controllerDLegerSelfId       this controller's id                      default n0
    controllerDLegerPeers        n0-127.0.0.1:9878;n1-...: where this controller listens
                                 (its own entry) when no listen address is given
    controllerStorePath          the file backend's directory              ~/DledgerController
    enableElectUncleanMaster     elect outside the SyncStateSet            false
    notifyBrokerRoleChanged      send NOTIFY_BROKER_ROLE_CHANGED            true
    scanNotActiveBrokerInterval  ms between scans for expired heartbeats   5000
    scanInactiveMasterInterval   ms between scans for dead masters         5000
    enableControllerInNamesrv    run a controller inside the name server   false

and rocketstore's::

    controllerListen             HOST:PORT to serve on                     127.0.0.1:9878
    controllerBackend            file or etcd                              file
    controllerEtcdEndpoints      http://HOST:PORT,... of the etcd cluster
    controllerEtcdPrefix         key prefix in etcd                        /rocketstore/controller
    controllerEtcdUser           etcd user (etcd's auth: its token on every call)
    controllerEtcdPassword       its password (or ROCKETSTORE_ETCD_PASSWORD)
    controllerEtcdCaFile         CA certificates to verify https:// endpoints (PEM)
    controllerEtcdCertFile       client certificate for etcd (PEM)
    controllerEtcdKeyFile        its private key (PEM)
    controllerEtcdInsecure       let the etcd backend run without auth
                                 while the controller checks ACL           false
    controllerLeaseTtl           seconds an etcd lease lives unrenewed      5
    brokerHeartbeatTimeoutMills  a heartbeat's life when it names none     10000
    innerClientAuthenticationCredentials  {"accessKey","secretKey"}: the account the
                                 controller's notices to brokers are signed with (else
                                 ROCKETSTORE_INNER_CLIENT_ACCESS_KEY / _SECRET_KEY)

Immutable; any thread.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..remoting._signing import inner_credentials
from ..store._config import comment_hint
from ._errors import ControllerConfigError
from ._etcd_client import EtcdSecurity

DEFAULT_PORT = 9878  # the port RocketMQ's controller quick start gives n0
BACKENDS = ("file", "etcd")
DAY_MS = 86_400_000
ETCD_PASSWORD_ENV = "ROCKETSTORE_ETCD_PASSWORD"


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = DEFAULT_PORT
    group: str = "group1"
    self_id: str = "n0"
    store_path: str = os.path.join("~", "DledgerController")
    backend: str = "file"
    etcd_endpoints: tuple[str, ...] = ()
    etcd_prefix: str = "/rocketstore/controller"
    etcd_user: str = ""
    etcd_password: str = dataclasses.field(default="", repr=False)
    etcd_ca_file: str = ""
    etcd_cert_file: str = ""
    etcd_key_file: str = ""
    etcd_insecure: bool = False
    lease_ttl_s: int = 5
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True
    scan_not_active_broker_interval_ms: int = 5_000
    scan_inactive_master_interval_ms: int = 5_000
    broker_heartbeat_timeout_ms: int = 10_000
    inner_client_credentials: str = dataclasses.field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ControllerConfigError(f"controllerBackend {self.backend!r}: file or etcd")
        if self.backend == "etcd" and not self.etcd_endpoints:
            raise ControllerConfigError("the etcd backend needs controllerEtcdEndpoints")
        if not 0 <= self.listen_port <= 65535:
            raise ControllerConfigError(f"listen port {self.listen_port} out of range")
        if not self.group or "/" in self.group:
            raise ControllerConfigError(f"controllerDLegerGroup {self.group!r}: a name, no '/'")
        if not self.self_id or any(c in self.self_id for c in ";:/"):
            raise ControllerConfigError(f"controllerDLegerSelfId {self.self_id!r}: no ';:/'")
        if not 2 <= self.lease_ttl_s <= 3600:
            raise ControllerConfigError(f"controllerLeaseTtl {self.lease_ttl_s}: 2 to 3600 s")
        for name, most in (
            ("scan_not_active_broker_interval_ms", DAY_MS),
            ("scan_inactive_master_interval_ms", DAY_MS),
            ("broker_heartbeat_timeout_ms", 600_000),
        ):
            if not 0 < getattr(self, name) <= most:
                raise ControllerConfigError(f"{_KEY_OF[name]} must be above 0 and at most {most}")
        if self.etcd_password and not self.etcd_user:
            raise ControllerConfigError("controllerEtcdPassword without controllerEtcdUser")
        if bool(self.etcd_cert_file) != bool(self.etcd_key_file):
            raise ControllerConfigError(
                "controllerEtcdCertFile and controllerEtcdKeyFile go together (set both or neither)"
            )
        if self.inner_client_credentials:
            self.inner_credentials()

    def inner_credentials(self) -> tuple[str, str] | None:
        """(access key, secret key) the controller's notices to brokers are signed with: the
        configured ``innerClientAuthenticationCredentials``, else the environment's inner
        account; None when neither."""
        try:
            return inner_credentials(self.inner_client_credentials)
        except ValueError as exc:
            raise ControllerConfigError(str(exc)) from None

    def etcd_security(self, env: Mapping[str, str] | None = None) -> EtcdSecurity:
        """The etcd backend's credentials and TLS files; the password from
        ROCKETSTORE_ETCD_PASSWORD when the settings hold none. ControllerConfigError for a user
        without a password."""
        password = self.etcd_password
        if self.etcd_user and not password:
            password = (os.environ if env is None else env).get(ETCD_PASSWORD_ENV, "")
            if not password:
                raise ControllerConfigError(
                    f"controllerEtcdUser {self.etcd_user!r} needs controllerEtcdPassword "
                    f"(or {ETCD_PASSWORD_ENV})"
                )
        return EtcdSecurity(
            self.etcd_user, password, self.etcd_ca_file, self.etcd_cert_file, self.etcd_key_file
        )

    @property
    def etcd_authenticated(self) -> bool:
        """Whether the etcd backend proves who it is to etcd (a user, or a client
        certificate)."""
        return bool(self.etcd_user or self.etcd_cert_file)

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def store_dir(self) -> str:
        return os.path.expanduser(self.store_path)

    # ---- properties (RocketMQ's names) --------------------------------------------------------

    @classmethod
    def from_properties(
        cls, values: Mapping[str, str], base: ControllerConfig | None = None
    ) -> ControllerConfig:
        """``base`` (the defaults) with the keys of ``values`` it knows applied; other keys
        are left to their owners (a namesrv.conf holds the name server's too).
        ControllerConfigError for a value that does not parse."""
        changes: dict[str, object] = {}
        for key, text in values.items():
            attr = _ATTR_OF.get(key)
            if attr is None:
                continue
            changes[attr] = _parse(key, attr, text)
        listen = values.get("controllerListen")
        peers = values.get("controllerDLegerPeers")
        self_id = str(changes.get("self_id", (base or cls()).self_id))
        if listen:
            changes["listen_host"], changes["listen_port"] = split_listen(listen)
        elif peers:
            own = dict(_peers(peers)).get(self_id)
            if own is None:
                raise ControllerConfigError(
                    f"controllerDLegerPeers {peers!r} has no entry for {self_id!r}"
                )
            changes["listen_host"], changes["listen_port"] = split_listen(own)
        return dataclasses.replace(base or cls(), **changes)  # type: ignore[arg-type]

    def to_properties(self) -> dict[str, str]:
        """Every setting by its property name, as text (GET_CONTROLLER_CONFIG)."""
        out = {"controllerListen": self.address}
        for attr, key in _KEY_OF.items():
            if attr in SECRET_ATTRS:
                continue  # never answered
            value = getattr(self, attr)
            if isinstance(value, bool):
                out[key] = "true" if value else "false"
            elif isinstance(value, tuple):
                out[key] = ",".join(value)
            else:
                out[key] = str(value)
        return out


# settings an UPDATE_CONTROLLER_CONFIG may change while the controller runs
RUNTIME_KEYS = frozenset(
    {
        "enableElectUncleanMaster",
        "notifyBrokerRoleChanged",
        "scanNotActiveBrokerInterval",
        "scanInactiveMasterInterval",
        "brokerHeartbeatTimeoutMills",
    }
)

_KEY_OF = {
    "group": "controllerDLegerGroup",
    "self_id": "controllerDLegerSelfId",
    "store_path": "controllerStorePath",
    "backend": "controllerBackend",
    "etcd_endpoints": "controllerEtcdEndpoints",
    "etcd_prefix": "controllerEtcdPrefix",
    "etcd_user": "controllerEtcdUser",
    "etcd_password": "controllerEtcdPassword",
    "etcd_ca_file": "controllerEtcdCaFile",
    "etcd_cert_file": "controllerEtcdCertFile",
    "etcd_key_file": "controllerEtcdKeyFile",
    "etcd_insecure": "controllerEtcdInsecure",
    "lease_ttl_s": "controllerLeaseTtl",
    "enable_elect_unclean_master": "enableElectUncleanMaster",
    "notify_broker_role_changed": "notifyBrokerRoleChanged",
    "scan_not_active_broker_interval_ms": "scanNotActiveBrokerInterval",
    "scan_inactive_master_interval_ms": "scanInactiveMasterInterval",
    "broker_heartbeat_timeout_ms": "brokerHeartbeatTimeoutMills",
    "inner_client_credentials": "innerClientAuthenticationCredentials",
}
SECRET_ATTRS = frozenset({"etcd_password", "inner_client_credentials"})
_ATTR_OF = {key: attr for attr, key in _KEY_OF.items()}
_BOOLS = frozenset({"enable_elect_unclean_master", "notify_broker_role_changed", "etcd_insecure"})
_INTS = frozenset(
    {
        "lease_ttl_s",
        "scan_not_active_broker_interval_ms",
        "scan_inactive_master_interval_ms",
        "broker_heartbeat_timeout_ms",
    }
)


def _parse(key: str, attr: str, text: str) -> object:
    text = text.strip()
    if attr in _BOOLS:
        if text.lower() not in ("true", "false"):
            raise ControllerConfigError(f"{key}: {text!r} is not true or false{comment_hint(text)}")
        return text.lower() == "true"
    if attr in _INTS:
        try:
            return int(text)
        except ValueError:
            raise ControllerConfigError(
                f"{key}: {text!r} is not an integer{comment_hint(text)}"
            ) from None
    if attr == "etcd_endpoints":
        return tuple(e.strip() for e in text.replace(";", ",").split(",") if e.strip())
    return text


def split_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ControllerConfigError(f"{text!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def _peers(text: str) -> list[tuple[str, str]]:
    """``n0-127.0.0.1:9878;n1-127.0.0.1:9868`` → [(id, address)]."""
    out = []
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        peer_id, sep, address = item.partition("-")
        if not sep:
            raise ControllerConfigError(f"controllerDLegerPeers entry {item!r} is not ID-HOST:PORT")
        out.append((peer_id, address))
    return out


def enabled_in_namesrv(values: Mapping[str, str]) -> bool:
    """Whether a namesrv.conf asks for a controller inside the name server."""
    return values.get("enableControllerInNamesrv", "false").strip().lower() == "true"
