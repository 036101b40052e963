"""TLS on the HA port (rocketstore's own; RocketMQ's HA is plain TCP).

``HATls`` is carried by the store's ``HAGuard``: the master's mode and the two contexts, made
by the broker from its remoting port's settings (``remoting._tls``: the same certificate, key,
client-certificate rule and trust). The store only uses the contexts it is given.

=============== ==========================================================================
``disabled``     plain TCP (no ``HATls``): the bytes are RocketMQ's, nothing is added
``permissive``   the master takes TLS and plain slaves on one port, told apart by the first
                 byte the slave sends: a TLS handshake record starts with 0x16, a 4.x report
                 and an AutoSwitch handshake with 0 (a slave that sends nothing first, one
                 waiting for the proof's challenge, is plain after ``PEEK_WAIT_S``)
``enforcing``    the master takes TLS only: a failed handshake is a refused peer
=============== ==========================================================================

A slave speaks TLS to its master whenever its ``HATls`` says so (``client``), whatever the
master's mode.

``TlsStream`` is a TLS connection over a blocking socket (with its timeout) through memory
buffers, so that a master's reader and writer threads can share one connection: the TLS state
is used under one lock, only for the time it takes to encrypt or decrypt, and the encrypted
bytes go out in the order they were made under a second one (a thread waiting for the peer to
read holds only that one). Reads and writes take and give buffers (memory views of the mapped
files): nothing is copied per message, the TLS layer encrypts whole transfer frames.

Threads: ``recv`` / ``recv_into`` from one thread at a time, ``send_all`` from any;
``shutdown`` and ``close`` from any.
"""

from __future__ import annotations

import functools
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..log._record import Buffer
from ._wire import send_all

HATlsMode = Literal["disabled", "permissive", "enforcing"]
TLS_HANDSHAKE = 0x16  # the first byte of a TLS handshake record
PEEK_WAIT_S = 1.0
RAW_READ = 256 * 1024


@dataclass(frozen=True, slots=True)
class HATls:
    """The HA port's TLS: the master's ``mode`` with its ``server`` context, and the
    ``client`` context a slave connects to its master with (None: plain)."""

    mode: HATlsMode = "disabled"
    server: ssl.SSLContext | None = None
    client: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        if self.mode != "disabled" and self.server is None:
            raise ValueError(f"HA TLS mode {self.mode} needs the server's context")


class TlsStream:
    """A TLS connection over ``sock`` (blocking, with a timeout), not yet shaken hands."""

    def __init__(
        self, sock: socket.socket, context: ssl.SSLContext, *, server_hostname: str | None = None
    ) -> None:
        self.raw = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        server_side = server_hostname is None
        self._obj = context.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=server_hostname
        )
        self._ssl_lock = threading.Lock()  # the TLS state
        self._send_lock = threading.Lock()  # the order encrypted bytes go out in
        self._buf = bytearray(RAW_READ)
        self._view = memoryview(self._buf)
        self._eof = False

    # ---- the socket's part ------------------------------------------------------------------

    def settimeout(self, value: float | None) -> None:
        self.raw.settimeout(value)

    def shutdown(self, how: int) -> None:
        self.raw.shutdown(how)

    def close(self) -> None:
        self.raw.close()

    @property
    def version(self) -> str | None:
        return self._obj.version()

    # ---- handshake --------------------------------------------------------------------------

    def handshake(self, keep_trying: Callable[[], bool]) -> None:
        """Shake hands; ``keep_trying()`` is asked each time the socket's timeout passes with
        nothing read (False: TimeoutError). ssl.SSLError when the peer speaks no TLS or its
        certificate is refused, OSError when the connection fails."""
        while True:
            try:
                with self._ssl_lock:
                    self._obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush(keep_trying)
                if not self._read_raw(keep_trying):
                    raise ConnectionError("closed during the TLS handshake") from None
        self._flush(keep_trying)

    # ---- reading ----------------------------------------------------------------------------

    def recv(self, n: int) -> bytes:
        buf = bytearray(n)
        got = self.recv_into(buf)
        del buf[got:]
        return bytes(buf)

    def recv_into(self, buffer: Buffer) -> int:
        """Decrypted bytes into ``buffer``: as many as the records received hold, at least one
        (0: the peer closed). TimeoutError as the socket's."""
        view = memoryview(buffer).cast("B")
        try:
            total = 0
            while True:
                with self._ssl_lock:
                    try:
                        while total < len(view) and not self._eof:
                            got: int = self._obj.read(  # type: ignore[assignment]
                                len(view) - total,
                                view[total:],  # type: ignore[arg-type]
                            )
                            if not got:
                                self._eof = True
                            total += got
                    except ssl.SSLWantReadError:
                        pass
                    except ssl.SSLZeroReturnError:
                        self._eof = True
                    answer = self._out.pending  # what reading made TLS say (a key update)
                if answer:
                    self._flush(lambda: True)
                if total or self._eof:
                    return total
                if not self._read_raw(None):
                    return 0
        finally:
            view.release()

    def _read_raw(self, keep_trying: Callable[[], bool] | None) -> bool:
        """Bytes from the socket into the TLS state; False when the peer closed."""
        while True:
            try:
                n = self.raw.recv_into(self._buf)
                break
            except TimeoutError:
                if keep_trying is None or not keep_trying():
                    raise
        if not n:
            self._eof = True
            return False
        with self._ssl_lock:
            self._in.write(self._view[:n])
        return True

    # ---- writing ----------------------------------------------------------------------------

    def send_all(self, parts: Sequence[Buffer], keep_trying: Callable[[], bool]) -> int:
        """Encrypt ``parts`` (no copy of them first) and send them whole; the plain bytes
        sent. As ``_wire.send_all``; a send that gave up leaves the stream unusable (the
        caller closes it)."""
        total = 0
        with self._send_lock:
            with self._ssl_lock:
                for p in parts:
                    total += self._obj.write(p)
                data = self._out.read()
            send_all(self.raw, (data,), keep_trying)
        return total

    def _flush(self, keep_trying: Callable[[], bool]) -> None:
        with self._send_lock:
            with self._ssl_lock:
                data = self._out.read()
            if data:
                send_all(self.raw, (data,), keep_trying)


Stream = socket.socket | TlsStream
Send = Callable[[Sequence[Buffer], Callable[[], bool]], int]
"""(parts, keep_trying) → bytes sent: ``_wire.send_all`` over one connection."""


def sender(sock: Stream) -> Send:
    """How to send on ``sock``, chosen once per connection."""
    if isinstance(sock, TlsStream):
        return sock.send_all
    return functools.partial(send_all, sock)


def speaks_tls(sock: socket.socket, wait_s: float) -> bool:
    """Whether the peer's first byte opens a TLS handshake (permissive mode); a peer that sends
    nothing within ``wait_s`` speaks plain. OSError when the connection fails."""
    timeout = sock.gettimeout()
    sock.settimeout(wait_s)
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        return False
    finally:
        sock.settimeout(timeout)
    if not first:
        raise ConnectionError("closed before a byte was sent")
    return first[0] == TLS_HANDSHAKE


__all__ = ["HATls", "HATlsMode", "Send", "Stream", "TlsStream", "sender", "speaks_tls"]
