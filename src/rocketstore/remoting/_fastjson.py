"""fastjson's text forms: JSON as RocketMQ's Java side writes and reads it.

fastjson departs from strict JSON in its map keys: a Java integer key is written bare,
``{0:"127.0.0.1:10911"}``, and a bean key as an object, ``{{"brokerName":"b",...}:{...}}``;
strict JSON parsers reject both. This module owns every form the project writes or reads:

Writing, every map in the order given (build beans with their fields sorted by name, as fastjson
does), ``int`` keys bare, tuple-of-pairs keys as objects, other keys quoted:

- :func:`dumps` compact (the official C++ client parses route bodies in it);
- ``dumps(obj, pretty=True)`` as SerializerFeature.PrettyFormat writes the broker's config files:
  tab indentation, no space after ``:``, no trailing newline; an entry with a text key goes on a
  line of its own, one with an integer key stays on the line before, and a non-empty map or list
  closes on a new line::

      {
      \t"offsetTable":{
      \t\t"TopicTest@G1":{0:250,1:248
      \t\t}
      \t}
      }

- ``dumps(obj, floats=...)`` with a float writer of the caller's (Java's ``Double.toString``);
- :func:`dumps_standard` the standard form (BrowserCompatible and MapSortField): every map
  sorted by key, every key quoted, ``/``, control characters and everything from U+007F on
  escaped.

Reading:

- :func:`loads` strict JSON or bare integer keys, which come back as ``int`` (quoted keys stay
  ``str``: a topic may be named "123");
- :func:`loads_lenient` the same, bare keys coming back as text (``{"0": 5}``), as the broker's
  config files are read;
- :func:`loads_object_keys` any of those plus object keys, which come back as tuples of their
  (name, value) pairs so they can be dict keys; number keys come back as numbers.

The compact writer and :func:`loads` run on the json module's C code: ``dumps`` renames integer
keys to a marked text (a NUL, then the digits), encodes, and unquotes the marked keys (a text
key that looks the same, an object key or a float writer of the caller's sends it to the slower
writer); ``loads`` quotes bare keys with a control character that the text does not hold, raw or
escaped, and turns them back into integers while parsing. The quick pass takes every ``{5:`` for
a key; one inside a string leaves the mark outside the string, where it fails the parse, and a
slower pass that skips strings runs instead.

Pure functions; any thread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

_BARE = "\x00"  # dumps' mark of an integer key (its JSON text: \\u0000)
_NAIVE_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")
# a string literal (consumed whole, so nothing inside it is touched) or a bare integer map key
_BARE_INT_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)
_MARKED_KEY = re.compile(r'"\\u0000(-?\d+)":')
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_encode_str = json.JSONEncoder(ensure_ascii=False).encode
_float_text = json.JSONEncoder().encode  # repr, and NaN / Infinity as the json module writes them


# ---- reading --------------------------------------------------------------------------------

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
    """Parse strict JSON or fastjson's form with bare integer keys; ValueError when neither
    (or when it is nested deeper than Python's recursion limit: bad input too)."""
    try:
        return _loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _loads(text: str | bytes | bytearray | memoryview) -> Any:
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


def _quote_key(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return match.group(1)
    return f'{match.group(2)}"{match.group(3)}"{match.group(4)}'


def loads_lenient(text: str) -> Any:
    """Parse JSON that may have fastjson's bare integer map keys (``{0:5,1:3}``); such keys come
    back as text (``{"0": 5, "1": 3}``), as quoted ones do. ValueError
    (``json.JSONDecodeError``) for anything else that is not JSON, or nested too deeply."""
    try:
        return json.loads(_BARE_INT_KEY.sub(_quote_key, text))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))
_ScanString = Callable[[str, int, bool], tuple[str, int]]
_scanstring: _ScanString = json.decoder.scanstring  # type: ignore[attr-defined]


def loads_object_keys(text: str) -> Any:
    """Parse fastjson's text: strict JSON plus map keys that are numbers or objects. Object
    keys become tuples of (name, value) pairs (arrays in them tuples); number keys become
    numbers. ValueError (or RecursionError) when the text does not parse."""
    parser = _Parser(text)
    try:
        value = parser.value()
        parser.skip_ws()
    except IndexError:
        raise ValueError(f"text ends early at {parser.pos}") from None
    if parser.pos != len(text):
        raise ValueError(f"extra data at {parser.pos}")
    return value


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


class _Parser:
    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip_ws(self) -> None:
        m = _WS.match(self.text, self.pos)
        assert m is not None  # the pattern matches the empty string
        self.pos = m.end()

    def value(self) -> Any:
        self.skip_ws()
        text, pos = self.text, self.pos
        ch = text[pos]
        if ch == "{":
            return self._object()
        if ch == "[":
            return self._array()
        if ch == '"':
            s, self.pos = _scanstring(text, pos + 1, True)
            return s
        for word, literal in _LITERALS:
            if text.startswith(word, pos):
                self.pos = pos + len(word)
                return literal
        m = _NUMBER.match(text, pos)
        if m is None:
            raise ValueError(f"unexpected {ch!r} at {pos}")
        self.pos = m.end()
        if m.group(1) or m.group(2):
            return float(m.group(0))
        return int(m.group(0))

    def _expect(self, ch: str) -> None:
        self.skip_ws()
        if self.text[self.pos] != ch:
            raise ValueError(f"expected {ch!r} at {self.pos}")
        self.pos += 1

    def _object(self) -> dict[Any, Any]:
        self.pos += 1
        out: dict[Any, Any] = {}
        self.skip_ws()
        if self.text[self.pos] == "}":
            self.pos += 1
            return out
        while True:
            key = _hashable(self.value())
            self._expect(":")
            out[key] = self.value()
            self.skip_ws()
            ch = self.text[self.pos]
            self.pos += 1
            if ch == "}":
                return out
            if ch != ",":
                raise ValueError(f"expected ',' or '}}' at {self.pos - 1}")

    def _array(self) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        self.skip_ws()
        if self.text[self.pos] == "]":
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.skip_ws()
            ch = self.text[self.pos]
            self.pos += 1
            if ch == "]":
                return out
            if ch != ",":
                raise ValueError(f"expected ',' or ']' at {self.pos - 1}")


# ---- writing --------------------------------------------------------------------------------


class _Form(NamedTuple):
    """How the slow writer writes: ``standard`` sorts every map and quotes every key;
    otherwise maps keep their order, ``int`` keys go bare and tuple keys become objects."""

    pretty: bool
    standard: bool
    string: Callable[[str], str]
    floats: Callable[[float], str]


class _NeedsSlowWriter(Exception):
    """An object key: the C encoder cannot write it."""


def dumps(obj: Any, *, pretty: bool = False, floats: Callable[[float], str] | None = None) -> str:
    """fastjson's text of ``obj``: compact, or as PrettyFormat writes it with ``pretty``; maps
    in their order, ``int`` keys bare, tuple-of-pairs keys as objects, other keys as text,
    lists, tuples and sets as arrays. ``floats`` writes a float (default: Python's repr).
    TypeError for a value of any other type."""
    if pretty or floats is not None:
        return _slow_dumps(obj, _Form(pretty, False, _encode_str, floats or _float_text))
    marked: list[int] = []
    try:
        text = _ENCODER.encode(_mark(obj, marked))
    except _NeedsSlowWriter:
        return _slow_dumps(obj, _COMPACT)
    if not marked:
        return text
    text, n = _MARKED_KEY.subn(r"\1:", text)
    if n != len(marked):  # a text key that looked like a marked one: write it the slow way
        return _slow_dumps(obj, _COMPACT)
    return text


def dumps_standard(obj: Any) -> str:
    """Compact JSON as fastjson writes it with BrowserCompatible and MapSortField: every map
    sorted by key (integers numerically), keys quoted."""
    return _slow_dumps(obj, _STANDARD)


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _mark(obj: Any, marked: list[int]) -> Any:
    """``obj`` with integer keys as marked text and other keys as text (tuples and sets as
    lists), for the C encoder."""
    if isinstance(obj, dict):
        return {
            (k if type(k) is str else _key(k, marked)): _mark(v, marked) for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [_mark(v, marked) for v in obj]
    if type(obj) in _SCALARS:
        return obj
    if isinstance(obj, Mapping):
        return _mark(dict(obj), marked)
    if isinstance(obj, set | frozenset):
        return [_mark(v, marked) for v in obj]
    return obj


def _key(key: Any, marked: list[int]) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        marked.append(0)
        return f"{_BARE}{int(key)}"
    if isinstance(key, tuple):
        raise _NeedsSlowWriter
    return str(key)


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f"}
_SHORT_ESCAPES.update({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def _escape_browser(text: str) -> str:
    if text.isascii() and text.isprintable() and not any(c in text for c in '"\\/'):
        return f'"{text}"'
    out = ['"']
    for ch in text:
        short = _SHORT_ESCAPES.get(ch)
        if short is not None:
            out.append(short)
            continue
        code = ord(ch)
        if code < 0x20 or code >= 0x7F:
            units = ch.encode("utf-16-be")
            for i in range(0, len(units), 2):
                out.append(f"\\u{units[i]:02X}{units[i + 1]:02X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_COMPACT = _Form(False, False, _encode_str, _float_text)
_STANDARD = _Form(False, True, _escape_browser, _float_text)


def _slow_dumps(obj: Any, form: _Form) -> str:
    out: list[str] = []
    _write(obj, out, 0, form)
    return "".join(out)


def _write(obj: Any, out: list[str], depth: int, form: _Form) -> None:
    if obj is None:
        out.append("null")
    elif obj is True or obj is False:
        out.append("true" if obj else "false")
    elif isinstance(obj, int):
        out.append(str(int(obj)))
    elif isinstance(obj, float):
        out.append(form.floats(obj))
    elif isinstance(obj, str):
        out.append(form.string(obj))
    elif isinstance(obj, Mapping):
        _write_map(obj, out, depth, form)
    elif isinstance(obj, list | tuple | set | frozenset):
        _write_list(obj, out, depth, form)
    else:
        raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def _write_map(obj: Mapping[Any, Any], out: list[str], depth: int, form: _Form) -> None:
    out.append("{")
    inner = "\n" + "\t" * (depth + 1) if form.pretty else ""
    items = sorted(obj.items(), key=lambda item: item[0]) if form.standard else obj.items()
    first = True
    for key, value in items:
        if not first:
            out.append(",")
        first = False
        if isinstance(key, int) and not isinstance(key, bool) and not form.standard:
            out.append(str(int(key)))  # on the line before, even when pretty
        else:
            out.append(inner)
            if isinstance(key, tuple) and not form.standard:
                _write(dict(key), out, depth + 1, form)
            else:
                out.append(form.string(str(key)))
        out.append(":")
        _write(value, out, depth + 1, form)
    if form.pretty and not first:
        out.append("\n" + "\t" * depth)
    out.append("}")


def _write_list(obj: Any, out: list[str], depth: int, form: _Form) -> None:
    out.append("[")
    inner = "\n" + "\t" * (depth + 1) if form.pretty else ""
    first = True
    for value in obj:
        if not first:
            out.append(",")
        first = False
        out.append(inner)
        _write(value, out, depth + 1, form)
    if form.pretty and not first:
        out.append("\n" + "\t" * depth)
    out.append("]")
