from typing import Any

def put_keys(
    f: Any,
    prefix_hash: int,
    uniq_key: str | None,
    keys: str | None,
    phy_offset: int,
    store_timestamp: int,
    done: int,
    /,
) -> int: ...
