"""Follower: a slave's replication from its master, the part both HA protocols share (RocketMQ
4.x's ``HAClient`` and controller mode's ``AutoClient`` differ in their handshake, their report
frame and their transfer frame's header). One thread.

For each connection to the master's HA address (from the configuration, the name server or the
controller, ``update_master_address``):

1. with TLS on (``_tls``: the guard's client context) it shakes hands, checking the master's
   certificate as the context says; with authentication on (``_auth``) it proves itself to
   the master, and the master to it;
2. the protocol's handshake (``_serve``; 4.x has none, it reports at once);
3. it reads transfer frames and appends each exactly at the end of its log, reporting its max
   offset after what one read brought in was appended, and every ``heartbeat_s``.

A frame the slave cannot take (``ProtocolError``: larger than a commit-log file, not at the
end of its log, one that would cross a file), a master silent for ``housekeeping_s``, a refused
proof or a handshake that did not complete ends the connection. The client connects again at
once when a connection that was replicating closed or failed, else (a protocol error, a
refusal, a master it cannot reach or that closed during the handshake) after ``reconnect_s``.

Threads: the client's own; ``update_master_address`` and the properties from any thread.
"""

from __future__ import annotations

import enum
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

from .._clock import Clock
from .._service import ServiceThread
from ..log._record import Buffer
from ._auth import HAGuard, HandshakeRefused, prove
from ._tls import Send, Stream, TlsStream, sender

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog

log = logging.getLogger(__name__)

READ_BUFFER_SIZE = 4 * 1024 * 1024
IO_TIMEOUT_S = 1.0
CONNECT_TIMEOUT_S = 3.0
HANDSHAKE_WAIT_S = 5.0


class ClientState(enum.Enum):
    READY = "READY"  # no master address, or waiting to connect
    HANDSHAKE = "HANDSHAKE"  # connected, proving itself or handshaking
    TRANSFER = "TRANSFER"  # connected, receiving
    SHUTDOWN = "SHUTDOWN"


class ProtocolError(Exception):
    """The master sent something this slave cannot take."""


def split_address(addr: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) → (host, port). Raises ValueError."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"not a host:port address: {addr!r}")
    return host.strip("[]"), int(port)


def _not_connected(parts: Sequence[Buffer], keep_trying: Callable[[], bool]) -> int:
    raise OSError("not connected to a master")


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Follower(ServiceThread):
    protocol: ClassVar[int]
    head_size: ClassVar[int]  # a transfer frame's header

    def __init__(
        self,
        name: str,
        commit_log: CommitLog,
        clock: Clock,
        *,
        broker_id: int,
        heartbeat_s: float,
        housekeeping_s: float,
        reconnect_s: float,
        guard: HAGuard,
        master_address: str = "",
    ) -> None:
        super().__init__(name)
        self.commit_log = commit_log
        self.clock = clock
        self.broker_id = broker_id
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.reconnect_s = reconnect_s
        self.guard = guard
        self._master = master_address or ""
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._phase = ClientState.READY
        self.connected_to = ""
        self.reported_offset = -1
        self.bytes_received = 0
        self.frames_received = 0
        self.connects = 0
        self.last_error = ""
        self.last_master_offset = -1  # the offset of the newest frame header
        self._last_write = 0.0
        self._send_parts: Send = _not_connected
        self.tls_version = ""  # the TLS spoken to the master ("": plain)

    # ---- state ------------------------------------------------------------------------------

    @property
    def master_address(self) -> str:
        return self._master

    @property
    def state(self) -> ClientState:
        if self.stopped and self._thread is None:
            return ClientState.SHUTDOWN
        return self._phase

    def update_master_address(self, addr: str | None) -> None:
        """Replicate from ``addr`` (``host:port``) from now on; a connection to another master
        is closed. Any thread (the broker's registration or role change)."""
        addr = (addr or "").strip()
        with self._lock:
            old = self._master
            if addr == old:
                return
            self._master = addr
            sock = self._sock
        log.info("HA master address changed from %r to %r", old, addr)
        if sock is not None:
            _shutdown(sock)
        self.wakeup()

    def stop(self, join: bool = True) -> None:
        self._stopped.set()
        with self._lock:
            sock = self._sock
        if sock is not None:
            _shutdown(sock)
        super().stop(join)

    # ---- the thread -------------------------------------------------------------------------

    def run(self) -> None:
        while not self.stopped:
            addr = self._master
            if not addr:
                self.wait_for_running(self.reconnect_s)
                continue
            raw = self._connect(addr)
            if raw is None:
                self.wait_for_running(self.reconnect_s)
                continue
            sock: Stream = raw
            pause = True  # unless the connection got as far as replicating
            try:
                sock = self._open_tls(raw, addr)
                if self.guard.enabled:
                    self._prove(sock)
                self._serve(sock)
                pause = False
            except (ProtocolError, HandshakeRefused) as exc:
                self.last_error = str(exc)
                log.error("HA client: %s; closing the connection to %s", exc, addr)
            except OSError as exc:
                self.last_error = str(exc)
                pause = self._phase is not ClientState.TRANSFER
                if not self.stopped:
                    log.warning("HA client: connection to %s ended: %s", addr, exc)
            finally:
                with self._lock:
                    self._sock = None
                    self.connected_to = ""
                self._phase = ClientState.READY
                raw.close()
            if pause:
                self.wait_for_running(self.reconnect_s)

    def _connect(self, addr: str) -> socket.socket | None:
        try:
            host, port = split_address(addr)
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            self.last_error = f"connect to {addr}: {exc}"
            log.info("HA client: cannot connect to master %s: %s", addr, exc)
            return None
        sock.settimeout(IO_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            if self.stopped or addr != self._master:
                sock.close()
                return None
            self._sock = sock
            self.connected_to = addr
        self.connects += 1
        log.info("HA client (broker %d) connected to master %s", self.broker_id, addr)
        return sock

    def _open_tls(self, raw: socket.socket, addr: str) -> Stream:
        """The connection to speak on: TLS over ``raw`` when the guard says so (shaken hands;
        ssl.SSLError when the master's certificate is refused or it speaks no TLS), else
        ``raw``."""
        tls = self.guard.tls
        sock: Stream = raw
        self.tls_version = ""
        if tls is not None and tls.client is not None:
            self._phase = ClientState.HANDSHAKE
            stream = TlsStream(raw, tls.client, server_hostname=split_address(addr)[0])
            deadline = self.clock.monotonic() + max(HANDSHAKE_WAIT_S, self.housekeeping_s)
            stream.handshake(lambda: not self.stopped and self.clock.monotonic() < deadline)
            self.tls_version = stream.version or "TLS"
            sock = stream
        self._send_parts = sender(sock)
        return sock

    def _keep_trying(self) -> bool:
        return not self.stopped

    def _send(self, frame: bytes) -> None:
        """Send one frame on the current connection."""
        self._send_parts((frame,), self._keep_trying)

    def _recv_exactly(self, sock: Stream, n: int, deadline: float) -> bytes:
        out = bytearray()
        while len(out) < n:
            if self.stopped:
                raise OSError("stopping")
            try:
                chunk = sock.recv(n - len(out))
            except TimeoutError:
                if self.clock.monotonic() > deadline:
                    raise OSError("no handshake answer from the master") from None
                continue
            if not chunk:
                raise OSError("the master closed the connection")
            out += chunk
        return bytes(out)

    def _prove(self, sock: Stream) -> None:
        """Prove this replica to the master, and the master to it (``_auth``)."""
        self._phase = ClientState.HANDSHAKE
        deadline = self.clock.monotonic() + max(HANDSHAKE_WAIT_S, self.housekeeping_s)

        def recv(n: int) -> bytes:
            return self._recv_exactly(sock, n, deadline)

        prove(self.guard, self.protocol, self.broker_id, recv, self._send)

    def _report(self, sock: Stream, offset: int) -> None:
        self._send(self._report_frame(offset))
        self.reported_offset = offset
        self._last_write = self.clock.monotonic()

    # ---- the protocol's parts ---------------------------------------------------------------

    def _serve(self, sock: Stream) -> None:
        """Serve one connection until it ends (returns, or raises OSError / ProtocolError)."""
        raise NotImplementedError

    def _report_frame(self, offset: int) -> bytes:
        raise NotImplementedError

    def _frame_head(self, buf: bytearray, start: int) -> tuple[int, int]:
        """(size, offset) of the transfer frame whose header is at ``buf[start]``; raises
        ProtocolError for a frame this slave cannot take."""
        raise NotImplementedError

    def _before_append(self, buf: bytearray, start: int, offset: int) -> None:
        """A frame with bytes is complete and about to be appended."""

    def _after_frame(self, buf: bytearray, start: int) -> None:
        """A complete frame was taken."""

    def _after_read(self) -> None:
        """What one read brought in was taken (and reported)."""

    # ---- transfer ---------------------------------------------------------------------------

    def _receive(self, sock: Stream) -> None:
        """Take transfer frames until the connection ends."""
        self._phase = ClientState.TRANSFER
        cl = self.commit_log
        clock = self.clock
        head_size = self.head_size
        buf = bytearray(READ_BUFFER_SIZE)
        view = memoryview(buf)
        start = end = 0
        last_read = clock.monotonic()
        max_frame = cl.file_size
        try:
            while not self.stopped:
                until_report = self._last_write + self.heartbeat_s - clock.monotonic()
                if until_report <= 0:
                    self._report(sock, cl.max_offset)
                    until_report = self.heartbeat_s
                sock.settimeout(min(IO_TIMEOUT_S, max(until_report, 0.001)))
                try:
                    n = sock.recv_into(view[end:])
                except TimeoutError:
                    if clock.monotonic() - last_read > self.housekeeping_s:
                        raise OSError(
                            f"the master sent nothing for more than {self.housekeeping_s:g} s"
                        ) from None
                    continue
                if n == 0:
                    return  # the master closed the connection
                last_read = clock.monotonic()
                end += n
                self.bytes_received += n
                appended = False
                while end - start >= head_size:
                    size, offset = self._frame_head(buf, start)
                    if size < 0 or size > max_frame:
                        raise ProtocolError(f"frame of {size} bytes at {offset}")
                    self.last_master_offset = offset
                    if end - start < head_size + size:
                        if head_size + size > len(buf):  # a frame larger than the buffer
                            buf[: end - start] = buf[start:end]
                            view.release()
                            buf.extend(bytes(head_size + size - len(buf)))
                            view = memoryview(buf)
                            end -= start
                            start = 0
                        break
                    body = start + head_size
                    if size:
                        self._before_append(buf, start, offset)
                        if not cl.append_data(offset, view[body : body + size]):
                            raise ProtocolError(
                                f"cannot append {size} bytes at {offset} (end of log "
                                f"{cl.max_offset}, file size {cl.file_size})"
                            )
                        appended = True
                    self._after_frame(buf, start)
                    start = body + size
                    self.frames_received += 1
                if start == end:
                    start = end = 0
                elif len(buf) - end < head_size or start > len(buf) // 2:
                    buf[: end - start] = buf[start:end]
                    end -= start
                    start = 0
                if appended:
                    mine = cl.max_offset
                    if mine > self.reported_offset:
                        self._report(sock, mine)
                self._after_read()  # after the report: the master waits for it, not for this
        finally:
            view.release()
