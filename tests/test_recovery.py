"""StoreLoader: RocketMQ's crashed and clean stores, checkpoint and abort-file lifecycle,
damaged files (checkpoint, consume queues, index, commit-log sizes), the fast scanner, and
``rocketstore inspect``."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketstore import CorruptFileError, Message, MessageStore
from rocketstore.cli import main
from rocketstore.store._errors import CorruptRecordError
from rocketstore.store.log._record import check_record, encode_record
from rocketstore.store.queue._consume_queue import UNIT, UNIT_SIZE
from rocketstore.store.queue._index import HEADER
from rocketstore.store.recovery._scan import BAD_RECORD, scan_records
from support.crash import config, read_queue
from support.fixtures import fixture_config, read_back
from support.fixtures import unpack_fixture as unpack

T = "Rec"


def fill(store: MessageStore, n: int, queues: int = 3) -> list[tuple[int, int, bytes]]:
    out = []
    for i in range(n):
        body = f"m{i}|".encode() * (1 + i % 50)
        r = store.put_message(Message(T, body, i % queues, keys=[f"k{i}"]))
        assert r.ok
        out.append((i % queues, r.queue_offset, body))
    while store.dispatch_behind_bytes():
        time.sleep(0.001)
    return out


def bodies(store: MessageStore, qid: int) -> list[bytes]:
    return [m.body for m in read_queue(store, T, qid)]


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ---- RocketMQ's stores --------------------------------------------------------------------------


def test_rocketmq_crashed_store_recovers_as_rocketmq_does(tmp_path: Path) -> None:
    fixture = unpack("abort", tmp_path)
    lines = read_back(fixture)
    load = next(d for d in lines if d["type"] == "load")
    after = next(d for d in lines if d["type"] == "store")
    root = fixture / "store"
    with MessageStore(fixture_config(root)) as store:
        r = store.load_result
        assert r is not None and r.mode == "abnormal" and r.abort_file_found
        assert r.max_phys_offset == load["recoveredMaxPhyOffset"] == store.max_phy_offset
        assert r.removed_commit_log_files == ("00000000000004194304",)  # the pre-allocated one
        cp = after["checkpointAfterStart"]
        assert r.checkpoint_after == (
            cp["physicMsgTimestamp"],
            cp["logicsMsgTimestamp"],
            cp["indexMsgTimestamp"],
        )
        table = {f"{t}-{q}": str(n) for (t, q), n in store.commit_log.topic_queue_table.items()}
        want = {
            k: v for k, v in after["topicQueueTable"].items() if not k.startswith("SCHEDULE_TOPIC")
        }
        assert {k: v for k, v in table.items() if not k.startswith("SCHEDULE_TOPIC")} == want
        assert store.dispatch_behind_bytes() == 0
        assert (root / "abort").exists()
    assert not (root / "abort").exists()  # removed by the clean shutdown
    with MessageStore(fixture_config(root)) as store:
        assert store.load_result is not None and store.load_result.mode == "clean"
        assert (
            store.load_result.dispatched == 0
            and store.max_phy_offset == load["recoveredMaxPhyOffset"]
        )


def test_rocketmq_clean_store_recovers_normally(tmp_path: Path) -> None:
    fixture = unpack("clean", tmp_path)
    root = fixture / "store"
    cq_before = tree_digest(root / "consumequeue")
    with MessageStore(fixture_config(root)) as store:
        r = store.load_result
        assert r is not None and r.mode == "normal" and not r.abort_file_found
        assert r.scan_from == 4 * 1_048_576  # three files from the end
        assert r.dropped_units == 0 and not r.rebuilt_queues and r.dirty_tail_bytes == 0
    assert tree_digest(root / "consumequeue") == cq_before


# ---- checkpoint and abort file ------------------------------------------------------------------


def test_abort_file_and_checkpoint_lifecycle(tmp_path: Path) -> None:
    cfg = config(
        tmp_path / "s",
        flush_interval_consume_queue=10,
        flush_consume_queue_thorough_interval=0,
        flush_commit_log_least_pages=0,
    )
    with MessageStore(cfg) as store:
        assert (tmp_path / "s" / "abort").exists()
        sent = fill(store, 50)
        last = store.put_message(Message(T, b"last", 0))
        deadline = time.monotonic() + 60
        cp = store.checkpoint
        assert cp is not None
        # the flush services move the checkpoint: commit log (physic), queues (logics)
        while (
            cp.logics_msg_timestamp < last.store_timestamp
            or cp.physic_msg_timestamp < last.store_timestamp
        ):
            assert time.monotonic() < deadline, cp.as_dict()
            time.sleep(0.01)
        sent.append((0, last.queue_offset, b"last"))
    assert not (tmp_path / "s" / "abort").exists()
    with MessageStore(cfg) as store:
        assert store.load_result is not None and store.load_result.mode == "clean"
        assert sum(len(bodies(store, q)) for q in range(3)) == len(sent)


@pytest.mark.parametrize("role,flush", [("SLAVE", "ASYNC_FLUSH"), ("ASYNC_MASTER", "SYNC_FLUSH")])
def test_dispatch_moves_the_physic_checkpoint_on_slaves_and_sync_flush(
    tmp_path: Path, role: str, flush: str
) -> None:
    with MessageStore(config(tmp_path / "m")) as master:
        fill(master, 5)
    data = (tmp_path / "m" / "commitlog" / f"{0:020d}").read_bytes()
    end = 0
    while not isinstance(r := check_record(data, end, len(data), check_crc=True), int):
        end += r.msg_size
    with MessageStore(config(tmp_path / "s", flush, broker_role=role)) as store:
        store.commit_log.append_data(0, data[:end])  # what replication does on a slave
        store.commit_log.queue.flush_all(0)
        deadline = time.monotonic() + 60
        while store.consume_queues.last_store_timestamp == 0:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        cp = store.checkpoint
        assert (
            cp is not None
            and cp.physic_msg_timestamp == store.consume_queues.last_store_timestamp > 0
        )


def test_missing_or_damaged_checkpoint_after_a_crash(tmp_path: Path) -> None:
    cfg = config(tmp_path / "s")
    with MessageStore(cfg) as store:
        sent = fill(store, 40)
    root = tmp_path / "s"
    for damage in ("missing", "short", "long"):
        cp = root / "checkpoint"
        if damage == "missing":
            cp.unlink()
        else:
            cp.write_bytes(b"\x01" * (10 if damage == "short" else 5000))
        (root / "abort").touch()
        with MessageStore(cfg) as store:
            r = store.load_result
            assert r is not None and r.mode == "abnormal" and r.scan_from == 0, r
            assert r.notes, r
            assert sum(len(bodies(store, q)) for q in range(3)) == len(sent)
        assert cp.stat().st_size == 4096


# ---- damaged files --------------------------------------------------------------------------------


def test_commit_log_file_sizes(tmp_path: Path) -> None:
    cfg = config(tmp_path / "s")
    with MessageStore(cfg) as store:
        sent = fill(store, 1000)
        assert len(store.commit_log.queue.files) >= 3
    cl = tmp_path / "s" / "commitlog"
    names = sorted(cl.iterdir())
    # a last file cut short while created (the process died between create and size)
    nxt = cl / f"{int(names[-1].name) + 65536:020d}"
    nxt.write_bytes(b"")
    (tmp_path / "s" / "abort").touch()
    with MessageStore(cfg) as store:
        r = store.load_result
        assert r is not None and any("cut short" in n for n in r.notes)
        assert sum(len(bodies(store, q)) for q in range(3)) == len(sent)
    # a middle file of the wrong size: a clear error, nothing changed
    with open(names[0], "r+b") as f:
        f.truncate(1000)
    with pytest.raises(CorruptFileError, match=r"mapped_file_size_commit_log|differs"):
        MessageStore(cfg).load()


@pytest.mark.parametrize(
    "damage", ["garbage-units", "foreign-unit", "empty-last-file", "partial-unit", "bad-size"]
)
def test_damaged_consume_queue_is_rebuilt(tmp_path: Path, damage: str) -> None:
    cfg = config(tmp_path / "s", mapped_file_size_consume_queue=20 * 40)
    with MessageStore(cfg) as store:
        sent = fill(store, 150)
    qdir = tmp_path / "s" / "consumequeue" / T / "1"
    files = sorted(qdir.iterdir())
    last = files[-1]
    data = bytearray(last.read_bytes())
    used = next(
        p
        for p in range(0, len(data) + UNIT_SIZE, UNIT_SIZE)
        if p >= len(data) or UNIT.unpack_from(data, p)[1] <= 0
    )  # the units in use
    if damage == "garbage-units":
        rng = random.Random(7)
        data[used - 60 : used] = bytes(rng.getrandbits(8) for _ in range(60))
    elif damage == "foreign-unit":
        q0 = sorted((tmp_path / "s" / "consumequeue" / T / "0").iterdir())[-1].read_bytes()
        data[used - UNIT_SIZE : used] = q0[:UNIT_SIZE]  # points at a record of queue 0
    elif damage == "empty-last-file":
        data = bytearray()
    elif damage == "partial-unit":
        data = data[: used - 7]
    else:
        files[0].write_bytes(files[0].read_bytes()[:100])  # a middle file of the wrong size
    if damage != "bad-size":
        last.write_bytes(bytes(data))
    with MessageStore(cfg) as store:
        r = store.load_result
        assert r is not None
        for q in range(3):
            assert bodies(store, q) == [b for qq, _o, b in sent if qq == q], (q, r.summary())


def test_damaged_index_files(tmp_path: Path) -> None:
    cfg = config(tmp_path / "s", max_hash_slot_num=100, max_index_num=400)
    with MessageStore(cfg) as store:
        fill(store, 700)  # two index files
    idx = sorted((tmp_path / "s" / "index").iterdir())
    assert len(idx) == 2
    # the newest: a garbage header; its entries are rebuilt by dispatch
    raw = bytearray(idx[-1].read_bytes())
    HEADER.pack_into(raw, 0, 1, 2, 99, 3, -5, 10**9)
    idx[-1].write_bytes(bytes(raw))
    with MessageStore(cfg) as store:
        r = store.load_result
        assert r is not None and idx[-1].name in r.destroyed_index_files
        for i in (0, 450, 699):
            got = store.query_message(T, f"k{i}").messages
            assert [m.queue_offset for m in got] and got[0].body == f"m{i}|".encode() * (
                1 + i % 50
            ), i


def test_index_entries_past_the_end_are_dropped(tmp_path: Path) -> None:
    cfg = config(tmp_path / "s", max_hash_slot_num=100, max_index_num=400)
    with MessageStore(cfg) as store:
        sent = fill(store, 60)
        cut = store.put_message(Message(T, b"gone", 0, keys=["gone"]))
        fill(store, 1)
    cl = sorted((tmp_path / "s" / "commitlog").iterdir())[-1]
    with open(cl, "r+b") as f:  # the last records are lost
        f.seek(cut.wrote_offset - int(cl.name))
        f.write(bytes(65536 - (cut.wrote_offset - int(cl.name))))
    (tmp_path / "s" / "abort").touch()
    (tmp_path / "s" / "checkpoint").unlink()  # keep the index files (no index checkpoint check)
    with MessageStore(cfg) as store:
        assert store.max_phy_offset == cut.wrote_offset
        assert store.query_message(T, "gone").messages == []
        w = store.put_message(Message(T, b"new", 0, keys=["new"]))
        while store.dispatch_behind_bytes():
            time.sleep(0.001)
        assert [m.body for m in store.query_message(T, "new").messages] == [b"new"]
        assert w.queue_offset == sum(1 for q, _o, _b in sent if q == 0)


# ---- the fast scanner decides as check_record does --------------------------------------------


def reference_end(buf: bytes, base: int) -> int:
    pos = 0
    while True:
        try:
            r = check_record(buf, pos, len(buf), check_crc=True)
        except CorruptRecordError:
            return pos
        if isinstance(r, int) or r.commitlog_offset != base + pos:
            return pos
        pos += r.msg_size


def test_scan_records_agrees_with_check_record() -> None:
    rng = random.Random(2024)
    for trial in range(300):
        buf = bytearray()
        for i in range(rng.randint(1, 6)):
            topic = "T" * (200 if rng.random() < 0.1 else rng.randint(1, 20))
            born = b"\x00" * 20 if rng.random() < 0.1 else b"\x7f\x00\x00\x01\x00\x00\x13\x88"
            props = "KEYS\x01a b\x02TAGS\x01x" if rng.random() < 0.5 else ""
            body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 60)))
            buf += encode_record(
                topic=topic,
                body=body,
                phys_offset=len(buf),
                born_host=born,
                queue_offset=i,
                properties=props,
            )
        buf += bytes(rng.randint(0, 30))
        for _ in range(rng.randint(0, 3)):  # damage
            at = rng.randrange(len(buf))
            buf[at] = rng.getrandbits(8)
        data = bytes(buf)
        r = scan_records(data, 0, len(data), 0, check_crc=True)
        assert r.end == reference_end(data, 0), trial
        assert (r.stop == BAD_RECORD) == (r.error is not None)


# ---- rocketstore inspect --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["clean", "abort"])
def test_inspect_rocketmq_stores(tmp_path: Path, name: str) -> None:
    fixture = unpack(name, tmp_path)
    before = tree_digest(fixture / "store")
    res = CliRunner().invoke(main, ["inspect", str(fixture / "store"), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["ok"] and not report["errors"]
    queues = {
        (q["topic"], q["queue_id"]): q for t in report["topics"].values() for q in t["queues"]
    }
    for d in read_back(fixture):
        if d["type"] == "queue":
            assert queues[(d["topic"], d["queueId"])]["commit_log_next_offset"] == d["maxOffset"]
    if name == "abort":
        assert (
            report["abort_file"]
            and sum("not in the queue yet" in w for w in report["warnings"]) == 8
        )
    assert tree_digest(fixture / "store") == before  # read-only


def test_inspect_finds_corruption_and_never_locks(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(config(root)) as store:
        fill(store, 100)
        res = CliRunner().invoke(main, ["inspect", str(root)])  # while the store is open
        assert res.exit_code == 0, res.output
    cl = sorted((root / "commitlog").iterdir())[0]
    data = bytearray(cl.read_bytes())
    data[200] ^= 0xFF
    cl.write_bytes(bytes(data))
    cq = sorted((root / "consumequeue" / T / "2").iterdir())[0]
    raw = bytearray(cq.read_bytes())
    UNIT.pack_into(raw, UNIT_SIZE * 3, 5, 77, 0)
    cq.write_bytes(bytes(raw))
    before = tree_digest(root)
    res = CliRunner().invoke(main, ["inspect", str(root), "--json"])
    assert res.exit_code == 1
    errors = json.loads(res.output)["errors"]
    assert any("invalid record" in e for e in errors) and any("unit 3" in e for e in errors)
    assert tree_digest(root) == before
    os.stat(root)  # untouched directory


def test_load_result_is_immutable(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path / "s")) as store:
        r = store.load_result
        assert r is not None and r.mode == "empty"
        with pytest.raises((AttributeError, TypeError)):
            r.mode = "x"  # type: ignore[misc]
        assert "recovery" in r.summary()
    shutil.rmtree(tmp_path / "s")
