"""HAConnection: the master's side of one slave's connection.

Two threads share the socket (blocking, with a one-second timeout so each can look up):

- the reader takes the slave's 8-byte reports. The first is the slave's request (where to send
  from); each one acknowledges what the slave holds and goes to ``on_ack`` (the group-transfer
  service). A report above the master's max offset closes the connection (a forged or confused
  peer, or a slave that holds what this master lost), and so does silence for
  ``housekeeping_s``;
- the writer sends frames (``_wire``): from the request on, at most ``batch_size`` bytes of one
  file each, of what readers may see (the committed end when write buffers are on); up to 1 MiB
  of consecutive frames go out in one system call (each return to the interpreter lock may
  wait while producers run, so fewer of them keep a slave closer). When the
  slave has everything it waits for new data: woken by ``wake()`` (a SYNC_MASTER put), else it
  looks again after 1 ms, doubling up to 100 ms while nothing comes. A heartbeat (an empty
  frame) goes out when nothing was sent for ``heartbeat_s``.

Whichever thread ends first closes the connection; the other one follows.
"""

from __future__ import annotations

import enum
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._clock import Clock
from .._service import ServiceThread
from ._wire import HEADER, last_report, send_all

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog

log = logging.getLogger(__name__)

IO_TIMEOUT_S = 1.0
IDLE_MIN_S = 0.001
IDLE_MAX_S = 0.1
REQUEST_WAIT_S = 0.01
SEND_MAX = 1024 * 1024
MAX_FRAMES_PER_SEND = 256  # two buffers each, below the system's 1024 per call


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


class HAConnection:
    """One slave. Created by the accept thread, which calls ``start()``."""

    def __init__(
        self,
        sock: socket.socket,
        commit_log: CommitLog,
        clock: Clock,
        *,
        batch_size: int,
        heartbeat_s: float,
        housekeeping_s: float,
        on_ack: Callable[[int], None],
        on_closed: Callable[[HAConnection], None],
    ) -> None:
        self.sock = sock
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
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.on_ack = on_ack
        self.on_closed = on_closed
        self.request_offset = -1  # the slave's first report
        self.ack_offset = -1  # its newest report
        self.next_transfer = -1  # where the next frame starts
        self.bytes_sent = 0
        self.frames_sent = 0
        self.connected_at = clock.now_ms()
        now = clock.monotonic()
        self.last_read = now
        self.last_write = now
        self.close_reason = ""
        self._lock = threading.Lock()
        self._closed = False
        self._threads_left = 2
        self._reported = threading.Event()
        # the writer's wake-up: a lock it holds and waits on; a waker releases it once
        self._wake = threading.Lock()
        self._wake.acquire()
        self._woken = False
        self.idle = False  # the writer waits for data
        self.reader = _Loop(f"HAConnection-read-{self.client_addr}", self._read_loop)
        self.writer = _Loop(f"HAConnection-write-{self.client_addr}", self._write_loop)

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

    def close(self, reason: str) -> None:
        """End the connection (idempotent); both threads stop soon after. Any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.close_reason = reason
        log.info("HA connection of slave %s closed: %s", self.client_addr, reason)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked on the socket
        except OSError:
            pass
        self._reported.set()
        self._release_writer()
        self.reader.stop(join=False)
        self.writer.stop(join=False)
        try:
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
        held = max(self.ack_offset, 0)
        return max(0, master_max - held)

    # ---- reader -----------------------------------------------------------------------------

    def _read_loop(self) -> None:
        pending = b""
        clock = self.clock
        try:
            while not self._closed:
                try:
                    data = self.sock.recv(4096)
                except TimeoutError:
                    if clock.monotonic() - self.last_read > self.housekeeping_s:
                        self.close(f"silent for more than {self.housekeeping_s:g} s")
                    continue
                except OSError as exc:
                    self.close(f"read failed: {exc}")
                    break
                if not data:
                    self.close("closed by the slave")
                    break
                self.last_read = clock.monotonic()
                pending += data
                found = last_report(pending, 0, len(pending))
                if found is None:
                    continue
                offset, used = found
                pending = pending[used:]
                if not self._on_report(offset):
                    break
        except Exception as exc:
            log.exception("HA connection reader of %s failed", self.client_addr)
            self.close(f"reader failed: {exc!r}")
        finally:
            self._thread_done()

    def _on_report(self, offset: int) -> bool:
        master_max = self.commit_log.max_offset
        if offset < 0 or offset > master_max:
            self.close(f"reported offset {offset} is beyond the master's max offset {master_max}")
            return False
        self.ack_offset = offset
        if self.request_offset < 0:
            self.request_offset = offset
            log.info("slave %s requests the commit log from %d", self.client_addr, offset)
            self._reported.set()
        self.on_ack(offset)
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

    def _start_offset(self) -> int:
        """Where to send from: the slave's request, or for a request of 0 the start of the
        master's last file."""
        if self.request_offset != 0:
            return self.request_offset
        end = self.commit_log.max_offset
        return max(0, end - end % self.commit_log.file_size)

    def _write_loop(self) -> None:
        clock = self.clock
        cl = self.commit_log
        idle_s = IDLE_MIN_S
        try:
            while not self._closed:
                if self.request_offset < 0:
                    self._reported.wait(REQUEST_WAIT_S)
                    continue
                if self.next_transfer < 0:
                    self.next_transfer = self._start_offset()
                    log.info(
                        "master sends to slave %s from %d (it asked for %d)",
                        self.client_addr,
                        self.next_transfer,
                        self.request_offset,
                    )
                selected = cl.get_data(self.next_transfer)
                if selected is not None and selected.size == 0:
                    selected.release()
                    selected = None
                if selected is None:
                    if clock.monotonic() - self.last_write >= self.heartbeat_s:
                        self._send((HEADER.pack(self.next_transfer, 0),))
                    self._idle_wait(idle_s)
                    idle_s = min(idle_s * 2, IDLE_MAX_S)
                    continue
                idle_s = IDLE_MIN_S
                try:
                    offset = self.next_transfer
                    size = min(selected.size, self.send_max)
                    parts: list[bytes | memoryview] = []
                    view = selected.buffer
                    batch = self.batch_size
                    for pos in range(0, size, batch):
                        n = min(batch, size - pos)
                        parts += (HEADER.pack(offset + pos, n), view[pos : pos + n])
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

    def _send(self, parts: Sequence[bytes | memoryview]) -> None:
        send_all(self.sock, parts, self._keep_trying)
        self.last_write = self.clock.monotonic()
