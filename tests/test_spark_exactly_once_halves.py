"""The exactly-once machinery through brokers without Spark (``_eos``, ``_eos_send``,
``_eos_checks``), against two broker groups: halves invisible until committed, a decided
batch sending nothing again, a commit cut off half way finished by the brokers' checks,
halves of a writer the decision does not name rolled back, and the decision record split
into parts and read back."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa

from rocketstore.client._admin import AdminClient
from rocketstore.spark import _eos
from rocketstore.spark._broker_send import send_settings
from rocketstore.spark._eos import (
    Decision,
    Half,
    WriterHalves,
    end_halves,
    find_decision,
    write_decision,
)
from rocketstore.spark._eos_checks import ExactlyOnceChecks
from rocketstore.spark._eos_send import HalfReport, write_halves
from support.eos_cluster import BROKERS, WAIT_S, Cluster, started_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started_cluster(tmp_path_factory.mktemp("eos-halves"), decisions=True) as c:
        yield c


def _rows(topic: str, prefix: str, n: int) -> Iterator[pa.RecordBatch]:
    bodies = [f"{prefix}-{i:04d}".encode() for i in range(n)]
    for lo in range(0, n, 16):
        chunk = bodies[lo : lo + 16]
        yield pa.RecordBatch.from_pydict(
            {"topic": [topic] * len(chunk), "body": chunk},
            schema=pa.schema([("topic", pa.string()), ("body", pa.binary())]),
        )


def _send(c: Cluster, topic: str, query: str, batch: int, part: int, prefix: str, n: int):
    s = send_settings({"namesrv": c.ns, "sendTimeoutMs": "10000"}, ("topic", "body"))
    return write_halves(s, _rows(topic, prefix, n), (query, batch, part, 0), HalfReport())


def _seen(c: Cluster, topic: str) -> collections.Counter[bytes]:
    return collections.Counter(bytes(m.body) for m in c.read(topic))


def _first_half_of(w: WriterHalves) -> WriterHalves:
    return WriterHalves(
        w.writer, w.partition, {q: hs[: len(hs) // 2] for q, hs in w.queues.items()}
    )


def test_decision_commit_replay_and_checks(cluster: Cluster) -> None:
    topic = "EOS_HALVES"
    cluster.create_topic(topic)
    first = _send(cluster, topic, "q1", 0, 0, "b0", 40)
    assert first.halves is not None and not first.replayed and first.rows == 40
    assert sum(len(h) for h in first.halves.queues.values()) == 40
    assert len(first.halves.queues) == len(BROKERS) * 2  # every write queue in turn
    assert not _seen(cluster, topic)  # halves are invisible

    with AdminClient(cluster.ns) as admin:
        assert find_decision(admin, "q1", 0) is None
        write_decision(admin, Decision("q1", 0, [first.halves]), 10.0)
        found = find_decision(admin, "q1", 0)
        assert found is not None and found.writer_ids == {first.halves.writer}
        # the driver dies half way through its commits
        assert end_halves(admin, [_first_half_of(first.halves)], True, 10.0) == 20
    seen = _seen(cluster, topic)
    assert len(seen) == 20 and set(seen.values()) == {1}

    # a replay of the decided batch sends nothing
    again = _send(cluster, topic, "q1", 0, 0, "b0", 40)
    assert again.replayed and again.halves is None

    # batch 1: a writer that failed (never decided) and the one that counts
    stale = _send(cluster, topic, "q1", 1, 0, "stale", 12)
    fresh = _send(cluster, topic, "q1", 1, 0, "b1", 12)
    assert stale.halves is not None and fresh.halves is not None
    with AdminClient(cluster.ns) as admin:
        write_decision(admin, Decision("q1", 1, [fresh.halves]), 10.0)

    # no query runs: the brokers' checks end the rest from the decisions
    expected = {f"b0-{i:04d}".encode() for i in range(40)} | {
        f"b1-{i:04d}".encode() for i in range(12)
    }
    with ExactlyOnceChecks(cluster.ns) as checks:
        assert checks.first_heartbeat.wait(WAIT_S)
        deadline = time.monotonic() + WAIT_S * 2
        while set(_seen(cluster, topic)) != expected or checks.answered["rollback"] < 12:
            assert time.monotonic() < deadline, (checks.answered, len(_seen(cluster, topic)))
            time.sleep(0.2)
    seen = _seen(cluster, topic)
    assert set(seen) == expected and set(seen.values()) == {1}

    # the driver's own commit after the checks: no-ops, nothing doubled
    with AdminClient(cluster.ns) as admin:
        end_halves(admin, [first.halves, fresh.halves], True, 10.0)
    assert _seen(cluster, topic) == seen


def test_decision_in_parts(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_eos, "_PART_BYTES", 512)
    w = WriterHalves("W" * 24, 3, {"T/b/0": [Half(i, 1000 + i * 97, i) for i in range(400)]})
    with AdminClient(cluster.ns) as admin:
        write_decision(admin, Decision("parts", 7, [w]), 10.0)
        got = find_decision(admin, "parts", 7)
    assert got is not None
    assert got.writers[0].queues == w.queues and got.writers[0].partition == 3


def test_unknown_half_is_an_error(cluster: Cluster, tmp_path: Path) -> None:
    w = WriterHalves("X" * 24, 0, {f"EOS_HALVES/{BROKERS[0]}/0": [Half(0, 12345, 999_999)]})
    with AdminClient(cluster.ns) as admin, pytest.raises(_eos.ExactlyOnceError, match="refused"):
        end_halves(admin, [w], True, 5.0)
