"""Topics: ``topic create|list|delete|route`` (mqadmin updateTopic / topicList / deleteTopic /
topicRoute)."""

from __future__ import annotations

import click

from ._admin_common import admin_client, dump_json, json_option, new_table, rich_console
from ._common import namesrv_option
from ._errors import ClientGroup


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
    with admin_client(namesrv) as admin:
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
    with admin_client(namesrv) as admin:
        topics = sorted(admin.topic_list())
    if as_json:
        dump_json(topics)
    else:
        for topic in topics:
            click.echo(topic)


@topic_group.command("route")
@namesrv_option
@click.option("--topic", "-t", required=True)
@json_option
def topic_route(namesrv: str, topic: str, as_json: bool) -> None:
    """A topic's route: its queues on each broker group and the groups' addresses."""
    with admin_client(namesrv) as admin:
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
        dump_json({"topic": topic, "brokers": rows})
        return
    table = new_table(
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
    rich_console().print(table)


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
    with admin_client(namesrv) as admin:
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


COMMANDS = [topic_group]
