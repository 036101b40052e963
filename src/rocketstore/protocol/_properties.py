"""Java properties text as RocketMQ's admin requests carry it (MixAll.string2Properties and
properties2String): UPDATE_BROKER_CONFIG's and UPDATE_NAMESRV_CONFIG's bodies, the
``key=value`` lines of GET_BROKER_CONFIG and GET_NAMESRV_CONFIG.

Lines: ``key=value`` or ``key:value`` (space around the key trimmed, leading space of the
value too, trailing space kept as Java's Properties keeps it); blank lines and lines starting
with ``#`` or ``!`` are skipped.

Typed values are read as RocketMQ reads them (``java_int``, ``java_bool``): an integer is
ASCII digits with an optional sign and nothing else, as Integer.parseInt / Long.parseLong take
it (Python's ``int()`` would also take ``" 12 "``, ``"1_000"`` or ``"٨"``); a boolean is
``true`` or ``false`` (any case), where Boolean.parseBoolean reads anything else as false
silently: refused here. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..store._config import comment_hint

# RocketMQ's config black lists: keys no admin request may change
NAMESRV_BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath"})
BROKER_BLACK_LIST = frozenset({"brokerConfigPath", "rocketmqHome", "configBlackList"})
BLACK_LIST_REMARK = "Can not update config in black list."


class PropertiesError(ValueError):
    """A body that is not properties text."""


_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")  # [0-9]: ASCII digits only
JAVA_INT_RANGE = (-(2**31), 2**31 - 1)
JAVA_LONG_RANGE = (-(2**63), 2**63 - 1)


def java_int(text: str, lo: int = JAVA_INT_RANGE[0], hi: int = JAVA_INT_RANGE[1]) -> int:
    """``text`` as Integer.parseInt (Long.parseLong with the long range) reads it, within
    [lo, hi]; ValueError (saying why) for anything else."""
    if not _JAVA_INTEGER.fullmatch(text):
        raise ValueError(
            f"{text!r} is not an integer (ASCII digits with an optional sign){comment_hint(text)}"
        )
    value = int(text)
    if not lo <= value <= hi:
        raise ValueError(f"{value} is not within [{lo}, {hi}]")
    return value


def java_bool(text: str) -> bool:
    """``true`` or ``false`` (any case); ValueError for anything else."""
    low = text.lower()
    if low not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false{comment_hint(text)}")
    return low == "true"


def parse_properties(body: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """The key → value pairs of a properties text, in order; PropertiesError when it is not
    UTF-8 or a line has no key."""
    if isinstance(body, str):
        text = body
    else:
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PropertiesError(f"not UTF-8 text: {exc}") from None
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip()
        if not line.strip() or line[0] in "#!":
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not seps:
            raise PropertiesError(f"line {lineno}: expected key=value, got {line!r:.80}")
        sep = min(seps)
        key = line[:sep].strip()
        if not key:
            raise PropertiesError(f"line {lineno}: no key in {line!r:.80}")
        out[key] = line[sep + 1 :].lstrip()
    return out


def format_properties(values: Mapping[str, str]) -> str:
    """``key=value`` lines, sorted by key, each ending in a newline."""
    return "".join(f"{k}={values[k]}\n" for k in sorted(values))
