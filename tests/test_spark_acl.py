"""The Spark source in broker mode against a broker with ACL on (no Spark needed: the planner
and the executors' pulls as the source runs them): it signs with the account of its
``accessKey`` / ``secretKey`` options, else with ROCKETSTORE_ACCESS_KEY's, and the broker's
ACL decides — an account with SUB on the topic reads it, none or a denied one is refused with
the ACL's reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from rocketstore.columns._arrow import ARROW_SCHEMA
from rocketstore.spark._broker import Cluster, drop_pool, pull_range
from rocketstore.spark._broker_plan import plan_remote
from rocketstore.spark._options import SourceOptionError, SourceOptions
from support.acl_env import World, acl_world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield from acl_world(tmp_path_factory.mktemp("spark_acl"))


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("ROCKETSTORE_ACCESS_KEY", "ROCKETSTORE_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    drop_pool()
    yield
    drop_pool()


def read(world: World, topic: str, **options: str) -> list[bytes]:
    opts = SourceOptions.parse({"broker": world.address, "topics": topic, "pullRetries": "0",
                                "consumerGroup": "GShared",
                                **options})  # fmt: skip
    assert opts.remote is not None
    with Cluster(opts.remote) as cluster:
        ranges = plan_remote(cluster, opts)
    bodies: list[Any] = []
    for r in ranges:
        for batch in pull_range(
            r, opts.remote, ARROW_SCHEMA, batch_rows=100, check_crc=True, fail_on_data_loss=True
        ):
            bodies += batch.column("body").to_pylist()
    return bodies


def test_options_sign_and_the_acl_decides(world: World) -> None:
    assert read(world, "Shared", accessKey="userAK001", secretKey="userSK001") == [
        b"body of Shared"
    ]
    with pytest.raises(Exception, match="No accessKey is configured"):
        read(world, "Shared")
    with pytest.raises(Exception, match="permission for topic:Secret"):
        read(world, "Secret", accessKey="readerAK1", secretKey="readerSK1")
    with pytest.raises(SourceOptionError, match="both accessKey and secretKey"):
        SourceOptions.parse({"broker": world.address, "topics": "T", "accessKey": "userAK001"})


def test_the_environment_signs_without_options(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCKETSTORE_ACCESS_KEY", "userAK001")
    monkeypatch.setenv("ROCKETSTORE_SECRET_KEY", "userSK001")
    assert read(world, "Shared") == [b"body of Shared"]


def test_options_keep_the_secret_out_of_reprs(world: World, tmp_path: Path) -> None:
    opts = SourceOptions.parse(
        {"broker": world.address, "topics": "T", "accessKey": "userAK001", "secretKey": "userSK001"}
    )
    assert opts.remote is not None
    assert "userSK001" not in repr(opts)
