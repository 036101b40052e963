"""Answering the brokers' checks of exactly-once halves from the decision records (``_eos``).

A broker asks about a half left open (older than its ``transactionTimeout``) with
CHECK_TRANSACTION_STATE, sent to a connected producer of the half's group: here
``rocketstore-spark-eos``. :class:`ExactlyOnceChecks` is such a producer: it sends the
group's heartbeat to every master the name servers list (every 10 s, so a master that
appeared or took over is reached too) and answers each check from the decision of the
half's batch (properties rsQuery, rsBatch, rsWriter):

    the batch has a decision naming the half's writer   END_TRANSACTION commit
    the batch has a decision without it                 END_TRANSACTION rollback
    no decision (the batch may still run), or the
    decision cannot be read                             no answer (asked again later)

Run it beside the queries (in the driver program, or as its own process:
``python -m rocketstore.spark._eos_checks --namesrv HOST:PORT``) so that halves a driver
left when it died are ended while no query runs; the queries do not need it, their replays
end their halves themselves.

Threads: ``start`` / ``stop`` from any thread; the work runs on a loop thread of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import logging
import os
import socket
import threading
import time
from typing import Any

from ..client._admin import AdminClient
from ..client._consumer import decode_records
from ..remoting import AsyncRemotingClient, RemotingCommand, RemotingError, RequestCode
from ._eos import (
    END_COMMIT,
    END_ROLLBACK,
    PRODUCER_GROUP,
    PROP_BATCH,
    PROP_QUERY,
    PROP_WRITER,
    Decision,
    ExactlyOnceError,
    find_decision,
)

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
_NO_DECISION_TTL_S = 1.0


class ExactlyOnceChecks:
    """A producer of the exactly-once group that answers the brokers' checks."""

    def __init__(self, namesrv: str, *, timeout_s: float = 5.0) -> None:
        self.namesrv = namesrv
        self.timeout_s = timeout_s
        self.client_id = f"{socket.gethostname()}@eos-checks-{os.getpid()}"
        self.answered = {"commit": 0, "rollback": 0, "none": 0}
        self._decided: dict[tuple[str, int], Decision] = {}
        self._undecided: dict[tuple[str, int], float] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._client: AsyncRemotingClient | None = None
        self._task: concurrent.futures.Future[None] | None = None
        self._admin = AdminClient(namesrv, timeout=timeout_s)
        self._admin_lock = threading.Lock()
        self.first_heartbeat = threading.Event()

    def start(self) -> ExactlyOnceChecks:
        self._thread.start()
        self._task = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._client is not None:
                self._client.close()

        if self._task is not None:
            self._task.cancel()
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._admin.close()

    def __enter__(self) -> ExactlyOnceChecks:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _run(self) -> None:
        self._client = AsyncRemotingClient({RequestCode.CHECK_TRANSACTION_STATE: self._check})
        body = json.dumps(
            {
                "clientID": self.client_id,
                "consumerDataSet": [],
                "producerDataSet": [{"groupName": PRODUCER_GROUP}],
            }
        ).encode()
        while True:
            try:
                masters = await asyncio.to_thread(self._masters)
            except Exception as exc:
                log.warning("exactly-once checks: no brokers: %s", exc)
                masters = []
            for addr in masters:
                cmd = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
                try:
                    await self._client.invoke(addr, cmd, self.timeout_s)
                except RemotingError as exc:
                    log.warning("exactly-once checks: heartbeat to %s failed: %s", addr, exc)
            if masters:
                self.first_heartbeat.set()
            await asyncio.sleep(HEARTBEAT_S)

    def _masters(self) -> list[str]:
        with self._admin_lock:
            return sorted(set(self._admin.masters().values()))

    def _decision(self, query: str, batch: int) -> Decision | None:
        """The batch's decision (kept once found; a missing one is asked for again after a
        second). Raises ExactlyOnceError when it cannot be read."""
        key = (query, batch)
        found = self._decided.get(key)
        if found is not None:
            return found
        if time.monotonic() - self._undecided.get(key, -1e9) < _NO_DECISION_TTL_S:
            return None
        with self._admin_lock:
            try:
                found = find_decision(self._admin, query, batch)
            except Exception as exc:
                raise ExactlyOnceError(f"decision {query}:{batch}: {exc}") from exc
        if found is None:
            self._undecided[key] = time.monotonic()
        else:
            self._decided[key] = found
            self._undecided.pop(key, None)
        return found

    async def _check(self, cmd: RemotingCommand, conn: Any) -> None:
        ext = cmd.ext_fields
        try:
            msgs = decode_records(cmd.body or b"")
        except ValueError as exc:
            log.warning("exactly-once checks: a check with a bad message: %s", exc)
            return None
        if not msgs:
            return None
        props = msgs[0].properties
        query, batch, writer = props.get(PROP_QUERY), props.get(PROP_BATCH), props.get(PROP_WRITER)
        if not query or batch is None or not writer or not batch.isdigit():
            self.answered["none"] += 1
            return None  # not an exactly-once half
        try:
            decision = await asyncio.to_thread(self._decision, query, int(batch))
        except ExactlyOnceError as exc:
            log.warning("exactly-once checks: %s", exc)
            self.answered["none"] += 1
            return None
        if decision is None:
            self.answered["none"] += 1
            return None
        commit = writer in decision.writer_ids
        self.answered["commit" if commit else "rollback"] += 1
        header = {
            "producerGroup": PRODUCER_GROUP,
            "tranStateTableOffset": str(ext.get("tranStateTableOffset", "")),
            "commitLogOffset": str(ext.get("commitLogOffset", "")),
            "commitOrRollback": str(END_COMMIT if commit else END_ROLLBACK),
            "fromTransactionCheck": "true",
            "msgId": str(ext.get("msgId", "")),
            "transactionId": str(ext.get("transactionId", "")),
        }
        conn.send(RemotingCommand.request(RequestCode.END_TRANSACTION, header, oneway=True))
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rocketstore.spark._eos_checks",
        description="Answer the brokers' checks of exactly-once Spark writes",
    )
    parser.add_argument("--namesrv", required=True, help="host:port[;host:port]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    checks = ExactlyOnceChecks(args.namesrv).start()
    try:
        while True:
            time.sleep(60)
            log.info("exactly-once checks answered: %s", checks.answered)
    except KeyboardInterrupt:
        pass
    finally:
        checks.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
