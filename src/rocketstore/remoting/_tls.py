"""TLS on the remoting ports, as RocketMQ 4.x serves it.

A server runs in one of RocketMQ's three modes (``tls.server.mode``):

=============== ==========================================================================
``disabled``     plain TCP only (the default); a TLS handshake is not understood
``permissive``   TLS and plain TCP on the same port, told apart by the first byte a client
                 sends: a TLS handshake record starts with 0x16 (RFC 8446, 5.1), a remoting
                 frame with the high byte of its length (0 for any frame under 16 MiB, and a
                 frame of 0x16 << 24 bytes is over every limit)
``enforcing``    TLS only: a plain frame is taken for a broken handshake and the connection
                 closed
=============== ==========================================================================

The server's certificate chain and key are PEM files (``tls.server.certPath``,
``tls.server.keyPath``); ``tls.server.need.client.auth`` (``none``, ``optional``,
``require``) asks clients for a certificate signed by ``tls.server.trustCertPath``.

A client speaks TLS when told to (RocketMQ's ``tls.enable``): the project's clients, the CLI
(``--tls``) and the Spark source read it from the environment of the process,
``ROCKETSTORE_TLS=true``, with ``ROCKETSTORE_TLS_CA`` (a PEM bundle the server's certificate
must chain to; without it the server's certificate is not checked, as RocketMQ's client does
by default, ``tls.client.authServer=false``) and ``ROCKETSTORE_TLS_CERT`` /
``ROCKETSTORE_TLS_KEY`` (the client's own, for a server that asks).

``TlsServerConfig.from_properties`` reads RocketMQ's tls.properties keys, so one file serves
both brokers. Pure functions and immutable settings; contexts are made once and shared.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Mapping
from typing import Literal

TlsMode = Literal["disabled", "permissive", "enforcing"]
ClientAuth = Literal["none", "optional", "require"]
MODES: tuple[TlsMode, ...] = ("disabled", "permissive", "enforcing")
CLIENT_AUTHS: tuple[ClientAuth, ...] = ("none", "optional", "require")
TLS_HANDSHAKE = 0x16  # the content type of a TLS handshake record

ENV_ENABLE = "ROCKETSTORE_TLS"
ENV_CA = "ROCKETSTORE_TLS_CA"
ENV_CERT = "ROCKETSTORE_TLS_CERT"
ENV_KEY = "ROCKETSTORE_TLS_KEY"


class TlsConfigError(ValueError):
    """TLS settings that cannot be used: an unknown mode, a missing or unreadable file."""


@dataclasses.dataclass(frozen=True, slots=True)
class TlsServerConfig:
    """A remoting server's TLS: ``mode`` and, unless disabled, its certificate and key."""

    mode: TlsMode = "disabled"
    cert_path: str = ""
    key_path: str = ""
    need_client_auth: ClientAuth = "none"
    trust_cert_path: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TlsConfigError(f"tls mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.need_client_auth not in CLIENT_AUTHS:
            raise TlsConfigError(
                f"tls client auth {self.need_client_auth!r} is not one of {', '.join(CLIENT_AUTHS)}"
            )
        if self.mode != "disabled" and not (self.cert_path and self.key_path):
            raise TlsConfigError(f"tls mode {self.mode} needs a certificate and its key")
        if self.need_client_auth != "none" and not self.trust_cert_path:
            raise TlsConfigError(
                "asking clients for certificates needs the CA that signs them "
                "(tls.server.trustCertPath)"
            )

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> TlsServerConfig:
        """RocketMQ's tls.properties keys (others are left alone)."""
        mode = values.get("tls.server.mode", "disabled").strip().lower()
        auth = values.get("tls.server.need.client.auth", "none").strip().lower()
        return cls(
            mode=mode,  # type: ignore[arg-type]  # checked in __post_init__
            cert_path=values.get("tls.server.certPath", "").strip(),
            key_path=values.get("tls.server.keyPath", "").strip(),
            need_client_auth=auth,  # type: ignore[arg-type]
            trust_cert_path=values.get("tls.server.trustCertPath", "").strip(),
        )

    def context(self) -> ssl.SSLContext:
        """The server side's context (TLS 1.2 and up). TlsConfigError for unreadable files."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(
                os.path.expanduser(self.cert_path), os.path.expanduser(self.key_path)
            )
            if self.need_client_auth != "none":
                ctx.load_verify_locations(os.path.expanduser(self.trust_cert_path))
                ctx.verify_mode = (
                    ssl.CERT_REQUIRED if self.need_client_auth == "require" else ssl.CERT_OPTIONAL
                )
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"tls: {exc}") from None
        return ctx


def speaks_tls(first_byte: int) -> bool:
    """Whether a connection whose first byte is ``first_byte`` opens a TLS handshake."""
    return first_byte == TLS_HANDSHAKE


def client_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process's clients speak TLS (``ROCKETSTORE_TLS``)."""
    value = (os.environ if env is None else env).get(ENV_ENABLE, "")
    return value.strip().lower() in ("1", "true", "yes")


_client_contexts: dict[tuple[str, str, str], ssl.SSLContext] = {}


def client_context(env: Mapping[str, str] | None = None) -> ssl.SSLContext | None:
    """The context the process's clients connect with, None when they speak plain TCP.
    TlsConfigError for files that cannot be read."""
    env = os.environ if env is None else env
    if not client_enabled(env):
        return None
    return client_context_for(env.get(ENV_CA, ""), env.get(ENV_CERT, ""), env.get(ENV_KEY, ""))


def client_context_for(ca: str, cert: str, key: str) -> ssl.SSLContext:
    """A client's context: the server checked against ``ca`` (its chain and name; "": not
    checked), ``cert`` / ``key`` offered to a server that asks ("": none). Made once per
    set of files. TlsConfigError for files that cannot be read."""
    files = (ca, cert, key)
    ctx = _client_contexts.get(files)
    if ctx is None:
        ctx = _client_contexts[files] = _make_client_context(*files)
    return ctx


def _make_client_context(ca: str, cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if ca:
            ctx.load_verify_locations(os.path.expanduser(ca))  # hostname and chain checked
        else:  # RocketMQ's client default: the channel is encrypted, the server not checked
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cert:
            ctx.load_cert_chain(os.path.expanduser(cert), os.path.expanduser(key or cert))
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"tls: {exc}") from None
    return ctx


__all__ = [
    "MODES",
    "TlsConfigError",
    "TlsMode",
    "TlsServerConfig",
    "client_context",
    "client_context_for",
    "client_enabled",
    "speaks_tls",
]
