"""Tiering commit-log ranges (``tier/_writer.py``): the tier holds exactly the rows the
``rocketstore`` source reads (every column, several topics and queues, batches, system and
retry topics, no transaction halves), sorted, in zstd Parquet with statistics and dictionaries;
damaged records are skipped and named, or end the range; a re-run is idempotent."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow.parquet as pq

from rocketstore.store._store import MessageStore
from rocketstore.store.read._reader import CommitLogView
from rocketstore.tier._manifest import (
    TierError,
    load_covered,
    load_manifest,
    part_name,
    save_covered,
    save_manifest,
    tiered_topics,
)
from rocketstore.tier._writer import (
    DICTIONARY_COLUMNS,
    RangeResult,
    WriterOptions,
    tier_range,
)
from support.tier_helpers import (
    FILE_SIZE,
    assert_same_rows,
    fill,
    source_rows,
    split_at,
    store_config,
    tier_rows,
)


def _store(root: Path, count: int, seed: int = 1) -> Path:
    with MessageStore(store_config(root / "store")) as store:
        fill(store, count, seed)
    return root / "store"


def _files(store: Path) -> list[int]:
    return sorted(int(p.name) for p in (store / "commitlog").iterdir())


def _tier_all_sealed(store: Path, tiered: Path, **kw: Any) -> list[RangeResult]:
    view = CommitLogView(store / "commitlog", FILE_SIZE)
    out = []
    try:
        for start in _files(store)[:-1]:
            result = tier_range(view, tiered, start, start + FILE_SIZE, **kw)
            out.append(result)
            if not result.complete:
                break
    finally:
        view.close()
    return out


def test_tier_rows_equal_the_source_rows(tmp_path: Path) -> None:
    store = _store(tmp_path, 1500)
    tiered = tmp_path / "tier"
    results = _tier_all_sealed(store, tiered, options=WriterOptions(row_group_rows=100))
    assert len(results) >= 4
    covered = load_covered(tiered)
    assert covered == _files(store)[-1]
    expected = source_rows(store)
    below, above = split_at(expected, covered)
    assert below.num_rows > 1000 and above.num_rows > 0
    assert_same_rows(tier_rows(tiered), below)
    assert set(tiered_topics(tiered)) >= {"TopicA", "TopicB", "%RETRY%group1"}
    assert "SCHEDULE_TOPIC_XXXX" in tiered_topics(tiered)  # the delayed messages, as the source


def test_files_are_sorted_with_statistics_dictionaries_and_zstd(tmp_path: Path) -> None:
    store = _store(tmp_path, 800)
    tiered = tmp_path / "tier"
    _tier_all_sealed(store, tiered, options=WriterOptions(row_group_rows=20))
    manifest = load_manifest(tiered, "TopicA")
    entry = manifest.files[0]
    assert entry.name == part_name(0) and entry.commitlog == (0, FILE_SIZE)
    path = tiered / "TopicA" / entry.name
    table = pq.read_table(path)
    keys = list(
        zip(
            table.column("queue_id").to_pylist(),
            table.column("queue_offset").to_pylist(),
            strict=True,
        )
    )
    assert keys == sorted(keys)
    for qid, (first, last) in entry.queues.items():
        offs = [o for q, o in keys if q == qid]
        assert (first, last) == (offs[0], offs[-1])
    times = [t.timestamp() * 1000 for t in table.column("store_timestamp").to_pylist()]
    assert entry.store_time == (round(min(times)), round(max(times)))
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups > 1
    names = [meta.row_group(0).column(i).path_in_schema for i in range(meta.num_columns)]
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for i, name in enumerate(names):
            col = rg.column(i)
            assert col.compression == "ZSTD"
            if name in ("queue_id", "queue_offset", "store_timestamp"):
                assert col.is_stats_set and col.statistics.has_min_max
            if name in DICTIONARY_COLUMNS and name != "tags":
                assert "RLE_DICTIONARY" in col.encodings or "PLAIN_DICTIONARY" in col.encodings


def test_a_rerun_skips_listed_topics_and_completes_a_half_listed_range(tmp_path: Path) -> None:
    store = _store(tmp_path, 600)
    tiered = tmp_path / "tier"
    first = _tier_all_sealed(store, tiered)
    before = tier_rows(tiered)
    # again: every topic of every range is listed already
    again = _tier_all_sealed(store, tiered)
    assert all(r.files == 0 and r.skipped_topics for r in again)
    view = CommitLogView(store / "commitlog", FILE_SIZE)
    try:  # out of order: refused
        with pytest.raises(TierError, match="in order"):
            tier_range(
                view, tiered, _files(store)[-1] + FILE_SIZE, _files(store)[-1] + 2 * FILE_SIZE
            )
    finally:
        view.close()
    assert_same_rows(tier_rows(tiered), before)
    # a crash after one topic of the last range was listed: covered back, one entry gone
    last = first[-1]
    save_covered(tiered, last.start)
    manifest = load_manifest(tiered, "TopicB")
    gone = manifest.files.pop()
    save_manifest(tiered, manifest)
    (tiered / "TopicB" / gone.name).unlink()
    view = CommitLogView(store / "commitlog", FILE_SIZE)
    try:
        redo = tier_range(view, tiered, last.start, last.start + FILE_SIZE)
    finally:
        view.close()
    assert redo.files == 1 and "TopicA" in redo.skipped_topics
    assert load_covered(tiered) == last.end
    assert_same_rows(tier_rows(tiered), before)


def _record_positions(store: Path, start: int) -> list[tuple[int, int]]:
    """(position, size) of the records of the file at ``start``."""
    from rocketstore.store.recovery._scan import scan_records

    data = (store / "commitlog" / f"{start:020d}").read_bytes()
    found: list[tuple[int, ...]] = []
    scan_records(data, 0, len(data), start, check_crc=True, collect=found)
    return [(int(r[0]) - start, int(r[1])) for r in found]


def _damage(store: Path, start: int, at: int) -> None:
    path = store / "commitlog" / f"{start:020d}"
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def test_a_damaged_record_is_skipped_named_and_the_range_still_tiered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(tmp_path, 900)
    second = _files(store)[1]
    records = _record_positions(store, second)
    pos, size = records[len(records) // 2]
    _damage(store, second, pos + size - 30)  # inside the body or properties: CRC or text
    tiered = tmp_path / "tier"
    with caplog.at_level(logging.ERROR, logger="rocketstore.tier"):
        results = _tier_all_sealed(store, tiered)
    damaged = [d for r in results for d in r.damaged]
    assert [(Path(d.path).name, d.position) for d in damaged] == [(f"{second:020d}", pos)]
    assert f"{second:020d} position {pos}" in caplog.text
    assert all(r.complete for r in results)
    covered = load_covered(tiered)
    assert covered == _files(store)[-1]
    rows = tier_rows(tiered)
    assert second + pos not in rows.column("commitlog_offset").to_pylist()
    below, _ = split_at(source_rows(store), covered)  # the source skips it too
    assert_same_rows(rows, below)


def test_a_record_that_cannot_be_stepped_over_ends_the_range(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(tmp_path, 900)
    second = _files(store)[1]
    records = _record_positions(store, second)
    pos, _size = records[len(records) // 3]
    _damage(store, second, pos + 1)  # the length: nothing after it can be found
    tiered = tmp_path / "tier"
    with caplog.at_level(logging.ERROR, logger="rocketstore.tier"):
        results = _tier_all_sealed(store, tiered)
    assert len(results) == 2 and results[0].complete
    broken = results[1]
    assert not broken.complete and broken.end == second + pos
    assert load_covered(tiered) == second + pos  # the ranges after it cannot be tiered
    assert "stops before it" in caplog.text
    rows = tier_rows(tiered)
    assert max(rows.column("commitlog_offset").to_pylist()) < second + pos
    below, _ = split_at(source_rows(store), second + pos)
    assert_same_rows(rows, below)


def test_text_bodies_take_less_than_seven_tenths_of_the_commit_log(tmp_path: Path) -> None:
    store = _store(tmp_path, 3000)
    tiered = tmp_path / "tier"
    results = _tier_all_sealed(store, tiered)
    source = sum(r.source_bytes for r in results)
    written = sum(
        os.path.getsize(tiered / t / f.name)
        for t in tiered_topics(tiered)
        for f in load_manifest(tiered, t).files
    )
    assert written == sum(r.parquet_bytes for r in results)
    assert written <= 0.7 * source, (written, source)


def test_the_benchmark_runs_small(tmp_path: Path) -> None:
    from rocketstore.bench.tier import put_impact, tier_speed

    speed = tier_speed(tmp_path / "speed", 1 << 20, files=2)
    assert speed["commitlog_bytes"] == 2 << 20 and speed["parquet_over_commitlog"] < 0.7
    assert len(speed["tier_s_per_file"]) == 2 and speed["messages_put"] > 1000
    impact = put_impact(tmp_path / "impact", 1 << 20, backlog=2, count=2000, pairs=1)
    assert len(impact["on_over_off"]) == 1 and impact["on_over_off"][0] > 0
    assert not list((tmp_path / "impact").glob("run-*"))


def test_a_damaged_topic_name_is_skipped_not_made_a_directory(tmp_path: Path) -> None:
    """The body CRC does not cover the topic: a damaged name still scans as a record."""
    from rocketstore.store.recovery._scan import _HEAD_SIZE

    store = _store(tmp_path, 700)
    first = _files(store)[0]
    pos, _size = _record_positions(store, first)[7]
    path = store / "commitlog" / f"{first:020d}"
    data = path.read_bytes()
    body_len = int.from_bytes(data[pos + _HEAD_SIZE - 4 : pos + _HEAD_SIZE], "big")
    with open(path, "r+b") as f:
        f.seek(pos + _HEAD_SIZE + body_len + 1 + 2)  # the topic's third byte
        f.write(b"/")
    tiered = tmp_path / "tier"
    results = _tier_all_sealed(store, tiered)
    assert all(r.complete for r in results)
    assert [(d.position, "not a topic's queue" in d.why) for d in results[0].damaged] == [
        (pos, True)
    ]
    assert all("/" not in t for t in tiered_topics(tiered))
    below, _ = split_at(source_rows(store), load_covered(tiered))
    assert_same_rows(tier_rows(tiered), below)
