from typing import Any

def scan_send(
    frame: Any, /
) -> tuple[int, int, int, int, int, str, int, str, int, int, int, int, int] | None: ...
