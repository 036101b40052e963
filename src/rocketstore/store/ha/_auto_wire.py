"""RocketMQ 5's AutoSwitch HA wire protocol (controller mode), big-endian, over one TCP
connection from the slave to its master's HA port.

Every frame starts with the sender's state (RocketMQ's HAConnectionState ordinal: READY 0,
HANDSHAKE 1, TRANSFER 2, SUSPEND 3, SHUTDOWN 4).

Slave → master::

    HANDSHAKE  ┌──────────┬──────────────────┬────────────────┬───────────────┐
               │ state 1  │ syncFromLastFile │ isAsyncLearner │ slave brokerId│
               │ int32    │ int16            │ int16          │ int64         │  16 bytes
               └──────────┴──────────────────┴────────────────┴───────────────┘
    TRANSFER   ┌──────────┬───────────────┐
               │ state 2  │ max offset    │   "I hold the log up to here": the first one is
               │ int32    │ int64         │   where to send from, each one acknowledges
               └──────────┴───────────────┘   12 bytes

Master → slave::

    HANDSHAKE  ┌──────────┬───────────┬────────────┬────────────┐┌─────────────┬──────────────┐
               │ state 1  │ body size │ max offset │ last epoch ││ epoch int32 │ start int64  │ …
               │ int32    │ int32     │ int64      │ int32      ││ (12 bytes per epoch entry) │
               └──────────┴───────────┴────────────┴────────────┘└─────────────┴──────────────┘
    TRANSFER   ┌──────────┬───────────┬────────┬───────┬─────────────┬─────────────┐┌────────┐
               │ state 2  │ body size │ offset │ epoch │ epoch start │ confirm off ││ log    │
               │ int32    │ int32     │ int64  │ int32 │ int64       │ int64       ││ bytes  │
               └──────────┴───────────┴────────┴───────┴─────────────┴─────────────┘└────────┘
                                                                           36 bytes + body

The handshake: the slave sends its HANDSHAKE, the master answers with its epoch entries and max
offset, the slave cuts its log at the consistent point (``_epoch.consistent_point``) and reports
from there in TRANSFER frames. A TRANSFER frame's bytes all belong to one epoch (its entry's
epoch and start offset travel with them) and one commit-log file; a frame of no bytes is a
heartbeat. The confirm offset is how far the master's SyncStateSet holds the log.
"""

from __future__ import annotations

import struct

READY = 0
HANDSHAKE = 1
TRANSFER = 2
SUSPEND = 3
SHUTDOWN = 4
STATE_NAMES = ("READY", "HANDSHAKE", "TRANSFER", "SUSPEND", "SHUTDOWN")

SLAVE_HANDSHAKE = struct.Struct(">ihhq")  # state, syncFromLastFile, isAsyncLearner, brokerId
SLAVE_TRANSFER = struct.Struct(">iq")  # state, max offset
MASTER_HANDSHAKE = struct.Struct(">iiqi")  # state, body size, max offset, last epoch
MASTER_TRANSFER = struct.Struct(">iiqiqq")  # state, size, offset, epoch, epoch start, confirm
EPOCH_ENTRY = struct.Struct(">iq")  # epoch, start offset
STATE = struct.Struct(">i")

SLAVE_HANDSHAKE_SIZE = SLAVE_HANDSHAKE.size  # 16
SLAVE_TRANSFER_SIZE = SLAVE_TRANSFER.size  # 12
MASTER_HANDSHAKE_SIZE = MASTER_HANDSHAKE.size  # 20
MASTER_TRANSFER_SIZE = MASTER_TRANSFER.size  # 36
EPOCH_ENTRY_SIZE = EPOCH_ENTRY.size  # 12
MAX_EPOCH_ENTRIES = 1000  # RocketMQ's handshake buffer holds this many


def state_name(state: int) -> str:
    return STATE_NAMES[state] if 0 <= state < len(STATE_NAMES) else f"state {state}"


def encode_entries(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(EPOCH_ENTRY.pack(epoch, start) for epoch, start in entries)


def decode_entries(body: bytes | memoryview) -> list[tuple[int, int]]:
    """The (epoch, start offset) pairs of a master handshake's body (its length a multiple of
    12: whole entries only)."""
    n = len(body) // EPOCH_ENTRY_SIZE
    return [EPOCH_ENTRY.unpack_from(body, i * EPOCH_ENTRY_SIZE) for i in range(n)]
