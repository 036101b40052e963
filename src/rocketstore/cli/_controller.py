"""``rocketstore controller``: run RocketMQ 5's controller, and ask it (mqadmin's
getControllerMetaData, getSyncStateSet, electMaster, cleanBrokerMetadata,
getControllerConfig / updateControllerConfig)::

    rocketstore controller [--listen HOST:PORT] [--store DIR] [--backend file|etcd]
                           [--etcd-endpoints URL,...] [-c controller.conf] ...
    rocketstore controller status       -a HOST:PORT
    rocketstore controller sync-state   -a HOST:PORT -b NAME [-b NAME ...]
    rocketstore controller elect-master -a HOST:PORT -b NAME [--broker-id N] [-c CLUSTER]
    rocketstore controller clean-broker-data -a HOST:PORT -b NAME [--broker-ids 1;2] ...
    rocketstore controller config       -a HOST:PORT [KEY=VALUE ...]

Requests are signed with the ACL keys of ``rocketstore --access-key`` (or the environment)
when given. A refused request or a controller out of reach ends the command with status 1.
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..controller._config import DEFAULT_PORT
from ..metrics._server import LISTEN_HELP as METRICS_LISTEN_HELP
from ..metrics._server import check_listen_option
from ._common import https_options, tls_server_options
from ._errors import ClientGroup
from ._serve import (
    _announce,
    _logging,
    _run,
    controller_config,
    metrics_auth_option,
    verbose_option,
)

address_option = click.option(
    "--controller",
    "-a",
    "address",
    default=f"127.0.0.1:{DEFAULT_PORT}",
    show_default=True,
    help="a controller's HOST:PORT (any of a group: requests go to the active one)",
)
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")


@click.group("controller", cls=ClientGroup, invoke_without_command=True)
@click.option("-c", "--conf", default=None, help="a controller.conf (RocketMQ's keys)")
@click.option(
    "--listen", default=None, help=f"HOST:PORT to serve on (default 127.0.0.1:{DEFAULT_PORT})"
)
@click.option(
    "--store",
    default=None,
    help="the file backend's directory (default: the conf's controllerStorePath, else "
    "~/DledgerController)",
)
@click.option("--backend", type=click.Choice(["file", "etcd"]), default=None, help="state backend")
@click.option(
    "--etcd-endpoints", default=None, help="the etcd cluster: http://HOST:PORT[,http://HOST:PORT]"
)
@click.option(
    "--etcd-user", default=None, help="etcd user (etcd's auth; the conf's controllerEtcdUser)"
)
@click.option(
    "--etcd-password-file",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="a file holding the etcd user's password (else controllerEtcdPassword or "
    "ROCKETSTORE_ETCD_PASSWORD)",
)
@click.option("--etcd-ca-file", default=None, help="CA certificates (PEM) for https:// endpoints")
@click.option("--etcd-cert-file", default=None, help="client certificate (PEM) for etcd")
@click.option("--etcd-key-file", default=None, help="its private key (PEM)")
@click.option(
    "--etcd-insecure",
    is_flag=True,
    default=None,
    help="run the etcd backend without credentials although ACL is on",
)
@click.option("--self-id", default=None, help="this controller's id (default n0)")
@click.option("--group", default=None, help="the controllers' group (default group1)")
@click.option("--acl-file", default=None, type=click.Path(exists=True, dir_okay=False),
              help="ACL on the controller's port: a plain_acl.yml")  # fmt: skip
@click.option(
    "--metrics-listen", default=None, callback=check_listen_option, help=METRICS_LISTEN_HELP
)
@metrics_auth_option
@verbose_option
@tls_server_options
@https_options
@click.pass_context
def controller_group(
    ctx: click.Context,
    conf: str | None,
    listen: str | None,
    store: str | None,
    backend: str | None,
    etcd_endpoints: str | None,
    etcd_user: str | None,
    etcd_password_file: str | None,
    etcd_ca_file: str | None,
    etcd_cert_file: str | None,
    etcd_key_file: str | None,
    etcd_insecure: bool | None,
    self_id: str | None,
    group: str | None,
    acl_file: str | None,
    metrics_listen: str | None,
    metrics_auth: str | None,
    verbose: bool,
    log_dir: str | None,
    log_level: str,
    log_levels: str | None,
    tls: Any,
    https: Any,
) -> None:
    """Run RocketMQ 5's controller (without a sub-command), or ask one."""
    if ctx.invoked_subcommand is not None:
        return
    from ..server import ControllerServer, run_servers

    overrides = {
        key: value
        for key, value in (
            ("controllerListen", listen),
            ("controllerStorePath", store),
            ("controllerBackend", backend),
            ("controllerEtcdEndpoints", etcd_endpoints),
            ("controllerEtcdUser", etcd_user),
            ("controllerEtcdPassword", _read_secret(etcd_password_file)),
            ("controllerEtcdCaFile", etcd_ca_file),
            ("controllerEtcdCertFile", etcd_cert_file),
            ("controllerEtcdKeyFile", etcd_key_file),
            ("controllerEtcdInsecure", "true" if etcd_insecure else None),
            ("controllerDLegerSelfId", self_id),
            ("controllerDLegerGroup", group),
        )
        if value is not None
    }
    config = controller_config(conf, overrides)
    _logging(verbose, log_dir, log_level, log_levels, config.store_dir)
    server = ControllerServer(config, acl_file=acl_file, tls=tls)
    _run(
        run_servers(
            None,
            [],
            announce=_announce,
            controller=server,
            metrics_listen=metrics_listen,
            metrics_auth=metrics_auth,
            https=https,
            console_listen="",
            stats_interval=0,
        )
    )


def _read_secret(path: str | None) -> str | None:
    """The first line of ``path`` (a password file), None when no path is given."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline().strip()
    except OSError as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--etcd-password-file") from None
    if not line:
        raise click.BadParameter(f"{path} is empty", param_hint="--etcd-password-file")
    return line


def _admin(address: str) -> Any:
    from ..client._controller import ControllerAdmin

    return ControllerAdmin(address)


@controller_group.command("status")
@address_option
@json_option
def status_cmd(address: str, as_json: bool) -> None:
    """The controllers: the group, the active one, the peers (getControllerMetaData)."""
    with _admin(address) as admin:
        meta = admin.metadata()
        peers = []
        for peer_id, peer_address in meta.peer_list():
            try:
                role = "active" if admin.metadata(peer_address).is_leader else "standby"
            except Exception as exc:
                role = f"unreachable ({exc})"
            peers.append({"id": peer_id, "address": peer_address, "role": role})
    if as_json:
        doc = {
            "group": meta.group,
            "leaderId": meta.controller_leader_id,
            "leaderAddress": meta.controller_leader_address,
            "askedIsLeader": meta.is_leader,
            "peers": peers,
        }
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"controller group  {meta.group}")
    if meta.controller_leader_address:
        click.echo(
            f"active            {meta.controller_leader_id} {meta.controller_leader_address}"
        )
    else:
        click.echo("active            none (no controller holds the leadership)")
    for peer in peers:
        click.echo(f"peer              {peer['id']} {peer['address']} {peer['role']}")


@controller_group.command("sync-state")
@address_option
@click.option("--broker-name", "-b", "broker_names", multiple=True, required=True)
@json_option
def sync_state_cmd(address: str, broker_names: tuple[str, ...], as_json: bool) -> None:
    """A group's SyncStateSet, master, epochs and replicas (getSyncStateSet)."""
    with _admin(address) as admin:
        info = admin.sync_state(broker_names)
    if as_json:
        click.echo(json.dumps(json.loads(info.encode()), indent=2))
        return
    missing = [n for n in broker_names if n not in info.table]
    for name, group in info.table.items():
        click.echo(f"broker group      {name}")
        master = "none" if group.master_broker_id is None else str(group.master_broker_id)
        click.echo(f"master            {master} {group.master_address or ''}".rstrip())
        click.echo(f"master epoch      {group.master_epoch}")
        click.echo(f"SyncStateSet      epoch {group.sync_state_set_epoch}, "
                   f"{len(group.in_sync_replicas)} in sync")  # fmt: skip
        click.echo("  id  address                  in sync  alive  role")
        rows = [(r, True) for r in group.in_sync_replicas]
        rows += [(r, False) for r in group.not_in_sync_replicas]
        for replica, in_sync in sorted(rows, key=lambda row: row[0].broker_id or 0):
            role = "master" if replica.broker_id == group.master_broker_id else "slave"
            click.echo(
                f"  {replica.broker_id!s:<3} {replica.broker_address or '':<24} "
                f"{'yes' if in_sync else 'no':<8} {'yes' if replica.alive else 'no':<6} {role}"
            )
    if missing:
        raise click.ClickException(f"the controller knows no broker group {', '.join(missing)}")


@controller_group.command("elect-master")
@address_option
@click.option("--broker-name", "-b", required=True)
@click.option("--broker-id", type=int, default=None, help="the broker to make master")
@click.option(
    "--cluster",
    "-c",
    default="DefaultCluster",
    show_default=True,
    help="the group's cluster (the request names it; the controller keeps its own)",
)
def elect_master_cmd(address: str, broker_name: str, broker_id: int | None, cluster: str) -> None:
    """Make a broker its group's master (electMaster; an admin request). Without --broker-id:
    an alive replica of the SyncStateSet other than the master."""
    with _admin(address) as admin:
        if broker_id is None:
            known = admin.sync_state([broker_name]).table.get(broker_name)
            if known is None:
                raise click.ClickException(f"the controller knows no broker group {broker_name}")
            broker_id = _best_other(known)
        header, _body = admin.elect_master(cluster, broker_name, broker_id)
    click.echo(
        f"broker group {broker_name}: master {header.master_broker_id} "
        f"({header.master_address}), master epoch {header.master_epoch}, "
        f"SyncStateSet epoch {header.sync_state_set_epoch}"
    )


def _best_other(group: Any) -> int:
    """An alive in-sync replica other than the master (the lowest id)."""
    for replica in sorted(group.in_sync_replicas, key=lambda r: r.broker_id or 0):
        if replica.alive and replica.broker_id != group.master_broker_id:
            return int(replica.broker_id)
    raise click.ClickException(
        "no alive replica in the SyncStateSet but the master: give --broker-id"
    )


@controller_group.command("clean-broker-data")
@address_option
@click.option("--broker-name", "-b", required=True)
@click.option("--cluster", "-c", default=None, help="the group's cluster")
@click.option("--broker-ids", default=None, help="only these brokers: 1;2;3 (default: the group)")
@click.option("--clean-living", is_flag=True, help="also brokers that are alive")
def clean_broker_data_cmd(
    address: str, broker_name: str, cluster: str | None, broker_ids: str | None, clean_living: bool
) -> None:
    """Make the controller forget a broker group, or some of its brokers (cleanBrokerMetadata;
    an admin request)."""
    ids = None
    if broker_ids:
        try:
            ids = [int(part) for part in broker_ids.split(";")]
        except ValueError:
            raise click.BadParameter(f"{broker_ids!r}: ids separated by ';'") from None
    with _admin(address) as admin:
        admin.clean_broker_data(
            broker_name, cluster=cluster, broker_ids=ids, clean_living=clean_living
        )
    what = f"brokers {';'.join(map(str, ids))}" if ids else "every broker"
    click.echo(f"broker group {broker_name}: {what} forgotten by the controller")


@controller_group.command("config")
@address_option
@click.argument("updates", nargs=-1)
def config_cmd(address: str, updates: tuple[str, ...]) -> None:
    """Show a controller's settings, or change some (KEY=VALUE ...; the ones that can change
    while it runs)."""
    with _admin(address) as admin:
        if updates:
            values = {}
            for item in updates:
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise click.BadParameter(f"{item!r} is not KEY=VALUE")
                values[key.strip()] = value.strip()
            admin.update_config(values)
        shown = admin.get_config()
    for key in sorted(shown):
        click.echo(f"{key}={shown[key]}")


COMMANDS = [controller_group]
