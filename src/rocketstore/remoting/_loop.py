"""The event loop the remoting front ends run on: uvloop's when it is installed.

uvloop (libuv under asyncio's API) takes some 10-20 % less CPU a request on the server's loop
than asyncio's own (``benchmarks/remoting_echo.py``). It is optional: without it both helpers
fall back to asyncio's loop.

    use_uvloop()                                   # before asyncio.run(...), main thread
    asyncio.Runner(loop_factory=new_event_loop)     # or per runner, without a global policy
"""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType


def _uvloop() -> ModuleType | None:
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def use_uvloop() -> bool:
    """Make asyncio.run and asyncio.new_event_loop use uvloop from now on, when uvloop is
    installed; True when it is. Call from the main thread before any loop starts."""
    uvloop = _uvloop()
    if uvloop is None:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop: uvloop's when it is installed, else asyncio's (any thread)."""
    uvloop = _uvloop()
    if uvloop is None:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop
