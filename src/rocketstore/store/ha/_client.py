"""HAClient: a slave's replication from its master in RocketMQ 4.x's HA protocol (``_wire``).
The connection, the proof, the reports and the appending loop are ``Follower``'s; the 4.x
parts: no handshake (the slave reports its max offset at once: where to send from), bare 8-byte
reports, and frames of an offset and a size whose offset must be the end of the slave's log
(heartbeats too), when the log is not empty. The client tries a master it cannot reach, or
after a protocol error, every ``reconnect_s`` (5 s, as RocketMQ).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._clock import Clock
from ._auth import OPEN, PROTOCOL_4X, HAGuard
from ._follower import ClientState, Follower, ProtocolError, split_address
from ._tls import Stream
from ._wire import HEADER, HEADER_SIZE, REPORT

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog

__all__ = ["ClientState", "HAClient", "ProtocolError", "split_address"]


class HAClient(Follower):
    protocol = PROTOCOL_4X
    head_size = HEADER_SIZE

    def __init__(
        self,
        commit_log: CommitLog,
        clock: Clock,
        *,
        master_address: str = "",
        heartbeat_s: float,
        housekeeping_s: float,
        reconnect_s: float = 5.0,
        guard: HAGuard = OPEN,
    ) -> None:
        super().__init__(
            "HAClient",
            commit_log,
            clock,
            broker_id=guard.broker_id,
            heartbeat_s=heartbeat_s,
            housekeeping_s=housekeeping_s,
            reconnect_s=reconnect_s,
            guard=guard,
            master_address=master_address,
        )

    def _serve(self, sock: Stream) -> None:
        self._phase = ClientState.TRANSFER
        self._report(sock, self.commit_log.max_offset)
        self._receive(sock)

    def _report_frame(self, offset: int) -> bytes:
        return REPORT.pack(offset)

    def _frame_head(self, buf: bytearray, start: int) -> tuple[int, int]:
        offset, size = HEADER.unpack_from(buf, start)
        cl = self.commit_log
        if 0 <= size <= cl.file_size and cl.queue.files and offset != cl.max_offset:
            raise ProtocolError(
                f"the master sends from {offset}, this slave's log ends at {cl.max_offset}"
            )
        return size, offset
