"""The gRPC front end's settings: where it listens, ACL and TLS, and the limits it applies to
clients (RocketMQ 5.x proxy's defaults unless noted). Frozen; validated at construction."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..store._errors import StoreConfigError

DEFAULT_GRPC_PORT = 8081


@dataclass(frozen=True, slots=True)
class GrpcConfig:
    """Settings of one :class:`~rocketstore.grpc.GrpcFrontEnd`.

    ``credentials`` (access key → secret key: accounts with every permission) turns the ACL on
    when the broker has no ACL file of its own, on this front end and the broker's remoting port
    alike (None: off). ``tls_cert`` / ``tls_key`` (PEM files, both or
    neither) serve TLS instead of plaintext. ``advertised_host`` is the host put into routes when
    a client's QueryRoute names no endpoints ("" → the broker's advertised host).
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_GRPC_PORT
    advertised_host: str = ""
    credentials: Mapping[str, str] | None = field(default=None, repr=False)
    tls_cert: str | None = None
    tls_key: str | None = None
    # ReceiveMessage: invisible durations a client may ask for (proxy: 10 s .. 12 h)
    min_invisible_ms: int = 10_000
    max_invisible_ms: int = 12 * 3_600_000
    # the invisible time of a push consumer's auto-renewed receive (no duration in the request)
    default_invisible_ms: int = 60_000
    # auto-renewal of such a receive while its client lives: renewed this long before it ends,
    # for at most renew_max_ms after the delivery; a client that leaves has its unacked
    # messages made visible to the group after release_invisible_ms
    renew_ahead_ms: int = 10_000
    renew_max_ms: int = 3 * 3_600_000
    release_invisible_ms: int = 1_000
    # long polling: the longest poll, and how long before the client's deadline it is answered
    max_long_polling_ms: int = 20_000
    long_polling_reserve_ms: int = 200
    # how often a waiting receive looks again for messages whose invisible time ran out that it
    # was not told about (handed out before a restart, or by another front end)
    pop_recheck_ms: int = 2_000
    # told to consumers in Settings; the largest batch a receive or pull returns
    receive_batch_size: int = 32
    max_batch_size: int = 1024
    # delivery timestamps further ahead than this are refused (ILLEGAL_DELIVERY_TIME)
    max_delay_ms: int = 86_400_000
    # user properties (count, and bytes of keys, values, tag and keys together)
    max_user_properties: int = 128
    max_user_property_size: int = 16 * 1024
    max_message_group_size: int = 64
    # pop state: written every this often (the at-least-once window after a crash)
    pop_persist_interval_ms: int = 1_000
    # an unanswered DLQ put keeps its message invisible this long before it is offered again
    dead_letter_retry_ms: int = 30_000
    # memory: one receive's answer holds at most max_receive_bytes of messages (and always at
    # least one message); what the front end holds of messages at most max_buffered_bytes:
    # sends being read and stored, receives' answers being read or written, Telemetry replies
    # waiting to be written (each takes room before it reads; see _gate, _receive, _replies).
    # A send that finds no room within send_wait_ms is answered TOO_MANY_REQUESTS unread.
    max_receive_bytes: int = 4 * 1024 * 1024
    max_buffered_bytes: int = 256 * 1024 * 1024
    send_wait_ms: int = 3_000
    # Telemetry: at most telemetry_queue_size replies wait for a stream's client to read them
    # (its commands are not read meanwhile); a reply that finds no place or room for
    # telemetry_stall_ms drops what waits and the stream reads nothing more. A Settings names
    # at most max_settings_topics topics (published, or subscribed to).
    telemetry_queue_size: int = 16
    telemetry_stall_ms: int = 10_000
    max_settings_topics: int = 1_024
    # calls: at most max_streams_per_connection under way on one connection (HTTP/2's
    # SETTINGS_MAX_CONCURRENT_STREAMS), max_concurrent_calls on the whole front end (beyond
    # it gRPC answers RESOURCE_EXHAUSTED); an open Telemetry stream costs some 27 KiB
    max_streams_per_connection: int = 256
    max_concurrent_calls: int = 8_192
    # connections: at most max_connections at once (fewer when the process's allowance of
    # connections has less room, see remoting/_allowance.py); one that has not finished its
    # HTTP/2 handshake within handshake_timeout_ms, or has had no call under way for
    # idle_timeout_ms, is closed (clients reconnect when they need to)
    max_connections: int = 10_000
    handshake_timeout_ms: int = 10_000
    idle_timeout_ms: int = 120_000
    # graceful stop: in-flight RPCs get this long to finish
    shutdown_grace_s: float = 1.0
    extra_options: tuple[tuple[str, int | str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise StoreConfigError(f"gRPC port out of range: {self.port}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise StoreConfigError("TLS needs both a certificate and a key file")
        for name in (
            "max_invisible_ms",
            "default_invisible_ms",
            "renew_ahead_ms",
            "renew_max_ms",
            "release_invisible_ms",
            "max_long_polling_ms",
            "pop_recheck_ms",
            "receive_batch_size",
            "max_batch_size",
            "max_delay_ms",
            "pop_persist_interval_ms",
            "dead_letter_retry_ms",
            "max_receive_bytes",
            "max_buffered_bytes",
            "send_wait_ms",
            "telemetry_queue_size",
            "telemetry_stall_ms",
            "max_settings_topics",
            "max_streams_per_connection",
            "max_concurrent_calls",
            "max_connections",
            "handshake_timeout_ms",
            "idle_timeout_ms",
        ):
            if getattr(self, name) <= 0:
                raise StoreConfigError(f"{name} must be positive, not {getattr(self, name)}")
        if self.min_invisible_ms < 0 or self.min_invisible_ms > self.max_invisible_ms:
            raise StoreConfigError("min_invisible_ms must be within 0 .. max_invisible_ms")
        if self.credentials is not None:
            creds = dict(self.credentials)
            for ak, sk in creds.items():
                if not ak or not sk:
                    raise StoreConfigError("ACL access and secret keys must not be empty")
            object.__setattr__(self, "credentials", MappingProxyType(creds))

    @property
    def acl_enabled(self) -> bool:
        return self.credentials is not None

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None

    def replace(self, **changes: object) -> GrpcConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def grpc_config_from_cli(
    listen: str | None,
    *,
    acl_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    default_port: int = DEFAULT_GRPC_PORT,
    base: GrpcConfig | None = None,
) -> GrpcConfig | None:
    """The config the CLI's ``--grpc-listen HOST:PORT`` (``[v6]:PORT``, ``HOST`` or ``:PORT``),
    ``--grpc-acl FILE`` (see ``load_credentials``) and ``--grpc-tls-cert`` / ``--grpc-tls-key``
    ask for; None when ``listen`` is None or empty (no gRPC front end). StoreConfigError for a
    bad address, an unreadable ACL file or half a TLS pair."""
    if not listen:
        return None
    from ._acl import load_credentials

    host, sep, port_text = listen.rpartition(":")
    try:
        ipaddress.IPv6Address(listen)
        host, port_text = listen, ""  # a bare IPv6 address
    except ValueError:
        if not sep:
            host, port_text = listen, ""
    if (port_text and not port_text.isdigit()) or (":" in host and not host.startswith("[")):
        if host != listen:
            raise StoreConfigError(f"--grpc-listen {listen!r} is not HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    port = int(port_text) if port_text else default_port
    credentials = None
    if acl_file:
        try:
            credentials = load_credentials(acl_file)
        except OSError as exc:
            raise StoreConfigError(f"--grpc-acl {acl_file}: {exc}") from None
    config = base if base is not None else GrpcConfig()
    return config.replace(
        host=host, port=port, credentials=credentials, tls_cert=tls_cert, tls_key=tls_key
    )
