"""``rocketstore bench``: write and read back messages and print figures."""

from __future__ import annotations

import sys

import click


@click.command()
@click.option(
    "--store",
    "store",
    default=None,
    help="directory for the scratch stores (default: a new temporary one, removed afterwards)",
)
@click.option("--scenario", "names", multiple=True, help="run only these scenarios (repeatable)")
@click.option("--messages", "count", default=None, type=int, help="messages per scenario")
@click.option("--json", "as_json", is_flag=True, help="print figures as JSON")
@click.option("--list", "list_only", is_flag=True, help="list the scenarios and exit")
@click.option("--all", "run_all", is_flag=True, help="every scenario but the Spark ones")
def bench(
    store: str | None,
    names: tuple[str, ...],
    count: int | None,
    as_json: bool,
    list_only: bool,
    run_all: bool,
) -> None:
    """Write and read back messages and print figures (msgs/s, MB/s, ratio to the floor)."""
    from ..bench import load_all
    from ..bench._runner import BenchDirectoryError, run_scenarios

    scenarios = load_all()
    if list_only:
        for s in scenarios.values():
            click.echo(f"{s.name:28} {s.area:10} {s.description}")
        return
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        raise click.BadParameter(
            f"unknown scenario(s): {', '.join(unknown)}", param_hint="--scenario"
        )
    try:
        status = run_scenarios(scenarios, names, store, count, as_json, run_all)
    except BenchDirectoryError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(status)


COMMANDS = [bench]
