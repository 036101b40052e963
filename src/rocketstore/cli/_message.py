"""Messages: ``message query|view`` (mqadmin queryMsgByKey / queryMsgById / queryMsgByUniqueKey)."""

from __future__ import annotations

from typing import Any

import click

from ._admin_common import admin_client, dump_json, json_option, new_table, rich_console, show_time
from ._common import namesrv_option
from ._errors import ClientGroup


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
    with admin_client(namesrv) as admin:
        msgs = admin.query_message(
            topic, key, max_num=max_num, begin=begin, end=end, unique_key=unique
        )
    if as_json:
        dump_json([_message_doc(m) for m in msgs])
        return
    if not msgs:
        raise click.ClickException(f"no message of topic {topic} with key {key}")
    table = new_table(
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
            show_time(m.store_timestamp),
            body if len(body) <= 60 else body[:57] + "...",
        )
    rich_console().print(table)


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
    with admin_client("" if broker else namesrv) as admin:
        msg = admin.find_message(msg_id, topic=topic, broker=broker)
    doc = _message_doc(msg)
    if as_json:
        dump_json(doc)
        return
    width = max(len(k) for k in doc)
    for k, v in doc.items():
        click.echo(f"{k:<{width}}  {v}")


COMMANDS = [message_group]
