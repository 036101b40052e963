import mmap
from collections.abc import Sequence
from typing import Any

def put_next_unit(cq: Any, phys_offset: int, size: int, tags_code: int, offset: int, /) -> bool: ...
def pack_units(
    buf: bytearray | mmap.mmap,
    pos: int,
    phys_offsets: Sequence[int],
    sizes: Sequence[int],
    tags_codes: Sequence[int],
    /,
) -> int: ...
