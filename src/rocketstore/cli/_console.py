"""``rocketstore console``: the web console (rocketstore.console) on a local address, until
SIGTERM or SIGINT (Ctrl-C), then closed cleanly with status 0. Startup problems (a port in use, a bad address) end it with one line on standard
error and exit status 1."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
from typing import Any

import click

from ._common import https_options, namesrv_option
from ._errors import CommandError


async def _run(namesrv: str, listen: str, login: bool, https: Any) -> None:
    from ..client._admin import AdminClient
    from ..console import ConsoleServer

    admin = AdminClient(namesrv, signer=None) if login else AdminClient(namesrv)
    console = ConsoleServer(admin, listen, login=login, tls=https)
    try:
        try:
            await console.start()
        except OSError as exc:
            hint = ""
            if exc.errno == errno.EADDRINUSE:  # `rocketstore serve` runs a console there
                hint = "; stop what holds it, or give the console another address (--listen)"
            raise CommandError(f"cannot listen on {listen}: {exc.strerror or exc}{hint}") from None
        scheme = "https" if https is not None else "http"
        click.echo(f"rocketstore console on {scheme}://{console.address}/ (name server {namesrv})")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # also where the parent ignored SIGINT
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await console.close()
        admin.close()


@click.command("console")
@namesrv_option
@click.option(
    "--listen",
    default="127.0.0.1:8080",
    show_default=True,
    help="HOST:PORT the console serves on (keep it on loopback unless a proxy guards it)",
)
@click.option(
    "--acl",
    "login",
    is_flag=True,
    help="the brokers check ACL: each visitor signs in with an account of plain_acl.yml, "
    "and the brokers decide what it may do",
)
@https_options
def console_cmd(namesrv: str, listen: str, login: bool, https: Any) -> None:
    """A web console: cluster, topics, consumer groups, messages and live throughput."""
    from ..remoting._client import split_address

    try:
        split_address(listen)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--listen") from None
    try:
        asyncio.run(_run(namesrv, listen, login, https))
    except KeyboardInterrupt:
        pass


COMMANDS = [console_cmd]
