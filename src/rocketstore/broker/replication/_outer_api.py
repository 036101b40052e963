"""The broker's side of the name servers (RocketMQ 4.9.8's BrokerOuterAPI and the registration
part of BrokerController): register with every name server at start, every 30 s after a first
10 s, and at once when a topic was created; unregister at shutdown.

A full registration sends every topic config with the broker's DataVersion (REGISTER_BROKER,
103, RegisterBrokerBody as JSON or compressed, with its CRC-32); the name servers are asked all
at once, each with a 6 s timeout. The first name server that answers (in the order given)
supplies what a slave learns from the answer: its master's broker address and HA server
address. A name server that is down or slow costs a warning in the log; the next round tries it
again.

What each round sends, per name server:

- a topic created or changed (``register_topics``): an incremental registration, as RocketMQ
  4.9's ``registerIncrementBrokerData`` sends it: the same request whose table holds only the
  changed topics, with the new DataVersion. A name server merges a master's topics into its
  routes and drops none that the table leaves out, so the broker's other topics keep theirs;
  the cost of a create does not grow with the number of topics.
- the periodic round of a master: QUERY_DATA_VERSION (322) first; the whole table only when the
  name server answers that its version differs (``forceRegister=true``: always, as RocketMQ's
  default). A current name server counts the query as the broker's sign of life.
- the whole table, whatever the round, to a name server this registrar has not registered the
  whole table with over the connection it now has: a name server forgets a broker whose
  connection closes (and a restarted one knows nothing), so an increment is never the first
  thing a name server hears of the broker. A failed increment also makes the next round whole.

A slave's rounds are always whole (its answer carries its master's addresses; its topics never
change routes). The whole table is encoded in a worker thread.

Event loop thread only: construct, ``start``, ``register_now``, ``register_topics`` and
``close`` on the broker's loop. The topic-config provider is called in a worker thread, the
version provider on the loop (it must not block).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...protocol._namesrv_bodies import (
    BodyError,
    DataVersion,
    RegisterBrokerBody,
    RegisterBrokerResult,
    TopicConfigWrapper,
    body_crc32,
    decode_kv_table,
)
from ...remoting import AsyncRemotingClient, RemotingCommand, RemotingError, RequestCode, ext_str
from ...remoting._client import FROM_ENV, Signer

log = logging.getLogger(__name__)

REGISTER_PERIOD_SECONDS = 30.0  # registerNameServerPeriod
QUERY_DATA_VERSION_TIMEOUT_SECONDS = 3.0
REGISTER_INITIAL_DELAY_SECONDS = 10.0
REGISTER_TIMEOUT_SECONDS = 6.0  # registerBrokerTimeoutMills
UNREGISTER_TIMEOUT_SECONDS = 3.0

TopicConfigsProvider = Callable[[], tuple[Any, Mapping[str, Mapping[str, Any]]]]
"""Returns the broker's DataVersion (any object with ``counter`` and ``timestamp``, or its JSON
object) and its topic configs: topic → RocketMQ's TopicConfig JSON object (``readQueueNums``,
``writeQueueNums``, ``perm``, ``topicSysFlag``, ``topicFilterType``, ``order``; fields left out
take RocketMQ's defaults)."""


class NamesrvRegistrar:
    """Keeps one broker registered with its name servers.

    ``master_addr`` and ``ha_master_addr`` hold what the last answered registration reported
    (a master gets None for both; ``ha_master_addr`` keeps its value when an answer has none,
    as RocketMQ's broker does). ``on_registered`` is called with that answer after every round
    that one name server answered.
    """

    def __init__(
        self,
        namesrv_addrs: Sequence[str],
        cluster: str,
        broker_name: str,
        broker_id: int,
        broker_addr: str,
        ha_server_addr: str,
        topic_configs_provider: TopicConfigsProvider,
        *,
        period_s: float = REGISTER_PERIOD_SECONDS,
        initial_delay_s: float = REGISTER_INITIAL_DELAY_SECONDS,
        timeout_s: float = REGISTER_TIMEOUT_SECONDS,
        compressed: bool = False,
        on_registered: Callable[[RegisterBrokerResult], None] | None = None,
        client: AsyncRemotingClient | None = None,
        broker_id_of: Callable[[], int] | None = None,
        signer: Signer | None = FROM_ENV,
        force_register: bool = False,
        version_provider: Callable[[], Any] | None = None,
    ) -> None:
        self.namesrv_addrs = list(namesrv_addrs)
        self.force_register = force_register
        # the current DataVersion alone, cheaper than the whole table (None: the provider's)
        self.version_provider = version_provider
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_id = broker_id
        # the id to register under, asked at each round (controller mode: 0 only while the
        # broker is a master the controller confirmed); None: ``broker_id``
        self.broker_id_of = broker_id_of
        self.broker_addr = broker_addr
        self.ha_server_addr = ha_server_addr
        self.topic_configs_provider = topic_configs_provider
        self.period_s = period_s
        self.initial_delay_s = initial_delay_s
        self.timeout_s = timeout_s
        self.compressed = compressed
        self.on_registered = on_registered
        self._own_client = client is None
        self.client = client if client is not None else AsyncRemotingClient(signer=signer)
        self.master_addr: str | None = None
        self.ha_master_addr: str | None = None
        self.last_result: RegisterBrokerResult | None = None
        self.rounds = 0  # registration rounds run (answered or not)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._waiting: list[asyncio.Future[None]] = []  # registered() calls for the next round
        self._full_wanted = False  # the next round sends the whole table to every name server
        # changed topics waiting for the next round: (DataVersion JSON, topic → config JSON)
        self._increments: dict[str, Mapping[str, Any]] = {}
        self._increment_version: Any = None
        # name server → the connection the whole table last went over (see the module doc)
        self._whole_on: dict[str, object] = {}
        # what the rounds sent, by kind ("whole", "increment", "skipped": the name server was
        # current), for the metrics and the tests
        self.sent: dict[str, int] = {"whole": 0, "increment": 0, "skipped": 0}

    def current_broker_id(self) -> int:
        return self.broker_id_of() if self.broker_id_of is not None else self.broker_id

    async def start(self) -> None:
        """Register with every name server (failures are logged), then keep registering."""
        await self.register_all()
        self._task = asyncio.create_task(self._run(), name=f"register-{self.broker_name}")

    def register_now(self) -> None:
        """Ask for a round that sends the whole table to every name server, as soon as
        possible; requests made while a round runs lead to one more round."""
        self._full_wanted = True
        self._wake.set()

    def register_topics(self, version: Any, configs: Mapping[str, Mapping[str, Any]]) -> None:
        """Ask for an incremental registration of ``configs`` (topic → TopicConfig JSON, the
        topics just created or changed) under ``version`` (the table's DataVersion after the
        change) as soon as possible; changes close together share one request."""
        self._increments.update(configs)
        self._increment_version = version
        self._wake.set()

    async def registered(self, *, whole: bool = True) -> None:
        """Ask for a round (``whole``: the whole table to every name server; else what
        ``register_topics`` left waiting), then wait until a round that began after this call
        has ended (requests close together share the round). Without the periodic task (not
        started, or closed) the round runs here."""
        if self._task is None or self._closing:
            if whole or not self._increments:
                await self.register_all()
            else:
                await self._round_of_increments()
            return
        done = asyncio.get_running_loop().create_future()
        self._waiting.append(done)
        if whole:
            self._full_wanted = True
        self._wake.set()
        await done

    async def register_all(self) -> list[RegisterBrokerResult]:
        """One round that sends the whole table to every name server at once. Returns the
        answers of those that answered SUCCESS, in the order of ``namesrv_addrs``."""
        self._increments.clear()  # the whole table holds them
        return await self._round("whole")

    async def _round_of_increments(self) -> list[RegisterBrokerResult]:
        return await self._round("increment")

    async def _round(self, kind: str) -> list[RegisterBrokerResult]:
        """``kind``: "whole", "increment" (what ``register_topics`` left waiting) or
        "periodic" (the whole table where the name server's version differs)."""
        async with self._lock:
            self.rounds += 1
            increments: dict[str, Mapping[str, Any]] = {}
            increment_version = self._increment_version
            if kind != "whole":
                increments, self._increments = self._increments, {}
            if self.current_broker_id() != 0:
                kind = "whole"  # a slave: its answer teaches it its master
            whole_body: asyncio.Future[bytes] | None = None

            def whole() -> asyncio.Future[bytes]:
                nonlocal whole_body
                if whole_body is None:
                    whole_body = asyncio.ensure_future(asyncio.to_thread(self._whole_body))
                return whole_body

            increment_body = b""
            if increments:
                try:
                    increment_body = RegisterBrokerBody(
                        TopicConfigWrapper(DataVersion.of(increment_version), dict(increments)),
                        [],
                    ).encode(self.compressed)
                except Exception:
                    log.exception("%s: cannot build the incremental registration", self.broker_name)
                    self._full_wanted = True
                    return []
            if kind == "increment" and not increments:
                return []
            answers = await asyncio.gather(
                *(
                    self._register_with(addr, kind, whole, increment_body)
                    for addr in self.namesrv_addrs
                )
            )
            if whole_body is not None and not whole_body.done():
                whole_body.cancel()
            results = [r for r in answers if r is not None]
            if results:
                self._learn(results[0])
            return results

    async def _register_with(
        self,
        addr: str,
        kind: str,
        whole: Callable[[], asyncio.Future[bytes]],
        increment_body: bytes,
    ) -> RegisterBrokerResult | None:
        """One name server's part of a round: the whole table, the increment, or nothing when
        a periodic round finds the name server current."""
        send_whole = kind == "whole" or self._whole_on.get(addr) is None
        if not send_whole and self.client.connected(addr) is not self._whole_on.get(addr):
            send_whole = True  # a new connection: the name server may have forgotten the broker
        if not send_whole and kind == "periodic":
            if self.force_register or await self._version_differs(addr):
                send_whole = True
            elif not increment_body:
                self.sent["skipped"] += 1
                return None
        if send_whole:
            try:
                body = await asyncio.shield(whole())
            except Exception:
                log.exception("%s: cannot build the registration body", self.broker_name)
                return None
            result = await self._register(addr, self._ext(body), body)
            if result is not None:
                self.sent["whole"] += 1
                self._whole_on[addr] = self.client.connected(addr)
            else:
                self._whole_on.pop(addr, None)
            return result
        result = await self._register(addr, self._ext(increment_body), increment_body)
        if result is None:
            self._whole_on.pop(addr, None)  # the next round sends it the whole table
        else:
            self.sent["increment"] += 1
        return result

    def _whole_body(self) -> bytes:
        """The whole table's registration body (a worker thread)."""
        version, configs = self.topic_configs_provider()
        return RegisterBrokerBody(
            TopicConfigWrapper(DataVersion.of(version), dict(configs)), []
        ).encode(self.compressed)

    def _ext(self, body: bytes) -> dict[str, str]:
        return {
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "clusterName": self.cluster,
            "haServerAddr": self.ha_server_addr,
            "brokerId": str(self.current_broker_id()),
            "compressed": "true" if self.compressed else "false",
            "bodyCrc32": str(body_crc32(body)),
        }

    async def _version_differs(self, addr: str) -> bool:
        """QUERY_DATA_VERSION: whether the name server holds another version of the broker's
        table than the current one (True when it cannot tell)."""
        version = (
            self.version_provider()
            if self.version_provider is not None
            else self.topic_configs_provider()[0]
        )
        ext = {
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "clusterName": self.cluster,
            "brokerId": str(self.current_broker_id()),
        }
        cmd = RemotingCommand.request(
            RequestCode.QUERY_DATA_VERSION, ext, DataVersion.of(version).encode()
        )
        try:
            response = await self.client.invoke(addr, cmd, QUERY_DATA_VERSION_TIMEOUT_SECONDS)
        except (RemotingError, OSError) as exc:
            log.warning("%s: asking %s for its version failed: %s", self.broker_name, addr, exc)
            return True
        if response.code != 0:
            return True
        return ext_str(response.ext_fields, "changed") != "false"

    async def _register(
        self, namesrv_addr: str, ext: dict[str, str], body: bytes
    ) -> RegisterBrokerResult | None:
        cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(ext), body)
        try:
            response = await self.client.invoke(namesrv_addr, cmd, self.timeout_s)
        except (RemotingError, OSError) as exc:
            log.warning("%s: registering with %s failed: %s", self.broker_name, namesrv_addr, exc)
            return None
        if response.code != 0:
            log.warning(
                "%s: name server %s refused the registration: %s %s",
                self.broker_name,
                namesrv_addr,
                response.code,
                response.remark,
            )
            return None
        kv_table = None
        if response.body:
            try:
                kv_table = decode_kv_table(response.body)
            except BodyError as exc:
                log.warning("%s: bad KV table from %s: %s", self.broker_name, namesrv_addr, exc)
        log.debug("%s: registered with %s", self.broker_name, namesrv_addr)
        return RegisterBrokerResult(
            ext_str(response.ext_fields, "haServerAddr"),
            ext_str(response.ext_fields, "masterAddr"),
            kv_table,
        )

    def _learn(self, result: RegisterBrokerResult) -> None:
        self.last_result = result
        if result.ha_server_addr is not None:
            self.ha_master_addr = result.ha_server_addr
        self.master_addr = result.master_addr
        if self.on_registered is not None:
            try:
                self.on_registered(result)
            except Exception:
                log.exception("%s: registration callback failed", self.broker_name)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self.initial_delay_s
        while not self._closing:
            kind = "increment"
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancellation that arrives as its wait ends
                async with asyncio.timeout(max(0.0, next_at - loop.time())):
                    await self._wake.wait()
            except TimeoutError:
                next_at = max(next_at + self.period_s, loop.time())
                kind = "periodic"
            if self._closing:
                return
            self._wake.clear()
            if self._full_wanted:
                kind = "whole"
                self._full_wanted = False
            waiting, self._waiting = self._waiting, []
            try:
                if kind == "whole":
                    await self.register_all()
                else:
                    await self._round(kind)
            except Exception:
                log.exception("%s: registration round failed", self.broker_name)
            finally:
                _release(waiting)

    async def close(self, *, unregister: bool = True) -> None:
        """Stop registering and (by default) unregister from every name server. The periodic
        task is told twice (a flag it checks after each wait and round, and a cancellation), so
        a cancellation lost inside a round (asyncio.wait_for on Python 3.11 can swallow one)
        ends it after that round instead of a period later."""
        self._closing = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=self.timeout_s + 1.0)
            if not done:
                log.warning("%s: the registration task did not stop", self.broker_name)
            elif not task.cancelled() and task.exception() is not None:
                log.warning(
                    "%s: the registration task failed: %s", self.broker_name, task.exception()
                )
        waiting, self._waiting = self._waiting, []
        _release(waiting)  # no round will come for them
        if unregister:
            await asyncio.gather(*(self._unregister(addr) for addr in self.namesrv_addrs))
        if self._own_client:
            self.client.close()

    async def _unregister(self, namesrv_addr: str) -> None:
        ext = {
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "clusterName": self.cluster,
            "brokerId": str(self.current_broker_id()),
        }
        cmd = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext)
        try:
            response = await self.client.invoke(namesrv_addr, cmd, UNREGISTER_TIMEOUT_SECONDS)
        except (RemotingError, OSError) as exc:
            log.warning("%s: unregistering from %s failed: %s", self.broker_name, namesrv_addr, exc)
            return
        if response.code != 0:
            log.warning(
                "%s: name server %s refused to unregister: %s %s",
                self.broker_name,
                namesrv_addr,
                response.code,
                response.remark,
            )


def _release(waiting: list[asyncio.Future[None]]) -> None:
    for done in waiting:
        if not done.done():
            done.set_result(None)
