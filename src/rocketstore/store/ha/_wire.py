"""RocketMQ 4.x's HA wire protocol: two streams over one TCP connection, big-endian.

Slave → master, one report after another, nothing else::

    ┌──────────────────────────┐
    │ int64 max offset (8)     │   "I hold the commit log up to here"
    └──────────────────────────┘

The first report is the slave's request: 0 asks for the master's last file from its start,
anything else for the bytes from that offset on. Every later report acknowledges what the slave
holds. A master reads the newest complete report in what it received (a slow reader skips
stale ones).

Master → slave, frames::

    ┌────────────────────┬───────────────┬──────────────────────────────┐
    │ int64 phy offset   │ int32 size    │ size raw commit-log bytes    │
    └────────────────────┴───────────────┴──────────────────────────────┘

The bytes are the commit log as stored (records, BLANK records, the unused end of a file
after its BLANK), at most ``ha_transfer_batch_size`` of them, never across a file. A frame of
size 0 is a heartbeat carrying the offset the master will send from next.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Sequence

from ..log._record import Buffer

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
REPORT_SIZE = REPORT.size  # 8
HEADER_SIZE = HEADER.size  # 12


def last_report(buf: Buffer, start: int, end: int) -> tuple[int, int] | None:
    """The newest complete report in ``buf[start:end]`` and where the complete reports end
    (reports are 8-byte aligned from ``start``); None when not one is complete."""
    whole = (end - start) // REPORT_SIZE * REPORT_SIZE
    if not whole:
        return None
    stop = start + whole
    return REPORT.unpack_from(buf, stop - REPORT_SIZE)[0], stop


class SendAborted(OSError):
    """A send gave up: the connection is closing, or the peer stopped reading for too long."""


def send_all(sock: socket.socket, parts: Sequence[Buffer], keep_trying: Callable[[], bool]) -> int:
    """Send ``parts`` whole, in as few system calls as the socket allows (scatter-gather, no
    copy of the parts); returns the bytes sent.

    The socket has a timeout: each time it passes with nothing sent, ``keep_trying()`` says
    whether to wait on (False raises SendAborted). A timeout sends nothing, so the stream stays
    whole until then. Raises OSError when the connection fails."""
    views = [memoryview(p).cast("B") for p in parts]
    try:
        total = left = sum(len(v) for v in views)
        queue = list(views)
        while left:
            try:
                sent = sock.sendmsg(queue)
            except TimeoutError:
                if not keep_trying():
                    raise SendAborted("send abandoned") from None
                continue
            left -= sent
            while sent:
                head = queue[0]
                if sent >= len(head):
                    sent -= len(head)
                    queue.pop(0)
                else:
                    queue[0] = head[sent:]
                    sent = 0
        return total
    finally:
        queue = []
        for v in views:
            v.release()
