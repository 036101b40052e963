"""What the administration commands share: the admin client, rich tables, JSON output, the
broker targets of a command and its common options. Tables go to standard output with rich;
``--json`` prints JSON instead. A refused request or a broker out of reach ends a command with
status 1 and the reason on standard error (``_errors``)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")


def admin_client(namesrv: str) -> Any:
    from ..client._admin import AdminClient

    return AdminClient(namesrv)


def rich_console() -> Any:
    import shutil

    from rich.console import Console

    return Console(soft_wrap=False, width=max(120, shutil.get_terminal_size().columns))


def new_table(title: str, columns: list[tuple[str, str]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    return table


def show_time(ms: int) -> str:
    if ms <= 0:
        return "N/A"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def dump_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False))


def targets(admin: Any, cluster: str | None, broker: str | None) -> list[str]:
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


def yes(flag: bool) -> str:
    return "true" if flag else "false"
