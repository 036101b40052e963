"""Column-wise batch encoding (store/log/_batch_encode.py) against the per-record encoder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import ManualClock, Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store.log._record import encode_record, tags_code
from support.waits import wait_until

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from rocketstore.store.log._batch_encode import encode_plain_batch, stamp  # noqa: E402

STORE_HOST = b"\x0a\x01\x02\x03\x00\x00\x2a\x9f"
_props = st.one_of(
    st.just(""),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40),
)


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(st.tuples(st.binary(max_size=60), _props), min_size=1, max_size=30),
    topic=st.sampled_from(["T", "abcdefghi", "abcdefghij", "x" * 127]),
    skip=st.integers(0, 3),
    seed=st.randoms(use_true_random=False),
    at=st.integers(0, 50),
    first_phys=st.integers(0, 2**40),
    first_qoff=st.integers(0, 2**40),
    now=st.integers(0, 2**42),
)
def test_records_match_the_per_record_encoder(
    rows: list[tuple[bytes, str]],
    topic: str,
    skip: int,
    seed: object,
    at: int,
    first_phys: int,
    first_qoff: int,
    now: int,
) -> None:
    bodies = pa.array([b for b, _ in rows], pa.binary()).slice(skip)  # arrays with an offset
    props = pa.array([p.encode() for _, p in rows], pa.binary()).slice(skip)
    if not len(bodies):
        return
    order = list(range(len(bodies)))
    seed.shuffle(order)  # type: ignore[attr-defined]
    order = order[: max(1, len(order) - 1)]
    picked = [rows[skip + i] for i in order]
    codes = [tags_code(p[:3] or None) for _, p in picked]
    batch = encode_plain_batch(
        topic, 3, bodies, props, codes, STORE_HOST, rows=np.array(order, dtype=np.int64)
    )
    target = bytearray(at + batch.total + 5)
    target[at : at + batch.total] = memoryview(batch.data)
    offsets = stamp(target, at, batch, first_phys, first_qoff, now)
    expected = []
    phys = first_phys
    for i, (body, p) in enumerate(picked):
        record = encode_record(
            topic=topic, body=body, queue_id=3, queue_offset=first_qoff + i, phys_offset=phys,
            born_timestamp=now, store_timestamp=now, store_host=STORE_HOST, properties=p,
        )  # fmt: skip
        expected.append(record)
        phys += len(record)
    assert bytes(target[at : at + batch.total]) == b"".join(expected)
    assert list(batch.sizes) == [len(r) for r in expected]
    assert offsets[0] == first_phys and len(offsets) == len(picked)
    assert batch.tags_codes == tuple(codes)
    assert target[:at] == bytes(at) and target[at + batch.total :] == bytes(5)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for sub in ("commitlog", "consumequeue")
        for p in sorted((root / sub).rglob("*"))
        if p.is_file()
    }


def test_put_encoded_stores_what_put_messages_stores(tmp_path: Path) -> None:
    """The same rows as Messages through put_messages, as lists through put_plain_batch and
    encoded through put_encoded_batch (file roll included): the same commit log, consume
    queues and index, byte for byte, and the keys are indexed."""
    rows = [
        (b"body-%d" % i * (i % 7), f"TAGS\x01t{i % 3}\x02KEYS\x01k{i} all".encode())
        for i in range(300)
    ]
    tags = [f"t{i % 3}" for i in range(300)]
    keys = [f"k{i} all" for i in range(300)]
    results = {}
    for kind in ("messages", "plain", "encoded"):
        clock = ManualClock()
        config = StoreConfig(
            store_path_root_dir=str(tmp_path / kind),
            mapped_file_size_commit_log=16 * 1024,
            mapped_file_size_consume_queue=20 * 64,
            max_hash_slot_num=100,
            max_index_num=400,
        )
        with MessageStore(config, clock=clock) as store:
            for lo in range(0, 300, 60):
                part = rows[lo : lo + 60]
                if kind == "messages":
                    r = store.put_messages(
                        [
                            Message("T", b, 1, properties={"TAGS": t, "KEYS": k})
                            for (b, _p), t, k in zip(
                                part, tags[lo : lo + 60], keys[lo : lo + 60], strict=True
                            )
                        ]
                    )
                elif kind == "plain":
                    r = store.put_plain_batch(
                        "T", 1, [b for b, _ in part], [p for _, p in part], tags[lo : lo + 60],
                        keys[lo : lo + 60],
                    )  # fmt: skip
                else:
                    batch = encode_plain_batch(
                        "T",
                        1,
                        pa.array([b for b, _ in part], pa.binary()),
                        pa.array([p for _, p in part], pa.binary()),
                        [tags_code(t) for t in tags[lo : lo + 60]],
                        store.commit_log.store_host,
                        keys=keys[lo : lo + 60],
                    )
                    r = store.put_encoded_batch(batch)
                assert r.ok, r
                clock.advance(0.001)
            assert wait_until(lambda: store.get_max_offset_in_queue("T", 1) == 300)
            found = store.query_message("T", "k123", max_num=5).messages
            assert [m.queue_offset for m in found] == [123]
            got = store.get_message("g", "T", 1, offset=250, max_msg_nums=1).messages[0]
            assert got.body == rows[250][0] and got.keys == ["k250", "all"]
        results[kind] = _files(tmp_path / kind)
    assert results["messages"] == results["plain"] == results["encoded"]
    assert len([k for k in results["plain"] if k.startswith("commitlog")]) > 1  # it rolled


def test_put_encoded_refuses_what_put_messages_refuses(tmp_path: Path) -> None:
    config = StoreConfig(store_path_root_dir=str(tmp_path / "s"), max_message_size=100)
    with MessageStore(config) as store:
        host = store.commit_log.store_host
        big = encode_plain_batch("T", 0, pa.array([b"x" * 101]), pa.array([b""]), [0], host)
        r = store.commit_log.put_encoded_batch(big)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "max_message_size" in r.error
        bad = encode_plain_batch("T?", 0, pa.array([b"x"]), pa.array([b""]), [0], host)
        assert store.commit_log.put_encoded_batch(bad).status is PutMessageStatus.MESSAGE_ILLEGAL
        other = encode_plain_batch("T", 0, pa.array([b"x"]), pa.array([b""]), [0], bytes(8))
        assert store.commit_log.put_encoded_batch(other).status is PutMessageStatus.MESSAGE_ILLEGAL
        ok = encode_plain_batch("T", 0, pa.array([b"x"]), pa.array([b""]), [0], host)
        assert store.commit_log.put_encoded_batch(ok).ok


def test_the_store_entry_point_counts_a_batch_as_its_messages(tmp_path: Path) -> None:
    with MessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "s"))) as store:
        host = store.commit_log.store_host
        bodies = pa.array([b"a", b"bb", b"ccc"])
        batch = encode_plain_batch("T", 1, bodies, pa.array([b""] * 3), [0, 0, 0], host)
        r = store.put_encoded_batch(batch)
        assert r.ok and r.msg_count == 3 and r.queue_offset == 0
        assert store.statistics().put_message_times_total == 3
        assert wait_until(lambda: store.get_max_offset_in_queue("T", 1) == 3)
        got = store.get_message("g", "T", 1, 0, 8)
        assert [m.body for m in got.messages] == [b"a", b"bb", b"ccc"]
