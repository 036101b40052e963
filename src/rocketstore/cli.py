"""The ``rocketstore`` command."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from . import Message, MessageStore, StoreConfig


def store_config(store: str, conf: str | None, **overrides: Any) -> StoreConfig:
    """A StoreConfig from a broker.conf (optional) with the store directory and overrides."""
    import dataclasses

    base = StoreConfig.from_broker_conf(conf) if conf else StoreConfig()
    return dataclasses.replace(base, store_path_root_dir=store, **overrides)


store_option = click.option(
    "--store", "store", default="store", show_default=True, help="store directory"
)
conf_option = click.option("--conf", default=None, help="a RocketMQ broker.conf to read settings from")


@click.group()
@click.version_option(package_name="rocketstore")
def main() -> None:
    """rocketstore: Apache RocketMQ's message store in Python."""


@main.command()
@store_option
@conf_option
@click.option("--topic", required=True)
@click.option("--queue", "queue_id", default=0, show_default=True, type=int)
@click.option("--tags", default=None)
@click.option("--key", "keys", multiple=True, help="a message key (repeatable)")
@click.option("--property", "props", multiple=True, help="name=value (repeatable)")
@click.option("--delay", default=0, type=int, help="delay level (0: none)")
@click.argument("body", required=False)
def put(
    store: str, conf: str | None, topic: str, queue_id: int, tags: str | None,
    keys: tuple[str, ...], props: tuple[str, ...], delay: int, body: str | None,
) -> None:
    """Put one message (BODY, or standard input when BODY is omitted)."""
    properties = {}
    for item in props:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not name=value", param_hint="--property")
        properties[name] = value
    if delay:
        properties["DELAY"] = str(delay)
    data = body.encode() if body is not None else sys.stdin.buffer.read()
    with MessageStore(store_config(store, conf)) as ms:
        r = ms.put_message(
            Message(topic, data, queue_id, tags=tags, keys=list(keys) or None, properties=properties)
        )
    out = {
        "status": r.status.name, "msg_id": r.msg_id, "wrote_offset": r.wrote_offset,
        "wrote_bytes": r.wrote_bytes, "queue_offset": r.queue_offset,
        "store_timestamp": r.store_timestamp,
    }
    if r.error:
        out["error"] = r.error
    click.echo(json.dumps(out))
    if not r.ok:
        sys.exit(1)


@main.command()
@click.option("--store", "store", default="store", show_default=True, help="scratch store directory")
@click.option("--scenario", "names", multiple=True, help="run only these scenarios (repeatable)")
@click.option("--messages", "count", default=None, type=int, help="messages per scenario")
@click.option("--json", "as_json", is_flag=True, help="print figures as JSON")
@click.option("--list", "list_only", is_flag=True, help="list the scenarios and exit")
def bench(store: str, names: tuple[str, ...], count: int | None, as_json: bool, list_only: bool) -> None:
    """Write and read back messages and print figures (msgs/s, MB/s, ratio to the floor)."""
    from .bench import load_all
    from .bench._runner import run_scenarios

    scenarios = load_all()
    if list_only:
        for s in scenarios.values():
            click.echo(f"{s.name:28} {s.area:10} {s.description}")
        return
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        raise click.BadParameter(f"unknown scenario(s): {', '.join(unknown)}", param_hint="--scenario")
    sys.exit(run_scenarios(scenarios, names, store, count, as_json))


if __name__ == "__main__":
    main()
