"""StoreCheckpoint: the 4096-byte ``checkpoint`` file recovery starts from.

Layout (big-endian)::

     0 physicMsgTimestamp  int64  store time of the last commit-log message known flushed
     8 logicsMsgTimestamp  int64  store time of the last message written to a consume queue
    16 indexMsgTimestamp   int64  store time of the last message in a flushed index file
    24 ... 4095           zero

Abnormal recovery begins at the last commit-log file whose first message was stored at or
before ``min_timestamp`` = max(0, min(physic, logics) - 3000): everything after that point may
not have reached the consume queues.

rocketstore's extension (RocketMQ reads only the first 24 bytes and never writes the rest)::

    24 "RSCLEAN1"          8 bytes  written at a clean shutdown, cleared at the next load
    32 endPhyOffset        int64    where the commit log ended
    40 physic, logics      2 x int64  copies of @0 and @8 at that moment
    56 crc32               int32    of bytes 24..55

A clean-shutdown record is believed only when the abort file is absent, its CRC matches and
the copies equal the timestamps at @0/@8 (a RocketMQ broker that wrote to the store since then
moved them, which makes the record stale). It lets a clean restart verify the tail after the
consume queues instead of CRC-scanning the last three commit-log files.

Threads: the flush services and dispatch update the timestamps (plain attribute writes);
``flush`` is called by the consume-queue flush service and at shutdown.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from pathlib import Path

from ._durable import reserve
from ._errors import CorruptFileError, translate_os_errors

log = logging.getLogger(__name__)

CHECKPOINT_FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqq")
MIN_TIMESTAMP_MARGIN_MS = 3000
CLEAN_MAGIC = b"RSCLEAN1"
_CLEAN = struct.Struct(">8sqqq")  # magic, end offset, physic, logics
_CLEAN_AT = _LAYOUT.size  # 24
_CLEAN_CRC = struct.Struct(">I")
_CLEAN_CRC_AT = _CLEAN_AT + _CLEAN.size  # 56


class StoreCheckpoint:
    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.existed = self.path.exists()
        self.problem: str | None = None  # what was wrong with the file as found
        with translate_os_errors(f"open {self.path}"):
            if read_only:
                if not self.existed:
                    self._mm: mmap.mmap | None = None
                    self.physic_msg_timestamp = self.logics_msg_timestamp = 0
                    self.index_msg_timestamp = 0
                    return
                fd = os.open(self.path, os.O_RDONLY)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size != CHECKPOINT_FILE_SIZE and self.existed:
                    self.problem = (
                        f"{self.path}: {size} bytes, a checkpoint has {CHECKPOINT_FILE_SIZE}"
                        + ("; its timestamps are unusable" if size < _LAYOUT.size else "")
                    )
                    log.warning("%s", self.problem)
                if size < _LAYOUT.size:
                    if read_only:
                        raise CorruptFileError(self.problem or f"{self.path}: too short")
                    # empty (a crash while creating it) or torn: start from zero timestamps
                    self.existed = False
                    os.ftruncate(fd, 0)
                if size != CHECKPOINT_FILE_SIZE and not read_only:
                    os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
                    size = CHECKPOINT_FILE_SIZE
                if not read_only:
                    # disk blocks before the first write through the mapping: on a full disk
                    # an error here, not SIGBUS at the first flush (none needed when it has them)
                    reserve(fd, 0, size)
                access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
                self._mm = mmap.mmap(fd, size, access=access)
            finally:
                os.close(fd)
        assert self._mm is not None
        (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp) = (
            _LAYOUT.unpack_from(self._mm, 0)
        )

    @property
    def min_timestamp(self) -> int:
        """Where abnormal recovery may start: min(physic, logics) less a 3 s margin."""
        return max(
            0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - MIN_TIMESTAMP_MARGIN_MS
        )

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)

    def flush(self) -> None:
        """Write the three timestamps and make them durable."""
        if self._mm is None or self.read_only:
            return
        _LAYOUT.pack_into(
            self._mm,
            0,
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
        )
        with translate_os_errors(f"flush {self.path}"):
            self._mm.flush()

    def clean_end_offset(self) -> int | None:
        """The commit-log end recorded by the last clean shutdown, when still believable."""
        mm = self._mm
        if mm is None or len(mm) < _CLEAN_CRC_AT + _CLEAN_CRC.size:
            return None
        magic, end, physic, logics = _CLEAN.unpack_from(mm, _CLEAN_AT)
        if magic != CLEAN_MAGIC:
            return None
        (crc,) = _CLEAN_CRC.unpack_from(mm, _CLEAN_CRC_AT)
        if crc != zlib.crc32(mm[_CLEAN_AT:_CLEAN_CRC_AT]):
            return None
        if (physic, logics) != (self.physic_msg_timestamp, self.logics_msg_timestamp):
            return None
        return int(end) if end >= 0 else None

    def mark_clean(self, end_offset: int) -> None:
        """Record a clean shutdown at ``end_offset`` (with the timestamps) and flush."""
        if self._mm is None or self.read_only:
            return
        _CLEAN.pack_into(
            self._mm,
            _CLEAN_AT,
            CLEAN_MAGIC,
            end_offset,
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
        )
        _CLEAN_CRC.pack_into(self._mm, _CLEAN_CRC_AT, zlib.crc32(self._mm[_CLEAN_AT:_CLEAN_CRC_AT]))
        self.flush()

    def clear_clean(self) -> None:
        """Forget the clean-shutdown record (the store is open: it may change) and flush."""
        if self._mm is None or self.read_only:
            return
        self._mm[_CLEAN_AT : _CLEAN_CRC_AT + _CLEAN_CRC.size] = bytes(
            _CLEAN_CRC_AT + _CLEAN_CRC.size - _CLEAN_AT
        )
        self.flush()

    def shutdown(self) -> None:
        if self._mm is not None:
            self.flush()
            self._mm.close()
            self._mm = None

    def as_dict(self) -> dict[str, int]:
        return {
            "physicMsgTimestamp": self.physic_msg_timestamp,
            "logicsMsgTimestamp": self.logics_msg_timestamp,
            "indexMsgTimestamp": self.index_msg_timestamp,
        }
