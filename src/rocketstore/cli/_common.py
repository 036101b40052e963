"""What several command groups of ``rocketstore`` share."""

from __future__ import annotations

import click


def parse_properties(items: tuple[str, ...]) -> dict[str, str]:
    """``--property name=value`` options as a dict; BadParameter for an item without ``=``."""
    properties = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not name=value", param_hint="--property")
        properties[name] = value
    return properties
