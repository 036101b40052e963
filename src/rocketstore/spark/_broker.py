"""Broker mode of the data source: options, the cluster as the driver sees it, and the
connections the executors pull through (no pyspark needed).

::

    driver (planner)                         executors (one Python worker each)
    Cluster: routes (name server or broker)  pool(): one RemotingClient per worker process,
      min / max / search offsets               reused by every task the worker runs
      → BrokerRange per (broker, topic,      pull_range(): PULL_MESSAGE of exact offsets,
        queue, offset range)                   raw records → RangeDecoder.records → Arrow

Stream offsets (and the JSON forms of startingOffsets / endingOffsets) are nested by broker
name: ``{topic: {broker name: {queue id: offset}}}`` with every level in canonical order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from ..client._route import RouteCache, TopicRoute
from ..columns._arrow import RangeDecoder
from ..remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..remoting._client import FROM_ENV
from ..store._errors import CorruptRecordError
from ._options import RemoteOptions, SourceOptionError

log = logging.getLogger(__name__)

MASTER_ID = 0
PERM_READ = 4
PERM_WRITE = 2
_FLAG_SUBSCRIPTION = 0x4
_BACKOFF_S = (0.1, 0.3, 1.0, 2.0)
_RETRYABLE_CODES = frozenset(
    {ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR}
)


class BrokerReadError(SourceOptionError):
    """A broker could not be read (unreachable after the retries, or it refused a request)."""


# ---- the cluster (driver) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class BrokerQueue:
    """One queue of one broker group."""

    topic: str
    broker_name: str
    queue_id: int


Addresses = tuple[tuple[int, str], ...]
"""A broker group's (broker id, address) pairs, the master (id 0) first."""


@dataclass(frozen=True, slots=True)
class BrokerRange:
    """Offsets ``[begin, end)`` of one queue of one broker group: the unit of a partition.
    ``addresses`` are the group's brokers when planned (master first)."""

    topic: str
    broker_name: str
    queue_id: int
    begin: int
    end: int
    addresses: Addresses

    @property
    def host(self) -> str:
        """The host of the master (where the data is): the partition's preferred location."""
        return self.addresses[0][1].rpartition(":")[0] if self.addresses else ""


def _addresses(route: TopicRoute, broker_name: str) -> Addresses:
    addrs = route.brokers.get(broker_name, {})
    return tuple(sorted(addrs.items()))


class Cluster:
    """The brokers as the driver sees them: topic routes (from the name servers, or made from
    one broker's topic table) and queue offsets. One thread; close it when done."""

    def __init__(self, opts: RemoteOptions, timeout_s: float = 5.0) -> None:
        self.opts = opts
        self.client = RemotingClient(timeout=timeout_s, signer=opts.signer())
        self._routes = RouteCache(self.client, list(opts.namesrv), 0.0) if opts.namesrv else None
        self._broker_name: str | None = None

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, addr: str, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        try:
            return self.client.invoke(addr, RemotingCommand.request(code, ext, body))
        except RemotingError as exc:
            raise BrokerReadError(f"broker {addr} did not answer: {exc}") from exc

    def route(self, topic: str) -> TopicRoute | None:
        """The topic's route; None when no broker has the topic."""
        if self._routes is not None:
            try:
                return self._routes.get(topic, refresh=True, allow_missing=True)
            except RemotingError as exc:
                raise BrokerReadError(
                    f"no name server answered ({self.opts.where}): {exc}"
                ) from exc
        addr = self.opts.broker
        assert addr is not None
        r = self.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG, {})
        if r.code != ResponseCode.SUCCESS:
            raise BrokerReadError(f"broker {addr} refused its topic list: {r.remark}")
        from ..remoting import _fastjson

        table = (_fastjson.loads(bytes(r.body)).get("topicConfigTable") or {}).get(topic)
        if table is None:
            return None
        name = self.broker_name(addr)
        qd = {
            "brokerName": name,
            "readQueueNums": int(table.get("readQueueNums", 0)),
            "writeQueueNums": int(table.get("writeQueueNums", 0)),
            "perm": int(table.get("perm", 6)),
        }
        return TopicRoute(topic, {name: {MASTER_ID: addr}}, [qd])

    def broker_name(self, addr: str) -> str:
        if self._broker_name is None:
            r = self.call(addr, 26, {})  # GET_BROKER_CONFIG
            text = bytes(r.body).decode("utf-8", "replace")
            conf = dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)
            self._broker_name = conf.get("brokerName") or addr
        return self._broker_name

    def queues(self, topic: str, *, must_exist: bool = True) -> list[tuple[BrokerQueue, Addresses]]:
        """Every readable queue of the topic on every broker group, ordered by broker, id."""
        route = self.route(topic)
        if route is None:
            if must_exist:
                raise SourceOptionError(f"unknown topic {topic} ({self.opts.where} has no route)")
            return []
        out = []
        for qd in sorted(route.queue_data, key=lambda q: str(q["brokerName"])):
            if not int(qd.get("perm", 6)) & PERM_READ:
                continue
            name = str(qd["brokerName"])
            addrs = _addresses(route, name)
            if not addrs:
                continue
            for qid in range(int(qd["readQueueNums"])):
                out.append((BrokerQueue(topic, name, qid), addrs))
        return out

    def _offset(self, addrs: Addresses, q: BrokerQueue, code: int, **extra: str) -> int:
        last: Exception | None = None
        for _bid, addr in addrs:
            try:
                r = self.call(addr, code, {"topic": q.topic, "queueId": str(q.queue_id), **extra})
            except BrokerReadError as exc:
                last = exc
                continue
            if r.code != ResponseCode.SUCCESS:
                raise BrokerReadError(f"{q.broker_name} ({addr}) refused {code}: {r.remark}")
            return int(r.ext_fields.get("offset", -1))
        raise BrokerReadError(f"no broker of {q.broker_name} answered: {last}")

    def min_offset(self, addrs: Addresses, q: BrokerQueue) -> int:
        return self._offset(addrs, q, RequestCode.GET_MIN_OFFSET)

    def max_offset(self, addrs: Addresses, q: BrokerQueue) -> int:
        return self._offset(addrs, q, RequestCode.GET_MAX_OFFSET)

    def offset_for_time(self, addrs: Addresses, q: BrokerQueue, ms: int) -> int:
        return self._offset(addrs, q, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=str(ms))

    def commit(self, addrs: Addresses, q: BrokerQueue, group: str, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET of ``group`` on the group's master."""
        ext = {
            "consumerGroup": group,
            "topic": q.topic,
            "queueId": str(q.queue_id),
            "commitOffset": str(offset),
        }
        r = self.call(addrs[0][1], RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        if r.code != ResponseCode.SUCCESS:
            raise BrokerReadError(f"{q.broker_name} refused the offset of {group}: {r.remark}")


# ---- pulling (executors) ----------------------------------------------------------------------

_pool: dict[tuple[str, str], RemotingClient] = {}
_pool_lock = threading.Lock()


def pooled(addr: str, timeout_s: float, opts: RemoteOptions | None = None) -> RemotingClient:
    """The worker process's client for ``addr`` signing as ``opts`` says (kept across the
    tasks it runs). Any thread: a client serialises its calls."""
    key = (addr, opts.access_key if opts is not None else "")
    with _pool_lock:
        client = _pool.get(key)
        if client is None:
            signer = opts.signer() if opts is not None else FROM_ENV
            client = _pool[key] = RemotingClient(timeout=timeout_s, signer=signer)
        client.timeout = timeout_s
        return client


def drop_pool() -> None:
    """Close the worker process's connections (tests; a worker's exit closes them anyway)."""
    with _pool_lock:
        for client in _pool.values():
            client.close()
        _pool.clear()


def pull_request(
    group: str, topic: str, queue_id: int, offset: int, max_nums: int
) -> RemotingCommand:
    """PULL_MESSAGE of at most ``max_nums`` records from ``offset``: no suspension, no commit,
    every tag (the subscription is in the request)."""
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(_FLAG_SUBSCRIPTION),
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)


class _Puller:
    """Pulls of one range: which broker of the group to ask, retries with the same offset."""

    def __init__(
        self,
        r: BrokerRange,
        opts: RemoteOptions,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.r = r
        self.opts = opts
        self.sleep = sleep
        self.addrs = dict(r.addresses)
        self.order = [a for _, a in r.addresses]
        self.current = self.order[0]

    def pull(self, offset: int, max_nums: int) -> RemotingCommand:
        r = self.r
        timeout = self.opts.pull_timeout_ms / 1000.0
        failures: list[str] = []
        for attempt in range(self.opts.pull_retries + 1):
            addr = self.current
            try:
                cmd = pull_request(self.opts.consumer_group, r.topic, r.queue_id, offset, max_nums)
                resp = pooled(addr, timeout, self.opts).invoke(addr, cmd, timeout)
            except RemotingError as exc:
                failures.append(f"{addr}: {exc}")
                # another broker of the group next (a slave holds the same queue offsets)
                self.current = self.order[(self.order.index(addr) + 1) % len(self.order)]
            else:
                if resp.code not in _RETRYABLE_CODES:
                    suggest = int(resp.ext_fields.get("suggestWhichBrokerId", 0) or 0)
                    self.current = self.addrs.get(suggest, self.order[0])
                    return resp
                failures.append(f"{addr}: code {resp.code} {resp.remark or ''}")
            if attempt < self.opts.pull_retries:
                self.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
        raise BrokerReadError(
            f"{r.topic}/{r.broker_name}/{r.queue_id}: pulling offset {offset} failed "
            f"{len(failures)} times ({'; '.join(failures[-2:])}); the task fails and Spark "
            "runs it again from the same offsets (spark.task.maxFailures)"
        )


def pull_range(
    r: BrokerRange,
    opts: RemoteOptions,
    schema: pa.Schema,
    *,
    batch_rows: int,
    check_crc: bool,
    fail_on_data_loss: bool,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``r``, pulled in order and decoded by the path-mode decoder: the same rows
    a read of the broker's store directory gives. A re-run yields the same rows."""
    decoder = RangeDecoder(
        None,
        schema=schema,
        batch_rows=batch_rows,
        check_crc=check_crc,
        fail_on_data_loss=fail_on_data_loss,
    )
    puller = _Puller(r, opts)
    offset = r.begin
    chunks: list[bytes | bytearray | memoryview] = []
    pending = 0  # records in chunks (at most; a pull may return fewer than asked)
    first = offset
    while offset < r.end:
        want = min(opts.pull_batch_size, r.end - offset)
        resp = puller.pull(offset, want)
        e = resp.ext_fields
        nxt = int(e.get("nextBeginOffset", offset))
        if resp.code == ResponseCode.SUCCESS:
            chunks.append(resp.body)
            pending += nxt - offset
            offset = max(nxt, offset + 1)
        elif resp.code == ResponseCode.PULL_OFFSET_MOVED or (
            resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and nxt > offset
        ):
            lowest = int(e.get("minOffset", 0))
            if offset < lowest:
                msg = (
                    f"{r.topic}/{r.broker_name}/{r.queue_id}: offsets {offset}..{lowest} are "
                    "no longer on the broker (retention removed them)"
                )
                if fail_on_data_loss:
                    raise CorruptRecordError(msg + "; set failOnDataLoss=false to skip them")
                log.warning("%s; skipped", msg)
                offset = lowest
            elif nxt > offset:
                offset = nxt
            else:
                break
        elif resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            log.warning(
                "%s/%s/%d: only offsets below %d of %d are readable",
                r.topic,
                r.broker_name,
                r.queue_id,
                offset,
                r.end,
            )
            break
        else:
            raise BrokerReadError(
                f"{r.topic}/{r.broker_name}/{r.queue_id}: the broker refused the pull of offset "
                f"{offset}: code {resp.code} {resp.remark or ''}"
            )
        if pending >= batch_rows:
            batch = decoder.records(b"".join(chunks), r.topic, r.queue_id, first, offset)
            chunks, pending, first = [], 0, offset
            if batch.num_rows:
                yield batch
    if chunks:
        batch = decoder.records(b"".join(chunks), r.topic, r.queue_id, first, r.end)
        if batch.num_rows:
            yield batch
