"""Link: a master's side of one slave's connection, the part both HA protocols share (RocketMQ
4.x's, ``HAConnection``, and controller mode's AutoSwitch, ``AutoConnection``, differ only in
their handshake, their report frame and their transfer frame's header).

Two threads share the socket (blocking, with a one-second timeout so each can look up):

- the reader: with TLS on (``_tls``) it shakes hands first (in permissive mode only with a
  peer whose first byte opens a TLS handshake; a failed handshake is a refused peer); with
  authentication on (``_auth``) it sends the CHALLENGE first and takes the
  slave's ANSWER before anything else, refusing a peer without the proof, of another group, or
  under an id another connection holds; then it takes the protocol's frames (``_frames``): the
  slave's reports, the first saying where to send from, each later one acknowledging what the
  slave holds. A report above the master's max offset, or silence for ``housekeeping_s``,
  closes the connection (and so does no proof within ``AUTH_WAIT_S``);
- the writer sends the commit log from the slave's request on, in frames of at most
  ``batch_size`` bytes of one file (and of what readers may see), several frames to one system
  call (up to ``SEND_MAX``: each return to the interpreter lock may wait while producers run).
  With nothing to send it waits for ``wake()`` (a put) or 1 ms, doubling to 100 ms while
  nothing comes, and sends an empty frame (a heartbeat) when nothing went out for
  ``heartbeat_s``.

An id (``slave_id``) is held by one connection at a time (the service's ``admit`` says whether
it may have it); only the connection holding an id reports for it, and only its closing lets
the id go. Whichever thread ends first closes the connection; the other one follows.
"""

from __future__ import annotations

import enum
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from .._clock import Clock
from .._service import ServiceThread
from ..log._commit_log import CommitLog
from ._auth import (
    HAGuard,
    HandshakeRefused,
    accepted,
    check_answer,
    new_challenge,
    read_answer,
    refused,
)
from ._tls import PEEK_WAIT_S, Stream, TlsStream, sender, speaks_tls

log = logging.getLogger(__name__)

IO_TIMEOUT_S = 1.0
IDLE_MIN_S = 0.001
IDLE_MAX_S = 0.1
REQUEST_WAIT_S = 0.1
AUTH_WAIT_S = 5.0  # a peer that has not proved itself by then is refused
SEND_MAX = 1024 * 1024
MAX_FRAMES_PER_SEND = 256  # two buffers each, below the system's 1024 per call

FrameHead = Callable[[int, int], bytes]
"""(offset, size) → a transfer frame's header."""


class ConnectionState(enum.Enum):
    HANDSHAKE = "HANDSHAKE"  # connected, the slave has not said where to start
    TRANSFER = "TRANSFER"  # sending
    SHUTDOWN = "SHUTDOWN"  # closed


class _Loop(ServiceThread):
    def __init__(self, name: str, body: Callable[[], None]) -> None:
        super().__init__(name)
        self.body = body

    def run(self) -> None:
        self.body()


Admit = Callable[["Link", int], "str | None"]
"""(link, slave id) → why the link may not hold that id, or None once it holds it."""


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """What every connection of one HA port shares (the port builds it)."""

    commit_log: CommitLog
    clock: Clock
    batch_size: int
    heartbeat_s: float
    housekeeping_s: float
    guard: HAGuard
    admit: Admit
    on_closed: Callable[[Link], None]


class Link:
    """One slave. Created by the accept thread, which calls ``start()``."""

    protocol: ClassVar[int]
    name: ClassVar[str]

    def __init__(self, sock: socket.socket, settings: LinkSettings) -> None:
        commit_log, clock, guard = settings.commit_log, settings.clock, settings.guard
        batch_size = settings.batch_size
        self.sock: Stream = sock
        self._send_parts = sender(sock)
        try:
            host, port = sock.getpeername()[:2]
            self.client_addr = f"{host}:{port}"
        except OSError:
            self.client_addr = "?"
        sock.settimeout(IO_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.commit_log = commit_log
        self.clock = clock
        self.batch_size = batch_size
        # frames sent in one system call (each still at most batch_size, within one file)
        self.send_max = max(batch_size, min(SEND_MAX, batch_size * MAX_FRAMES_PER_SEND))
        self.heartbeat_s = settings.heartbeat_s
        self.housekeeping_s = settings.housekeeping_s
        self.guard = guard
        self.admit = settings.admit
        self.on_closed = settings.on_closed
        self.slave_id = -1  # the id this connection holds (-1: none)
        self.holds_id = False
        self.proven = not guard.enabled  # authenticated (or authentication off)
        self.tls_version = ""  # the TLS the slave speaks ("": plain)
        self.refused = ""  # why the peer was refused ("" when it was not)
        self.request_offset = -1  # the slave's first report
        self.ack_offset = -1  # its newest report
        self.next_transfer = -1  # where the next frame starts
        self.bytes_sent = 0
        self.frames_sent = 0
        self.connected_at = clock.now_ms()
        now = clock.monotonic()
        self.opened = now
        self.last_read = now
        self.last_write = now
        self.close_reason = ""
        self._challenge = b""
        self._lock = threading.Lock()
        self._closed = False
        self._threads_left = 2
        # the writer's wake-up: a lock it holds and waits on; a waker releases it once
        self._wake = threading.Lock()
        self._wake.acquire()
        self._woken = False
        self.idle = False  # the writer waits for data
        self.reader = _Loop(f"{self.name}-read-{self.client_addr}", self._read_loop)
        self.writer = _Loop(f"{self.name}-write-{self.client_addr}", self._write_loop)

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.reader.start()
        self.writer.start()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def state(self) -> ConnectionState:
        if self._closed:
            return ConnectionState.SHUTDOWN
        if self.request_offset < 0:
            return ConnectionState.HANDSHAKE
        return ConnectionState.TRANSFER

    @property
    def who(self) -> str:
        if self.slave_id < 0:
            return f"slave {self.client_addr}"
        return f"slave {self.slave_id} ({self.client_addr})"

    def close(self, reason: str) -> None:
        """End the connection (idempotent); both threads stop soon after. Any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.close_reason = reason
        log.info("HA connection of %s closed: %s", self.who, reason)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked on the socket
        except OSError:
            pass
        self._release_writer()
        self.reader.stop(join=False)
        self.writer.stop(join=False)
        try:
            if self.holds_id:
                self._let_go(self.slave_id)
            self.on_closed(self)
        except Exception:
            log.exception("HA connection close callback failed")

    def join(self, timeout: float) -> None:
        """Wait for both threads (after ``close``). Not from the connection's own threads."""
        for t in (self.reader._thread, self.writer._thread):
            if t is not None and t is not threading.current_thread():
                t.join(timeout)

    def _thread_done(self) -> None:
        with self._lock:
            self._threads_left -= 1
            last = self._threads_left == 0
        if last:
            self.sock.close()

    def wake(self) -> None:
        """New data may be there: wake the writer if it waits. Any thread (a put's)."""
        if self.idle and not self._woken:
            self._release_writer()

    def _release_writer(self) -> None:
        self._woken = True
        try:
            self._wake.release()
        except RuntimeError:  # released already, not taken back yet
            pass

    def _idle_wait(self, seconds: float) -> None:
        """The writer, with nothing to send: wait for ``wake()`` or ``seconds``."""
        self._woken = False
        self.idle = True
        try:
            if self.commit_log.max_offset <= self.next_transfer and not self._closed:
                self._wake.acquire(timeout=seconds)
            else:
                self._wake.acquire(blocking=False)
        finally:
            self.idle = False

    def lag(self, master_max: int) -> int:
        """Bytes the slave has not acknowledged (its request before the first ack)."""
        return max(0, master_max - max(self.ack_offset, 0))

    # ---- who the peer is --------------------------------------------------------------------

    def refuse(self, account: str, claimed: str, reason: str) -> None:
        """Refuse the peer: audited, told why (with authentication on), closed. Reader."""
        self.refused = reason
        self.guard.refuse(self.client_addr, account, claimed, reason)
        if self._challenge and not self.proven and not self._closed:  # the RESULT frame
            try:
                self._send_parts((refused(reason),), lambda: False)
            except OSError:
                pass
        self.close(f"refused: {reason}")

    def hold(self, slave_id: int, claimed: str, account: str = "") -> bool:
        """Take ``slave_id`` for this connection (False: refused and closed). Reader."""
        why = self.admit(self, slave_id)
        if why is not None:
            self.refuse(account, claimed, why)
            return False
        self.slave_id = slave_id
        self.holds_id = True
        return True

    def _let_go(self, slave_id: int) -> None:
        """This connection no longer holds ``slave_id`` (it closes). The protocol's part."""

    def _authenticate(self, buf: bytes) -> bytes | None:
        """Take the slave's ANSWER from ``buf``: what follows it (``proven`` set), ``buf``
        itself while it is incomplete, None when the peer was refused. Reader."""
        try:
            found = read_answer(buf)
        except HandshakeRefused as exc:
            self.refuse("", "unproven", str(exc))
            return None
        if found is None:
            return buf
        answer, used = found
        try:
            check_answer(self.guard, self._challenge, answer, self.protocol)
        except HandshakeRefused as exc:
            self.refuse(answer.access_key, answer.claimed, str(exc))
            return None
        if not self.hold(answer.broker_id, answer.claimed, answer.access_key):
            return None
        self._send_parts((accepted(self.guard, self._challenge, answer),), self._keep_trying)
        self.proven = True
        log.info("HA: %s proved it is %s", self.client_addr, answer.claimed)
        return buf[used:]

    def _open_tls(self) -> bool:
        """Shake hands when the port speaks TLS (and, permissive, the peer does); False when
        the peer was refused. Reader, before anything is read or written."""
        tls = self.guard.tls
        if tls is None or tls.server is None or tls.mode == "disabled":
            return True
        raw = self.sock
        assert isinstance(raw, socket.socket)
        if tls.mode == "permissive" and not speaks_tls(raw, PEEK_WAIT_S):
            return True
        stream = TlsStream(raw, tls.server)
        deadline = self.opened + AUTH_WAIT_S
        try:
            stream.handshake(lambda: not self._closed and self.clock.monotonic() < deadline)
        except TimeoutError:
            if not self._closed:
                self.refuse("", "unproven", f"no TLS handshake within {AUTH_WAIT_S:g} s")
            return False
        except ssl.SSLError as exc:
            self.refuse("", "unproven", f"TLS handshake failed: {exc.reason or exc}")
            return False
        self.sock = stream
        self._send_parts = stream.send_all
        self.tls_version = stream.version or "TLS"
        return True

    # ---- reader -----------------------------------------------------------------------------

    def _read_loop(self) -> None:
        buf = b""
        clock = self.clock
        try:
            if not self._open_tls():
                return
            if not self.proven:
                self._challenge, frame = new_challenge()
                self._send_parts((frame,), self._keep_trying)
            while not self._closed:
                try:
                    data = self.sock.recv(4096)
                except TimeoutError:
                    now = clock.monotonic()
                    if not self.proven and now - self.opened > AUTH_WAIT_S:
                        self.refuse("", "unproven", f"no proof within {AUTH_WAIT_S:g} s")
                    elif now - self.last_read > self.housekeeping_s:
                        self.close(f"silent for more than {self.housekeeping_s:g} s")
                    continue
                except OSError as exc:
                    self.close(f"read failed: {exc}")
                    break
                if not data:
                    self.close("closed by the slave")
                    break
                self.last_read = clock.monotonic()
                buf += data
                if not self.proven:
                    rest = self._authenticate(buf)
                    if rest is None:
                        break
                    buf = rest
                    if not self.proven:
                        continue
                used = self._frames(buf)
                if used < 0:
                    break
                buf = buf[used:]
        except OSError as exc:
            self.close(f"read failed: {exc}")
        except Exception as exc:
            log.exception("HA connection reader of %s failed", self.client_addr)
            self.close(f"reader failed: {exc!r}")
        finally:
            self._thread_done()

    def _frames(self, buf: bytes) -> int:
        """Take the complete frames at the start of ``buf``; the bytes used, -1 when the
        connection was closed. The protocol's part."""
        raise NotImplementedError

    def _check_report(self, offset: int) -> bool:
        """A report: False (and closed) when it is beyond the master's log; else it is the
        newest ack, and the first one the request (the writer is woken for it)."""
        master_max = self.commit_log.max_offset
        if offset < 0 or offset > master_max:
            self.close(f"reported offset {offset} is beyond the master's max offset {master_max}")
            return False
        self.ack_offset = offset
        if self.request_offset < 0:
            self.request_offset = offset
            log.info("%s requests the commit log from %d", self.who, offset)
            self._release_writer()
        return True

    # ---- writer -----------------------------------------------------------------------------

    def _keep_trying(self) -> bool:
        """A send timed out with nothing sent: go on unless closing or stalled too long."""
        if self._closed:
            return False
        if self.clock.monotonic() - self.last_write > self.housekeeping_s:
            self.close(f"the slave read nothing for more than {self.housekeeping_s:g} s")
            return False
        return True

    def _send(self, parts: Sequence[bytes | memoryview]) -> None:
        self._send_parts(parts, self._keep_trying)
        self.last_write = self.clock.monotonic()

    def _before_request(self) -> bool:
        """Work before the slave's request (AutoSwitch: answer its handshake); True when
        something was done. Writer."""
        return False

    def _start_offset(self) -> int:
        """Where to send from: the slave's request, or for a request of 0 the start of the
        master's last file."""
        if self.request_offset != 0:
            return self.request_offset
        end = self.commit_log.max_offset
        return max(0, end - end % self.commit_log.file_size)

    def _frame_head(self, offset: int) -> tuple[int, FrameHead]:
        """How far frames from ``offset`` may go, and their header. The protocol's part."""
        raise NotImplementedError

    def _on_idle(self, now: float) -> None:
        """The slave has everything there is (at ``now``). Writer."""

    def _on_transfer(self, now: float) -> None:
        """Bytes go out now. Writer."""

    def _write_loop(self) -> None:
        clock = self.clock
        cl = self.commit_log
        idle_s = IDLE_MIN_S
        try:
            while not self._closed:
                if self._before_request():
                    continue
                if self.request_offset < 0:  # the first report (or the handshake) wakes it
                    self._wake.acquire(timeout=REQUEST_WAIT_S)
                    continue
                if self.next_transfer < 0:
                    self.next_transfer = self._start_offset()
                    log.info(
                        "master sends to %s from %d (it asked for %d)",
                        self.who,
                        self.next_transfer,
                        self.request_offset,
                    )
                offset = self.next_transfer
                limit, head = self._frame_head(offset)
                selected = cl.get_data(offset) if offset < limit else None
                if selected is not None and selected.size == 0:
                    selected.release()
                    selected = None
                if selected is None:
                    now = clock.monotonic()
                    self._on_idle(now)
                    if now - self.last_write >= self.heartbeat_s:
                        self._send((head(offset, 0),))
                    self._idle_wait(idle_s)
                    idle_s = min(idle_s * 2, IDLE_MAX_S)
                    continue
                idle_s = IDLE_MIN_S
                try:
                    size = min(selected.size, self.send_max, limit - offset)
                    self._on_transfer(clock.monotonic())
                    parts: list[bytes | memoryview] = []
                    view = selected.buffer
                    batch = self.batch_size
                    for pos in range(0, size, batch):
                        n = min(batch, size - pos)
                        parts += (head(offset + pos, n), view[pos : pos + n])
                    self._send(parts)
                    del parts, view
                finally:
                    selected.release()
                self.next_transfer = offset + size
                self.bytes_sent += size
                self.frames_sent += -(-size // batch)
        except OSError as exc:
            self.close(f"write failed: {exc}")
        except Exception as exc:
            log.exception("HA connection writer of %s failed", self.client_addr)
            self.close(f"writer failed: {exc!r}")
        finally:
            self._thread_done()
