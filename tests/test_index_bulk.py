"""The key index's bulk path: ``build_index_many`` leaves every file exactly as ``build_index``
record by record does, and ``split_key_hashes`` hashes exactly as ``KeyHasher``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rocketstore.store.queue._index as index_module
from rocketstore import ManualClock
from rocketstore.store._java_hash import java_hash_unsigned, java_string_hash, power31
from rocketstore.store.log._record import KEY_SEPARATOR, DispatchRequest
from rocketstore.store.queue._index import (
    HEADER_SIZE,
    INT32_MAX,
    SLOT,
    IndexService,
    KeyHasher,
    split_key_hashes,
)

BASE_TS = 1_700_000_000_000
ALL_TIME = (0, 2**63 - 1)


def reference_keys(topic: str, keys: Sequence[str]) -> list[tuple[int, int]]:
    hasher = KeyHasher()
    return [
        (r, hasher(topic, key))
        for r, value in enumerate(keys)
        for key in value.split(KEY_SEPARATOR)
        if key
    ]


def min_value_key(topic: str) -> str:
    """A 7-character key whose ``topic#key`` hashes to Integer.MIN_VALUE: the key's own hash
    must make up the difference, and 31^7 > 2^32 leaves room for it in base-31 digits."""
    base = ord("0")
    target = (0x80000000 - java_hash_unsigned(topic + "#") * power31(7)) & 0xFFFFFFFF
    target = (target - java_hash_unsigned(chr(base) * 7)) & 0xFFFFFFFF
    digits = []
    for _ in range(7):
        target, d = divmod(target, 31)
        digits.append(chr(base + d))
    return "".join(reversed(digits))


class Pair:
    """Two services fed the same records: ``one`` record by record, ``bulk`` in batches."""

    def __init__(self, root: Path, slot_num: int = 7, index_num: int = 50) -> None:
        self.one = IndexService(
            root / "one", slot_num=slot_num, index_num=index_num, clock=ManualClock()
        )
        self.bulk = IndexService(
            root / "bulk", slot_num=slot_num, index_num=index_num, clock=ManualClock()
        )
        self.seen: set[tuple[str, str]] = set()

    def feed(self, topic: str, offsets: Sequence[int], keys: Sequence[str], ts: int) -> None:
        for phys, value in zip(offsets, keys, strict=True):
            req = DispatchRequest(topic, 3, phys, 100, 0, ts, 7, value, None, 0, 0)
            self.one.build_index(req, write_header=False)
        self.one.write_last_header()
        self.bulk.build_index_many(topic, offsets, keys, ts)
        self.seen.update((topic, k) for v in keys for k in v.split(KEY_SEPARATOR) if k)
        self.check()

    def check(self) -> None:
        one, bulk = self.one.files, self.bulk.files
        assert [f.name for f in one] == [f.name for f in bulk]
        for a, b in zip(one, bulk, strict=True):
            assert bytes(a.mf.mm) == bytes(b.mf.mm), a.name
            assert vars_of(a) == vars_of(b), a.name
        for topic, key in self.seen:
            assert self.one.query(topic, key, 64, *ALL_TIME) == self.bulk.query(
                topic, key, 64, *ALL_TIME
            )

    def close(self) -> None:
        self.one.shutdown()
        self.bulk.shutdown()


def vars_of(f: index_module.IndexFile) -> tuple[int, ...]:
    return (
        f.begin_timestamp,
        f.end_timestamp,
        f.begin_phy_offset,
        f.end_phy_offset,
        f.hash_slot_count,
        f.index_count,
    )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    p = Pair(tmp_path)
    yield p
    p.close()


@pytest.fixture
def always_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Send even tiny batches down the numpy path."""
    monkeypatch.setattr(index_module, "BULK_MIN_RECORDS", 1)


# ---- hashing --------------------------------------------------------------------------------

KEY_CHARS = st.sampled_from(
    ["a", "b", "Z", "0", "#", " ", " ", "ü", "标", "\U0001f600", "\ud800", "\x00", "\x7f"]
)
KEYS_VALUE = st.text(alphabet=KEY_CHARS, max_size=12)
ONE_KEY = st.text(alphabet=KEY_CHARS.filter(lambda c: c != KEY_SEPARATOR), min_size=1, max_size=12)


@given(st.text(max_size=6), st.lists(KEYS_VALUE, max_size=30))
def test_split_key_hashes_matches_key_hasher(topic: str, keys: list[str]) -> None:
    records, hashes = split_key_hashes(topic, keys)
    assert list(zip(records.tolist(), hashes.tolist(), strict=True)) == reference_keys(topic, keys)


@given(st.text(max_size=6), st.lists(ONE_KEY, max_size=30))
def test_split_key_hashes_of_one_key_a_value(topic: str, keys: list[str]) -> None:
    records, hashes = split_key_hashes(topic, keys)
    assert list(zip(records.tolist(), hashes.tolist(), strict=True)) == reference_keys(topic, keys)


def test_split_key_hashes_on_many_strings() -> None:
    spaced = [f"key-{i} {'x' * (i % 97)}  order_{i * 7919}" for i in range(3000)]
    spaced += ["", " ", "a  b", "标签-ü 键", "  lead", "trail  "]
    plain = [f"order_{i * 7919}{'y' * (i % 50)}" for i in range(3000)] + ["标签-ü"]
    for topic in ("T", "TopicA", "主题"):
        for keys in (spaced, plain):
            records, hashes = split_key_hashes(topic, keys)
            assert list(zip(records.tolist(), hashes.tolist(), strict=True)) == reference_keys(
                topic, keys
            )


def test_min_value_hash_maps_to_zero() -> None:
    key = min_value_key("T")
    assert java_string_hash("T#" + key) == -(2**31)
    assert KeyHasher()("T", key) == 0
    records, hashes = split_key_hashes("T", ["a", f"b {key}", key])
    assert records.tolist() == [0, 1, 1, 2]
    assert hashes.tolist() == [KeyHasher()("T", "a"), KeyHasher()("T", "b"), 0, 0]


def test_long_keys_grow_the_power_table() -> None:
    keys = ["k" * 5000, "q" * 300 + " " + "r" * 7000]
    records, hashes = split_key_hashes("T", keys)
    assert list(zip(records.tolist(), hashes.tolist(), strict=True)) == reference_keys("T", keys)


# ---- equivalence with build_index -----------------------------------------------------------

TIMESTAMPS = st.sampled_from(
    [
        *(-5, 0, 1, 999),
        *(BASE_TS - 7000, BASE_TS, BASE_TS + 999, BASE_TS + 61_000),
        BASE_TS + (INT32_MAX + 3) * 1000,  # timeDiff clamps to INT32_MAX
    ]
)


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[str, list[int], list[str], int]]:
    out = []
    next_offset = draw(st.integers(0, 3)) * 100
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 40))
        if draw(st.booleans()) and next_offset > 0:
            next_offset = draw(st.integers(0, next_offset // 100)) * 100  # re-dispatch
        gaps = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
        offsets = list(itertools.accumulate(gaps, initial=next_offset))[1:]
        if draw(st.booleans()):
            values = KEYS_VALUE | st.sampled_from(["k", "k k", "k1 k2 k3"])
        else:  # one key a record
            values = ONE_KEY | st.sampled_from(["k", "k1"])
        keys = draw(st.lists(values, min_size=n, max_size=n))
        topic = draw(st.sampled_from(["T", "T", "Other"]))
        out.append((topic, offsets, keys, draw(TIMESTAMPS)))
        if offsets:
            next_offset = offsets[-1] + 1
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches(),
    st.sampled_from([(1, 6), (7, 50), (16, 9), (3, 3)]),
    st.booleans(),
)
def test_bulk_equals_record_by_record(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[tuple[str, list[int], list[str], int]],
    sizes: tuple[int, int],
    tiny_batches_bulk: bool,
) -> None:
    root = tmp_path_factory.mktemp("pair")
    p = Pair(root, *sizes)
    old = index_module.BULK_MIN_RECORDS
    index_module.BULK_MIN_RECORDS = 1 if tiny_batches_bulk else old
    try:
        for topic, offsets, keys, ts in data:
            p.feed(topic, offsets, keys, ts)
    finally:
        index_module.BULK_MIN_RECORDS = old
        p.close()


def test_a_batch_spanning_several_files(pair: Pair) -> None:
    offsets = [i * 64 for i in range(400)]
    keys = [f"order-{i} user-{i % 13} {'shared' if i % 5 == 0 else ''}" for i in range(400)]
    pair.feed("T", offsets, keys, BASE_TS)
    assert len(pair.bulk.files) >= 15  # 49 entries a file
    assert pair.bulk.query("T", "order-123", 64, *ALL_TIME)[0] == [123 * 64]
    shared = [i * 64 for i in range(0, 400, 5)]
    assert pair.bulk.query("T", "shared", 64, *ALL_TIME)[0] == shared[-64:]  # the newest 64
    # later batches carry on in the newest file and chain to its entries
    pair.feed("T", [30_000 + i for i in range(50)], ["shared user-3"] * 50, BASE_TS + 5000)


def test_reapplied_batches_are_skipped(pair: Pair) -> None:
    offsets = [i * 10 for i in range(100)]
    keys = [f"k{i % 17} m{i}" for i in range(100)]
    pair.feed("T", offsets, keys, BASE_TS)
    before = [bytes(f.mf.mm) for f in pair.bulk.files]
    pair.feed("T", offsets, keys, BASE_TS)  # the whole batch again
    pair.feed("T", offsets[:40], keys[:40], BASE_TS + 1000)
    assert [bytes(f.mf.mm) for f in pair.bulk.files] == before
    # half old, half new: only the new half is indexed
    pair.feed("T", [*offsets[50:], *range(1000, 1500, 10)], keys, BASE_TS + 2000)
    assert pair.bulk.query("T", "m10", 64, *ALL_TIME)[0] == [100]  # at 600: skipped
    assert pair.bulk.query("T", "m50", 64, *ALL_TIME)[0] == [500, 1000]


def test_a_full_file_is_replaced_by_a_record_with_only_separators(tmp_path: Path) -> None:
    p = Pair(tmp_path, slot_num=5, index_num=21)  # 20 entries a file
    try:
        p.feed("T", list(range(20)), [f"k{i}" for i in range(20)], BASE_TS)
        assert len(p.bulk.files) == 1 and p.bulk.files[0].is_full()
        p.feed("T", list(range(20, 40)), [""] * 20, BASE_TS)  # no keys: the file stays
        assert len(p.bulk.files) == 1
        p.feed("T", list(range(40, 60)), ["  "] + [""] * 19, BASE_TS)
        assert len(p.bulk.files) == 2
        # a full file is replaced before the offset check: the new file is empty, so the
        # record at the previous file's end offset is indexed again there
        p.feed("T", list(range(60, 80)), [f"x{i}" for i in range(20)], BASE_TS)
        p.feed("T", [79, *range(80, 99)], ["again"] * 20, BASE_TS)
    finally:
        p.close()


def test_begin_timestamp_and_time_diffs(tmp_path: Path, always_bulk: None) -> None:
    p = Pair(tmp_path, slot_num=7, index_num=6)
    try:
        # five entries a file
        p.feed("T", [0, 1], ["a", "b c"], 0)  # begin time 0: every diff of the file is 0
        p.feed("T", [5, 6], ["d", "e"], BASE_TS)
        p.feed("T", [9], ["f"], BASE_TS + 4500)  # a new file: diff from the old end time
        p.feed("T", [12], ["g"], BASE_TS - 10_000)  # before the begin time: 0
        p.feed("T", [15], ["h"], BASE_TS + (INT32_MAX + 5) * 1000)  # clamped
        p.feed("T", [18, 19], ["i", "j"], BASE_TS + 7500)
        diffs = [[f.entry(n)[2] for n in range(1, f.index_count)] for f in p.bulk.files]
        assert diffs == [[0, 0, 0, 0, 0], [4, 0, INT32_MAX, 3, 3]]
        assert p.bulk.files[1].begin_timestamp == BASE_TS + 4500
    finally:
        p.close()


def test_damaged_slots_are_treated_as_put_key_treats_them(tmp_path: Path) -> None:
    """A slot value counts as empty when it is <= 0 or above the entry count at the time the
    slot's entry is written, so a too-high value may become believable later in a batch."""
    p = Pair(tmp_path, slot_num=3, index_num=200)
    try:
        p.feed("T", list(range(30)), [f"k{i}" for i in range(30)], BASE_TS)
        count = p.bulk.files[-1].index_count
        keys = [f"n{i}" for i in range(30)]
        slots = [KeyHasher()("T", k) % 3 for k in keys]
        # the slots by the position of their first new entry, latest first
        late, middle, early = sorted((0, 1, 2), key=slots.index, reverse=True)
        assert slots.index(late) > 0
        damage = {
            late: count + slots.index(late),  # just believable when its first entry comes
            middle: count + slots.index(middle) + 1,  # one too high: empty
            early: -3,
        }
        for svc in (p.one, p.bulk):
            for slot, value in damage.items():
                SLOT.pack_into(svc.files[-1].mf.mm, HEADER_SIZE + slot * 4, value)
        p.feed("T", list(range(100, 130)), keys, BASE_TS)
    finally:
        p.close()


def test_min_value_key_is_indexed_in_bulk(pair: Pair, always_bulk: None) -> None:
    key = min_value_key("T")
    pair.feed("T", [0, 10, 20], [key, f"a {key}", "a"], BASE_TS)
    assert pair.bulk.query("T", key, 64, *ALL_TIME)[0] == [0, 10]
    assert pair.bulk.files[0].entry(1)[0] == 0


def test_disabled_or_read_only_index_writes_nothing(tmp_path: Path) -> None:
    offsets, keys = list(range(20)), ["a b"] * 20
    svc = IndexService(tmp_path / "off", slot_num=7, index_num=50, enabled=False)
    svc.build_index_many("T", offsets, keys, BASE_TS)
    assert svc.files == [] and not (tmp_path / "off").exists()
    svc = IndexService(tmp_path / "ro", slot_num=7, index_num=50, read_only=True)
    svc.build_index_many("T", offsets, keys, BASE_TS)
    assert svc.files == [] and not (tmp_path / "ro").exists()


def test_mismatched_columns_are_refused(pair: Pair) -> None:
    with pytest.raises(ValueError, match="KEYS values"):
        pair.bulk.build_index_many("T", [1, 2], ["a"], BASE_TS)


def test_reloaded_bulk_files_answer_queries(tmp_path: Path) -> None:
    p = Pair(tmp_path, slot_num=16, index_num=50)
    offsets = [i * 100 for i in range(120)]
    p.feed("T", offsets, [f"k{i % 10}" for i in range(120)], BASE_TS)
    p.close()
    again = IndexService(tmp_path / "bulk", slot_num=16, index_num=50, clock=ManualClock())
    again.load()
    assert again.query("T", "k3", 64, *ALL_TIME)[0] == [i * 100 for i in range(3, 120, 10)]
    again.shutdown()
