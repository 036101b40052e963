from collections.abc import Callable
from typing import Any

def check_v4(
    buf: Any, pos: int, size: int, raw_topic: bytes, queue_id: int, crc32: Callable[[Any], int], /
) -> bool: ...
