"""The tiering service (``tier/_service.py``) on a live store, the commit log's retention gated
by ``covered``, the tier's own retention, leftovers of a crash, and the broker's composition
root running it (and not running it when tiering is off)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from rocketstore.broker._config import BrokerConfig
from rocketstore.server import BrokerServer
from rocketstore.store._clock import ManualClock
from rocketstore.store._config import StoreConfig
from rocketstore.store._store import MessageStore
from rocketstore.tier._manifest import (
    load_covered,
    load_manifest,
    part_name,
    tiered_topics,
)
from rocketstore.tier._retention import enforce_retention
from rocketstore.tier._service import TierService, remove_leftovers, tier_store
from support.tier_helpers import (
    FILE_SIZE,
    assert_same_rows,
    fill,
    source_rows,
    split_at,
    store_config,
    tier_rows,
)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[MessageStore, StoreConfig]]:
    config = store_config(
        tmp_path / "store", tiered_dir=str(tmp_path / "tier"), file_reserved_time=0
    )
    store = MessageStore(config)
    store.load()
    store.start()
    try:
        yield store, config
    finally:
        store.shutdown()


def _settle(store: MessageStore) -> None:
    """Wait until the commit log is flushed and dispatched (the source's rows are read through
    the consume queues)."""
    deadline = time.monotonic() + 60
    while store.flushed_phy_offset() < store.max_phy_offset or store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "the commit log was not flushed and dispatched"
        time.sleep(0.01)


def _files(config: StoreConfig) -> list[int]:
    return sorted(int(p.name) for p in Path(config.commit_log_dir).iterdir())


def _drain(tier: TierService) -> int:
    n = 0
    while (r := tier.tier_once()) is not None and r.end > r.start:
        n += 1
    return n


def test_the_service_tiers_sealed_files_in_order(live: tuple[MessageStore, StoreConfig]) -> None:
    """Each range in a niced child process (the service's default)."""
    store, config = live
    fill(store, 500)
    _settle(store)
    tier = TierService(config, settled=store.flushed_phy_offset)
    assert tier.tier_once() is not None
    _drain(tier)
    last = store.max_phy_offset - store.max_phy_offset % FILE_SIZE
    assert tier.covered() == load_covered(config.tiered_dir) == last
    assert tier.tier_once() is None  # the last file is not sealed
    below, _ = split_at(source_rows(Path(config.store_path_root_dir)), last)
    assert_same_rows(tier_rows(Path(config.tiered_dir)), below)


def test_a_seal_age_tiers_the_settled_part_of_the_last_file(
    live: tuple[MessageStore, StoreConfig],
) -> None:
    store, config = live
    clock = ManualClock()
    config = dataclasses.replace(config, tiered_seal_age_ms=1000)
    fill(store, 700)
    _settle(store)
    tier = TierService(
        config, settled=store.flushed_phy_offset, clock=clock, duty=1.0, in_process=True
    )
    _drain(tier)
    sealed = tier.covered()
    assert sealed % FILE_SIZE == 0 and sealed < store.max_phy_offset
    assert tier.tier_once() is None  # the flushed end is new: not yet
    clock.advance(0.5)
    assert tier.tier_once() is None
    clock.advance(0.6)
    r = tier.tier_once()
    assert r is not None and r.complete and (r.start, r.end) == (sealed, store.max_phy_offset)
    # more messages: the next range starts inside the file
    fill(store, 50, seed=2)
    _settle(store)
    assert tier.tier_once() is None
    clock.advance(1.1)
    r2 = tier.tier_once()
    assert r2 is not None and r2.start == r.end and r2.end == store.max_phy_offset
    assert part_name(r2.start) in {f.name for f in load_manifest(config.tiered_dir, "TopicA").files}
    store_dir = Path(config.store_path_root_dir)
    assert_same_rows(tier_rows(Path(config.tiered_dir)), source_rows(store_dir))


def test_commit_log_cleaning_waits_for_covered(live: tuple[MessageStore, StoreConfig]) -> None:
    store, config = live
    fill(store, 1200)
    _settle(store)
    files = _files(config)
    assert len(files) >= 5
    tier = TierService(config, settled=store.flushed_phy_offset, duty=1.0, in_process=True)
    store.set_tiered_below(tier.covered)
    store.clean_commit_log.execute_delete_files_manually()
    assert store.cleaner.run_once() == 0  # nothing tiered: nothing may go
    assert _files(config) == files
    tier.tier_once()
    tier.tier_once()  # two files tiered
    store.cleaner.run_once()
    assert _files(config) == files[2:]
    _drain(tier)
    store.cleaner.run_once()
    assert _files(config) == [f for f in files if f >= tier.covered()]
    assert len(_files(config)) < len(files) - 2


def test_with_tiering_off_cleaning_deletes_as_before(tmp_path: Path) -> None:
    config = store_config(tmp_path / "store", file_reserved_time=0)
    assert config.tiered_dir == "" and StoreConfig().tiered_dir == ""
    with MessageStore(config) as store:
        assert store.clean_commit_log.tiered_below is None
        fill(store, 1200)
        _settle(store)
        files = _files(config)
        store.clean_commit_log.execute_delete_files_manually()
        store.cleaner.run_once()
        assert _files(config) == files[-2:]  # all but the file written to and the next one


def test_broker_conf_keys(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "tieredDir=/data/tier\ntieredSealAgeMs=60000\ntieredRetentionHours=720\n"
        "tieredMaxBytes=1000000\n"
    )
    config = StoreConfig.from_broker_conf(conf)
    assert (config.tiered_dir, config.tiered_seal_age_ms) == ("/data/tier", 60000)
    assert (config.tiered_retention_hours, config.tiered_max_bytes) == (720, 1000000)
    assert not config.extra
    with pytest.raises(ValueError, match="tiered_max_bytes"):
        StoreConfig(tiered_max_bytes=-1)


def _tiered_store(tmp_path: Path, count: int = 1200) -> tuple[Path, Path]:
    config = store_config(tmp_path / "store")
    with MessageStore(config) as store:
        fill(store, count)
    tiered = tmp_path / "tier"
    tier_store(Path(config.commit_log_dir), tiered)
    return Path(config.store_path_root_dir), tiered


def test_retention_by_age_and_by_size(tmp_path: Path) -> None:
    _store, tiered = _tiered_store(tmp_path)
    manifests = {t: load_manifest(tiered, t) for t in tiered_topics(tiered)}
    total = sum(f.bytes for m in manifests.values() for f in m.files)
    newest = max(f.store_time[1] for m in manifests.values() for f in m.files)
    # size: the files cut from the lowest commit-log offsets go first, whatever their topic
    removed = enforce_retention(tiered, retention_hours=0, max_bytes=total // 2, now_ms=newest)
    assert removed
    kept = {t: load_manifest(tiered, t) for t in tiered_topics(tiered)}
    left = [f for m in kept.values() for f in m.files]
    assert sum(f.bytes for f in left) <= total // 2
    assert max(r.file.commitlog[0] for r in removed) <= min(f.commitlog[0] for f in left)
    for r in removed:
        assert not (tiered / r.topic / r.file.name).exists()
    for t, m in kept.items():
        for f in m.files:
            assert (tiered / t / f.name).exists()
    # age: everything older than an hour before "now"
    later = newest + 2 * 3_600_000
    removed = enforce_retention(tiered, retention_hours=1, max_bytes=0, now_ms=later)
    assert {r.why for r in removed} == {"age"}
    assert all(not load_manifest(tiered, t).files for t in tiered_topics(tiered))
    assert not list(tiered.glob("*/part-*"))
    assert enforce_retention(tiered, retention_hours=0, max_bytes=0, now_ms=later) == []


def test_leftovers_of_a_crash_are_deleted_listed_files_kept(tmp_path: Path) -> None:
    _store, tiered = _tiered_store(tmp_path, 600)
    listed = sorted(tiered.glob("*/part-*"))
    junk = [
        tiered / "TopicA" / part_name(10**9),  # renamed, never listed
        tiered / "TopicA" / f".{part_name(10**9 + 1)}.tmp",
        tiered / "NewTopic" / f".{part_name(0)}.tmp",  # before the topic's first manifest
        tiered / "TopicB" / "_manifest.json.tmp",
        tiered / "_tier.json.tmp",
    ]
    for path in junk:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x")
    gone = remove_leftovers(tiered)
    assert sorted(gone) == sorted(junk)
    assert sorted(tiered.glob("*/part-*")) == listed
    assert all(not p.exists() for p in junk)


@pytest.mark.parametrize("in_process", [True, False], ids=["thread", "child"])
def test_the_service_stops_mid_range_and_leaves_no_temporaries(
    live: tuple[MessageStore, StoreConfig], in_process: bool
) -> None:
    store, config = live
    fill(store, 1500)
    _settle(store)
    tier = TierService(config, settled=store.flushed_phy_offset, duty=0.05, in_process=in_process)
    tier.start()
    time.sleep(0.3 if in_process else 1.2)
    tier.stop()
    assert tier.error is None
    tiered = Path(config.tiered_dir)
    assert not list(tiered.glob("*/.*.tmp"))
    covered = load_covered(tiered)
    below, _ = split_at(source_rows(Path(config.store_path_root_dir)), covered)
    assert_same_rows(tier_rows(tiered), below)


def test_the_broker_runs_the_tier_and_gates_cleaning(tmp_path: Path) -> None:
    config = store_config(tmp_path / "store", tiered_dir=str(tmp_path / "tier"))

    async def run() -> int:
        server = BrokerServer(config, BrokerConfig(listen_port=0))
        await server.start()
        try:
            assert server.tier is not None and server.tier.running
            gate = server.store.clean_commit_log.tiered_below
            assert gate is not None and gate() == server.tier.covered()
            await asyncio.to_thread(fill, server.store, 800)
            deadline = time.monotonic() + 60
            while server.tier.covered() < FILE_SIZE * 3:
                assert time.monotonic() < deadline, "the tier did not follow the commit log"
                await asyncio.sleep(0.05)
            return server.tier.covered()
        finally:
            await server.shutdown()
            assert server.tier is None

    covered = asyncio.run(run())
    assert load_covered(tmp_path / "tier") >= covered


def test_the_broker_without_a_tiered_dir_runs_no_tier(tmp_path: Path) -> None:
    async def run() -> None:
        server = BrokerServer(store_config(tmp_path / "store"), BrokerConfig(listen_port=0))
        await server.start()
        try:
            assert server.tier is None
            assert server.store.clean_commit_log.tiered_below is None
        finally:
            await server.shutdown()

    asyncio.run(run())
    assert not (tmp_path / "tier").exists()


def test_the_worker_reports_a_damaged_record_to_the_broker_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rocketstore.store.recovery._scan import _HEAD_SIZE as BODY_AT
    from rocketstore.store.recovery._scan import scan_records

    config = store_config(tmp_path / "store", tiered_dir=str(tmp_path / "tier"))
    with MessageStore(config) as store:
        fill(store, 400)
    first = Path(config.commit_log_dir) / f"{0:020d}"
    data = first.read_bytes()
    found: list[tuple[int, ...]] = []
    scan_records(data, 0, len(data), 0, check_crc=True, collect=found)  # type: ignore[arg-type]
    phys = int(found[5][0])
    with open(first, "r+b") as f:  # a byte of the body: the CRC fails, the length holds
        f.seek(phys + BODY_AT + 2)
        f.write(bytes([data[phys + BODY_AT + 2] ^ 0xFF]))
    tier = TierService(config, settled=lambda: 10 * FILE_SIZE)
    with caplog.at_level(logging.ERROR, logger="rocketstore.tier"):
        result = tier.tier_once()
    assert result is not None and result.complete and result.end == FILE_SIZE
    assert [(d.path, d.position) for d in result.damaged] == [(str(first), phys)]
    assert f"damaged record not tiered: {first} position {phys}" in caplog.text
