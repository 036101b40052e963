"""The files RocketMQ itself wrote and said, kept in ``tests/fixtures`` (its README says what
each is), and how tests unpack the stores (into a directory of their own, never in place)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from rocketstore import StoreConfig

FIXTURES_ROOT = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURES = FIXTURES_ROOT / "rocketmq-4.9.8"
"""The two store directories RocketMQ 4.9.8 wrote, as tarballs (clean and abort)."""
TRANSCRIPTS = FIXTURES_ROOT / "remoting"
"""The official 4.x client's conversations with RocketMQ 4.9.8, one JSON line per frame."""


def tarball(name: str) -> Path:
    return FIXTURES / f"rocketmq-4.9.8-{name}.tar.gz"


def unpack_fixture(name: str, dest: Path) -> Path:
    """Unpack ``rocketmq-4.9.8-<name>.tar.gz`` under ``dest``; returns the unpacked directory
    (with store/, manifest.jsonl, reader-output.jsonl). The tarball is only read."""
    with tarfile.open(tarball(name)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # Python 3.11 before 3.11.4 (Debian 12's 3.11.2) has no extraction filters
            for member in tar.getmembers():
                inside = (dest / member.name).resolve().is_relative_to(dest.resolve())
                if not inside or not (member.isfile() or member.isdir()):
                    raise ValueError(f"{tarball(name)}: unexpected member {member.name!r}")
            tar.extractall(dest)
    return dest / f"rocketmq-4.9.8-{name}"


def fixture_config(store: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(store),
        mapped_file_size_commit_log=1_048_576,
        mapped_file_size_consume_queue=20_000,
        max_hash_slot_num=1000,
        max_index_num=4000,
        store_host="127.0.0.1",
        store_port=10911,
    )


def read_back(fixture: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (fixture / "reader-output.jsonl").read_text().splitlines()]
