"""Reading the tiered store (rocketstore.tier._read): queue ranges from the manifests, rows of a
queue from an offset through only the files and row groups that hold them, messages and
commit-log records rebuilt from rows (byte for byte the store's records), queries by key in a
time range, and all of it after retention removed the commit-log files the tier came from."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rocketstore import Message, MessageStore
from rocketstore.store.log._record import tags_code
from rocketstore.store.read._raw_read import get_raw
from rocketstore.tier._manifest import TierError, load_manifest, save_manifest, topic_dir
from rocketstore.tier._read import TierReader, TierRecords, encode_rows
from support.tier_files import expire_oldest, store_rows, tier_store, wait_dispatched

TOPICS = ("TA", "TB")
COUNT = 240  # per topic: about 8 commit-log files of 64 KiB


def body(topic: str, n: int) -> bytes:
    return f"{topic}-{n}-".encode() * (100 + n % 17)


@pytest.fixture
def store(open_store: Callable[..., MessageStore]) -> MessageStore:
    s = open_store(file_reserved_time=1, delete_commit_log_files_interval=0)
    for n in range(COUNT):
        for topic in TOPICS:
            r = s.put_message(
                Message(
                    topic,
                    body(topic, n),
                    n % 2,
                    tags=f"tag{n % 3}",
                    keys=[f"k{n}", f"even{n % 2 == 0}"],
                    properties={"p": str(n), "z": "last"},
                )
            )
            assert r.ok
    wait_dispatched(s)
    return s


def config_root(store: MessageStore) -> str:
    return str(store.config.store_path_root_dir)


@pytest.fixture
def tiered(store: MessageStore, tmp_path: Path) -> Path:
    root = tmp_path / "tiered"
    tier_store(config_root(store), root, files=4, row_group_rows=16)
    return root


def test_queue_ranges_come_from_the_manifests(store: MessageStore, tiered: Path) -> None:
    tier = TierReader(tiered)
    for topic in TOPICS:
        manifest = load_manifest(tiered, topic)
        assert len(manifest.files) == 4
        for qid in (0, 1):
            first, end = tier.queue_range(topic, qid)  # type: ignore[misc]
            assert first == 0
            # every message of the first four commit-log files, and none past them
            phys = store.get_commit_log_offset_in_queue(topic, qid, end - 1)
            nxt = store.get_commit_log_offset_in_queue(topic, qid, end)
            assert phys < 4 * store.config.mapped_file_size_commit_log <= nxt
        assert tier.boundary(topic) == {q: tier.queue_range(topic, q)[1] for q in (0, 1)}  # type: ignore[index]
    assert tier.queue_range("TA", 7) is None
    assert tier.queue_range("NONE", 0) is None
    assert not tier.holds("TA", 0, tier.queue_range("TA", 0)[1])  # type: ignore[index]


def test_rows_equal_the_stores_rows(store: MessageStore, tiered: Path) -> None:
    tier = TierReader(tiered)
    rows = store_rows(config_root(store), "TB")
    for qid, offset, n in ((0, 0, 5), (1, 17, 40), (0, 30, 1000)):
        end = tier.queue_range("TB", qid)[1]  # type: ignore[index]
        got = tier.read_rows("TB", qid, offset, n)
        want = rows.filter(
            pa.compute.and_(
                pa.compute.equal(rows.column("queue_id"), qid),
                pa.compute.and_(
                    pa.compute.greater_equal(rows.column("queue_offset"), offset),
                    pa.compute.less(rows.column("queue_offset"), min(offset + n, end)),
                ),
            )
        )
        assert got.num_rows == min(n, end - offset)
        assert got.equals(want)
    two = tier.read_rows("TB", 1, 3, 4, columns=["body", "queue_offset"])
    assert two.column_names == ["body", "queue_offset"]
    assert two.column("queue_offset").to_pylist() == [3, 4, 5, 6]
    assert tier.read_rows("TB", 1, 10_000, 4).num_rows == 0


def test_a_read_opens_only_the_files_and_row_groups_that_hold_it(
    tiered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tier = TierReader(tiered)
    read: list[tuple[str, list[int]]] = []
    original = TierReader._read_groups

    def spy(self: TierReader, path: Path, groups: list[int], columns: list[str]) -> pa.Table:
        read.append((path.name, list(groups)))
        return original(self, path, groups, columns)

    monkeypatch.setattr(TierReader, "_read_groups", spy)
    manifest = load_manifest(tiered, "TA")
    third = manifest.files[2]
    first, _last = third.queues[1]
    tier.read_rows("TA", 1, first + 2, 3)
    assert [name for name, _ in read] == [third.name]
    groups = pq.read_metadata(topic_dir(tiered, "TA") / third.name).num_row_groups
    assert groups > 2 and len(read[0][1]) <= 2


def test_messages_and_records_are_the_stores(store: MessageStore, tiered: Path) -> None:
    tier = TierReader(tiered)
    end = tier.queue_range("TA", 1)[1]  # type: ignore[index]
    got = tier.messages("TA", 1, end - 5, 32)
    want = store.get_message("g", "TA", 1, end - 5, 5).messages
    assert [tuple(m) for m in got] == [tuple(m) for m in want]
    assert got[0].keys == [f"k{got[0].properties['p']}", want[0].keys[1]]
    raw = get_raw(store.reader, "TA", 1, 3, 6)
    recs = tier.records("TA", 1, 3, 6, 1 << 20)
    assert (recs.count, recs.next_offset) == (6, 9)
    assert recs.data == raw.data  # FLAG and PREPAREDTXOFFSET are 0 in these records too


def test_records_keep_to_the_pull_bounds(tiered: Path) -> None:
    tier = TierReader(tiered)
    whole = tier.records("TA", 0, 0, 4, 1 << 20)
    sizes = [len(r) for r in encode_rows(tier.read_rows("TA", 0, 0, 4))]
    assert len(whole.data) == sum(sizes)
    two = tier.records("TA", 0, 0, 4, sizes[0] + sizes[1])
    assert (two.count, two.next_offset, two.data) == (2, 2, whole.data[: sizes[0] + sizes[1]])
    one = tier.records("TA", 0, 0, 4, 1)  # the first record always goes
    assert (one.count, one.next_offset) == (1, 1)
    end = tier.queue_range("TA", 0)[1]  # type: ignore[index]
    tail = tier.records("TA", 0, end - 2, 32, 1 << 20)
    assert (tail.count, tail.next_offset) == (2, end)
    assert tier.records("TA", 0, end, 32, 1 << 20) == TierRecords(b"", 0, end)


def test_records_filtered_by_tags_codes(tiered: Path) -> None:
    tier = TierReader(tiered)
    recs = tier.records("TB", 0, 0, 5, 1 << 20, frozenset({tags_code("tag1")}))
    from rocketstore.client._consumer import decode_records

    msgs = decode_records(recs.data)
    assert [m.tags for m in msgs] == ["tag1"] * 5
    # TB/0 holds the even n: tag1 at n = 4, 10, 16, ... (queue offsets 2, 5, 8, ...)
    assert [m.queue_offset for m in msgs] == [2, 5, 8, 11, 14]
    assert recs.next_offset == 15
    none = tier.records("TB", 0, 0, 5, 1 << 20, frozenset({tags_code("nope")}))
    end = tier.queue_range("TB", 0)[1]  # type: ignore[index]
    assert none.count == 0 and none.next_offset == end  # every row looked at


def test_reads_after_retention_removed_the_commit_log(store: MessageStore, tiered: Path) -> None:
    tier = TierReader(tiered)
    before = tier.messages("TA", 0, 0, 10)
    expire_oldest(store, 3)
    assert store.get_min_offset_in_queue("TA", 0) > 0
    assert store.get_message("g", "TA", 0, 0, 10).status.name == "OFFSET_TOO_SMALL"
    after = tier.messages("TA", 0, 0, 10)
    assert [tuple(m) for m in after] == [tuple(m) for m in before]
    assert [m.queue_offset for m in after] == list(range(10))


def test_query_by_key_in_a_time_range(store: MessageStore, tiered: Path) -> None:
    tier = TierReader(tiered)
    hits = tier.query("TA", "k7")
    assert [m.properties["p"] for m in hits] == ["7"]
    assert hits[0] == store.query_message("TA", "k7").messages[0]
    uniq = tier.query("TA", hits[0].uniq_key) if hits[0].uniq_key else hits
    assert [m.commitlog_offset for m in uniq] == [hits[0].commitlog_offset]
    even = tier.query("TA", "evenTrue", max_num=3)
    assert [int(m.properties["p"]) % 2 for m in even] == [0, 0, 0]
    offsets = [m.commitlog_offset for m in even]
    assert offsets == sorted(offsets)
    everything = tier.query("TA", "evenTrue", max_num=10_000)
    assert even == everything[-3:]  # the newest
    t = hits[0].store_timestamp
    assert tier.query("TA", "k7", begin=t, end=t) == hits
    assert tier.query("TA", "k7", begin=t + 1) == []
    assert tier.query("TA", "k7", end=t - 1) == []
    assert tier.query("TA", "missing") == []


def test_unlisted_files_are_not_read_and_manifest_changes_are_seen(tiered: Path) -> None:
    tier = TierReader(tiered)
    end = tier.queue_range("TA", 0)[1]  # type: ignore[index]
    rows = tier.read_rows("TA", 0, 0, 10_000)
    stray = topic_dir(tiered, "TA") / "part-99999999999999999999.parquet"
    pq.write_table(rows.slice(0, 3), stray)  # left over from a crash: no manifest lists it
    assert tier.read_rows("TA", 0, 0, 10_000).equals(rows)
    manifest = load_manifest(tiered, "TA")
    manifest.files = manifest.files[:1]
    save_manifest(tiered, manifest)
    assert tier.queue_range("TA", 0)[1] < end  # type: ignore[index]
    assert tier.read_rows("TA", 0, 0, 10_000).num_rows < rows.num_rows


def test_a_damaged_manifest_or_file_is_a_tier_error(tiered: Path) -> None:
    tier = TierReader(tiered)
    name = load_manifest(tiered, "TA").files[0].name
    (topic_dir(tiered, "TA") / name).write_bytes(b"not parquet")
    with pytest.raises(TierError, match="cannot read the tiered file"):
        tier.read_rows("TA", 0, 0, 3)
    (topic_dir(tiered, "TB") / "_manifest.json").write_text("{")
    with pytest.raises(TierError, match="cannot read"):
        tier.queue_range("TB", 0)


def test_encode_rows_needs_the_record_columns(tiered: Path) -> None:
    tier = TierReader(tiered)
    with pytest.raises(TierError, match="body"):
        encode_rows(tier.read_rows("TA", 0, 0, 2, columns=["topic", "queue_id"]))


# ---- the commands ------------------------------------------------------------------------------


def cli(*args: str) -> Any:
    from click.testing import CliRunner

    from rocketstore.cli import main

    return CliRunner().invoke(main, list(args))


def test_get_and_query_read_below_the_minimum_from_the_tier(
    store: MessageStore, tiered: Path
) -> None:
    expire_oldest(store, 3)
    root = config_root(store)
    low = store.get_min_offset_in_queue("TA", 0)
    end = store.get_max_offset_in_queue("TA", 0)
    assert low > 0
    plain = cli("get", "--store", root, "TA", "0", "0", "--json")
    assert plain.exit_code == 1 and '"OFFSET_TOO_SMALL"' in plain.output

    got = cli("get", "--store", root, "TA", "0", "0", "--count", "1000", "--json",
              "--tiered-dir", str(tiered))  # fmt: skip
    assert got.exit_code == 0, got.output
    lines = [json.loads(line) for line in got.output.splitlines()]
    msgs, summary = lines[:-1], lines[-1]
    assert [m["queue_offset"] for m in msgs] == list(range(end))  # the tier, then the store
    assert msgs[0]["body"] == body("TA", 0).decode() and msgs[0]["flag"] == 0
    assert summary["tiered"] == list(TierReader(tiered).queue_range("TA", 0))  # type: ignore[arg-type]
    assert summary["min_offset"] == low and summary["next_offset"] == end

    tagged = cli("get", "--store", root, "TA", "0", "0", "--count", "5", "--tags", "tag2",
                 "--json", "--tiered-dir", str(tiered))  # fmt: skip
    assert tagged.exit_code == 0, tagged.output
    assert {json.loads(line).get("tags") for line in tagged.output.splitlines()[:-1]} == {"tag2"}

    no_tier = cli("query", "--store", root, "--topic", "TA", "--key", "k7")
    assert no_tier.exit_code == 1
    found = cli("query", "--store", root, "--topic", "TA", "--key", "k7", "--json",
                "--tiered-dir", str(tiered))  # fmt: skip
    assert found.exit_code == 0, found.output
    assert [json.loads(line)["properties"]["p"] for line in found.output.splitlines()] == ["7"]
    late = f"k{COUNT - 1}"  # still in the commit log: found once, from the store
    both = cli("query", "--store", root, "--topic", "TA", "--key", late, "--tiered-dir",
               str(tiered))  # fmt: skip
    assert both.exit_code == 0 and "1 message(s)" in both.output

    missing = cli("get", "--store", root, "TA", "0", "0", "--tiered-dir", str(tiered / "nope"))
    assert missing.exit_code != 0 and "no tiered store at" in missing.output
    assert "Traceback" not in missing.output


def test_query_by_id_finds_tiered_messages(store: MessageStore, tiered: Path) -> None:
    expire_oldest(store, 3)
    root = config_root(store)
    first = TierReader(tiered).messages("TA", 0, 0, 1)[0]
    assert store.get_min_offset_in_queue("TA", 0) > 0  # the commit log no longer holds it
    gone = cli("query", "--store", root, "--id", first.msg_id)
    assert gone.exit_code == 1
    found = cli("query", "--store", root, "--id", first.msg_id, "--json",
                "--tiered-dir", str(tiered))  # fmt: skip
    assert found.exit_code == 0, found.output
    (line,) = found.output.splitlines()
    got = json.loads(line)
    assert (got["topic"], got["queue_id"], got["queue_offset"]) == ("TA", 0, 0)
    assert got["commitlog_offset"] == first.commitlog_offset
    other = TierReader(tiered).at_commitlog_offset(first.commitlog_offset + 1)
    assert other is None  # no record starts there
