"""The ``rocketstore`` group: the options every command shares (ACL keys), and each command
group's module adding its commands."""

from __future__ import annotations

import click

from . import (
    _auth,
    _bench,
    _client,
    _cluster,
    _config_reference,
    _console,
    _consumer,
    _controller,
    _group,
    _message,
    _serve,
    _settings,
    _spark,
    _stats,
    _store,
    _tier,
    _topic,
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
@click.option(
    "--tls",
    is_flag=True,
    default=False,
    help="the remoting clients of this command speak TLS (as RocketMQ's tls.enable; env "
    "ROCKETSTORE_TLS=true)",
)
@click.option(
    "--tls-ca",
    default=None,
    help="check the servers' certificates against this CA bundle (PEM; env ROCKETSTORE_TLS_CA)",
)
def main(access_key: str | None, secret_key: str | None, tls: bool, tls_ca: str | None) -> None:
    """rocketstore: Apache RocketMQ's message store in Python."""
    import os

    if tls or tls_ca:  # every remoting client of this process connects with TLS
        os.environ["ROCKETSTORE_TLS"] = "true"
    if tls_ca:
        os.environ["ROCKETSTORE_TLS_CA"] = tls_ca

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
    _topic,
    _cluster,
    _group,
    _consumer,
    _settings,
    _message,
    _auth,
    _console,
    _config_reference,
):
    for _command in _module.COMMANDS:
        main.add_command(_command)
