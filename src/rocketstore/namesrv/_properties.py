"""Java properties text as RocketMQ's admin requests carry it (MixAll.string2Properties and
properties2String): UPDATE_BROKER_CONFIG's and UPDATE_NAMESRV_CONFIG's bodies, the
``key=value`` lines of GET_BROKER_CONFIG and GET_NAMESRV_CONFIG.

Lines: ``key=value`` or ``key:value`` (space around the key trimmed, leading space of the
value too); blank lines and lines starting with ``#`` or ``!`` are skipped. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping

# RocketMQ's config black lists: keys no admin request may change
NAMESRV_BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath"})
BROKER_BLACK_LIST = frozenset({"brokerConfigPath", "rocketmqHome", "configBlackList"})
BLACK_LIST_REMARK = "Can not update config in black list."


class PropertiesError(ValueError):
    """A body that is not properties text."""


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
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not seps:
            raise PropertiesError(f"line {lineno}: expected key=value, got {line!r:.80}")
        sep = min(seps)
        key = line[:sep].strip()
        if not key:
            raise PropertiesError(f"line {lineno}: no key in {line!r:.80}")
        out[key] = line[sep + 1 :].strip()
    return out


def format_properties(values: Mapping[str, str]) -> str:
    """``key=value`` lines, sorted by key, each ending in a newline."""
    return "".join(f"{k}={values[k]}\n" for k in sorted(values))
