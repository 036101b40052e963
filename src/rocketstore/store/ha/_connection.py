"""HAConnection: a master's side of one slave's connection in RocketMQ 4.x's HA protocol
(``_wire``): the slave's reports are bare 8-byte offsets, the master's frames an offset and a
size before the bytes. The threads, the proof, the idle waits and the frames' batching are
``Link``'s; this module adds the 4.x parts:

- the reader takes the newest complete report in what arrived (a slow reader skips stale
  ones) and hands it to ``on_ack`` (the group-transfer service);
- with authentication on, the slave's proof names its broker id; one connection per id. With
  it off a 4.x slave says nothing of who it is, and every connection counts (RocketMQ's trust).
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from ._auth import PROTOCOL_4X
from ._link import ConnectionState, FrameHead, Link, LinkSettings
from ._wire import HEADER, last_report

__all__ = ["ConnectionState", "HAConnection"]

_NO_LIMIT = 1 << 62


class HAConnection(Link):
    """One 4.x slave. Created by the accept thread, which calls ``start()``."""

    protocol = PROTOCOL_4X
    name = "HAConnection"

    def __init__(
        self, sock: socket.socket, settings: LinkSettings, on_ack: Callable[[int], None]
    ) -> None:
        super().__init__(sock, settings)
        self.on_ack = on_ack

    def _frames(self, buf: bytes) -> int:
        found = last_report(buf, 0, len(buf))
        if found is None:
            return 0
        offset, used = found
        if not self._check_report(offset):
            return -1
        self.on_ack(offset)
        return used

    def _frame_head(self, offset: int) -> tuple[int, FrameHead]:
        return _NO_LIMIT, HEADER.pack
