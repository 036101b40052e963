"""JSON as RocketMQ's Java side writes it (fastjson): maps with integer keys are written with the
keys bare, ``{0:"127.0.0.1:10911"}``, which strict JSON parsers reject.

``dumps`` writes that form (the official C++ client parses route bodies in it), compact and
with map keys in the order given; ``loads`` reads it as well as strict JSON. Keys that were bare
integers come back as ``int``; quoted keys stay ``str``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BARE_INT_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?\d+)(\s*:)')
_encode_str = json.JSONEncoder(ensure_ascii=False).encode


def _quote_keys(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return match.group(1)
    return f'{match.group(2)}"{_BARE}{match.group(3)}"{match.group(4)}'


_BARE = "\x00"  # marks a key that was bare in the text (JSON text cannot hold a raw NUL)


def _int_keys(pairs: list[tuple[str, Any]]) -> dict[Any, Any]:
    """object_pairs_hook: keys that were bare integers become ints; quoted keys stay text
    (a topic may be named "123")."""
    return {int(k[1:]) if k[:1] == _BARE else k: v for k, v in pairs}


def loads(text: str | bytes) -> Any:
    """Parse strict JSON or fastjson's form with bare integer keys; ValueError when neither."""
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    return json.loads(
        _BARE_INT_KEY.sub(_quote_keys, text), object_pairs_hook=_int_keys, strict=False
    )


def dumps(obj: Any) -> str:
    """Compact JSON with integer map keys bare, as fastjson writes them."""
    parts: list[str] = []
    _write(obj, parts)
    return "".join(parts)


def _write(obj: Any, out: list[str]) -> None:
    if isinstance(obj, dict):
        out.append("{")
        first = True
        for key, value in obj.items():
            if not first:
                out.append(",")
            first = False
            if isinstance(key, bool) or not isinstance(key, int):
                out.append(_encode_str(str(key)))
            else:
                out.append(str(key))
            out.append(":")
            _write(value, out)
        out.append("}")
    elif isinstance(obj, list | tuple):
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _write(value, out)
        out.append("]")
    elif isinstance(obj, str):
        out.append(_encode_str(obj))
    else:
        out.append(json.dumps(obj))
