"""The ``rocketstore`` group: the options every command shares (ACL keys), and each command
group's module adding its commands."""

from __future__ import annotations

import click

from . import (
    _admin,
    _auth,
    _bench,
    _client,
    _console,
    _controller,
    _serve,
    _spark,
    _stats,
    _store,
    _tier,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})  # mqadmin's -h too
@click.version_option(package_name="rocketstore")
@click.option(
    "--access-key",
    envvar="ROCKETSTORE_ACCESS_KEY",
    default=None,
    help="ACL: sign requests to brokers with this account (env ROCKETSTORE_ACCESS_KEY)",
)
@click.option(
    "--secret-key",
    envvar="ROCKETSTORE_SECRET_KEY",
    default=None,
    help="ACL: the account's secret key (env ROCKETSTORE_SECRET_KEY)",
)
def main(access_key: str | None, secret_key: str | None) -> None:
    """rocketstore: Apache RocketMQ's message store in Python."""
    import os

    if bool(access_key) != bool(secret_key):
        raise click.UsageError("give both --access-key and --secret-key, or neither")
    if access_key and secret_key:  # every remoting client of this process signs with them
        os.environ["ROCKETSTORE_ACCESS_KEY"] = access_key
        os.environ["ROCKETSTORE_SECRET_KEY"] = secret_key


for _module in (
    _store,
    _stats,
    _tier,
    _bench,
    _spark,
    _serve,
    _controller,
    _client,
    _admin,
    _auth,
    _console,
):
    for _command in _module.COMMANDS:
        main.add_command(_command)
