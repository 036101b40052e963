"""The reading commands (get, query, stats, inspect) never change a store: clean, crashed
(abort file, queues behind the log) or damaged; reading a damaged store shows every intact
message and says where the damage is; RocketMQ's own stores read back as RocketMQ reads them."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.store.queue._consume_queue import UNIT, UNIT_SIZE
from support.crash import produce_and_kill
from support.fixtures import unpack_fixture

Snapshot = tuple[frozenset[str], dict[str, bytes]]
QUEUES = 4
FILE_SIZE = 16 * 1024


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root`` and every file's bytes."""
    entries = frozenset(str(p.relative_to(root)) for p in root.rglob("*"))
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return entries, files


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def small_config(root: Path, **kw: Any) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=20 * 500,
        max_hash_slot_num=100,
        max_index_num=400,
        **kw,
    )


def body_of(i: int) -> bytes:
    return f"body-{i:05d}-".encode() * 3


def fill(root: Path, count: int) -> list[tuple[int, int, int]]:
    """``count`` messages over QUEUES queues of topic T (keys k<i>); (queue, offset, phys)."""
    out = []
    with MessageStore(small_config(root)) as store:
        for i in range(count):
            r = store.put_message(Message("T", body_of(i), i % QUEUES, keys=[f"k{i}"]))
            assert r.ok
            out.append((i % QUEUES, r.queue_offset, r.wrote_offset))
    return out


def damage_body(root: Path, phys: int, body: bytes) -> Path:
    """Flip one byte of ``body`` in the record at ``phys``; returns the file changed."""
    path = root / "commitlog" / f"{phys - phys % FILE_SIZE:020d}"
    data = bytearray(path.read_bytes())
    at = data.index(body, phys % FILE_SIZE)
    data[at + 2] ^= 0x40
    path.write_bytes(bytes(data))
    return path


def read_all(root: Path, queue_id: int, *extra: str) -> Result:
    return cli("get", "--store", str(root), *extra, "T", str(queue_id), "0", "--count", "100000")


def bodies(result: Result) -> list[str]:
    return [line.split("\t")[-1] for line in result.stdout.splitlines()]


# ---- the stores -----------------------------------------------------------------------------


def clean_store(tmp_path: Path) -> Path:
    root = tmp_path / "clean"
    fill(root, 200)
    return root


def damaged_store(tmp_path: Path) -> Path:
    root = tmp_path / "damaged"
    _q, _o, phys = fill(root, 1200)[600]
    damage_body(root, phys, body_of(600))
    return root


def killed_store(tmp_path: Path) -> Path:
    root = tmp_path / "killed"
    produce_and_kill(root, "ASYNC_FLUSH", 0, random.Random(7), min_acks=60, max_acks=80)
    assert (root / "abort").exists()
    return root


def rocketmq_abort_store(tmp_path: Path) -> Path:
    return unpack_fixture("abort", tmp_path) / "store"


STORES: dict[str, Callable[[Path], Path]] = {
    "clean": clean_store,
    "damaged": damaged_store,
    "killed": killed_store,
    "rocketmq-abort": rocketmq_abort_store,
}


def reading_commands(root: Path) -> list[list[str]]:
    s = str(root)
    cmds = [
        ["stats", "--store", s],
        ["stats", "--store", s, "--json"],
        ["query", "--store", s, "--topic", "T", "--key", "k600"],
        ["query", "--store", s, "--id", "7F00000100002A9F0000000000000000"],
        ["inspect", s],
        ["inspect", s, "--json"],
    ]
    queues = root / "consumequeue"  # none yet in a store killed before its dispatch made them
    topics = sorted(p.name for p in queues.iterdir()) if queues.is_dir() else []
    for topic in topics:
        for qdir in sorted((root / "consumequeue" / topic).iterdir()):
            cmds.append(["get", "--store", s, topic, qdir.name, "0", "--count", "100000"])
    return cmds


@pytest.mark.parametrize("kind", sorted(STORES))
def test_reading_commands_change_nothing(kind: str, tmp_path: Path) -> None:
    root = STORES[kind](tmp_path)
    before = snapshot(root)
    for args in reading_commands(root):
        result = cli(*args)
        assert "Traceback" not in result.output, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), args
        after = snapshot(root)
        assert after[0] == before[0], (args, after[0] ^ before[0])
        changed = [name for name, data in after[1].items() if before[1][name] != data]
        assert not changed, (args, changed)


def test_damaged_store_shows_every_intact_message_and_the_damage(tmp_path: Path) -> None:
    root = damaged_store(tmp_path)
    positions = fill_positions_after_damage(root)
    bad_q, bad_off, bad_phys = positions[600]
    assert len(list((root / "commitlog").iterdir())) >= 5  # several files, damage in the middle
    seen: list[str] = []
    for q in range(QUEUES):
        result = read_all(root, q)
        assert result.exit_code == (1 if q == bad_q else 0)  # 1: something was damaged
        assert "Traceback" not in result.output
        seen += bodies(result)
        warnings = [w for w in result.stderr.splitlines() if w.startswith("warning:")]
        if q == bad_q:
            file_name = f"{bad_phys - bad_phys % FILE_SIZE:020d}"
            assert len(warnings) == 1, result.stderr
            assert file_name in warnings[0] and str(bad_phys) in warnings[0]
            assert f"T/{bad_q} offset {bad_off}" in warnings[0]
        else:
            assert warnings == [], result.stderr
    want = sorted(body_of(i).decode() for i in range(1200) if i != 600)
    assert sorted(seen) == want  # before and after the damage, in every queue
    query = cli("query", "--store", str(root), "--topic", "T", "--key", "k600")
    assert query.exit_code == 1 and "Traceback" not in query.output
    assert f"{bad_phys - bad_phys % FILE_SIZE:020d} at {bad_phys}" in query.stderr
    assert cli("query", "--store", str(root), "--topic", "T", "--key", "k601").exit_code == 0
    # the messages after the damaged one in its queue, read from there
    after = cli("get", "--store", str(root), "T", str(bad_q), str(bad_off + 1), "--count", "5")
    assert bodies(after) == [body_of(600 + QUEUES * k).decode() for k in range(1, 6)]


def fill_positions_after_damage(root: Path) -> list[tuple[int, int, int]]:
    """(queue, offset, phys) of message i, from the consume queues (read-only)."""
    from rocketstore.store.read._reader import StoreReader

    with StoreReader(root) as reader:
        units = [
            (q, off, phys)
            for q in range(QUEUES)
            for off, phys, _size, _tags in reader.queue("T", q).units(0, 10**9)
        ]
    return sorted(units, key=lambda u: u[2])


def test_killed_store_reads_every_acknowledged_message(tmp_path: Path) -> None:
    root = tmp_path / "killed"
    _load, acks = produce_and_kill(
        root, "ASYNC_FLUSH", 0, random.Random(11), min_acks=60, max_acks=80
    )
    for q in range(3):
        result = cli(
            "get",
            "--store",
            str(root),
            "--json",
            "--body",
            "hex",
            "Crash",
            str(q),
            "0",
            "--count",
            "9999",
        )
        lines = [json.loads(line) for line in result.stdout.splitlines()[:-1]]
        got = {d["queue_offset"]: bytes.fromhex(d["body"]) for d in lines}
        for a in (a for a in acks if a.queue_id == q):
            assert got.get(a.queue_offset) == a.body


def test_lagging_queues_are_dispatched_in_memory(tmp_path: Path) -> None:
    """Consume-queue units past a point are wiped (a crash before dispatch): the messages are
    still read, from the commit log, and nothing is written."""
    root = tmp_path / "lag"
    cut = fill(root, 40)[25][2]  # dispatch stopped before message 25
    (root / "abort").touch()
    for q in range(QUEUES):
        path = next((root / "consumequeue" / "T" / str(q)).iterdir())
        data = bytearray(path.read_bytes())
        units = [UNIT.unpack_from(data, at) for at in range(0, len(data), UNIT_SIZE)]
        keep = sum(1 for phys, size, _tags in units if size > 0 and phys < cut)
        data[keep * UNIT_SIZE :] = bytes(len(data) - keep * UNIT_SIZE)
        path.write_bytes(bytes(data))
    before = snapshot(root)
    result = read_all(root, 1)
    assert result.exit_code == 0, result.output
    assert bodies(result) == [body_of(i).decode() for i in range(1, 40, QUEUES)]
    stats = json.loads(cli("stats", "--store", str(root), "--json").stdout)
    assert stats["topics"]["T"]["messages"] == 40
    assert int(stats["runtime_info"]["dispatchBehindBytes"]) > 0
    found = cli("query", "--store", str(root), "--topic", "T", "--key", "k37")
    assert found.exit_code == 0 and "1 message(s)" in found.stderr
    assert snapshot(root) == before


@pytest.mark.parametrize("size", [0, 4096])
def test_a_consume_queue_file_cut_short_at_its_creation(tmp_path: Path, size: int) -> None:
    """A crash between creating a queue's first file and giving it its size leaves a short
    file, and dispatch stopped before that queue's messages: the queue ends before the file,
    and its messages are read from the commit log."""
    root = tmp_path / "short"
    bodies_of_1 = []
    with MessageStore(small_config(root)) as store:
        for i in range(9):  # queues 0, 2 and 3 first
            assert store.put_message(Message("T", body_of(i), (0, 2, 3)[i % 3])).ok
        cut = store.commit_log.max_offset
        for i in range(9, 15):
            assert store.put_message(Message("T", body_of(i), 1)).ok
            bodies_of_1.append(body_of(i).decode())
    (root / "abort").touch()
    for q in (0, 2, 3):  # dispatch had got no further than the cut
        path = next((root / "consumequeue" / "T" / str(q)).iterdir())
        data = bytearray(path.read_bytes())
        units = [UNIT.unpack_from(data, at) for at in range(0, len(data), UNIT_SIZE)]
        keep = sum(1 for phys, n, _tags in units if n > 0 and phys < cut)
        data[keep * UNIT_SIZE :] = bytes(len(data) - keep * UNIT_SIZE)
        path.write_bytes(bytes(data))
    path = next((root / "consumequeue" / "T" / "1").iterdir())
    path.write_bytes(bytes(size))
    before = snapshot(root)
    result = read_all(root, 1)
    assert result.exit_code == 0, result.output
    assert bodies(result) == bodies_of_1
    assert snapshot(root) == before


# ---- RocketMQ's stores ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["clean", "abort"])
def test_get_and_query_match_rocketmq_read_back(name: str, tmp_path: Path) -> None:
    fixture = unpack_fixture(name, tmp_path)
    root = str(fixture / "store")
    lines = [json.loads(x) for x in (fixture / "reader-output.jsonl").read_text().splitlines()]
    before = snapshot(fixture / "store")
    msgs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for d in (d for d in lines if d["type"] == "msg"):
        msgs.setdefault((d["topic"], d["queueId"]), []).append(d)
    queues = [d for d in lines if d["type"] == "queue"]
    assert queues
    for q in queues:
        r = cli(
            "get", "--store", root, "--json", "--body", "hex", "--count", "100000",
            q["topic"], str(q["queueId"]), str(q["minOffset"]),
        )  # fmt: skip
        out = [json.loads(x) for x in r.stdout.splitlines()]
        summary, got = out[-1], out[:-1]
        assert (summary["min_offset"], summary["max_offset"]) == (q["minOffset"], q["maxOffset"])
        want = msgs.get((q["topic"], q["queueId"]), [])
        assert len(got) == len(want)
        for m, d in zip(got, want, strict=True):
            assert (m["msg_id"], m["commitlog_offset"], m["queue_offset"]) == (
                d["msgId"],
                d["physicalOffset"],
                d["queueOffset"],
            )
            assert (m["store_timestamp"], m["tags"], m["uniq_key"], m["properties"]) == (
                d["storeTimestamp"],
                d["tags"],
                d["uniqKey"],
                d["properties"],
            )
            assert hashlib.sha256(bytes.fromhex(m["body"])).hexdigest() == d["bodySha256"]
    for d in (d for d in lines if d["type"] == "query"):
        r = cli(
            "query", "--store", root, "--json", "--max", "64", "--topic", d["topic"],
            "--key", d["key"],
        )  # fmt: skip
        got_offsets = [json.loads(x)["commitlog_offset"] for x in r.stdout.splitlines()]
        assert got_offsets == [x["physicalOffset"] for x in d["results"]], d["key"]
    for d in [d for d in lines if d["type"] == "msgid"][:20]:
        r = cli("query", "--store", root, "--json", "--id", d["msgId"])
        assert r.exit_code == 0, r.output
        (m,) = [json.loads(x) for x in r.stdout.splitlines()]
        assert (m["commitlog_offset"], m["store_size"]) == (d["physicalOffset"], d["storeSize"])
    assert snapshot(fixture / "store") == before
