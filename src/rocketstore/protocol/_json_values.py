"""Values of the JSON bodies as RocketMQ's clients and servers write them: an integer may come
as a string, a boolean as ``"true"`` / ``"false"``. Pure functions, any thread."""

from __future__ import annotations

from typing import Any


def as_int(value: Any, name: str) -> int:
    """A JSON integer (or a string holding one, as some clients send); ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise ValueError(f"{name} is not an integer: {value!r}")


def as_bool(value: Any, name: str) -> bool:
    """A JSON boolean (or the string "true" / "false"); ValueError otherwise."""
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return bool(value == "true")
    raise ValueError(f"{name} is not a boolean: {value!r}")
