"""Store files are created at their full size but sparse: disk use follows the data."""

from __future__ import annotations

import os
from pathlib import Path

from rocketstore.store import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store.log._mapped_file import MappedFile, file_name_for

GIB = 1 << 30
MIB = 1 << 20


def disk_bytes(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_fresh_store_with_default_files_holds_a_few_mib_for_one_message(tmp_path: Path) -> None:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "s"))
    assert cfg.mapped_file_size_commit_log == GIB
    with MessageStore(cfg) as store:
        r = store.put_message(Message("Sparse", b"one message", 0, keys=["k"]))
        assert r.status is PutMessageStatus.PUT_OK
        assert store.allocator is not None
        store.allocator.wait_idle(10)  # the next file, made ahead
        files = sorted((tmp_path / "s" / "commitlog").iterdir())
        assert len(files) == 2  # the file in use and the one made ahead
        for f in files:
            assert f.stat().st_size == GIB  # readers need the exact size
        assert disk_bytes(files[0]) <= cfg.mapped_file_allocate_ahead + MIB
        assert disk_bytes(files[1]) < MIB
        total = sum(disk_bytes(p) for p in (tmp_path / "s").rglob("*") if p.is_file())
        assert total < 16 * MIB, total


def test_blocks_are_reserved_ahead_of_the_writes_in_steps(tmp_path: Path) -> None:
    path = tmp_path / file_name_for(0)
    mf = MappedFile(path, 64 * MIB, allocate_ahead=MIB)
    try:
        assert mf.allocated == 0 and disk_bytes(path) == 0
        mf.ensure_allocated(100)
        assert mf.allocated == MIB
        assert MIB <= disk_bytes(path) < 2 * MIB
        mf.ensure_allocated(MIB)  # inside: nothing more
        assert mf.allocated == MIB
        mf.ensure_allocated(MIB + 1)
        assert mf.allocated == 2 * MIB
        mf.ensure_allocated(64 * MIB)
        assert mf.allocated == 64 * MIB  # never past the end
        assert os.stat(path).st_size == 64 * MIB
    finally:
        mf.close()


def test_a_loaded_file_knows_where_its_data_ends(tmp_path: Path) -> None:
    path = tmp_path / file_name_for(0)
    mf = MappedFile(path, 8 * MIB, allocate_ahead=4096)
    mf.append(b"x" * 10_000)
    mf.close()
    again = MappedFile(path, 8 * MIB, create=False)
    try:
        assert again.allocated == 12_288  # three pages of data, holes after them
        again.set_positions(10_000)
        assert again.select_mapped_buffer(0, 10_000) is not None
        again.truncate_to(5_000)  # zeroes through the descriptor: the holes stay holes
        assert disk_bytes(path) <= 16_384
    finally:
        again.close()


def test_warm_up_touches_and_allocates_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / file_name_for(0)
    mf = MappedFile(path, 4 * MIB)
    try:
        mf.warm()
        assert mf.allocated == 4 * MIB
        assert disk_bytes(path) >= 4 * MIB
    finally:
        mf.close()
