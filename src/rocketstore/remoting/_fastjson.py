"""JSON as RocketMQ's Java side writes it (fastjson): maps with integer keys are written with the
keys bare, ``{0:"127.0.0.1:10911"}``, which strict JSON parsers reject.

``dumps`` writes that form (the official C++ client parses route bodies in it), compact and
with map keys in the order given; ``loads`` reads it as well as strict JSON. Keys that were bare
integers come back as ``int``; quoted keys stay ``str``.

Both run on the json module's C code: ``dumps`` renames integer keys to a marked text (a NUL,
then the digits), encodes, and unquotes the marked keys (a text key that looks the same sends
it to a slower writer); ``loads`` quotes bare keys with a control character that the text does
not hold, raw or escaped, and turns them back into integers while parsing. The quick pass
takes every ``{5:`` for a key; one inside a string leaves the mark outside the string, where
it fails the parse, and a slower pass that skips strings runs instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_BARE = "\x00"  # dumps' mark of an integer key (its JSON text: \\u0000)
_NAIVE_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")
_BARE_INT_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?\d+)(\s*:)')
_MARKED_KEY = re.compile(r'"\\u0000(-?\d+)":')
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_encode_str = json.JSONEncoder(ensure_ascii=False).encode


# control characters JSON writes only as \\u00XX: a key may carry one (escaped), so the mark is
# one that the text does not hold, raw or escaped
_MARKS = [chr(c) for c in (*range(0, 8), 11, *range(14, 32))]


def _mark_for(text: str) -> str | None:
    lowered = text.lower() if "\\u" in text or "\\U" in text else ""
    for mark in _MARKS:
        if mark not in text and f"\\u{ord(mark):04x}" not in lowered:
            return mark
    return None


def _int_keys(mark: str) -> Callable[[list[tuple[str, Any]]], dict[Any, Any]]:
    """An object_pairs_hook: keys that carry ``mark`` were bare integers and become ints;
    quoted keys stay text (a topic may be named "123")."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[Any, Any]:
        return {int(k[1:]) if k[:1] == mark else k: v for k, v in pairs}

    return hook


def loads(text: str | bytes | bytearray | memoryview) -> Any:
    """Parse strict JSON or fastjson's form with bare integer keys; ValueError when neither."""
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    mark = _mark_for(text)
    if mark is None:
        raise ValueError("JSON text holding every control character: cannot mark its keys")
    hook = _int_keys(mark)
    try:
        # quick: every "{5:" or ",5:" is taken for a key; one inside a string leaves the mark
        # outside any string, where a control character fails the parse
        quoted = _NAIVE_KEY.sub(f'\\1"{mark}\\2"\\3', text)
        return json.loads(quoted, object_pairs_hook=hook, strict=False)
    except json.JSONDecodeError:
        pass

    def quote_keys(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return match.group(1)
        return f'{match.group(2)}"{mark}{match.group(3)}"{match.group(4)}'

    return json.loads(_BARE_INT_KEY.sub(quote_keys, text), object_pairs_hook=hook, strict=False)


def dumps(obj: Any) -> str:
    """Compact JSON with integer map keys bare, as fastjson writes them."""
    marked: list[int] = []
    text = _ENCODER.encode(_mark(obj, marked))
    if not marked:
        return text
    text, n = _MARKED_KEY.subn(r"\1:", text)
    if n != len(marked):  # a text key that looked like a marked one: write it the slow way
        parts: list[str] = []
        _write(obj, parts)
        return "".join(parts)
    return text


def _mark(obj: Any, marked: list[int]) -> Any:
    """``obj`` with integer keys as marked text and other keys as text (tuples as lists)."""
    if isinstance(obj, dict):
        return {
            (k if type(k) is str else _key(k, marked)): _mark(v, marked) for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [_mark(v, marked) for v in obj]
    return obj


def _key(key: Any, marked: list[int]) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        marked.append(0)
        return f"{_BARE}{int(key)}"
    return str(key)


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
                out.append(str(int(key)))
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
