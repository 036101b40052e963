"""The administration commands of ``rocketstore`` (mqadmin's topic, cluster, consumer,
subscription-group and message commands): ``topic create|list|delete|route``, ``cluster list``,
``group update|delete|list``, ``consumer progress|connection|reset-offset``, ``producer connection``,
``consumer status|clone-offset``, ``broker-config get|update``, ``broker-perm wipe|add``,
``kv put|get|delete|list``, ``broker-stats``, ``namesrv-config get|update``, ``message query|view``. Tables go to standard output with rich; ``--json`` prints JSON instead.
A refused request or a broker out of reach ends the command with status 1 and the reason on
standard error (``_cli_errors``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ._common import either, mqadmin_bool, namesrv_option, parse_timestamp
from ._errors import ClientGroup

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")


def _admin(namesrv: str) -> Any:
    from ..client._admin import AdminClient

    return AdminClient(namesrv)


def _console() -> Any:
    import shutil

    from rich.console import Console

    return Console(soft_wrap=False, width=max(120, shutil.get_terminal_size().columns))


def _table(title: str, columns: list[tuple[str, str]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    return table


def _time(ms: int) -> str:
    if ms <= 0:
        return "N/A"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _dump(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False))


# ---- topic ----------------------------------------------------------------------------------


@click.group("topic", cls=ClientGroup)
def topic_group() -> None:
    """Create, list and delete topics (mqadmin updateTopic / topicList / deleteTopic)."""


@topic_group.command("create")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option(
    "--queues", type=click.IntRange(0), default=8, show_default=True, help="read and write queues"
)
@click.option(
    "--read-queues",
    "-r",
    type=click.IntRange(0),
    default=None,
    help="read queues (default --queues)",
)
@click.option(
    "--write-queues",
    "-w",
    type=click.IntRange(0),
    default=None,
    help="write queues (default --queues)",
)
@click.option(
    "--perm",
    "-p",
    type=click.IntRange(0, 15),
    default=6,
    show_default=True,
    help="2: W, 4: R, 6: RW",
)
@click.option(
    "--order",
    "-o",
    type=click.BOOL,
    is_flag=False,
    flag_value=True,
    default=False,
    help="an ordered topic (--order, or mqadmin's -o true|false)",
)
@click.option("--cluster", "-c", default=None, help="create on every master of this cluster")
@click.option("--broker", "-b", default=None, help="create on this broker HOST:PORT only")
def topic_create(
    namesrv: str,
    topic: str,
    queues: int,
    read_queues: int | None,
    write_queues: int | None,
    perm: int,
    order: bool,
    cluster: str | None,
    broker: str | None,
) -> None:
    """Create or update a topic on one broker, or on every master of a cluster (every master
    the name server knows when neither --cluster nor --broker is given)."""
    if cluster and broker:
        raise click.UsageError("give --cluster or --broker, not both")
    with _admin(namesrv) as admin:
        targets = [broker] if broker else sorted(admin.masters(cluster).values())
        if not targets:
            raise click.ClickException("no master broker to create the topic on")
        for addr in targets:
            admin.create_topic(
                addr,
                topic,
                read_queue_nums=queues if read_queues is None else read_queues,
                write_queue_nums=queues if write_queues is None else write_queues,
                perm=perm,
                order=order,
            )
            click.echo(f"create topic to {addr} success.")


@topic_group.command("list")
@namesrv_option
@json_option
def topic_list(namesrv: str, as_json: bool) -> None:
    """Every topic the name server has a route for."""
    with _admin(namesrv) as admin:
        topics = sorted(admin.topic_list())
    if as_json:
        _dump(topics)
    else:
        for topic in topics:
            click.echo(topic)


@topic_group.command("route")
@namesrv_option
@click.option("--topic", "-t", required=True)
@json_option
def topic_route(namesrv: str, topic: str, as_json: bool) -> None:
    """A topic's route: its queues on each broker group and the groups' addresses."""
    with _admin(namesrv) as admin:
        route = admin.route(topic)
    if route is None:
        from ..client._route import TopicNotFoundError

        raise TopicNotFoundError(topic)
    rows = []
    for qd in sorted(route.queue_data, key=lambda q: q["brokerName"]):
        name = qd["brokerName"]
        rows.append(
            {
                "broker_name": name,
                "addresses": {str(k): v for k, v in sorted(route.brokers.get(name, {}).items())},
                "read_queues": int(qd.get("readQueueNums", 0)),
                "write_queues": int(qd.get("writeQueueNums", 0)),
                "perm": int(qd.get("perm", 0)),
            }
        )
    if as_json:
        _dump({"topic": topic, "brokers": rows})
        return
    table = _table(
        f"route of {topic}",
        [
            ("Broker Name", "left"),
            ("Addresses", "left"),
            ("Read", "right"),
            ("Write", "right"),
            ("Perm", "right"),
        ],
    )
    for row in rows:
        addrs = ", ".join(f"{k}={v}" for k, v in row["addresses"].items())
        table.add_row(
            row["broker_name"],
            addrs,
            str(row["read_queues"]),
            str(row["write_queues"]),
            str(row["perm"]),
        )
    _console().print(table)


@topic_group.command("delete")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option(
    "--cluster",
    "-c",
    default=None,
    help="delete from this cluster (default: every broker of the topic's route)",
)
def topic_delete(namesrv: str, topic: str, cluster: str | None) -> None:
    """Delete a topic from the masters of a cluster, then from the name servers."""
    with _admin(namesrv) as admin:
        if cluster:
            targets = sorted(admin.masters(cluster).values())
        else:
            route = admin.route(topic)
            names = set(route.brokers) if route is not None else set()
            targets = sorted(a for n, a in admin.masters().items() if n in names)
        for addr in targets:
            admin.delete_topic_in_broker(addr, topic)
        where = f"cluster [{cluster}]" if cluster else f"{len(targets)} broker(s)"
        click.echo(f"delete topic [{topic}] from {where} success.")
        admin.delete_topic_in_namesrv(topic, cluster)
        click.echo(f"delete topic [{topic}] from NameServer success.")


# ---- cluster --------------------------------------------------------------------------------


@click.group("cluster", cls=ClientGroup)
def cluster_group() -> None:
    """The brokers the name servers know (mqadmin clusterList)."""


@cluster_group.command("list")
@namesrv_option
@click.option("--cluster", "-c", default=None, help="only this cluster")
@click.option("--no-stats", is_flag=True, help="do not ask each broker for its runtime info")
@json_option
def cluster_list(namesrv: str, cluster: str | None, no_stats: bool, as_json: bool) -> None:
    """Every broker: cluster, broker name, id, address, and (from the broker) version and
    put / get TPS."""
    from ..client import ClientError
    from ..remoting import RemotingError

    rows: list[dict[str, Any]] = []
    with _admin(namesrv) as admin:
        for b in admin.brokers(cluster):
            row: dict[str, Any] = {
                "cluster": b.cluster,
                "broker_name": b.broker_name,
                "broker_id": b.broker_id,
                "address": b.address,
            }
            if not no_stats:
                try:
                    info = admin.runtime_info(b.address)
                except (ClientError, RemotingError, ValueError) as exc:
                    row["error"] = str(exc)
                else:
                    row["version"] = info.get("brokerVersionDesc", "")
                    row["put_tps"] = _first_float(info.get("putTps", ""))
                    row["get_transferred_tps"] = _first_float(info.get("getTransferedTps", ""))
                    row["commit_log_max_offset"] = int(info.get("commitLogMaxOffset", 0) or 0)
                    if info.get("controllerRole"):  # controller mode
                        row["role"] = info["controllerRole"]
                        row["epoch"] = int(info.get("masterEpoch", -1) or -1)
                        row["sync_state_set"] = info.get("syncStateSet", "")
            rows.append(row)
    if as_json:
        _dump(rows)
        return
    columns = [("Cluster", "left"), ("Broker Name", "left"), ("BID", "right"), ("Addr", "left")]
    roles = any("role" in row for row in rows)
    if not no_stats:
        columns += [("Version", "left"), ("InTPS", "right"), ("OutTPS", "right")]
        if roles:
            columns += [("Role", "left"), ("Epoch", "right"), ("SyncStateSet", "left")]
    table = _table("brokers", columns)
    for row in rows:
        cells = [row["cluster"], row["broker_name"], str(row["broker_id"]), row["address"]]
        if not no_stats:
            if "error" in row:
                cells += ["unreachable", "-", "-"]
            else:
                cells += [
                    row["version"],
                    f"{row['put_tps']:.2f}",
                    f"{row['get_transferred_tps']:.2f}",
                ]
            if roles:
                cells += [
                    row.get("role", "-"),
                    str(row.get("epoch", "-")),
                    row.get("sync_state_set", "") or "-",
                ]
        table.add_row(*cells)
    _console().print(table)


def _first_float(text: str) -> float:
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return 0.0


# ---- group (subscription groups) ------------------------------------------------------------


@click.group("group", cls=ClientGroup)
def subscription_group() -> None:
    """Consumer groups' settings on brokers (mqadmin updateSubGroup / deleteSubGroup)."""


def _targets(admin: Any, cluster: str | None, broker: str | None) -> list[str]:
    """The broker given, or every master of the cluster (of every cluster when neither)."""
    if cluster and broker:
        raise click.UsageError("give --cluster or --broker, not both")
    targets = [broker] if broker else sorted(admin.masters(cluster).values())
    if not targets:
        raise click.ClickException("no master broker found")
    return targets


cluster_option = click.option(
    "--cluster", "-c", default=None, help="every master of this cluster (default: of every one)"
)
broker_option = click.option("--broker", "-b", default=None, help="this broker HOST:PORT only")
group_option = click.option("--group", "-g", required=True, help="consumer group")


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
    with _admin(namesrv) as admin:
        for addr in _targets(admin, cluster, broker):
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
    with _admin(namesrv) as admin:
        for addr in _targets(admin, cluster, broker):
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
    with _admin(namesrv) as admin:
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
        _dump(rows)
    else:
        table = _table(
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
                _yes(row["consume_enable"]),
                _yes(row["consume_message_orderly"]),
                _yes(row["consume_broadcast_enable"]),
                _yes(row["consume_from_min_enable"]),
                str(row["retry_queue_nums"]),
                str(row["retry_max_times"]),
                str(row["broker_id"]),
            )
        _console().print(table)
    if failed:
        sys.exit(1)


def _yes(flag: bool) -> str:
    return "true" if flag else "false"


# ---- consumer -------------------------------------------------------------------------------


@click.group("consumer", cls=ClientGroup)
def consumer_group() -> None:
    """Consumer groups (mqadmin consumerProgress)."""


@consumer_group.command("progress")
@namesrv_option
@click.option("--group", "-g", required=True, help="consumer group")
@click.option("--topic", "-t", default=None, help="only this topic")
@json_option
def consumer_progress(namesrv: str, group: str, topic: str | None, as_json: bool) -> None:
    """A group's progress on each queue: broker offset, consumer offset, lag, last time."""
    with _admin(namesrv) as admin:
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
        _dump(
            {
                "group": group,
                "consume_tps": stats.consume_tps,
                "total_lag": stats.total_lag(),
                "queues": queues,
            }
        )
        return
    table = _table(
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
            _time(q["last_timestamp"]),
        )
    console = _console()
    console.print(table)
    console.print(f"Consume TPS: {stats.consume_tps:.2f}")
    console.print(f"Total lag: {stats.total_lag()}")


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
    table = _table(
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
    with _admin(namesrv) as admin:
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
        _dump(doc)
        return
    console = _console()
    console.print(_connections_table(f"consumer group {group}", doc["connections"]))
    subs = _table("subscriptions", [("Topic", "left"), ("Expression", "left")])
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
    with _admin(namesrv) as admin:
        online, table = admin.reset_consumer_offset(group, topic, timestamp, force=force)
    rows = [
        {"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id, "offset": o}
        for mq, o in sorted(table.items())
    ]
    if as_json:
        _dump({"group": group, "topic": topic, "online": online, "queues": rows})
        return
    table_out = _table(
        f"consumer group {group}: offsets reset "
        + ("by its online clients" if online else "(the group is not online)"),
        [("Topic", "left"), ("Broker Name", "left"), ("QID", "right"), ("Offset", "right")],
    )
    for row in rows:
        table_out.add_row(
            row["topic"], row["broker_name"], str(row["queue_id"]), str(row["offset"])
        )
    _console().print(table_out)


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
    with _admin(namesrv) as admin:
        if client_id is None:
            ids = [c.client_id for c in admin.examine_consumer_connection(group).connections]
        else:
            ids = [client_id]
        docs = [_running_info_doc(cid, admin.consumer_running_info(group, cid)) for cid in ids]
    if as_json:
        _dump(docs)
        return
    console = _console()
    for doc in docs:
        console.print(f"[bold]{doc['client_id']}[/bold]")
        props = _table("properties", [("Key", "left"), ("Value", "left")])
        for key, value in doc["properties"].items():
            props.add_row(key, value)
        console.print(props)
        subs = _table("subscriptions", [("Topic", "left"), ("Expression", "left")])
        for sub in doc["subscriptions"]:
            subs.add_row(str(sub.get("topic")), str(sub.get("subString")))
        console.print(subs)
        queues = _table(
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
                _yes(q["locked"]),
                _time(q["last_pull_timestamp"]),
            )
        console.print(queues)
        rates = _table(
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
    with _admin(namesrv) as admin:
        brokers = admin.clone_group_offset(src_group, dest_group, topic, offline=offline)
    if as_json:
        _dump(
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
    with _admin(namesrv) as admin:
        found = admin.examine_producer_connection(group, topic)
    if not found:
        raise click.ClickException(
            f"no producer of group {group} is connected to any broker"
            + (f" of topic {topic}" if topic else "")
        )
    connections = _connections_json(found)
    if as_json:
        _dump({"group": group, "connections": connections})
        return
    _console().print(_connections_table(f"producer group {group}", connections))


# ---- broker and name-server settings, broker counters ---------------------------------------


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
    with _admin(namesrv) as admin:
        configs = {addr: admin.broker_config(addr) for addr in _targets(admin, cluster, broker)}
    if keys:
        configs = {a: {k: c[k] for k in keys if k in c} for a, c in configs.items()}
    if as_json:
        _dump(configs)
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
    with _admin(namesrv) as admin:
        for addr in _targets(admin, cluster, broker):
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
        with _admin(namesrv) as admin:
            if wipe:
                counts = admin.wipe_write_perm(broker_name)
            else:
                counts = admin.add_write_perm(broker_name)
        if as_json:
            _dump({"broker_name": broker_name, "topic_counts": counts})
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
    with _admin(namesrv) as admin:
        admin.put_kv_config(namespace, key, value)
    if as_json:
        _dump({"namespace": namespace, "key": key, "value": value, "namesrv": admin.namesrv_addrs})
        return
    click.echo(f"update kv config in namespace {namespace} success")


@kv_group.command("delete")
@namesrv_option
@namespace_option
@key_option
@json_option
def kv_delete(namesrv: str, namespace: str, key: str, as_json: bool) -> None:
    """Remove a value from every name server."""
    with _admin(namesrv) as admin:
        admin.delete_kv_config(namespace, key)
    if as_json:
        _dump({"namespace": namespace, "key": key, "namesrv": admin.namesrv_addrs})
        return
    click.echo(f"delete kv config in namespace {namespace} success")


@kv_group.command("get")
@namesrv_option
@namespace_option
@key_option
@json_option
def kv_get(namesrv: str, namespace: str, key: str, as_json: bool) -> None:
    """One value (from the first name server that answers)."""
    with _admin(namesrv) as admin:
        value = admin.get_kv_config(namespace, key)
    if value is None:
        raise click.ClickException(f"No config item, Namespace: {namespace} Key: {key}")
    if as_json:
        _dump({"namespace": namespace, "key": key, "value": value})
        return
    click.echo(value)


@kv_group.command("list")
@namesrv_option
@namespace_option
@json_option
def kv_list(namesrv: str, namespace: str, as_json: bool) -> None:
    """Every value of a namespace."""
    with _admin(namesrv) as admin:
        table = admin.kv_list(namespace)
    if table is None:
        raise click.ClickException(f"No config item, Namespace: {namespace}")
    if as_json:
        _dump({"namespace": namespace, "table": dict(sorted(table.items()))})
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
    with _admin(namesrv) as admin:
        for addr in _targets(admin, cluster, broker):
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
        _dump(rows)
        return
    table = _table(
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
    _console().print(table)


@click.group("namesrv-config", cls=ClientGroup)
def namesrv_config_group() -> None:
    """The name servers' settings."""


@namesrv_config_group.command("get")
@namesrv_option
@json_option
def namesrv_config_get(namesrv: str, as_json: bool) -> None:
    """GET_NAMESRV_CONFIG of every name server given."""
    with _admin(namesrv) as admin:
        configs = admin.namesrv_configs()
    if as_json:
        _dump(configs)
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
    with _admin(namesrv) as admin:
        admin.update_namesrv_config({key: value})
    click.echo(f"update name server config success: {key}={value}")


# ---- message --------------------------------------------------------------------------------


@click.group("message", cls=ClientGroup)
def message_group() -> None:
    """Find messages by key or by id (mqadmin queryMsgByKey / queryMsgById)."""


def _message_doc(m: Any) -> dict[str, Any]:
    return {
        "offset_msg_id": m.msg_id,
        "msg_id": m.properties.get("UNIQ_KEY", ""),
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commitlog_offset": m.commitlog_offset,
        "tags": m.tags,
        "keys": list(m.keys),
        "store_timestamp": m.store_timestamp,
        "born_timestamp": m.born_timestamp,
        "store_host": _host(m.store_host),
        "reconsume_times": m.reconsume_times,
        "properties": dict(m.properties),
        "body": m.body.decode("utf-8", "replace"),
    }


def _host(raw: Any) -> str:
    from ..store.log._record import unpack_host

    if isinstance(raw, bytes | bytearray | memoryview) and len(raw) in (8, 20):
        return unpack_host(bytes(raw))
    return str(raw)


@message_group.command("query")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--key", "-k", required=True, help="a message key (or, with --unique, a msg id)")
@click.option("--unique", is_flag=True, help="KEY is the client's message id (UNIQ_KEY)")
@click.option("--max", "max_num", type=click.IntRange(1), default=32, show_default=True)
@click.option("--begin", type=int, default=0, help="store time from (ms)")
@click.option("--end", type=int, default=2**63 - 1, help="store time to (ms)")
@json_option
def message_query(
    namesrv: str,
    topic: str,
    key: str,
    unique: bool,
    max_num: int,
    begin: int,
    end: int,
    as_json: bool,
) -> None:
    """Messages of a topic by key, from every broker of its route."""
    with _admin(namesrv) as admin:
        msgs = admin.query_message(
            topic, key, max_num=max_num, begin=begin, end=end, unique_key=unique
        )
    if as_json:
        _dump([_message_doc(m) for m in msgs])
        return
    if not msgs:
        raise click.ClickException(f"no message of topic {topic} with key {key}")
    table = _table(
        f"messages of {topic} with key {key}",
        [
            ("Offset Message ID", "left"),
            ("QID", "right"),
            ("Offset", "right"),
            ("Tags", "left"),
            ("Keys", "left"),
            ("Store Time", "left"),
            ("Body", "left"),
        ],
    )
    for m in msgs:
        body = m.body.decode("utf-8", "replace")
        table.add_row(
            m.msg_id,
            str(m.queue_id),
            str(m.queue_offset),
            m.tags or "",
            " ".join(m.keys),
            _time(m.store_timestamp),
            body if len(body) <= 60 else body[:57] + "...",
        )
    _console().print(table)


@message_group.command("view")
@namesrv_option
@click.option(
    "--broker",
    "-b",
    default=None,
    help="broker HOST:PORT (default: the one the id names, if the name server knows it)",
)
@click.option(
    "--topic", "-t", default=None, help="the topic, to look the id up as the client's (UNIQ_KEY)"
)
@click.option(
    "--msg-id",
    "--offset-msg-id",
    "-i",
    "msg_id",
    required=True,
    help="the offset message id, or the client's message id (UNIQ_KEY) with --topic",
)
@json_option
def message_view(
    namesrv: str, broker: str | None, topic: str | None, msg_id: str, as_json: bool
) -> None:
    """One message by its id (mqadmin queryMsgById / queryMsgByUniqueKey): an offset message id
    (store address + commit-log offset) is read from that broker when the name server knows it
    (or it is --broker); any other id is looked up as the client's message id in --topic's index
    on the topic's brokers. No connection is made to an address the name server did not name."""
    with _admin("" if broker else namesrv) as admin:
        msg = admin.find_message(msg_id, topic=topic, broker=broker)
    doc = _message_doc(msg)
    if as_json:
        _dump(doc)
        return
    width = max(len(k) for k in doc)
    for k, v in doc.items():
        click.echo(f"{k:<{width}}  {v}")


COMMANDS = [
    topic_group,
    cluster_group,
    subscription_group,
    consumer_group,
    producer_group,
    broker_config_group,
    broker_perm_group,
    kv_group,
    broker_stats,
    namesrv_config_group,
    message_group,
]
