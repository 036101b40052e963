"""AutoClient: a controller-mode slave's replication from its master (RocketMQ 5's
AutoSwitchHAClient), one thread, in the frames of ``_auto_wire``.

For each connection to the master's HA address:

1. it sends its HANDSHAKE (its broker id, syncFromLastFile, asyncLearner);
2. it reads the master's HANDSHAKE (the master's epoch entries and max offset) and cuts its own
   log at the consistent point (``_epoch.consistent_point``: the end of the newest epoch both
   logs record with one start offset); with no epoch entries of its own it keeps its log as it
   is (a new replica). The cut goes through ``truncate`` (commit log, consume queues, index)
   and the epoch file forgets the epochs after it. A log that shares no epoch with the
   master's is not touched: the connection is closed and tried again later, with an error;
3. it reports its max offset (TRANSFER) and appends every TRANSFER frame exactly at its end of
   the log, recording a new epoch (with its start offset) before the first bytes of it; it
   takes the master's confirm offset (up to its own end) and reports its max offset after
   each read that appended, and every ``heartbeat_s``.

A frame in another state, at another offset than the log's end, one that cannot be appended,
or a master silent for ``housekeeping_s`` ends the connection; the client connects again at
once, or after ``reconnect_s`` when the master cannot be reached or the handshake failed.

Threads: the client's own; ``update_master_address`` and the properties from any thread.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._clock import Clock
from .._service import ServiceThread
from ._auto_wire import (
    HANDSHAKE,
    MASTER_HANDSHAKE,
    MASTER_HANDSHAKE_SIZE,
    MASTER_TRANSFER,
    MASTER_TRANSFER_SIZE,
    SLAVE_HANDSHAKE,
    SLAVE_TRANSFER,
    STATE,
    TRANSFER,
    decode_entries,
    state_name,
)
from ._client import CONNECT_TIMEOUT_S, IO_TIMEOUT_S, ProtocolError, _shutdown, split_address
from ._epoch import EpochEntry, EpochFile, consistent_point
from ._wire import send_all

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog
    from ._in_sync import InSyncReplicas

log = logging.getLogger(__name__)

READ_BUFFER_SIZE = 4 * 1024 * 1024
HANDSHAKE_WAIT_S = 5.0


class AutoClient(ServiceThread):
    def __init__(
        self,
        commit_log: CommitLog,
        epochs: EpochFile,
        in_sync: InSyncReplicas,
        clock: Clock,
        *,
        broker_id: int,
        truncate: Callable[[int], int],
        on_append: Callable[[], None],
        heartbeat_s: float,
        housekeeping_s: float,
        reconnect_s: float,
        sync_from_last_file: bool = False,
    ) -> None:
        super().__init__("AutoSwitchHAClient")
        self.commit_log = commit_log
        self.epochs = epochs
        self.in_sync = in_sync
        self.clock = clock
        self.broker_id = broker_id
        self.truncate = truncate
        self.on_append = on_append
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.reconnect_s = reconnect_s
        self.sync_from_last_file = sync_from_last_file
        self._master = ""
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.state = "READY"
        self.reported_offset = -1
        self.bytes_received = 0
        self.connects = 0
        self.truncations = 0
        self.last_error = ""
        self.received_epoch = -1
        self._last_write = 0.0

    @property
    def master_address(self) -> str:
        return self._master

    def update_master_address(self, addr: str | None) -> None:
        """Replicate from ``addr`` (the master's HA ``host:port``) from now on; a connection
        to another address is closed. Any thread."""
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
                self._serve(sock)
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
                self.state = "READY"
                sock.close()
            if pause:
                self.wait_for_running(self.reconnect_s)
        self.state = "SHUTDOWN"

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
        self.connects += 1
        log.info("HA client (broker %d) connected to master %s", self.broker_id, addr)
        return sock

    def _keep_trying(self) -> bool:
        return not self.stopped

    def _report(self, sock: socket.socket, offset: int) -> None:
        send_all(sock, (SLAVE_TRANSFER.pack(TRANSFER, offset),), self._keep_trying)
        self.reported_offset = offset
        self._last_write = self.clock.monotonic()

    def _recv_exactly(self, sock: socket.socket, n: int, deadline: float) -> bytes:
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

    def _serve(self, sock: socket.socket) -> None:
        self.state = "HANDSHAKE"
        flags = 1 if self.sync_from_last_file else 0
        send_all(
            sock, (SLAVE_HANDSHAKE.pack(HANDSHAKE, flags, 0, self.broker_id),), self._keep_trying
        )
        deadline = self.clock.monotonic() + max(HANDSHAKE_WAIT_S, self.housekeeping_s)
        head = self._recv_exactly(sock, MASTER_HANDSHAKE_SIZE, deadline)
        state, size, master_max, _last_epoch = MASTER_HANDSHAKE.unpack(head)
        if state != HANDSHAKE or size < 0 or size % 12:
            raise ProtocolError(f"expected the master's handshake, got {state_name(state)}")
        body = self._recv_exactly(sock, size, deadline) if size else b""
        theirs = [EpochEntry(e, s) for e, s in decode_entries(body)]
        start = self._cut(theirs, master_max)
        self.state = "TRANSFER"
        self.received_epoch = -1
        self._report(sock, start)
        self._transfer(sock)

    def _cut(self, theirs: list[EpochEntry], master_max: int) -> int:
        """Cut this log where it stops matching the master's; where to replicate from."""
        cl = self.commit_log
        mine = self.epochs.entries()
        my_end = cl.max_offset
        if not mine:
            log.info(
                "HA client: no epoch entries here (a new replica): the log is kept to %d",
                my_end,
            )
            return my_end
        point = consistent_point(mine, my_end, theirs, master_max)
        log.info(
            "HA client: master epochs %s (max %d), mine %s (max %d): consistent point %d",
            [tuple(e) for e in theirs],
            master_max,
            [tuple(e) for e in mine],
            my_end,
            point,
        )
        if point < 0:
            raise ProtocolError(
                f"this log shares no epoch with the master's (mine {[tuple(e) for e in mine]}, "
                f"the master's {[tuple(e) for e in theirs]}): not replicating"
            )
        if point < my_end:
            log.warning(
                "HA client: cutting the log from %d to %d (%d bytes the master does not hold)",
                my_end,
                point,
                my_end - point,
            )
            self.truncate(point)
            self.truncations += 1
        self.epochs.truncate_suffix_by_offset(point)
        return min(point, cl.max_offset)

    def _transfer(self, sock: socket.socket) -> None:
        cl = self.commit_log
        clock = self.clock
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
                    return
                last_read = clock.monotonic()
                end += n
                self.bytes_received += n
                appended = False
                while end - start >= MASTER_TRANSFER_SIZE:
                    (state,) = STATE.unpack_from(buf, start)
                    if state != TRANSFER:
                        raise ProtocolError(
                            f"a frame in {state_name(state)} state while in TRANSFER"
                        )
                    _s, size, offset, epoch, epoch_start, confirm = MASTER_TRANSFER.unpack_from(
                        buf, start
                    )
                    if size < 0 or size > max_frame:
                        raise ProtocolError(f"frame of {size} bytes at {offset}")
                    if end - start < MASTER_TRANSFER_SIZE + size:
                        if MASTER_TRANSFER_SIZE + size > len(buf):
                            buf[: end - start] = buf[start:end]
                            view.release()
                            buf.extend(bytes(MASTER_TRANSFER_SIZE + size - len(buf)))
                            view = memoryview(buf)
                            end -= start
                            start = 0
                        break
                    body = start + MASTER_TRANSFER_SIZE
                    if size:
                        mine = cl.max_offset
                        if cl.queue.files and offset != mine:
                            raise ProtocolError(
                                f"the master sends from {offset}, this slave's log ends at {mine}"
                            )
                        if epoch != self.received_epoch:
                            self._new_epoch(epoch, epoch_start)
                        if not cl.append_data(offset, view[body : body + size]):
                            raise ProtocolError(
                                f"cannot append {size} bytes at {offset} (end of log "
                                f"{cl.max_offset}, file size {cl.file_size})"
                            )
                        appended = True
                    self.in_sync.set_confirm(min(confirm, cl.max_offset))
                    start = body + size
                if start == end:
                    start = end = 0
                elif len(buf) - end < MASTER_TRANSFER_SIZE or start > len(buf) // 2:
                    buf[: end - start] = buf[start:end]
                    end -= start
                    start = 0
                if appended:
                    mine = cl.max_offset
                    if mine > self.reported_offset:
                        self._report(sock, mine)
                self.on_append()  # after the report: the master waits for it, not for this
        finally:
            view.release()

    def _new_epoch(self, epoch: int, start: int) -> None:
        self.received_epoch = epoch
        last = self.epochs.last_entry()
        if last is not None and (last.epoch > epoch or (last.epoch == epoch)):
            return
        if self.epochs.append(epoch, start):
            log.info("HA client: epoch %d starts at %d", epoch, start)
