"""Bounded inflation of deflate (zlib) and gzip data received from a peer.

A few kilobytes of deflate data can stand for gigabytes: every body that arrives compressed
(a REGISTER_BROKER body, a message body with the compressed system flag, a gRPC body in GZIP)
is inflated here, with a limit on what it may grow to. Past the limit inflation stops at once
(``zlib.decompressobj`` with ``max_length``): the memory used is the limit, the time what the
limit takes to write, never what the sender asked for.

    ValueError
    └── InflateError            not deflate / gzip data, or truncated
        └── InflateLimitError   inflates to more than the limit

Pure functions; any thread.
"""

from __future__ import annotations

import zlib

DEFAULT_MAX_BODY = 4 * 1024 * 1024
"""RocketMQ's default maxMessageSize: what a message body may inflate to unless the caller
knows its own limit."""

ZLIB = zlib.MAX_WBITS
GZIP = zlib.MAX_WBITS | 16
ZLIB_OR_GZIP = zlib.MAX_WBITS | 32  # told apart by their headers
_GZIP_MAGIC = b"\x1f\x8b"
_PIECE = 1024 * 1024  # inflated at a time


class InflateError(ValueError):
    """Compressed data that does not inflate: not deflate (gzip) data, or cut short."""


class InflateLimitError(InflateError):
    """Compressed data that inflates to more than its limit."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} inflates to more than {limit} bytes")
        self.limit = limit


def inflate(
    data: bytes | bytearray | memoryview, limit: int, *, wbits: int = ZLIB, what: str = "body"
) -> bytes:
    """``data`` inflated: zlib by default, ``wbits=GZIP`` or ``ZLIB_OR_GZIP`` for gzip
    (concatenated gzip members are inflated one after the other, as ``gzip.decompress`` does).
    InflateLimitError as soon as the output would pass ``limit`` bytes; InflateError for data
    that does not inflate. ``what`` names the data in the message."""
    if limit < 0:
        raise ValueError(f"limit must not be negative, not {limit}")
    parts: list[bytes] = []
    size = 0
    rest: bytes | bytearray | memoryview = data
    while True:
        inflater = zlib.decompressobj(wbits)
        while True:  # in pieces: a bomb costs the limit in memory, not twice the limit
            room = min(_PIECE, limit - size + 1)
            try:
                out = inflater.decompress(rest, room)
            except zlib.error as exc:
                raise InflateError(f"{what} does not inflate: {exc}") from None
            size += len(out)
            if size > limit:
                raise InflateLimitError(what, limit)
            if out:
                parts.append(out)
            rest = inflater.unconsumed_tail
            if inflater.eof or (not rest and len(out) < room):
                break
        if not inflater.eof:
            raise InflateError(f"{what} does not inflate: the compressed data is cut short")
        rest = inflater.unused_data
        if wbits == ZLIB or not rest.startswith(_GZIP_MAGIC):
            break  # trailing bytes after the stream are ignored, as zlib.decompress does
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)
