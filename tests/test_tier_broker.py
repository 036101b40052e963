"""Brokers tell where their tiered store is (GET_TIER_MANIFEST), and ``read_topic`` through the
name server reads those Parquet files itself and pulls only what follows them: a name server,
two broker groups with tiered directories (built as the tiering service builds them) and one
without, on loopback. The answer lists exactly the manifest's files below ``covered`` and each
queue's first offset past them; a broker without a tier, an unknown topic and the ACL are
answered as they should. ``read_topic(namesrv=...)`` gives exactly the rows of the
``rocketstore`` source through the brokers, also when one broker's tier is not readable from
the driver (that group is pulled alone, logged once), and after the commit log's oldest files
were cleaned it still gives every row, where the source alone no longer can."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from rocketstore import StoreConfig
from rocketstore.acl import AccessDeniedError
from rocketstore.acl._plain import SUB, parse_plain_acl
from rocketstore.acl._remoting import check_request, request_needs
from rocketstore.broker._config import BrokerConfig
from rocketstore.client import ClientError, MessageQueue, Producer
from rocketstore.client._admin import AdminClient
from rocketstore.namesrv import NameServer
from rocketstore.remoting import RemotingCommand, RequestCode, ResponseCode
from rocketstore.remoting._signing import RequestSigner
from rocketstore.server import BrokerServer
from rocketstore.spark._tiered_broker import broker_tiers
from rocketstore.tier._answer import TierManifestBody
from rocketstore.tier._manifest import load_covered, load_manifest, save_covered, topic_dir
from support.tier_files import expire_oldest, tier_store, wait_dispatched

TIERED = ("broker-a", "broker-b")
TOPICS = ("TA", "TB")
QUEUES = 3
PER_QUEUE = 120
FILE_SIZE = 64 * 1024
TIERED_FILES = 3
WAIT_S = 30.0
ORDER = ["store_host", "topic", "queue_id", "queue_offset"]


class Cluster:
    """A name server, the broker groups of ``TIERED`` (each with a tiered directory) and
    ``broker-c`` without one, on an event loop thread. ``service``: the tiered groups run the
    tiering service (``tieredDir`` in their store config: sealed files tiered in the
    background, the commit log's cleaner held back by ``covered``); otherwise the test tiers
    their stores and the brokers only read their tiers."""

    def __init__(self, root: Path, *, service: bool = False) -> None:
        self.root = root
        self.service = service
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.namesrv: NameServer | None = None
        self.brokers: dict[str, BrokerServer] = {}
        try:
            self.run(self._start())
        except BaseException:
            self.stop()
            raise

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)

    def tiered(self, name: str) -> Path:
        return self.root / f"{name}-tiered"

    def store_dir(self, name: str) -> str:
        return str(self.root / name)

    async def _start(self) -> None:
        self.namesrv = NameServer(port=0)
        await self.namesrv.start()
        for name in (*TIERED, "broker-c"):
            tiered = str(self.tiered(name)) if name in TIERED else None
            store = StoreConfig(
                store_path_root_dir=self.store_dir(name),
                mapped_file_size_commit_log=FILE_SIZE,
                flush_interval_commit_log=10,
                file_reserved_time=1,
                delete_commit_log_files_interval=0,
                ha_listen_port=0,
                tiered_dir=tiered if tiered and self.service else "",
            )
            config = BrokerConfig(listen_port=0, namesrv_addr=self.ns, broker_name=name)
            server = BrokerServer(store, config, tiered_dir=tiered)
            self.brokers[name] = server  # stopped by stop() even when the start fails
            await server.start()

    @property
    def ns(self) -> str:
        assert self.namesrv is not None
        return self.namesrv.address

    def addr(self, name: str) -> str:
        return self.brokers[name].address

    def stop(self) -> None:
        try:

            async def down() -> None:
                for server in self.brokers.values():
                    await server.shutdown()
                if self.namesrv is not None:
                    await self.namesrv.close()

            self.run(down())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()


def fill(c: Cluster) -> int:
    """Both topics on both tiered groups, ``PER_QUEUE`` messages a queue; the count sent."""
    with AdminClient(c.ns) as admin:
        for topic in TOPICS:
            for name in TIERED:
                admin.create_topic(
                    c.addr(name), topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES
                )
        deadline = time.monotonic() + WAIT_S
        for topic in TOPICS:
            while True:
                route = admin.route(topic)
                if route is not None and set(route.brokers) >= set(TIERED):
                    break
                assert time.monotonic() < deadline, f"no route for {topic}"
                time.sleep(0.05)
    sent = 0
    with Producer(c.ns) as p:  # interleaved: every commit-log file holds both topics
        for lo in range(0, PER_QUEUE, 40):
            for topic in TOPICS:
                for name in TIERED:
                    for q in range(QUEUES):
                        bodies = [
                            f"{topic}|{name}|{q}|{i}|".encode() * (10 + i % 13)
                            for i in range(lo, min(lo + 40, PER_QUEUE))
                        ]
                        mq = MessageQueue(topic, name, q)
                        r = p.send_batch(topic, bodies, tags="t", queue=mq)
                        assert r.status == "SEND_OK"
                        sent += len(bodies)
    for name in TIERED:
        store = c.brokers[name].store
        wait_dispatched(store)
        files = len(store.commit_log.queue.files)
        assert files > TIERED_FILES + 1
        if not c.service:
            assert tier_store(c.store_dir(name), c.tiered(name), files=TIERED_FILES) > 0
            continue
        service = c.brokers[name].tier
        assert service is not None
        deadline = time.monotonic() + 4 * WAIT_S
        while service.covered() < (files - 1) * FILE_SIZE:  # every sealed file
            assert time.monotonic() < deadline, f"{name}: tiering did not catch up"
            time.sleep(0.05)
    return sent


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.sent = fill(c)  # type: ignore[attr-defined]
        yield c
    finally:
        c.stop()


@pytest.fixture
def tiering_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, service=True)
    try:
        c.sent = fill(c)  # type: ignore[attr-defined]
        yield c
    finally:
        c.stop()


# ---- the request ------------------------------------------------------------------------------


def test_the_answer_lists_the_covered_files_and_the_boundary(cluster: Cluster) -> None:
    tiered = cluster.tiered("broker-a")
    with AdminClient(cluster.ns) as admin:
        body = admin.tier_manifest(cluster.addr("broker-a"), "TA")
        assert body is not None
        covered = load_covered(tiered)
        assert covered == TIERED_FILES * FILE_SIZE
        want = load_manifest(tiered, "TA").covered_files(covered)
        assert want
        assert body.topic == "TA" and body.covered == covered
        assert body.tiered_dir == os.path.abspath(tiered) and os.path.isabs(body.tiered_dir)
        assert body.host == socket.gethostname()
        assert [f.to_json() for f in body.files] == [f.to_json() for f in want]
        # every queue's tiered offsets run from 0 (nothing cleaned yet): the boundary counts them
        for q in range(QUEUES):
            rows = sum(f.queues[q][1] - f.queues[q][0] + 1 for f in want if q in f.queues)
            assert body.boundary[q] == rows > 0

        # files listed past ``covered`` (a crash while a range was tiered) are left out
        save_covered(tiered, FILE_SIZE)
        try:
            lower = admin.tier_manifest(cluster.addr("broker-a"), "TA")
        finally:
            save_covered(tiered, covered)
        assert lower is not None and lower.covered == FILE_SIZE
        assert [f.name for f in lower.files] == [
            f.name for f in want if f.commitlog[1] <= FILE_SIZE
        ]
        assert len(lower.files) < len(want)
        assert lower.boundary == {
            q: max(f.queues[q][1] for f in lower.files if q in f.queues) + 1
            for q in {q for f in lower.files for q in f.queues}
        }
        assert lower.boundary != body.boundary

        with pytest.raises(ClientError) as info:
            admin.tier_manifest(cluster.addr("broker-a"), "NoSuchTopic")
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
        # a broker without a tier: None (the reader pulls), its remark says why
        assert admin.tier_manifest(cluster.addr("broker-c"), "TA") is None
        r = admin.call(
            cluster.addr("broker-c"),
            RequestCode.GET_TIER_MANIFEST,
            {"topic": "TA"},
            ok=(ResponseCode.SYSTEM_ERROR,),
        )
        assert r.code == ResponseCode.SYSTEM_ERROR and "keeps no tiered store" in (r.remark or "")
        r = admin.call(cluster.addr("broker-a"), RequestCode.GET_TIER_MANIFEST, ok=(1,))
        assert r.code == ResponseCode.SYSTEM_ERROR and "<topic> is null" in (r.remark or "")


def test_the_request_reads_its_topic_under_the_acl() -> None:
    import yaml

    cmd = RemotingCommand.request(RequestCode.GET_TIER_MANIFEST, {"topic": "topicA"})
    assert int(RequestCode.GET_TIER_MANIFEST) == 9001
    assert request_needs(cmd) == {"topicA": SUB}
    acl = parse_plain_acl(
        yaml.safe_load(
            "accounts:\n  - accessKey: readerAK\n    secretKey: 12345678\n"
            "    defaultTopicPerm: DENY\n    topicPerms:\n      - topicA=DENY\n"
            "      - topicC=SUB\n"
        )
    )
    RequestSigner("readerAK", "12345678")(cmd)
    with pytest.raises(AccessDeniedError):
        check_request(acl, cmd, "127.0.0.1")
    allowed = RemotingCommand.request(RequestCode.GET_TIER_MANIFEST, {"topic": "topicC"})
    RequestSigner("readerAK", "12345678")(allowed)
    check_request(acl, allowed, "127.0.0.1")


def elsewhere(admin: AdminClient, addr: str) -> None:
    """Answers of the broker at ``addr`` as from another machine: its tier at a path that
    does not exist here."""
    ask = admin.tier_manifest

    def remote(broker_addr: str, topic: str) -> TierManifestBody | None:
        body = ask(broker_addr, topic)
        if body is None or broker_addr != addr:
            return body
        return dataclasses.replace(body, tiered_dir="/nonexistent/tier", host="elsewhere")

    admin.tier_manifest = remote  # type: ignore[method-assign]


def test_a_tier_not_readable_here_is_pulled_alone_and_logged_once(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    with AdminClient(cluster.ns) as admin:
        whole = broker_tiers(admin, TOPICS)
        assert set(whole.starting["TA"]) == set(TIERED) and not whole.fallbacks
        # one listed file of broker-b is not the size its manifest gives (another machine's
        # directory at the same path, a copy in progress): broker-b is pulled alone
        body = admin.tier_manifest(cluster.addr("broker-b"), "TB")
        assert isinstance(body, TierManifestBody) and body.files
        odd = topic_dir(body.tiered_dir, "TB") / body.files[0].name
        size = odd.stat().st_size
        with open(odd, "ab") as fh:
            fh.write(b"x")
        try:
            with caplog.at_level(logging.WARNING, logger="rocketstore.spark._tiered_broker"):
                part = broker_tiers(admin, TOPICS)
        finally:
            os.truncate(odd, size)
    assert list(part.fallbacks) == ["broker-b"] and list(part.fallbacks["broker-b"]) == ["TB"]
    assert "bytes here" in part.fallbacks["broker-b"]["TB"]
    assert {t: set(b) for t, b in part.starting.items()} == {
        "TA": set(TIERED),
        "TB": {"broker-a"},
    }
    b_tb = os.path.join(os.path.abspath(cluster.tiered("broker-b")), "TB") + os.sep
    assert part.files == [f for f in whole.files if not f.startswith(b_tb)]
    assert len(part.files) < len(whole.files)
    warned = [r for r in caplog.records if "broker-b" in r.getMessage()]
    assert len(warned) == 1

    # a directory missing here (another machine's path): every topic of the group, one line
    caplog.clear()
    logger = "rocketstore.spark._tiered_broker"
    with caplog.at_level(logging.WARNING, logger=logger), AdminClient(cluster.ns) as admin:
        elsewhere(admin, cluster.addr("broker-b"))
        gone = broker_tiers(admin, TOPICS)
    assert list(gone.fallbacks["broker-b"]) == list(TOPICS)
    assert {t: set(b) for t, b in gone.starting.items()} == {t: {"broker-a"} for t in TOPICS}
    warned = [r.getMessage() for r in caplog.records if "broker-b" in r.getMessage()]
    assert len(warned) == 1 and "TA, TB" in warned[0]


def test_read_topic_arguments() -> None:
    from rocketstore.spark import read_topic

    with pytest.raises(ValueError, match="either path"):
        read_topic(None, path="/x", namesrv="127.0.0.1:1", topics="T")
    with pytest.raises(ValueError, match="either path"):
        read_topic(None, topics="T")
    with pytest.raises(ValueError, match="tiered_dir is for path mode"):
        read_topic(None, namesrv="127.0.0.1:1", topics="T", tiered_dir="/t")
    with pytest.raises(ValueError, match="startingOffsets"):
        read_topic(None, namesrv="127.0.0.1:1", topics="T", options={"startingOffsets": "{}"})


# ---- Spark --------------------------------------------------------------------------------------


def test_read_topic_through_brokers_equals_the_source_and_outlives_retention(
    spark: Any,
    tiering_cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rocketstore.spark import read_topic

    cluster = tiering_cluster

    def rows(df: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in df.orderBy(*ORDER).collect()]

    def source() -> Any:
        return (
            spark.read.format("rocketstore")
            .option("namesrv", cluster.ns)
            .option("topics", ",".join(TOPICS))
            .load()
        )

    want = rows(source())
    assert len(want) == cluster.sent  # type: ignore[attr-defined]
    got_df = read_topic(spark, namesrv=cluster.ns, topics=list(TOPICS))
    assert got_df.columns == source().columns
    assert rows(got_df) == want

    # broker-b's tier is on another machine: that group is pulled alone, the rows are the same
    real = AdminClient.__enter__

    def enter(self: AdminClient) -> AdminClient:
        elsewhere(self, cluster.addr("broker-b"))
        return real(self)

    monkeypatch.setattr(AdminClient, "__enter__", enter)
    with caplog.at_level(logging.WARNING, logger="rocketstore.spark._tiered_broker"):
        assert rows(read_topic(spark, namesrv=cluster.ns, topics="TA,TB")) == want
    assert any("broker-b is read by pulling alone" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()

    # the commit log's oldest files are cleaned: their rows are only in the tiers now. The
    # brokers give the tiers' first offsets as the queues' first (as RocketMQ 5's tiered store
    # does) and answer pulls below the commit log from them, so the source alone still reads
    # every row, by pulling
    for name in TIERED:
        expire_oldest(cluster.brokers[name].store, TIERED_FILES)
        assert cluster.brokers[name].store.get_min_offset_in_queue("TA", 0) > 0
    assert rows(source()) == want
    after = rows(read_topic(spark, namesrv=cluster.ns, topics="TA,TB"))
    assert after == want
    picked = read_topic(spark, namesrv=cluster.ns, topics="TA", columns=["queue_offset", "body"])
    assert picked.columns == ["queue_offset", "body"]
    assert picked.count() == len(want) // len(TOPICS)
