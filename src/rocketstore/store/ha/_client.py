"""HAClient: a slave's replication from its master, one thread.

It connects to the master's HA address (from the configuration, or learnt from the name server
through ``update_master_address``), reports its max offset at once, and then reads frames
(``_wire``): each is appended to the commit log exactly at its offset, and the new max offset is
reported after what one read brought in was appended. It also reports every ``heartbeat_s``.

A frame whose offset is not the end of the slave's log (when the log is not empty), a frame that
cannot be appended (it would cross a file), a frame larger than a commit-log file, or a master
silent for ``housekeeping_s`` closes the connection. After a connection ends the client connects
again at once; while the master cannot be reached, or after a protocol error, it tries again
every ``reconnect_s`` (5 s, as RocketMQ).

Threads: the client's own; ``update_master_address`` and the properties from any thread.
"""

from __future__ import annotations

import enum
import logging
import socket
import threading
from typing import TYPE_CHECKING

from .._clock import Clock
from .._service import ServiceThread
from ._wire import HEADER, HEADER_SIZE, REPORT, send_all

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog

log = logging.getLogger(__name__)

READ_BUFFER_SIZE = 4 * 1024 * 1024
IO_TIMEOUT_S = 1.0
CONNECT_TIMEOUT_S = 3.0


class ClientState(enum.Enum):
    READY = "READY"  # no master address, or waiting to connect
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


class HAClient(ServiceThread):
    def __init__(
        self,
        commit_log: CommitLog,
        clock: Clock,
        *,
        master_address: str = "",
        heartbeat_s: float,
        housekeeping_s: float,
        reconnect_s: float = 5.0,
    ) -> None:
        super().__init__("HAClient")
        self.commit_log = commit_log
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.reconnect_s = reconnect_s
        self._master = master_address or ""
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.connected_to = ""
        self.reported_offset = -1
        self.bytes_received = 0
        self.frames_received = 0
        self.connects = 0
        self.last_error = ""
        self.last_master_offset = -1  # the offset of the newest frame header
        self._last_write = 0.0

    # ---- state ------------------------------------------------------------------------------

    @property
    def master_address(self) -> str:
        return self._master

    @property
    def state(self) -> ClientState:
        if self.stopped and self._thread is None:
            return ClientState.SHUTDOWN
        return ClientState.TRANSFER if self._sock is not None else ClientState.READY

    def update_master_address(self, addr: str | None) -> None:
        """Replicate from ``addr`` (``host:port``) from now on; a connection to another master
        is closed. Any thread (the broker's registration callback)."""
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
            sock = self._connect(addr)
            if sock is None:
                self.wait_for_running(self.reconnect_s)
                continue
            pause = False
            try:
                self._replicate(sock)
            except ProtocolError as exc:
                self.last_error = str(exc)
                log.error("HA client: %s; closing the connection to %s", exc, addr)
                pause = True
            except OSError as exc:
                self.last_error = str(exc)
                if not self.stopped:
                    log.warning("HA client: connection to %s ended: %s", addr, exc)
            finally:
                with self._lock:
                    self._sock = None
                    self.connected_to = ""
                sock.close()
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
        log.info("HA client connected to master %s", addr)
        return sock

    def _keep_trying(self) -> bool:
        return not self.stopped

    def _report(self, sock: socket.socket, offset: int) -> None:
        send_all(sock, (REPORT.pack(offset),), self._keep_trying)
        self.reported_offset = offset
        self._last_write = self.clock.monotonic()

    def _replicate(self, sock: socket.socket) -> None:
        """Serve one connection until it ends (returns, or raises OSError / ProtocolError)."""
        cl = self.commit_log
        clock = self.clock
        buf = bytearray(READ_BUFFER_SIZE)
        view = memoryview(buf)
        start = end = 0
        self._report(sock, cl.max_offset)
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
                while end - start >= HEADER_SIZE:
                    offset, size = HEADER.unpack_from(buf, start)
                    if size < 0 or size > max_frame:
                        raise ProtocolError(f"frame of {size} bytes at {offset}")
                    self.last_master_offset = offset
                    if cl.queue.files and offset != cl.max_offset:
                        raise ProtocolError(
                            f"the master sends from {offset}, this slave's log ends at "
                            f"{cl.max_offset}"
                        )
                    if end - start < HEADER_SIZE + size:
                        if HEADER_SIZE + size > len(buf):  # a frame larger than the buffer
                            buf[: end - start] = buf[start:end]
                            view.release()
                            buf.extend(bytes(HEADER_SIZE + size - len(buf)))
                            view = memoryview(buf)
                            end -= start
                            start = 0
                        break
                    body = start + HEADER_SIZE
                    if size and not cl.append_data(offset, view[body : body + size]):
                        raise ProtocolError(
                            f"cannot append {size} bytes at {offset} (end of log "
                            f"{cl.max_offset}, file size {cl.file_size})"
                        )
                    start = body + size
                    self.frames_received += 1
                    appended = appended or size > 0
                if start == end:
                    start = end = 0
                elif len(buf) - end < HEADER_SIZE or start > len(buf) // 2:
                    buf[: end - start] = buf[start:end]
                    end -= start
                    start = 0
                if appended:
                    mine = cl.max_offset
                    if mine > self.reported_offset:
                        self._report(sock, mine)
        finally:
            view.release()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
