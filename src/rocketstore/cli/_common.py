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
