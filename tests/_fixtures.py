"""Where the real RocketMQ 4.9.8 stores live, and how tests unpack them (never in place).

The fixtures sit in ``shared/fixtures/rocketmq-4.9.8`` beside the repository; the environment
variable ROCKETSTORE_FIXTURES points elsewhere.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest


def _locate() -> Path:
    env = os.environ.get("ROCKETSTORE_FIXTURES")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[1]
    return repo.parent / "shared" / "fixtures" / "rocketmq-4.9.8"


FIXTURES = _locate()
needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason=f"RocketMQ fixtures not present at {FIXTURES}"
)


def tarball(name: str) -> Path:
    return FIXTURES / f"rocketmq-4.9.8-{name}.tar.gz"


def unpack_fixture(name: str, dest: Path) -> Path:
    """Unpack ``rocketmq-4.9.8-<name>.tar.gz`` under ``dest``; returns the unpacked directory
    (with store/, manifest.jsonl, reader-output.jsonl). The tarball is only read."""
    with tarfile.open(tarball(name)) as tar:
        tar.extractall(dest, filter="data")
    return dest / f"rocketmq-4.9.8-{name}"
