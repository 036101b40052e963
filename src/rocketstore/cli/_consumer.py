"""Consumers and producers: ``consumer progress|connection|status|reset-offset|clone-offset``,
``producer connection`` (mqadmin consumerProgress, consumerConnection, consumerStatus,
resetOffsetByTime, cloneGroupOffset, producerConnection)."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ._admin_common import (
    admin_client,
    dump_json,
    json_option,
    new_table,
    rich_console,
    show_time,
    yes,
)
from ._common import either, mqadmin_bool, namesrv_option, parse_timestamp
from ._errors import ClientGroup


@click.group("consumer", cls=ClientGroup)
def consumer_group() -> None:
    """Consumer groups (mqadmin consumerProgress)."""


@consumer_group.command("progress")
@namesrv_option
@click.option(
    "--group", "-g", default=None, help="consumer group (default: a line for every group)"
)
@click.option("--topic", "-t", default=None, help="only this topic")
@json_option
def consumer_progress(namesrv: str, group: str | None, topic: str | None, as_json: bool) -> None:
    """A group's progress on each queue: broker offset, consumer offset, lag, last time.
    Without -g, as mqadmin consumerProgress: every group (each has its %RETRY% topic) with its
    online consumers, how it consumes, its consume TPS and its total lag."""
    if group is None:
        _every_group_progress(namesrv, as_json)
        return
    with admin_client(namesrv) as admin:
        stats = admin.examine_consume_stats(group, topic)
    if not stats.offset_table:
        raise click.ClickException(
            f"no consume stats for group {group}: it has no offsets on any broker "
            "(maybe it has not consumed anything)"
        )
    queues = [
        {
            "topic": mq.topic,
            "broker_name": mq.broker_name,
            "queue_id": mq.queue_id,
            "broker_offset": w.broker_offset,
            "consumer_offset": w.consumer_offset,
            "lag": w.lag,
            "last_timestamp": w.last_timestamp,
        }
        for mq, w in sorted(stats.offset_table.items())
    ]
    if as_json:
        dump_json(
            {
                "group": group,
                "consume_tps": stats.consume_tps,
                "total_lag": stats.total_lag(),
                "queues": queues,
            }
        )
        return
    table = new_table(
        f"consumer group {group}",
        [
            ("Topic", "left"),
            ("Broker Name", "left"),
            ("QID", "right"),
            ("Broker Offset", "right"),
            ("Consumer Offset", "right"),
            ("Lag", "right"),
            ("Last Time", "left"),
        ],
    )
    for q in queues:
        table.add_row(
            q["topic"],
            q["broker_name"],
            str(q["queue_id"]),
            str(q["broker_offset"]),
            str(q["consumer_offset"]),
            str(q["lag"]),
            show_time(q["last_timestamp"]),
        )
    console = rich_console()
    console.print(table)
    console.print(f"Consume TPS: {stats.consume_tps:.2f}")
    console.print(f"Total lag: {stats.total_lag()}")


def _every_group_progress(namesrv: str, as_json: bool) -> None:
    from ..client import ClientError
    from ..client._admin import RETRY_GROUP_TOPIC_PREFIX

    rows: list[dict[str, Any]] = []
    with admin_client(namesrv) as admin:
        groups = sorted(
            t[len(RETRY_GROUP_TOPIC_PREFIX) :]
            for t in admin.topic_list()
            if t.startswith(RETRY_GROUP_TOPIC_PREFIX)
        )
        for name in groups:
            stats = admin.examine_consume_stats(name)
            row: dict[str, Any] = {
                "group": name,
                "count": 0,
                "version": None,
                "consume_type": None,
                "message_model": None,
                "consume_tps": round(stats.consume_tps, 2),
                "total_lag": stats.total_lag(),
            }
            try:
                conn = admin.examine_consumer_connection(name)
            except ClientError:  # no consumer online: the group's offsets still count
                pass
            else:
                row["count"] = len(conn.connections)
                versions = {c.version for c in conn.connections}
                row["version"] = max(versions) if versions else None
                row["consume_type"] = conn.consume_type
                row["message_model"] = conn.message_model
            rows.append(row)
    if as_json:
        dump_json(rows)
        return
    table = new_table(
        "consumer groups",
        [
            ("Group", "left"),
            ("Count", "right"),
            ("Version", "right"),
            ("Type", "left"),
            ("Model", "left"),
            ("TPS", "right"),
            ("Diff Total", "right"),
        ],
    )
    for r in rows:
        table.add_row(
            r["group"],
            str(r["count"]),
            "" if r["version"] is None else str(r["version"]),
            r["consume_type"] or "",
            r["message_model"] or "",
            f"{r['consume_tps']:.2f}",
            str(r["total_lag"]),
        )
    rich_console().print(table)


def _connections_json(connections: Any) -> list[dict[str, Any]]:
    return [
        {
            "client_id": c.client_id,
            "client_addr": c.client_addr,
            "language": c.language,
            "version": c.version,
        }
        for c in connections
    ]


def _connections_table(title: str, connections: list[dict[str, Any]]) -> Any:
    table = new_table(
        title,
        [
            ("#", "right"),
            ("Client Id", "left"),
            ("Client Addr", "left"),
            ("Language", "left"),
            ("Version", "right"),
        ],
    )
    for i, c in enumerate(connections, 1):
        table.add_row(str(i), c["client_id"], c["client_addr"], c["language"], str(c["version"]))
    return table


@consumer_group.command("connection")
@namesrv_option
@click.option("--group", "-g", required=True, help="consumer group")
@json_option
def consumer_connection(namesrv: str, group: str, as_json: bool) -> None:
    """A group's online consumers, how it consumes and what it subscribes."""
    with admin_client(namesrv) as admin:
        cc = admin.examine_consumer_connection(group)
    doc = {
        "group": group,
        "connections": _connections_json(cc.connections),
        "consume_type": cc.consume_type,
        "message_model": cc.message_model,
        "consume_from_where": cc.consume_from_where,
        "subscriptions": {
            topic: {
                "sub_string": sub.get("subString"),
                "expression_type": sub.get("expressionType"),
                "sub_version": sub.get("subVersion"),
            }
            for topic, sub in sorted(cc.subscriptions.items())
        },
    }
    if as_json:
        dump_json(doc)
        return
    console = rich_console()
    console.print(_connections_table(f"consumer group {group}", doc["connections"]))
    subs = new_table("subscriptions", [("Topic", "left"), ("Expression", "left")])
    for topic, sub in doc["subscriptions"].items():
        subs.add_row(topic, str(sub["sub_string"]))
    console.print(subs)
    console.print(f"ConsumeType: {cc.consume_type}")
    console.print(f"MessageModel: {cc.message_model}")
    console.print(f"ConsumeFromWhere: {cc.consume_from_where}")


@consumer_group.command("reset-offset")
@namesrv_option
@click.option("--group", "-g", required=True, help="consumer group")
@click.option("--topic", "-t", required=True)
@click.option(
    "--timestamp",
    "--time",
    "-s",
    "when",
    required=True,
    help="store time: ms since the epoch, now, or yyyy-MM-dd#HH:mm:ss:SSS (local time), as "
    "mqadmin takes it; -1: the end of each queue",
)
@click.option(
    "--force/--no-force", default=None, help="also move offsets forward  [default: force]"
)
@mqadmin_bool("-f", "force_value", "the same as --force / --no-force")
@json_option
def consumer_reset_offset(
    namesrv: str,
    group: str,
    topic: str,
    when: str,
    force: bool | None,
    force_value: bool | None,
    as_json: bool,
) -> None:
    """Move a group's offsets on a topic to a point in time: online consumers are told by
    their brokers; an offline group's offsets are set directly."""
    try:
        timestamp = parse_timestamp(when)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="--timestamp") from None
    force = either(force, force_value, "--force and -f")
    force = True if force is None else force
    with admin_client(namesrv) as admin:
        online, table = admin.reset_consumer_offset(group, topic, timestamp, force=force)
    rows = [
        {"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id, "offset": o}
        for mq, o in sorted(table.items())
    ]
    if as_json:
        dump_json({"group": group, "topic": topic, "online": online, "queues": rows})
        return
    table_out = new_table(
        f"consumer group {group}: offsets reset "
        + ("by its online clients" if online else "(the group is not online)"),
        [("Topic", "left"), ("Broker Name", "left"), ("QID", "right"), ("Offset", "right")],
    )
    for row in rows:
        table_out.add_row(
            row["topic"], row["broker_name"], str(row["queue_id"]), str(row["offset"])
        )
    rich_console().print(table_out)


def _running_info_doc(client_id: str, info: Any) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "properties": dict(sorted(info.properties.items())),
        "subscriptions": info.subscriptions,
        "queues": [
            {
                "topic": mq.topic,
                "broker_name": mq.broker_name,
                "queue_id": mq.queue_id,
                **dataclasses.asdict(pq),
            }
            for mq, pq in sorted(info.mq_table.items())
        ],
        "status": {t: dataclasses.asdict(s) for t, s in sorted(info.status_table.items())},
    }


@consumer_group.command("status")
@namesrv_option
@click.option("--group", "-g", required=True, help="consumer group")
@click.option(
    "--client", "-i", "client_id", default=None, help="one client id (default: every online one)"
)
@json_option
def consumer_status(namesrv: str, group: str, client_id: str | None, as_json: bool) -> None:
    """What each online consumer of a group tells of itself (mqadmin consumerStatus /
    GET_CONSUMER_RUNNING_INFO): its settings, subscriptions, the queues it holds with their
    committed offsets, its pull and consume rates."""
    with admin_client(namesrv) as admin:
        if client_id is None:
            ids = [c.client_id for c in admin.examine_consumer_connection(group).connections]
        else:
            ids = [client_id]
        docs = [_running_info_doc(cid, admin.consumer_running_info(group, cid)) for cid in ids]
    if as_json:
        dump_json(docs)
        return
    console = rich_console()
    for doc in docs:
        console.print(f"[bold]{doc['client_id']}[/bold]")
        props = new_table("properties", [("Key", "left"), ("Value", "left")])
        for key, value in doc["properties"].items():
            props.add_row(key, value)
        console.print(props)
        subs = new_table("subscriptions", [("Topic", "left"), ("Expression", "left")])
        for sub in doc["subscriptions"]:
            subs.add_row(str(sub.get("topic")), str(sub.get("subString")))
        console.print(subs)
        queues = new_table(
            "queues",
            [
                ("Topic", "left"),
                ("Broker Name", "left"),
                ("QID", "right"),
                ("Commit Offset", "right"),
                ("Cached", "right"),
                ("Locked", "left"),
                ("Last Pull", "left"),
            ],
        )
        for q in doc["queues"]:
            queues.add_row(
                q["topic"],
                q["broker_name"],
                str(q["queue_id"]),
                str(q["commit_offset"]),
                str(q["cached_msg_count"]),
                yes(q["locked"]),
                show_time(q["last_pull_timestamp"]),
            )
        console.print(queues)
        rates = new_table(
            "rates",
            [
                ("Topic", "left"),
                ("Pull TPS", "right"),
                ("Pull RT", "right"),
                ("Consume OK TPS", "right"),
                ("Consume Failed TPS", "right"),
                ("Consume RT", "right"),
                ("Failed (1h)", "right"),
            ],
        )
        for topic, s in doc["status"].items():
            rates.add_row(
                topic,
                f"{s['pull_tps']:.2f}",
                f"{s['pull_rt']:.2f}",
                f"{s['consume_ok_tps']:.2f}",
                f"{s['consume_failed_tps']:.2f}",
                f"{s['consume_rt']:.2f}",
                str(s["consume_failed_msgs"]),
            )
        console.print(rates)


@consumer_group.command("clone-offset")
@namesrv_option
@click.option("--src-group", "-s", required=True, help="the group whose offsets are copied")
@click.option("--dest-group", "-d", required=True, help="the group that gets them")
@click.option("--topic", "-t", required=True)
@click.option(
    "--offline",
    "-o",
    type=click.BOOL,
    is_flag=False,
    flag_value=True,
    default=False,
    help="copy even when the online source group does not subscribe (--offline, or "
    "mqadmin's -o true|false)",
)
@json_option
def consumer_clone_offset(
    namesrv: str, src_group: str, dest_group: str, topic: str, offline: bool, as_json: bool
) -> None:
    """Copy a group's consumer offsets on a topic to another group, on every broker of the
    topic's route (mqadmin cloneGroupOffset)."""
    with admin_client(namesrv) as admin:
        brokers = admin.clone_group_offset(src_group, dest_group, topic, offline=offline)
    if as_json:
        dump_json(
            {"src_group": src_group, "dest_group": dest_group, "topic": topic, "brokers": brokers}
        )
        return
    for addr in brokers:
        click.echo(f"clone group offset success, {addr}: {src_group} -> {dest_group} on {topic}")


@click.group("producer", cls=ClientGroup)
def producer_group() -> None:
    """Producers: who is connected."""


@producer_group.command("connection")
@namesrv_option
@click.option("--group", "-g", required=True, help="producer group")
@click.option("--topic", "-t", default=None, help="ask the brokers of this topic's route")
@json_option
def producer_connection(namesrv: str, group: str, topic: str | None, as_json: bool) -> None:
    """A producer group's connected clients."""
    with admin_client(namesrv) as admin:
        found = admin.examine_producer_connection(group, topic)
    if not found:
        raise click.ClickException(
            f"no producer of group {group} is connected to any broker"
            + (f" of topic {topic}" if topic else "")
        )
    connections = _connections_json(found)
    if as_json:
        dump_json({"group": group, "connections": connections})
        return
    rich_console().print(_connections_table(f"producer group {group}", connections))


COMMANDS = [consumer_group, producer_group]
