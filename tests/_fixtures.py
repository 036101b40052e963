"""The files RocketMQ itself wrote and said, kept in ``tests/fixtures`` (its README says what
each is), and how tests unpack the stores (into a directory of their own, never in place)."""

from __future__ import annotations

import tarfile
from pathlib import Path

FIXTURES_ROOT = Path(__file__).resolve().parent / "fixtures"
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
        tar.extractall(dest, filter="data")
    return dest / f"rocketmq-4.9.8-{name}"
