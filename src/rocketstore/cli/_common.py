"""What several command groups of ``rocketstore`` share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def parse_properties(items: tuple[str, ...]) -> dict[str, str]:
    """``--property name=value`` options as a dict; BadParameter for an item without ``=``."""
    properties = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not name=value", param_hint="--property")
        properties[name] = value
    return properties


# One spelling of each option across the commands, with mqadmin's short flags where the meaning
# is the same (RocketMQ 4.9.8's tools: -n namesrvAddr, -t topic, -g group, -k key, ...).
NAMESRV_DEFAULT = "127.0.0.1:9876"
NAMESRV_ENV = "NAMESRV_ADDR"  # mqadmin's and the broker's, as RocketMQ's scripts read it
namesrv_option = click.option(
    "--namesrv",
    "-n",
    default=NAMESRV_DEFAULT,
    envvar=NAMESRV_ENV,
    show_default=True,
    show_envvar=True,
    help="name server HOST:PORT[;HOST:PORT]",
)
conf_option = click.option(
    "--conf", "-c", default=None, help="a RocketMQ broker.conf to read settings from"
)


def topic_option(required: bool = True, help: str | None = None) -> Callable[[F], F]:
    """``--topic`` / ``-t``."""
    return click.option("--topic", "-t", required=required, default=None, help=help)


def mqadmin_bool(short: str, dest: str, what: str) -> Callable[[F], F]:
    """mqadmin's ``-X true|false`` form of a boolean setting: a short-only option into
    ``dest`` (None when not given), to be merged with the long ``--x/--no-x`` flag by
    :func:`either`."""
    return click.option(short, dest, type=click.BOOL, default=None, help=f"{what} (true|false)")


def either(flag: bool | None, value: bool | None, names: str) -> bool | None:
    """The flag's or mqadmin's value of one setting; UsageError when both disagree."""
    if flag is not None and value is not None and flag != value:
        raise click.UsageError(f"{names} disagree")
    return flag if flag is not None else value


TIME_FORMAT = "%Y-%m-%d#%H:%M:%S:%f"  # mqadmin's yyyy-MM-dd#HH:mm:ss:SSS


def parse_timestamp(text: str, *, now_ms: Callable[[], int] | None = None) -> int:
    """A time as mqadmin's resetOffsetByTime takes it: milliseconds since the epoch, ``now``,
    or ``yyyy-MM-dd#HH:mm:ss:SSS`` in local time; -1 (the end of each queue) passes through.
    BadParameter otherwise."""
    import datetime
    import time

    text = text.strip()
    if text == "now":
        return now_ms() if now_ms is not None else int(time.time() * 1000)
    if text.lstrip("-").isdigit():
        value = int(text)
        if value < -1:
            raise click.BadParameter(f"{text}: must be a time in ms or -1")
        return value
    try:
        when = datetime.datetime.strptime(text, TIME_FORMAT)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: give milliseconds since the epoch, now, or yyyy-MM-dd#HH:mm:ss:SSS"
        ) from None
    return int(when.timestamp() * 1000)


_TLS_PARAMS = ("tls_mode", "tls_cert", "tls_key", "tls_client_auth", "tls_trust", "tls_config")


def tls_server_options(f: F) -> F:
    """The remoting port's TLS, as RocketMQ's tls.server.* settings: ``--tls-mode`` and its
    files, or ``--tls-config`` (a tls.properties; the flags win). The command gets one
    ``tls`` argument, a TlsServerConfig."""
    import functools

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _TLS_PARAMS}
        kwargs["tls"] = tls_server_config(**given)
        return f(*args, **kwargs)

    options = [
        click.option(
            "--tls-mode",
            type=click.Choice(["disabled", "permissive", "enforcing"]),
            default=None,
            help="TLS on the remoting port: disabled (default), permissive (TLS and plain "
            "on one port) or enforcing (TLS only), as RocketMQ's tls.server.mode",
        ),
        click.option("--tls-cert", default=None, help="the server's certificate chain (PEM)"),
        click.option("--tls-key", default=None, help="the certificate's private key (PEM)"),
        click.option(
            "--tls-client-auth",
            type=click.Choice(["none", "optional", "require"]),
            default=None,
            help="ask clients for a certificate (default none)",
        ),
        click.option("--tls-trust", default=None, help="the CA clients' certificates chain to"),
        click.option(
            "--tls-config",
            default=None,
            help="a RocketMQ tls.properties (tls.server.mode, tls.server.certPath, ...)",
        ),
    ]
    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def tls_server_config(
    tls_mode: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_auth: str | None,
    tls_trust: str | None,
    tls_config: str | None,
) -> Any:
    """The TlsServerConfig the TLS options stand for; BadParameter when they do not fit."""
    from pathlib import Path

    from ..protocol._properties import PropertiesError, parse_properties
    from ..remoting._tls import TlsConfigError, TlsServerConfig

    values: dict[str, str] = {}
    if tls_config:
        try:
            values = parse_properties(Path(tls_config).read_bytes())
        except (OSError, PropertiesError) as exc:
            raise click.BadParameter(str(exc), param_hint="--tls-config") from None
    for key, value in (
        ("tls.server.mode", tls_mode),
        ("tls.server.certPath", tls_cert),
        ("tls.server.keyPath", tls_key),
        ("tls.server.need.client.auth", tls_client_auth),
        ("tls.server.trustCertPath", tls_trust),
    ):
        if value is not None:
            values[key] = value
    try:
        config = TlsServerConfig.from_properties(values)
        if config.enabled:
            config.context()  # files that cannot be read: said now, not at the first client
    except TlsConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--tls-*") from None
    return config


def https_options(f: F) -> F:
    """``--https-cert`` / ``--https-key``: the metrics endpoint and the console serve HTTPS.
    The command gets one ``https`` argument, an SSLContext or None."""
    import functools

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["https"] = https_context(kwargs.pop("https_cert"), kwargs.pop("https_key"))
        return f(*args, **kwargs)

    decorated: Any = click.option(
        "--https-key", default=None, help="the HTTPS certificate's private key (PEM)"
    )(wrapper)
    decorated = click.option(
        "--https-cert",
        default=None,
        help="serve the metrics endpoint and the console over HTTPS with this certificate "
        "chain (PEM)",
    )(decorated)
    return decorated  # type: ignore[no-any-return]


def https_context(cert: str | None, key: str | None) -> Any:
    """The server context of ``--https-cert`` / ``--https-key`` (None without them);
    BadParameter when only one is given or they cannot be read."""
    import os
    import ssl

    if not cert and not key:
        return None
    if not (cert and key):
        raise click.BadParameter("give both --https-cert and --https-key", param_hint="--https-*")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(os.path.expanduser(cert), os.path.expanduser(key))
    except (OSError, ssl.SSLError) as exc:
        raise click.BadParameter(f"https: {exc}", param_hint="--https-*") from None
    return ctx
