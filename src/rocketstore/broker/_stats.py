"""BrokerStats: what the broker counts where requests are served, for its metrics.

- messages and bytes handed to consumers, per (topic, consumer group): counted by the pull
  processor and the gRPC receive;
- request latency, per (request code, response code, held or not, result), in RocketMQ 5's
  ``rocketmq_rpc_latency`` buckets (milliseconds): timed by ``timed_handlers``, which wraps a
  remoting handler table;
- the body size of each message sent, per (topic, message type), in ``rocketmq_message_size``'s
  buckets (bytes): measured by the same wrapper on SEND_MESSAGE / SEND_MESSAGE_V2.

Counting costs a dictionary update; the latency wrapper is installed only when metrics are
served. Loop thread only (counts are plain ints; readers copy them on the same thread).
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..remoting import RemotingCommand, RequestCode, ResponseCode, ext_str

RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
MESSAGE_SIZE_BUCKETS = (1024.0, 4096.0, 512 * 1024.0, 1024 * 1024.0, 2048 * 1024.0, 4096 * 1024.0)

RESULT_SUCCESS = "success"
RESULT_ONEWAY = "oneway"
RESULT_CANCELLED = "cancelled"
RESULT_FAILED = "process_request_failed"

_SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
_PROPERTY_SEPARATOR = "\x02"
_NAME_SEPARATOR = "\x01"


class Histogram:
    """Bucket counts (not cumulative; one more than ``bounds`` for +Inf), sum and count."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)


def code_name(code: int | None, names: type[RequestCode] | type[ResponseCode]) -> str:
    """RocketMQ's description of a code: its constant's name in lower case, else the number
    ('' for None)."""
    if code is None:
        return ""
    try:
        return names(code).name.lower()
    except ValueError:
        return str(code)


def message_type(properties: str) -> str:
    """RocketMQ 5's message type of a sent message, from its properties string."""
    names = {p.split(_NAME_SEPARATOR, 1)[0]: p for p in properties.split(_PROPERTY_SEPARATOR)}
    if names.get("TRAN_MSG", "").endswith(_NAME_SEPARATOR + "true"):
        return "transaction"
    if "__SHARDINGKEY" in names:
        return "fifo"
    if any(
        k in names for k in ("__STARTDELIVERTIME", "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC")
    ):
        return "delay"
    return "normal"


class BrokerStats:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        # (topic, group) -> [messages, bytes]
        self.out: dict[tuple[str, str], list[int]] = {}
        # (request code, response code (None: no response), is_long_polling, result) -> ms;
        # the codes' names are looked up at scrape time (code_name)
        self.rpc_latency: dict[tuple[int, int | None, bool, str], Histogram] = {}
        # (topic, message_type) -> histogram of bytes
        self.message_size: dict[tuple[str, str], Histogram] = {}

    def note_out(self, topic: str, group: str, messages: int, size: int) -> None:
        """``messages`` of ``size`` bytes in all handed to ``group`` from ``topic``."""
        counts = self.out.get((topic, group))
        if counts is None:
            counts = self.out[(topic, group)] = [0, 0]
        counts[0] += messages
        counts[1] += size

    def note_rpc(self, cmd: RemotingCommand, response: Any, held: bool, began: float) -> None:
        ms = (self._clock() - began) * 1000.0
        if isinstance(response, RemotingCommand):
            response_code: int | None = response.code
            result = RESULT_ONEWAY if cmd.is_oneway else RESULT_SUCCESS
            if response_code == 0 and cmd.code in _SEND_CODES:
                self._note_sent(cmd)
        else:
            response_code = None
            result = response if isinstance(response, str) else RESULT_ONEWAY
        key = (cmd.code, response_code, held, result)
        histogram = self.rpc_latency.get(key)
        if histogram is None:
            histogram = self.rpc_latency[key] = Histogram(RPC_LATENCY_BUCKETS_MS)
        histogram.observe(ms)

    def _note_sent(self, cmd: RemotingCommand) -> None:
        ext = cmd.ext_fields  # a V2 header, or V1 names once the send handler converted it
        topic = ext_str(ext, "topic") or ext_str(ext, "b") or ""
        properties = ext_str(ext, "properties") or ext_str(ext, "i") or ""
        key = (topic, message_type(properties))
        histogram = self.message_size.get(key)
        if histogram is None:
            histogram = self.message_size[key] = Histogram(MESSAGE_SIZE_BUCKETS)
        histogram.observe(float(len(cmd.body or b"")))

    def timed(self, handler: Callable[[RemotingCommand, Any], Any]) -> Callable[..., Any]:
        """``handler`` with its latency counted: until its response is ready (a held pull until
        it is answered). A handler that raises counts as ``process_request_failed``."""
        clock = self._clock
        note = self.note_rpc

        def timed_handler(cmd: RemotingCommand, conn: Any) -> Any:
            began = clock()
            try:
                result = handler(cmd, conn)
            except BaseException:
                note(cmd, RESULT_FAILED, False, began)
                raise
            if result is None or isinstance(result, RemotingCommand):
                note(cmd, result, False, began)
                return result
            if isinstance(result, asyncio.Future):
                if result.done():
                    note(cmd, _outcome(result), False, began)
                else:
                    result.add_done_callback(lambda f: note(cmd, _outcome(f), True, began))
                return result
            return _timed_awaitable(result, cmd, note, began)

        return timed_handler

    def timed_handlers(self, handlers: Mapping[int, Any]) -> dict[int, Any]:
        return {code: self.timed(handler) for code, handler in handlers.items()}


def _outcome(fut: asyncio.Future[Any]) -> Any:
    if fut.cancelled():
        return RESULT_CANCELLED
    if fut.exception() is not None:
        return RESULT_FAILED
    return fut.result()


async def _timed_awaitable(
    awaitable: Awaitable[Any],
    cmd: RemotingCommand,
    note: Callable[[RemotingCommand, Any, bool, float], None],
    began: float,
) -> Any:
    try:
        response = await awaitable
    except asyncio.CancelledError:
        note(cmd, RESULT_CANCELLED, True, began)
        raise
    except BaseException:
        note(cmd, RESULT_FAILED, True, began)
        raise
    note(cmd, response, True, began)
    return response
