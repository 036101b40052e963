"""What one peer may cost a server: the log lines its bad requests write (``LogLimiter``) and
the connections and unsent answers it may hold (``ServerLimits``).

Loop thread only (a limiter shared by several loops is safe too: the worst a race does is let
a line more through).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ._codes import ResponseCode


class RequestError(ValueError):
    """A request that cannot be served as sent (a header field missing or not a number, a
    body that does not decode): answered with ``code`` (SYSTEM_ERROR unless the handler names
    a more specific one) and the message as the remark, logged as one line, no traceback.
    Handlers may raise any ValueError for bad input; this one chooses its response code."""

    def __init__(self, message: str, code: int = ResponseCode.SYSTEM_ERROR) -> None:
        super().__init__(message)
        self.code = int(code)


class LogLimiter:
    """A logger that writes at most ``burst`` lines per ``interval`` seconds; what it holds back
    is counted and told in one line with the first message of the next interval::

        remoting: 4,210 similar messages suppressed in the last 60 s

    One limiter per kind of message (bad requests, failed handlers), shared by every
    connection: a flood from many peers is bounded as much as one from a single peer."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 10,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._window_end = float("-inf")
        self._written = 0
        self.suppressed = 0  # held back in the current interval

    def log(self, level: int, msg: str, *args: Any, exc_info: BaseException | None = None) -> bool:
        """Write the line unless this interval's share is spent; True when it was written."""
        now = self._clock()
        if now >= self._window_end:
            if self.suppressed:
                self.logger.log(
                    level,
                    "%s similar messages suppressed in the last %g s",
                    f"{self.suppressed:,}",
                    self.interval,
                )
            self._window_end = now + self.interval
            self._written = 0
            self.suppressed = 0
        if self._written >= self.burst:
            self.suppressed += 1
            return False
        self._written += 1
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True
