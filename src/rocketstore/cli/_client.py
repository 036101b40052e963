"""The client commands of ``rocketstore``: produce and consume, through the brokers."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ._common import namesrv_option, parse_properties, topic_option
from ._errors import ClientCommand


@click.command("produce", cls=ClientCommand)
@namesrv_option
@topic_option()
@click.option("--tags", default=None)
@click.option("--key", "-k", "keys", multiple=True, help="a message key (repeatable)")
@click.option("--property", "props", multiple=True, help="name=value (repeatable)")
@click.option("--delay", default=0, type=int, help="delay level (0: none)")
@click.option("--group", "-g", default="rocketstore-producer", show_default=True)
@click.argument("body", required=False)
def produce_cmd(
    namesrv: str,
    topic: str,
    tags: str | None,
    keys: tuple[str, ...],
    props: tuple[str, ...],
    delay: int,
    group: str,
    body: str | None,
) -> None:
    """Send BODY, or every line of standard input as a message, through the brokers."""
    from ..client import Producer

    properties = parse_properties(props)
    bodies = (
        [body.encode()] if body is not None else (line.rstrip(b"\n") for line in sys.stdin.buffer)
    )
    failed = 0
    with Producer(namesrv, group) as producer:
        for data in bodies:
            r = producer.send(
                topic,
                data,
                tags=tags,
                keys=list(keys) or None,
                properties=properties,
                delay_level=delay,
            )
            click.echo(
                json.dumps(
                    {
                        "status": r.status,
                        "msg_id": r.msg_id,
                        "offset_msg_id": r.offset_msg_id,
                        "broker": r.queue.broker_name,
                        "queue_id": r.queue.queue_id,
                        "queue_offset": r.queue_offset,
                    }
                )
            )
            failed += r.status != "SEND_OK"
    if failed:
        sys.exit(1)


@click.command("consume", cls=ClientCommand)
@namesrv_option
@topic_option()
@click.option("--group", "-g", default="rocketstore-console", show_default=True)
@click.option("--tags", "expression", default="*", show_default=True, help='e.g. "TagA || TagB"')
@click.option("--from-beginning", is_flag=True, help="start at each queue's minimum offset")
@click.option("--max-messages", type=int, default=None, help="stop after this many")
@click.option("--timeout", type=float, default=None, help="stop after this many idle seconds")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per message")
@click.option("--no-commit", is_flag=True, help="do not store the group's offsets")
def consume_cmd(
    namesrv: str,
    topic: str,
    group: str,
    expression: str,
    from_beginning: bool,
    max_messages: int | None,
    timeout: float | None,
    as_json: bool,
    no_commit: bool,
) -> None:
    """Print a topic's messages as they arrive (every queue, long polling), keeping the group's
    offsets on the brokers. A broker that restarts is waited for; the consumer goes on from its
    offsets."""
    from ..client import PullConsumer
    from ._consume import TopicTail

    with PullConsumer(namesrv, group) as consumer:
        tail = TopicTail(
            consumer,
            topic,
            expression=expression,
            from_beginning=from_beginning,
            commit=not no_commit,
            emit=lambda m: _print_message(m, as_json),
            warn=lambda line: click.echo(line, err=True),
            flush=sys.stdout.flush,
        )
        tail.run(max_messages=max_messages, idle_timeout=timeout)


def _print_message(m: Any, as_json: bool) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "topic": m.topic,
                    "queue_id": m.queue_id,
                    "queue_offset": m.queue_offset,
                    "msg_id": m.properties.get("UNIQ_KEY") or m.msg_id,
                    "tags": m.tags,
                    "keys": m.keys,
                    "body": m.body.decode("utf-8", "replace"),
                    "store_timestamp": m.store_timestamp,
                }
            )
        )
    else:
        click.echo(m.body.decode("utf-8", "replace"))


COMMANDS = [produce_cmd, consume_cmd]
