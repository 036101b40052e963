"""Real RocketMQ 4.9.8 stores: our reads equal RocketMQ's own read-back, and re-dispatching the
commit log writes consume-queue and index files equal to RocketMQ's, byte for byte."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore
from rocketstore.store.log._record import decode_msg_id
from support.fixtures import FIXTURES as FIXTURES
from support.fixtures import fixture_config, read_back
from support.fixtures import unpack_fixture as unpack


def frozen(store: Path) -> MessageStore:
    """The store as RocketMQ read it back: no delayed delivery, no retention cleaning.

    The clean fixture holds two level-18 (2 h) messages that were pending when RocketMQ read
    it back; they are due now, and a store opened with its services delivers them (see
    ``test_opening_delivers_what_became_due``). A comparison with the read-back must not race
    with that."""
    return MessageStore(fixture_config(store), maintenance=False)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack("clean", tmp_path_factory.mktemp("fx"))


def manifest(fixture: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (fixture / "manifest.jsonl").read_text().splitlines()]


@pytest.fixture(params=["clean", "abort"])
def opened(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[MessageStore, list[dict[str, Any]]]]:
    fixture = unpack(request.param, tmp_path)
    with frozen(fixture / "store") as store:
        yield store, read_back(fixture)


def test_queues_and_messages_match_rocketmq(
    opened: tuple[MessageStore, list[dict[str, Any]]],
) -> None:
    store, lines = opened
    queues = [d for d in lines if d["type"] == "queue"]
    assert queues
    for d in queues:
        assert store.get_min_offset_in_queue(d["topic"], d["queueId"]) == d["minOffset"]
        assert store.get_max_offset_in_queue(d["topic"], d["queueId"]) == d["maxOffset"]
    msgs = [d for d in lines if d["type"] == "msg"]
    assert len(msgs) > 1000
    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for d in msgs:
        by_queue.setdefault((d["topic"], d["queueId"]), []).append(d)
    for (topic, qid), want in by_queue.items():
        got = []
        offset = 0
        while True:
            g = store.get_message("g", topic, qid, offset, 32)
            if not g.messages:
                break
            got += g.messages
            offset = g.next_begin_offset
        assert len(got) == len(want)
        cq = store.consume_queues.find(topic, qid)
        assert cq is not None
        for m, d in zip(got, want, strict=True):
            assert cq.get_unit(d["cqOffset"]) == (d["cqPhyOffset"], d["cqSize"], d["cqTagsCode"])
            assert m.queue_offset == d["queueOffset"] and m.commitlog_offset == d["physicalOffset"]
            assert (m.topic, m.queue_id, m.store_size) == (
                d["recTopic"],
                d["recQueueId"],
                d["storeSize"],
            )
            assert m.msg_id == d["msgId"]
            assert (m.store_timestamp, m.born_timestamp) == (
                d["storeTimestamp"],
                d["bornTimestamp"],
            )
            assert (m.born_host_str, m.store_host_str) == (d["bornHost"], d["storeHost"])
            assert (m.sys_flag, m.flag, m.reconsume_times) == (
                d["sysFlag"],
                d["flag"],
                d["reconsumeTimes"],
            )
            assert m.prepared_transaction_offset == d["preparedTransactionOffset"]
            assert (m.body_crc, hashlib.sha256(m.body).hexdigest()) == (
                d["bodyCRC"],
                d["bodySha256"],
            )
            assert (m.tags, m.uniq_key, m.properties) == (d["tags"], d["uniqKey"], d["properties"])


def test_key_queries_and_msg_ids_match_rocketmq(
    opened: tuple[MessageStore, list[dict[str, Any]]],
) -> None:
    store, lines = opened
    queries = [d for d in lines if d["type"] == "query"]
    assert queries
    for d in queries:
        r = store.query_message(d["topic"], d["key"], 64, 0, 2**63 - 1)
        assert [m.commitlog_offset for m in r.messages] == [
            x["physicalOffset"] for x in d["results"]
        ]
        assert [m.msg_id for m in r.messages] == [x["msgId"] for x in d["results"]]
        if d["results"]:
            assert r.index_last_update_phyoffset == d["indexLastUpdatePhyoffset"]
    for d in (d for d in lines if d["type"] == "msgid"):
        _host, phys = decode_msg_id(d["msgId"])
        m = store.look_message_by_offset(phys)
        assert m is not None
        assert (m.msg_id, m.store_size, m.topic, m.queue_offset) == (
            d["msgId"],
            d["storeSize"],
            d["recTopic"],
            d["queueOffset"],
        )


def test_redispatch_writes_rocketmq_bytes(clean: Path, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    shutil.copytree(clean / "store", store_dir)
    shutil.rmtree(store_dir / "consumequeue")
    shutil.rmtree(store_dir / "index")
    with frozen(store_dir) as store:
        assert store.reput.parsed == 3039 + 7  # every record read back from the files
    original = clean / "store" / "consumequeue"
    files = sorted(p.relative_to(original) for p in original.rglob("*") if p.is_file())
    assert len(files) == 15 + 1  # TopicA/0 has two files
    for rel in files:
        assert (store_dir / "consumequeue" / rel).read_bytes() == (original / rel).read_bytes(), rel
    # index files: same entries, slots and headers; only the names (creation times) differ
    ours = sorted((store_dir / "index").iterdir())
    theirs = sorted((clean / "store" / "index").iterdir())
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs, strict=True):
        assert a.read_bytes() == b.read_bytes(), (a.name, b.name)


def test_clean_reopen_changes_nothing(clean: Path, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    shutil.copytree(clean / "store", store_dir)
    with frozen(store_dir) as store:
        assert store.reput.parsed <= 7  # at most the records after the last unit
    for sub in ("consumequeue", "index"):
        for p in (clean / "store" / sub).rglob("*"):
            if p.is_file():
                assert (
                    store_dir / p.relative_to(clean / "store")
                ).read_bytes() == p.read_bytes(), p


def test_opening_delivers_what_became_due(clean: Path, tmp_path: Path) -> None:
    """A store opened with its services delivers the level-18 messages that were pending in
    the fixture (they were due two hours after they were stored), as a RocketMQ broker
    started on it would: after the first second, to their real topic and queue."""
    pending = [
        m
        for m in manifest(clean)
        if m.get("topic") == "SCHEDULE_TOPIC_XXXX" and m.get("queueId") == 17
    ]
    assert len(pending) == 2
    assert max(m["storeTimestamp"] for m in pending) + 7_200_000 < time.time() * 1000
    store_dir = tmp_path / "store"
    shutil.copytree(clean / "store", store_dir)
    with MessageStore(fixture_config(store_dir)) as store:
        before = {q: store.get_max_offset_in_queue("TopicB", q) for q in range(4)}
        opened = time.monotonic()
        want = dict(before)
        for m in pending:
            want[int(m["properties"]["REAL_QID"])] += 1
        deadline = opened + 60
        while {q: store.get_max_offset_in_queue("TopicB", q) for q in range(4)} != want:
            assert time.monotonic() < deadline, "the due messages were not delivered"
            time.sleep(0.02)
        for m in pending:
            q = int(m["properties"]["REAL_QID"])
            got = store.get_message("g", "TopicB", q, before[q], 1).messages
            assert [g.body_crc for g in got] == [m["bodyCRC"]]
            assert got[0].properties["DELAY"] == "18"  # RocketMQ keeps DELAY when it re-puts
