"""BrokerStats: what the broker counts where requests are served, for its metrics.

- messages and bytes handed to consumers, per (topic, consumer group): counted by the pull
  processor and the gRPC receive;
- request latency, per (request code, response code, held or not, result), in RocketMQ 5's
  ``rocketmq_rpc_latency`` buckets (milliseconds): timed by ``timed_handlers``, which wraps a
  remoting handler table;
- the body size of each message sent, per (topic, message type), in ``rocketmq_message_size``'s
  buckets (bytes): measured by the same wrapper on SEND_MESSAGE / SEND_MESSAGE_V2.

Counting costs a dictionary update; the latency wrapper is installed only when metrics are
served. The two per-message paths cost less than that:

- the send frame path counts its sends by read (``sent_in_read``): per send, two counters and
  the size histogram of its topic's normal messages (kept by topic, no key built); when the
  read ends (``Connection.after_read``, after its answers are written), one clock read gives
  every send of the read the same latency: from the first send's start to the write of the
  read's answers, which is when each of them was answered (RocketMQ 5 times a request from
  its frame's decoding to its answer's write). One send a read is timed exactly as before;
- a pull adds to the ``GroupTraffic`` of its (topic, group), which holds the totals and the
  rolling counters (no ``topic@group`` key built, one clock read a pull), and a rolling
  counter takes a sample only when one is due; its latency goes to the histogram the timed
  handler of its request code keeps for the answer's response code (``timed``: the same
  object as ``rpc_latency``'s, found by that code alone, no key built).

Loop thread only (counts are plain ints; readers copy them on the same thread).
"""

from __future__ import annotations

import asyncio
import struct
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode, ext_str
from ...remoting._command import ONEWAY_FLAG

RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
MESSAGE_SIZE_BUCKETS = (1024.0, 4096.0, 512 * 1024.0, 1024 * 1024.0, 2048 * 1024.0, 4096 * 1024.0)

RESULT_SUCCESS = "success"
RESULT_ONEWAY = "oneway"
RESULT_CANCELLED = "cancelled"
RESULT_FAILED = "process_request_failed"

_SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
_SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)
_SENT_V1 = (int(RequestCode.SEND_MESSAGE), 0, False, RESULT_SUCCESS)
_SENT_V2 = (_SEND_V2, 0, False, RESULT_SUCCESS)
_SERIALIZE_ROCKETMQ = 1  # the binary header's serialize type
_INT16 = struct.Struct(">h")
_PROPERTY_SEPARATOR = "\x02"
_NAME_SEPARATOR = "\x01"


class Histogram:
    """Bucket counts (not cumulative; one more than ``bounds`` for +Inf), sum and count."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        bounds = self.bounds
        self.counts[0 if value <= bounds[0] else bisect_left(bounds, value)] += 1
        self.sum += value

    def observe_times(self, value: float, times: int) -> None:
        """``observe(value)`` ``times`` times."""
        bounds = self.bounds
        self.counts[0 if value <= bounds[0] else bisect_left(bounds, value)] += times
        self.sum += value * times

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
    if (
        "TRAN_MSG" not in properties
        and "__SHARDINGKEY" not in properties
        and "DELAY" not in properties  # DELAY and TIMER_DELAY_*
        and "DELIVER" not in properties  # __STARTDELIVERTIME and TIMER_DELIVER_MS
    ):
        return "normal"  # none of the names message_type_parsed looks for can be there
    return message_type_parsed(properties)


def message_type_parsed(properties: str) -> str:
    """``message_type`` by splitting the properties (the reference for its shortcut)."""
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


class DailyTotals:
    """RocketMQ's BrokerStats: the store's totals of messages put and handed to consumers,
    recorded at each local midnight (``record``, called by the broker's task), so brokerStatus
    shows yesterday's and today's morning figures next to the current ones. Zero until the
    first midnight after start, as RocketMQ's."""

    def __init__(self) -> None:
        self.put_yesterday_morning = self.put_today_morning = 0
        self.get_yesterday_morning = self.get_today_morning = 0

    def record(self, put_total: int, get_total: int) -> None:
        self.put_yesterday_morning, self.put_today_morning = self.put_today_morning, put_total
        self.get_yesterday_morning, self.get_today_morning = self.get_today_morning, get_total

    def totals(self, put_now: int, get_now: int) -> dict[str, str]:
        """The six ``msg{Put,Get}Total*`` keys of GET_BROKER_RUNTIME_INFO."""
        return {
            "msgPutTotalYesterdayMorning": str(self.put_yesterday_morning),
            "msgPutTotalTodayMorning": str(self.put_today_morning),
            "msgPutTotalTodayNow": str(put_now),
            "msgGetTotalYesterdayMorning": str(self.get_yesterday_morning),
            "msgGetTotalTodayMorning": str(self.get_today_morning),
            "msgGetTotalTodayNow": str(get_now),
        }


def seconds_to_next_midnight(now: float) -> float:
    """Seconds from ``now`` (epoch seconds) to the next local midnight."""
    t = time.localtime(now)
    midnight = time.mktime((t.tm_year, t.tm_mon, t.tm_mday + 1, 0, 0, 0, 0, 0, -1))
    return max(0.0, midnight - now)


class GroupTraffic:
    """What was handed to one consumer group from one topic: ``messages`` and ``size`` (bytes)
    in all, and the rolling counters GROUP_GET_NUMS and GROUP_GET_SIZE of ``topic@group``.
    Loop thread."""

    def __init__(self, nums: RollingCounter, sizes: RollingCounter) -> None:
        self.messages = 0
        self.size = 0
        self.nums = nums
        self.sizes = sizes


class BrokerStats:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        # (topic, group) -> what was handed out
        self.out: dict[tuple[str, str], GroupTraffic] = {}
        self._broker_get: RollingCounter | None = None  # BROKER_GET_NUMS, once a pull counted
        # (request code, response code (None: no response), is_long_polling, result) -> ms;
        # the codes' names are looked up at scrape time (code_name)
        self.rpc_latency: dict[tuple[int, int | None, bool, str], Histogram] = {}
        # (topic, message_type) -> histogram of bytes
        self.message_size: dict[tuple[str, str], Histogram] = {}
        # topic -> its normal messages' histogram in message_size (the same object)
        self._normal_sizes: dict[str, Histogram] = {}
        # the read whose sends the send frame path is counting (``sent_in_read``): on which
        # connection (None: no read is open), from when, its stored sends by request code
        # (SEND_MESSAGE, SEND_MESSAGE_V2) and its other answers' (request code, response code)
        self._read_conn: Any = None
        self._read_began = 0.0
        self._read_v1 = 0
        self._read_v2 = 0
        self._read_others: list[tuple[int, int]] = []
        self._read_ended = self.read_ended  # bound once: handed to each read's connection
        # the stored sends' latency histograms in rpc_latency (the same objects), once made
        self._sent_v1: Histogram | None = None
        self._sent_v2: Histogram | None = None
        # RocketMQ's stats items (GROUP_GET_NUMS, ...) over the last minute, hour and day
        self.rolling = RollingStats()
        # the store's put and get totals at the last two midnights (brokerStatus)
        self.daily = DailyTotals()
        # requests are timed (``timed_handlers`` was called): the send frame path, which
        # serves sends outside the handler table, counts them itself (``note_sent``)
        self.timing = False

    def note_out(self, topic: str, group: str, messages: int, size: int) -> None:
        """``messages`` of ``size`` bytes in all handed to ``group`` from ``topic``."""
        traffic = self.out.get((topic, group))
        if traffic is None:
            traffic = self._traffic(topic, group)
        traffic.messages += messages
        traffic.size += size
        rolling = self.rolling
        now_ms = rolling.now_ms()
        traffic.nums.add(now_ms, messages)
        traffic.sizes.add(now_ms, size)
        broker = self._broker_get
        if broker is None:
            broker = self._broker_get = rolling.counter(BROKER_GET_NUMS, "")
        broker.add(now_ms, messages)

    def _traffic(self, topic: str, group: str) -> GroupTraffic:
        key = f"{topic}@{group}"
        rolling = self.rolling
        traffic = GroupTraffic(
            rolling.counter(GROUP_GET_NUMS, key), rolling.counter(GROUP_GET_SIZE, key)
        )
        self.out[(topic, group)] = traffic
        return traffic

    def note_rpc(self, cmd: RemotingCommand, response: Any, held: bool, began: float) -> None:
        ms = (self._clock() - began) * 1000.0
        if isinstance(response, RemotingCommand):
            response_code: int | None = response.code
            result = RESULT_ONEWAY if cmd.is_oneway else RESULT_SUCCESS
            if response_code == 0 and cmd.code in _SEND_CODES:
                self._note_sent(cmd)
        elif type(response) is bytes:  # an answer's frame (a JSON header: its code first)
            response_code = frame_code(response)
            result = RESULT_SUCCESS
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
        self._note_size(topic, properties, len(cmd.body or b""))

    def _note_size(self, topic: str, properties: str, size: int) -> None:
        kind = message_type(properties)
        if kind == "normal":
            histogram = self._normal_sizes.get(topic)
            if histogram is None:
                histogram = self._normal_sizes[topic] = self._size_histogram(topic, kind)
        else:
            histogram = self._size_histogram(topic, kind)
        histogram.observe(float(size))

    def _size_histogram(self, topic: str, kind: str) -> Histogram:
        key = (topic, kind)
        histogram = self.message_size.get(key)
        if histogram is None:
            histogram = self.message_size[key] = Histogram(MESSAGE_SIZE_BUCKETS)
        return histogram

    def _latency(self, key: tuple[int, int | None, bool, str]) -> Histogram:
        histogram = self.rpc_latency.get(key)
        if histogram is None:
            histogram = self.rpc_latency[key] = Histogram(RPC_LATENCY_BUCKETS_MS)
        return histogram

    def note_sent(
        self,
        code: int,
        response_code: int,
        topic: str,
        properties: str,
        size: int,
        began: float,
        held: bool = False,
        ended: float | None = None,
    ) -> None:
        """What ``timed`` counts for a send (not one-way), for the send frame path: its latency
        since ``began`` until ``ended`` (this object's clock; None: now) and, when it was
        stored (``response_code`` 0), its body's ``size`` under its topic and message type;
        ``held``: answered when its put's future completed, as ``timed`` counts a handler's
        pending future."""
        ms = ((self._clock() if ended is None else ended) - began) * 1000.0
        if response_code == 0:
            self._note_size(topic, properties, size)
        self._latency((code, response_code, held, RESULT_SUCCESS)).observe(ms)

    def read_began(self) -> float:
        """When the send frame path's send about to be served began: the start of the read
        whose sends are being counted, else now (this object's clock)."""
        return self._read_began if self._read_conn is not None else self._clock()

    def sent_in_read(
        self,
        code: int,
        response_code: int,
        topic: str,
        properties: str,
        size: int,
        began: float,
        conn: Connection,
    ) -> None:
        """What ``note_sent`` counts for a send the send frame path answered in ``conn``'s read
        being parsed, ``began`` (``read_began``) its start; its latency is counted with the
        read's other sends when the read ends (``read_ended``, which ``conn`` calls)."""
        if conn is not self._read_conn:
            if self._read_conn is not None:  # served outside a connection's read: that one is
                began = self._end_read()  # over, and this one begins as it ends
            self._read_began = began
            self._read_conn = conn
            conn.after_read = self._read_ended
        if response_code == 0:
            self._note_size(topic, properties, size)
            if code == _SEND_V2:
                self._read_v2 += 1
            else:
                self._read_v1 += 1
        else:
            self._read_others.append((code, response_code))

    def read_ended(self) -> None:
        """Count the latency of the sends of the read that ended: from its start until now,
        when its answers have been written."""
        if self._read_conn is not None:
            self._end_read()

    def _end_read(self) -> float:
        """``read_ended`` of an open read; the time it ended."""
        now = self._clock()
        ms = (now - self._read_began) * 1000.0
        self._read_conn = None
        if self._read_v2:
            sent = self._sent_v2
            if sent is None:
                sent = self._sent_v2 = self._latency(_SENT_V2)
            sent.observe_times(ms, self._read_v2)
            self._read_v2 = 0
        if self._read_v1:
            sent = self._sent_v1
            if sent is None:
                sent = self._sent_v1 = self._latency(_SENT_V1)
            sent.observe_times(ms, self._read_v1)
            self._read_v1 = 0
        if self._read_others:
            for code, response_code in self._read_others:
                self._latency((code, response_code, False, RESULT_SUCCESS)).observe(ms)
            self._read_others.clear()
        return now

    def now(self) -> float:
        """The time on the clock latencies are measured on (seconds)."""
        return self._clock()

    def timed(
        self, handler: Callable[[RemotingCommand, Any], Any], code: int | None = None
    ) -> Callable[..., Any]:
        """``handler`` with its latency counted: until its response is ready (a held pull until
        it is answered). A handler that raises counts as ``process_request_failed``.

        With ``code``, the one request code the handler serves (a handler table's), what it
        answers at once (a command or a frame, not one-way, not a send) is counted in the
        histograms it keeps by response code: the same objects as ``rpc_latency``'s, found
        without building their key, a request."""
        clock = self._clock
        note = self.note_rpc
        # response code -> the histogram of (code, it, not held, success), once seen
        answered: dict[int, Histogram] = {}
        counted = code is not None and code not in _SEND_CODES

        def timed_handler(cmd: RemotingCommand, conn: Any) -> Any:
            began = clock()
            try:
                result = handler(cmd, conn)
            except BaseException:
                note(cmd, RESULT_FAILED, False, began)
                raise
            if result is None or isinstance(result, RemotingCommand) or type(result) is bytes:
                if (
                    counted
                    and result is not None
                    and cmd.code == code
                    and not cmd.flag & ONEWAY_FLAG
                ):
                    response_code = (
                        result.code if isinstance(result, RemotingCommand) else frame_code(result)
                    )
                    if response_code is not None:
                        histogram = answered.get(response_code)
                        if histogram is None:
                            histogram = answered[response_code] = self._latency(
                                (cmd.code, response_code, False, RESULT_SUCCESS)
                            )
                        histogram.observe((clock() - began) * 1000.0)
                        return result
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
        self.timing = True
        return {code: self.timed(handler, code) for code, handler in handlers.items()}


def frame_code(frame: bytes) -> int | None:
    """The response code of an answer frame: in a JSON header ``{"code":N,`` after the 8-byte
    prefix, in the binary form (serialize type 1 in the prefix's fifth byte) the int16 after
    it; None when it has none there."""
    if len(frame) >= 10 and frame[4] == _SERIALIZE_ROCKETMQ:
        code: int = _INT16.unpack_from(frame, 8)[0]
        return code
    if frame[8:16] != b'{"code":':
        return None
    end = frame.find(b",", 16, 32)
    try:
        return int(frame[16:end]) if end > 16 else None
    except ValueError:
        return None


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


# ---- rolling counters (VIEW_BROKER_STATS_DATA, a group's consume TPS) -------------------------

# RocketMQ's BrokerStatsManager names
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"

# (sampling interval, samples kept) of the minute, hour and day windows, as RocketMQ's StatsItem
_WINDOWS_MS = ((10_000, 7), (600_000, 7), (3_600_000, 25))
_NEVER_SAMPLED = -(1 << 62)
_FAR_AHEAD = 1 << 62


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class RollingCounter:
    """A cumulative count (``value``: messages or bytes; ``times``: how many additions) with
    samples taken every 10 s, 10 min and 1 h, from which the last minute's, hour's and day's
    sum, TPS and average per addition are computed (RocketMQ's StatsItem). Samples are taken
    when the counter is touched or read, not by a timer. Loop thread only."""

    def __init__(self) -> None:
        self.value = 0
        self.times = 0
        self.samples: tuple[list[tuple[int, int, int]], ...] = ([], [], [])
        self._due = _NEVER_SAMPLED  # the earliest time a window takes its next sample

    def maybe_sample(self, now_ms: int) -> None:
        due = _FAR_AHEAD
        for (interval, keep), samples in zip(_WINDOWS_MS, self.samples, strict=True):
            if not samples or now_ms - samples[-1][0] >= interval:
                samples.append((now_ms, self.value, self.times))
                if len(samples) > keep:
                    del samples[0]
            due = min(due, samples[-1][0] + interval)
        self._due = due

    def add(self, now_ms: int, value: int, times: int = 1) -> None:
        if now_ms >= self._due:
            self.maybe_sample(now_ms)
        self.value += value
        self.times += times

    def set_total(self, now_ms: int, value: int, times: int) -> None:
        """Catch up with a total counted elsewhere (the store's puts)."""
        self.maybe_sample(now_ms)
        self.value = max(self.value, value)
        self.times = max(self.times, times)

    def window(self, now_ms: int, index: int) -> tuple[int, float, float]:
        """(sum, tps, avgpt) of window ``index`` (0 minute, 1 hour, 2 day) up to now.

        Samples are taken lazily, before an addition that comes an interval or more after the
        last one; so a value reached after sample k holds from ``ts_k + interval`` on, and the
        window's start value is known even when no sample was taken then."""
        samples = self.samples[index]
        if not samples:
            return 0, 0.0, 0.0
        interval, keep = _WINDOWS_MS[index]
        start = now_ms - interval * (keep - 1)
        base_ts, base_value, base_times = samples[0]
        for i, (ts, value, times) in enumerate(samples):
            if ts > start:
                break
            if start >= ts + interval:
                later = samples[i + 1] if i + 1 < len(samples) else (now_ms, self.value, self.times)
                base_ts, base_value, base_times = start, later[1], later[2]
            else:
                base_ts, base_value, base_times = ts, value, times
        total = self.value - base_value
        # a counter younger than one sampling step (10 s) is divided by that step: RocketMQ's
        # samples come every 10 s, so its first TPS covers 10 s, never a few milliseconds
        elapsed = max(now_ms - base_ts, _WINDOWS_MS[0][0])
        tps = total * 1000.0 / elapsed
        times_diff = self.times - base_times
        return total, tps, (total / times_diff if times_diff > 0 else 0.0)


class RollingStats:
    """RollingCounters by (stats name, stats key): ``TOPIC_PUT_NUMS`` by topic,
    ``GROUP_GET_NUMS`` by ``topic@group``, ``BROKER_GET_NUMS`` by cluster, ... Loop thread."""

    def __init__(self, now_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.now_ms = now_ms
        self.items: dict[tuple[str, str], RollingCounter] = {}

    def counter(self, name: str, key: str) -> RollingCounter:
        item = self.items.get((name, key))
        if item is None:
            item = self.items[(name, key)] = RollingCounter()
        return item

    def add(self, name: str, key: str, value: int, times: int = 1) -> None:
        self.counter(name, key).add(self.now_ms(), value, times)

    def set_total(self, name: str, key: str, value: int, times: int) -> None:
        self.counter(name, key).set_total(self.now_ms(), value, times)

    def get(self, name: str, key: str) -> RollingCounter | None:
        return self.items.get((name, key))

    def tps(self, name: str, key: str) -> float:
        """The last minute's TPS of one counter (0.0 when there is none)."""
        item = self.items.get((name, key))
        return 0.0 if item is None else item.window(self.now_ms(), 0)[1]
