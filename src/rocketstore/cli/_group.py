"""Consumer groups' settings on brokers: ``group update|delete|list`` (mqadmin updateSubGroup /
deleteSubGroup)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click

from ._admin_common import (
    admin_client,
    broker_option,
    cluster_option,
    dump_json,
    group_option,
    json_option,
    new_table,
    rich_console,
    targets,
    yes,
)
from ._common import either, mqadmin_bool, namesrv_option
from ._errors import ClientGroup


@click.group("group", cls=ClientGroup)
def subscription_group() -> None:
    """Consumer groups' settings on brokers (mqadmin updateSubGroup / deleteSubGroup)."""


@subscription_group.command("update")
@namesrv_option
@cluster_option
@broker_option
@group_option
@click.option(
    "--orderly/--no-orderly",
    default=None,
    help="FIFO delivery to pop (gRPC) consumers (consumeMessageOrderly)",
)
@click.option("--retry-max-times", "-r", type=click.IntRange(0), default=None, help="retryMaxTimes")
@click.option(
    "--retry-queue-nums", "-q", type=click.IntRange(0), default=None, help="retryQueueNums"
)
@click.option("--consume-enable/--no-consume-enable", default=None, help="consumeEnable")
@mqadmin_bool("-s", "consume_enable_value", "consumeEnable")
@click.option("--broadcast/--no-broadcast", default=None, help="consumeBroadcastEnable")
@mqadmin_bool("-d", "broadcast_value", "consumeBroadcastEnable")
@click.option("--consume-from-min/--no-consume-from-min", default=None, help="consumeFromMinEnable")
@mqadmin_bool("-m", "consume_from_min_value", "consumeFromMinEnable")
@click.option(
    "--notify-ids-changed/--no-notify-ids-changed",
    default=None,
    help="notifyConsumerIdsChangedEnable",
)
@mqadmin_bool("-a", "notify_ids_changed_value", "notifyConsumerIdsChangedEnable")
@click.option("--broker-id", "-i", type=click.IntRange(0), default=None, help="brokerId")
@click.option(
    "--which-broker-when-consume-slowly",
    "-w",
    type=click.IntRange(0),
    default=None,
    help="whichBrokerWhenConsumeSlowly",
)
def group_update(
    namesrv: str,
    cluster: str | None,
    broker: str | None,
    group: str,
    **settings: Any,
) -> None:
    """Create a group's settings or change some of them, on one broker or on every master of a
    cluster. Settings not given keep each broker's current value (the defaults for a new
    group)."""
    for name in [k for k in settings if k.endswith("_value")]:  # mqadmin's -s true and the like
        flag = name.removesuffix("_value")
        settings[flag] = either(settings[flag], settings.pop(name), f"--{flag} and its short form")
    changes = {_GROUP_FIELDS[k]: v for k, v in settings.items() if v is not None}
    with admin_client(namesrv) as admin:
        for addr in targets(admin, cluster, broker):
            config = admin.update_subscription_group(addr, group, **changes)
            click.echo(f"create subscription group to {addr} success.")
            click.echo(json.dumps(config.to_json(), separators=(",", ":")))


_GROUP_FIELDS = {
    "orderly": "consume_message_orderly",
    "retry_max_times": "retry_max_times",
    "retry_queue_nums": "retry_queue_nums",
    "consume_enable": "consume_enable",
    "broadcast": "consume_broadcast_enable",
    "consume_from_min": "consume_from_min_enable",
    "notify_ids_changed": "notify_consumer_ids_changed_enable",
    "broker_id": "broker_id",
    "which_broker_when_consume_slowly": "which_broker_when_consume_slowly",
}


@subscription_group.command("delete")
@namesrv_option
@cluster_option
@broker_option
@group_option
@click.option("--clean-offset", is_flag=True, help="remove the group's consumer offsets too")
@mqadmin_bool("-r", "remove_offset", "the same as --clean-offset (mqadmin's removeOffset)")
def group_delete(
    namesrv: str,
    cluster: str | None,
    broker: str | None,
    group: str,
    clean_offset: bool,
    remove_offset: bool | None,
) -> None:
    """Delete a group's settings from one broker or from every master of a cluster (its retry
    and dead-letter topics stay: delete them with ``topic delete``)."""
    clean_offset = bool(either(clean_offset or None, remove_offset, "--clean-offset and -r"))
    with admin_client(namesrv) as admin:
        for addr in targets(admin, cluster, broker):
            admin.delete_subscription_group(addr, group, clean_offset=clean_offset)
            offsets = " and its consumer offsets" if clean_offset else ""
            click.echo(
                f"delete subscription group [{group}]{offsets} from broker [{addr}] success."
            )


@subscription_group.command("list")
@namesrv_option
@cluster_option
@broker_option
@json_option
def group_list(namesrv: str, cluster: str | None, broker: str | None, as_json: bool) -> None:
    """Every group's settings on each master (or on the broker given)."""
    from ..client import ClientError
    from ..remoting import RemotingError

    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    with admin_client(namesrv) as admin:
        if broker and not cluster:
            targets = [("", broker)]
        else:
            if cluster and broker:
                raise click.UsageError("give --cluster or --broker, not both")
            targets = sorted(admin.masters(cluster).items())
        for broker_name, addr in targets:
            try:
                groups = admin.subscription_groups(addr)
            except (ClientError, RemotingError, ValueError) as exc:
                click.echo(f"error: {addr}: {exc}", err=True)
                failed.append(addr)
                continue
            for name in sorted(groups):
                row: dict[str, Any] = {"broker_name": broker_name, "address": addr}
                row.update(dataclasses.asdict(groups[name]))
                rows.append(row)
    if as_json:
        dump_json(rows)
    else:
        table = new_table(
            "subscription groups",
            [
                ("Broker", "left"),
                ("Group", "left"),
                ("Consume", "left"),
                ("Orderly", "left"),
                ("Broadcast", "left"),
                ("From Min", "left"),
                ("Retry Queues", "right"),
                ("Retry Max", "right"),
                ("BID", "right"),
            ],
        )
        for row in rows:
            table.add_row(
                row["broker_name"] or row["address"],
                row["group_name"],
                yes(row["consume_enable"]),
                yes(row["consume_message_orderly"]),
                yes(row["consume_broadcast_enable"]),
                yes(row["consume_from_min_enable"]),
                str(row["retry_queue_nums"]),
                str(row["retry_max_times"]),
                str(row["broker_id"]),
            )
        rich_console().print(table)
    if failed:
        sys.exit(1)


COMMANDS = [subscription_group]
