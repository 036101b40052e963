"""White remote addresses of RocketMQ's plain ACL: which client addresses a pattern lets in.

    ""  (blank)               nobody
    *   *.*.*.*   *:*:*:*:*:*:*:*   everybody
    192.168.0.1   ::1         one address (IPv6 in any spelling)
    192.168.0.*   192.168.*   one segment (and those after it) any value
    192.168.1-10.*            one segment within a range (IPv6: hex, e.g. 2::ac5:78:1-200)
    192.168.1.{1,2,9}         a list of last segments
    10.10.103.*,192.168.1.*   a comma-separated list of any of the above

RocketMQ takes only plain addresses in a comma-separated list; patterns are accepted there
too. Immutable; any thread.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ._errors import AclConfigError

_V4_SEGMENTS = 4
_V6_SEGMENTS = 8


def normalize_host(address: str) -> str:
    """The host of a peer address: ``1.2.3.4:567`` → ``1.2.3.4``, ``[::1]:5`` → ``::1``,
    ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` (gRPC peers) too; an IPv4-mapped IPv6 address
    becomes its IPv4 address."""
    text = address.strip()
    for prefix in ("ipv4:", "ipv6:"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.rpartition(":")[0]
    elif text.count(":") > 1:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:  # an IPv6 address with a port and no brackets
            text = text.rpartition(":")[0]
    text = text.partition("%")[0]  # a zone index
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _segments(host: str) -> tuple[int, ...] | None:
    """The 4 (IPv4) or 8 (IPv6) numbers of an address; None when it is none."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv4Address):
        return tuple(ip.packed)
    packed = ip.packed
    return tuple(int.from_bytes(packed[i : i + 2], "big") for i in range(0, 16, 2))


# a segment of a pattern: (low, high) inclusive
Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Pattern:
    v6: bool
    spans: tuple[Span, ...]  # one per segment

    def matches(self, segments: tuple[int, ...]) -> bool:
        if len(segments) != len(self.spans):
            return False
        return all(lo <= s <= hi for s, (lo, hi) in zip(segments, self.spans, strict=True))


def _parse_one(text: str) -> tuple[_Pattern, ...]:
    """The patterns of one item (a ``{a,b}`` list gives several)."""
    if text.endswith("}"):
        head, brace, tail = text.partition("{")
        if not brace or not head or head[-1] not in ".:":
            raise AclConfigError(f"white address {text!r}: a {{...}} list must be the last part")
        items = [i.strip() for i in tail[:-1].split(",") if i.strip()]
        if not items:
            raise AclConfigError(f"white address {text!r}: an empty {{...}} list")
        return tuple(p for item in items for p in _parse_one(head + item))
    v6 = ":" in text
    if v6:
        parts = _expand_v6(text)
        base, limit = 16, 0xFFFF
    else:
        parts = text.split(".")
        if len(parts) > _V4_SEGMENTS:
            raise AclConfigError(f"white address {text!r}: more than 4 parts")
        if len(parts) < _V4_SEGMENTS:
            if parts[-1].strip() != "*":
                raise AclConfigError(f"white address {text!r}: not an IPv4 address or pattern")
            parts += ["*"] * (_V4_SEGMENTS - len(parts))
        base, limit = 10, 255
    spans: list[Span] = []
    wild = False
    for part in (p.strip() for p in parts):
        if wild or part == "*":
            wild = True  # RocketMQ ignores what follows the first wildcard or range
            spans.append((0, limit))
            continue
        low, dash, high = part.partition("-")
        try:
            lo = int(low, base)
            hi = int(high, base) if dash else lo
        except ValueError:
            raise AclConfigError(f"white address {text!r}: bad part {part!r}") from None
        if not 0 <= lo <= hi <= limit:
            raise AclConfigError(f"white address {text!r}: {part!r} out of range")
        if dash:
            wild = True
        spans.append((lo, hi))
    return (_Pattern(v6, tuple(spans)),)


def _expand_v6(text: str) -> list[str]:
    """The 8 parts of an IPv6 pattern (``::`` expanded; ``*`` and ``a-b`` parts kept)."""
    if text.count("::") > 1:
        raise AclConfigError(f"white address {text!r}: more than one '::'")
    if "::" in text:
        left, _, right = text.partition("::")
        lp = left.split(":") if left else []
        rp = right.split(":") if right else []
        missing = _V6_SEGMENTS - len(lp) - len(rp)
        if missing < 1:
            raise AclConfigError(f"white address {text!r}: too many parts")
        parts = lp + ["0"] * missing + rp
    else:
        parts = text.split(":")
    if len(parts) < _V6_SEGMENTS and parts and parts[-1].strip() == "*":
        parts += ["*"] * (_V6_SEGMENTS - len(parts))
    if len(parts) != _V6_SEGMENTS:
        raise AclConfigError(f"white address {text!r}: not an IPv6 address or pattern")
    return parts


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """A white remote address: ``matches(host)`` says whether it lets ``host`` in."""

    text: str
    everybody: bool
    patterns: tuple[_Pattern, ...]

    @classmethod
    def parse(cls, text: str | None) -> AddressPattern:
        """AclConfigError when ``text`` is no pattern."""
        value = (text or "").strip()
        if value in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
            return cls(value, True, ())
        if not value:
            return cls(value, False, ())
        items: list[str] = []
        depth = 0
        current = ""
        for ch in value:  # split on commas outside {...}
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                items.append(current)
                current = ""
            else:
                current += ch
        items.append(current)
        patterns = tuple(p for item in items if item.strip() for p in _parse_one(item.strip()))
        return cls(value, False, patterns)

    def matches(self, host: str) -> bool:
        if self.everybody:
            return True
        if not self.patterns:
            return False
        segments = _segments(normalize_host(host))
        if segments is None:
            return False
        v6 = len(segments) == _V6_SEGMENTS
        return any(p.v6 == v6 and p.matches(segments) for p in self.patterns)
