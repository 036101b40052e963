"""Brokers' and name servers' settings and counters: ``broker-config get|update``, ``broker-perm
wipe|add``, ``kv put|get|delete|list``, ``broker-stats``, ``namesrv-config get|update``."""

from __future__ import annotations

from typing import Any

import click

from ._admin_common import (
    admin_client,
    broker_option,
    cluster_option,
    dump_json,
    json_option,
    new_table,
    rich_console,
    targets,
)
from ._common import namesrv_option
from ._errors import ClientGroup


@click.group("broker-config", cls=ClientGroup)
def broker_config_group() -> None:
    """A running broker's settings (RocketMQ's key names)."""


@broker_config_group.command("get")
@namesrv_option
@cluster_option
@broker_option
@click.option("--key", "-k", "keys", multiple=True, help="only this key (repeatable)")
@json_option
def broker_config_get(
    namesrv: str, cluster: str | None, broker: str | None, keys: tuple[str, ...], as_json: bool
) -> None:
    """GET_BROKER_CONFIG of a broker, or of every master."""
    with admin_client(namesrv) as admin:
        configs = {addr: admin.broker_config(addr) for addr in targets(admin, cluster, broker)}
    if keys:
        configs = {a: {k: c[k] for k in keys if k in c} for a, c in configs.items()}
    if as_json:
        dump_json(configs)
        return
    for addr, config in configs.items():
        click.echo(f"============{addr}============")
        for key in sorted(config):
            click.echo(f"{key:<50}=  {config[key]}")


@broker_config_group.command("update")
@namesrv_option
@cluster_option
@broker_option
@click.option("--key", "-k", required=True, help="the setting's name, e.g. brokerPermission")
@click.option("--value", "-v", required=True, help="its new value")
def broker_config_update(
    namesrv: str, cluster: str | None, broker: str | None, key: str, value: str
) -> None:
    """UPDATE_BROKER_CONFIG on a broker, or on every master: applied at once, and written to
    the broker's broker.conf when it was started with one (else in memory only)."""
    with admin_client(namesrv) as admin:
        for addr in targets(admin, cluster, broker):
            remark = admin.update_broker_config(addr, {key: value})
            click.echo(f"update broker config success, {addr}" + (f": {remark}" if remark else ""))


@click.group("broker-perm", cls=ClientGroup)
def broker_perm_group() -> None:
    """A broker group's write permission in the name servers' routes (mqadmin wipeWritePerm /
    addWritePerm): wipe it before taking a broker out of service, add it back after."""


def _perm_command(name: str, doc: str, wipe: bool) -> Any:
    @broker_perm_group.command(name, help=doc)
    @namesrv_option
    @click.option("--broker-name", "-b", required=True, help="the broker group, e.g. broker-a")
    @json_option
    def command(namesrv: str, broker_name: str, as_json: bool) -> None:
        with admin_client(namesrv) as admin:
            if wipe:
                counts = admin.wipe_write_perm(broker_name)
            else:
                counts = admin.add_write_perm(broker_name)
        if as_json:
            dump_json({"broker_name": broker_name, "topic_counts": counts})
            return
        verb = "wipe" if wipe else "add"
        for addr, count in counts.items():
            click.echo(
                f"{verb} write perm of broker[{broker_name}] in name server[{addr}] OK, {count}"
            )

    return command


broker_wipe_write_perm = _perm_command(
    "wipe", "Clear the write bit of the group's queue data on every name server.", True
)
broker_add_write_perm = _perm_command(
    "add", "Give the group's queue data read and write again on every name server.", False
)


@click.group("kv", cls=ClientGroup)
def kv_group() -> None:
    """The name servers' KV config (mqadmin updateKvConfig / deleteKvConfig); the namespace
    ORDER_TOPIC_CONFIG holds the order configuration routes carry."""


namespace_option = click.option("--namespace", "-s", required=True, help="the namespace")
key_option = click.option("--key", "-k", required=True, help="the key")


@kv_group.command("put")
@namesrv_option
@namespace_option
@key_option
@click.option("--value", "-v", required=True, help="the value")
@json_option
def kv_put(namesrv: str, namespace: str, key: str, value: str, as_json: bool) -> None:
    """Set a value on every name server."""
    with admin_client(namesrv) as admin:
        admin.put_kv_config(namespace, key, value)
    if as_json:
        dump_json(
            {"namespace": namespace, "key": key, "value": value, "namesrv": admin.namesrv_addrs}
        )
        return
    click.echo(f"update kv config in namespace {namespace} success")


@kv_group.command("delete")
@namesrv_option
@namespace_option
@key_option
@json_option
def kv_delete(namesrv: str, namespace: str, key: str, as_json: bool) -> None:
    """Remove a value from every name server."""
    with admin_client(namesrv) as admin:
        admin.delete_kv_config(namespace, key)
    if as_json:
        dump_json({"namespace": namespace, "key": key, "namesrv": admin.namesrv_addrs})
        return
    click.echo(f"delete kv config in namespace {namespace} success")


@kv_group.command("get")
@namesrv_option
@namespace_option
@key_option
@json_option
def kv_get(namesrv: str, namespace: str, key: str, as_json: bool) -> None:
    """One value (from the first name server that answers)."""
    with admin_client(namesrv) as admin:
        value = admin.get_kv_config(namespace, key)
    if value is None:
        raise click.ClickException(f"No config item, Namespace: {namespace} Key: {key}")
    if as_json:
        dump_json({"namespace": namespace, "key": key, "value": value})
        return
    click.echo(value)


@kv_group.command("list")
@namesrv_option
@namespace_option
@json_option
def kv_list(namesrv: str, namespace: str, as_json: bool) -> None:
    """Every value of a namespace."""
    with admin_client(namesrv) as admin:
        table = admin.kv_list(namespace)
    if table is None:
        raise click.ClickException(f"No config item, Namespace: {namespace}")
    if as_json:
        dump_json({"namespace": namespace, "table": dict(sorted(table.items()))})
        return
    for key in sorted(table):
        click.echo(f"{key}={table[key]}")


def _stats_item(item: Any) -> dict[str, Any]:
    return {"sum": item.sum, "tps": item.tps, "avgpt": item.avgpt}


def _maybe_stats(admin: Any, addr: str, name: str, key: str) -> Any:
    """One stats item, or None when the broker has none by that name and key."""
    from ..client import ClientError

    try:
        return admin.broker_stats(addr, name, key)
    except ClientError as exc:
        if "not exist" in (exc.remark or ""):
            return None
        raise


@click.command("broker-stats")
@namesrv_option
@cluster_option
@broker_option
@click.option("--name", "stats_name", default=None, help="one stats item: e.g. TOPIC_PUT_NUMS")
@click.option("--key", "-k", "stats_key", default=None, help="its key: a topic, TOPIC@GROUP, ...")
@json_option
def broker_stats(
    namesrv: str,
    cluster: str | None,
    broker: str | None,
    stats_name: str | None,
    stats_key: str | None,
    as_json: bool,
) -> None:
    """Messages in and out of brokers over the last minute, hour and day (RocketMQ's stats
    items); without --name, every topic's puts and every consuming group's gets."""
    if (stats_name is None) != (stats_key is None):
        raise click.UsageError("give --name and --key together, or neither")
    rows: list[dict[str, Any]] = []
    with admin_client(namesrv) as admin:
        for addr in targets(admin, cluster, broker):
            if stats_name is not None and stats_key is not None:
                wanted = [(stats_name, stats_key)]
            else:
                wanted = []
                for topic in sorted(admin.topic_configs(addr)):
                    wanted.append(("TOPIC_PUT_NUMS", topic))
                    for group in admin.topic_consumer_groups(addr, topic):
                        wanted.append(("GROUP_GET_NUMS", f"{topic}@{group}"))
            for name, key in wanted:
                data = _maybe_stats(admin, addr, name, key)
                if data is None:
                    if stats_name is not None:
                        raise click.ClickException(f"The stats <{name}> <{key}> not exist")
                    continue
                rows.append(
                    {
                        "broker": addr,
                        "name": name,
                        "key": key,
                        "minute": _stats_item(data.minute),
                        "hour": _stats_item(data.hour),
                        "day": _stats_item(data.day),
                    }
                )
    if as_json:
        dump_json(rows)
        return
    table = new_table(
        "broker stats",
        [
            ("Broker", "left"),
            ("Stats", "left"),
            ("Key", "left"),
            ("TPS (minute)", "right"),
            ("Minute", "right"),
            ("Hour", "right"),
            ("Day", "right"),
        ],
    )
    for row in rows:
        table.add_row(
            row["broker"],
            row["name"],
            row["key"],
            f"{row['minute']['tps']:.2f}",
            str(row["minute"]["sum"]),
            str(row["hour"]["sum"]),
            str(row["day"]["sum"]),
        )
    rich_console().print(table)


@click.group("namesrv-config", cls=ClientGroup)
def namesrv_config_group() -> None:
    """The name servers' settings."""


@namesrv_config_group.command("get")
@namesrv_option
@json_option
def namesrv_config_get(namesrv: str, as_json: bool) -> None:
    """GET_NAMESRV_CONFIG of every name server given."""
    with admin_client(namesrv) as admin:
        configs = admin.namesrv_configs()
    if as_json:
        dump_json(configs)
        return
    for addr, config in configs.items():
        click.echo(f"============{addr}============")
        for key in sorted(config):
            click.echo(f"{key:<50}=  {config[key]}")


@namesrv_config_group.command("update")
@namesrv_option
@click.option("--key", "-k", required=True)
@click.option("--value", "-v", required=True)
def namesrv_config_update(namesrv: str, key: str, value: str) -> None:
    """UPDATE_NAMESRV_CONFIG on every name server given (in memory)."""
    with admin_client(namesrv) as admin:
        admin.update_namesrv_config({key: value})
    click.echo(f"update name server config success: {key}={value}")


COMMANDS = [broker_config_group, broker_perm_group, kv_group, broker_stats, namesrv_config_group]
