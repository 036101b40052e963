import mmap
from typing import Any

def write_v4(
    target: bytearray | memoryview | mmap.mmap,
    pos: int,
    total: int,
    magic: int,
    crc: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phys_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_offset: int,
    body: bytes | bytearray | memoryview,
    tail: bytes,
    /,
) -> None: ...
def write_batch_v4(
    target: bytearray | memoryview | mmap.mmap,
    pos: int,
    base: int,
    queue_id: int,
    queue_offset: int,
    now: int,
    store_host: bytes,
    prepared: list[tuple[Any, ...]],
    /,
) -> list[int]: ...
