"""The key index's compiled per-record write (``_index_write_c.put_keys``) against its
pure-Python reference (``_index_write.put_keys_py``) and against the per-key path
(``KeyHasher`` and ``IndexFile.put_key``): the same outcome (result or exception type), the same
bytes and attributes for random records and damaged files, byte-identical index files for random
streams that roll over many small files, and the same errors for positions out of bounds."""

from __future__ import annotations

import errno
import mmap
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import ManualClock
from rocketstore.store._errors import StoreIOError
from rocketstore.store._java_hash import java_hash_unsigned, power31
from rocketstore.store.log._mapped_file import OS_PAGE_SIZE
from rocketstore.store.log._record import KEY_SEPARATOR, DispatchRequest
from rocketstore.store.queue import _index, _index_write
from rocketstore.store.queue._index import (
    ENTRY,
    ENTRY_SIZE,
    HEADER_SIZE,
    INT32_MAX,
    SLOT,
    SLOT_PAGE_CHUNK,
    SLOT_SIZE,
    IndexFile,
    IndexService,
    KeyHasher,
    index_file_size,
)
from rocketstore.store.queue._index_write import put_keys_py, record_keys

index_c = pytest.importorskip(
    "rocketstore.store.queue._index_write_c", reason="the compiled core is not built"
)

BASE_TS = 1_795_000_000_000
uint32 = st.integers(0, 2**32 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
key_text = st.one_of(
    st.text(max_size=12),
    st.text("ab \u00e9\u4e2d\U0001f600\ud800\udfff#", max_size=12),  # BMP, astral, lone surrogates
    st.sampled_from(["", " ", "  ", "k", "k1 k2", " a  b ", "x" * 300]),
)
opt_key = st.one_of(st.none(), key_text)


def _outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return type(exc).__name__, None


def per_key(
    topic_hash: int, key: str
) -> int:  # the index hash as KeyHasher computes it, from the prefix
    h = (topic_hash * power31(len(key.encode("utf-16-le", "surrogatepass")) // 2)) & 0xFFFFFFFF
    h = (h + java_hash_unsigned(key)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    return 0 if signed == -(2**31) else abs(signed)


# ---- one call, on a file made of plain objects ------------------------------------------------


class _Mapped:
    def __init__(self, mm: Any) -> None:
        self.mm = mm


class _File:
    """What put_keys reads and moves of an IndexFile; reservations logged, and refused when
    ``refuse`` says so (as on a full disk)."""

    def __init__(
        self,
        slot_num: int,
        index_num: int,
        count: int,
        mapped: int,
        image: bytes,
        flags: bytes,
        entries_allocated: int,
        begin_ts: int,
        refuse: frozenset[int],
    ) -> None:
        self.slot_num = slot_num
        self.index_num = index_num
        self.index_count = count
        self.hash_slot_count = 3
        self.begin_timestamp = begin_ts
        self.end_timestamp = begin_ts + 5
        self.begin_phy_offset = 100
        self.end_phy_offset = 200
        buf = mmap.mmap(-1, max(mapped, 1))
        buf[:mapped] = image[:mapped]
        self.mf = _Mapped(buf)
        self._slot_pages = bytearray(flags)
        self._entries_allocated = entries_allocated
        self.calls: list[tuple[str, Any]] = []
        self.refuse = refuse

    def _maybe_refuse(self) -> None:
        if len(self.calls) in self.refuse:
            self.calls.append(("refused", None))
            raise StoreIOError(errno.ENOSPC, "no space left on device")

    def allocate_slot_pages(self, pages: tuple[int, ...], /) -> None:
        self.calls.append(("slots", pages))
        self._maybe_refuse()
        for p in pages:
            self._slot_pages[p] = 1

    def allocate_entries(self, end: int, /) -> None:
        self.calls.append(("entries", end))
        self._maybe_refuse()
        self._entries_allocated = end + 2 * ENTRY_SIZE

    def state(self) -> tuple[Any, ...]:
        return (
            self.index_count,
            self.hash_slot_count,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            bytes(self._slot_pages),
            self._entries_allocated,
            self.calls,
            bytes(self.mf.mm),
        )


@st.composite
def files(draw: st.DrawFn) -> dict[str, Any]:
    slot_num = draw(st.integers(1, 1100))  # past one 4 KiB page of slots sometimes
    index_num = draw(st.integers(0, 12))
    size = index_file_size(slot_num, index_num)
    count = draw(st.one_of(st.integers(1, max(index_num, 1)), st.integers(0, index_num + 2)))
    image = bytearray(draw(st.binary(min_size=size, max_size=size)) if size < 600 else size)
    for _ in range(draw(st.integers(0, 6))):  # slots that point anywhere: damaged files
        at = HEADER_SIZE + draw(st.integers(0, min(slot_num, 20) - 1)) * SLOT_SIZE
        value = st.one_of(st.integers(-2, count + 2), st.integers(-(2**31), 2**31 - 1))
        SLOT.pack_into(image, at, draw(value))
    pages = -(-(HEADER_SIZE + slot_num * SLOT_SIZE) // OS_PAGE_SIZE) + 1
    mapped = draw(st.one_of(st.just(size), st.just(size), st.integers(0, size)))
    return {
        "slot_num": slot_num,
        "index_num": index_num,
        "count": count,
        "mapped": mapped,
        "image": bytes(image),
        "flags": draw(
            st.one_of(
                st.binary(min_size=pages, max_size=pages),
                st.binary(max_size=pages),  # shorter: slots past the flags (IndexError)
            )
        ),
        "entries_allocated": draw(st.integers(0, size + 40)),
        "begin_ts": draw(
            st.one_of(st.just(0), st.integers(-5, 5), st.integers(BASE_TS - 10, BASE_TS + 10))
        ),
        "refuse": frozenset(draw(st.lists(st.integers(0, 5), max_size=2))),
    }


@settings(max_examples=500, deadline=None)
@given(
    files(),
    uint32,
    opt_key,
    opt_key,
    st.one_of(st.integers(0, 2**40), int64, st.sampled_from([2**63, -(2**63) - 1])),
    st.one_of(
        st.integers(BASE_TS - 2000, BASE_TS + 20_000),
        st.sampled_from([0, -1, BASE_TS + (INT32_MAX + 5) * 1000, 2**63 - 1]),
    ),
    st.integers(-1, 4),
)
def test_put_keys_matches_the_reference(
    spec: dict[str, Any],
    prefix: int,
    uniq_key: str | None,
    keys: str | None,
    phys: int,
    ts: int,
    done: int,
) -> None:
    py, c = _File(**spec), _File(**spec)
    ra = _outcome(put_keys_py, py, prefix, uniq_key, keys, phys, ts, done)
    rb = _outcome(index_c.put_keys, c, prefix, uniq_key, keys, phys, ts, done)
    assert ra == rb
    assert py.state() == c.state()


@settings(max_examples=300, deadline=None)
@given(uint32, key_text, key_text, st.integers(0, 2**40), st.integers(0, 2**41))
def test_entries_hold_the_index_hash_of_each_key(
    prefix: int, uniq_key: str, keys: str, phys: int, ts: int
) -> None:
    """The written entries, read back: one per key, in order, with KeyHasher's hash."""
    wanted = record_keys(uniq_key, keys)
    slot_num, index_num = 5, len(wanted) + 2
    size = index_file_size(slot_num, index_num)
    for fn in (put_keys_py, index_c.put_keys):
        f = _File(slot_num, index_num, 1, size, bytes(size), b"\x01", size, 0, frozenset())
        assert fn(f, prefix, uniq_key, keys, phys, ts, 0) == -1
        at = HEADER_SIZE + slot_num * SLOT_SIZE
        got = [ENTRY.unpack_from(f.mf.mm, at + n * ENTRY_SIZE) for n in range(1, len(wanted) + 1)]
        assert [e[0] for e in got] == [per_key(prefix, k) for k in wanted]
        assert all(e[1] == phys and e[2] == 0 for e in got)
        assert f.index_count == len(wanted) + 1


def test_new_slots_are_counted() -> None:
    keys = " ".join(f"k{i}" for i in range(12))
    slots = {per_key(7, k) % 1000 for k in keys.split()}
    for fn in (put_keys_py, index_c.put_keys):
        size = index_file_size(1000, 20)
        f = _File(1000, 20, 1, size, bytes(size), b"\x01\x01", size, 0, frozenset())
        assert fn(f, 7, None, keys, 9, BASE_TS, 0) == -1
        assert f.hash_slot_count == 3 + len(slots) and f.index_count == 13


def test_the_hash_runs_on_from_the_topic_prefix() -> None:
    hasher = KeyHasher()
    for topic, key in [("T", "k"), ("Topic\u00e9", "\U0001f600x"), ("T", "\ud800"), ("", "a b")]:
        assert per_key(hasher.prefix(topic), key) == hasher(topic, key)


def _min_value_prefix(key: str) -> int:
    """A topic prefix hash that makes ``key`` (one code unit) hash to Integer.MIN_VALUE."""
    return (0x80000000 - ord(key)) * pow(31, -1, 2**32) & 0xFFFFFFFF


@pytest.mark.parametrize(
    ("case", "slot", "begin", "ts", "want_diff", "want_prev"),
    [
        ("diff capped at INT32_MAX", 0, BASE_TS, BASE_TS + (INT32_MAX + 5) * 1000, INT32_MAX, 0),
        ("diff in whole seconds", 0, BASE_TS, BASE_TS + 2999, 2, 0),
        ("begin 0", 0, 0, BASE_TS, 0, 0),
        ("before begin", 0, BASE_TS, BASE_TS - 1, 0, 0),
        ("a slot at the entry written", 4, BASE_TS, BASE_TS, 0, 4),
        ("a slot past it", 5, BASE_TS, BASE_TS, 0, 0),
        ("a slot at entry 1", 1, BASE_TS, BASE_TS, 0, 1),
        ("a negative slot", -4, BASE_TS, BASE_TS, 0, 0),
    ],
)
def test_edges_are_written_as_the_reference_writes_them(
    case: str, slot: int, begin: int, ts: int, want_diff: int, want_prev: int
) -> None:
    states = []
    for fn in (put_keys_py, index_c.put_keys):
        f = _full_file()
        f.index_count, f.begin_timestamp = 4, begin
        for at in range(3):  # every slot
            SLOT.pack_into(f.mf.mm, HEADER_SIZE + at * SLOT_SIZE, slot)
        assert fn(f, 0, "u", None, 9, ts, 0) == -1
        entry = ENTRY.unpack_from(f.mf.mm, HEADER_SIZE + 3 * SLOT_SIZE + 4 * ENTRY_SIZE)
        assert entry[1:] == (9, want_diff, want_prev), case
        assert f.hash_slot_count == 3 + (want_prev == 0), case
        states.append(f.state())
    assert states[0] == states[1], case


def test_a_key_hashing_to_integer_min_value_gets_hash_0() -> None:
    prefix = _min_value_prefix("a")
    assert per_key(prefix, "a") == 0
    for fn in (put_keys_py, index_c.put_keys):
        f = _full_file()
        assert fn(f, prefix, None, "a", 9, BASE_TS, 0) == -1
        assert ENTRY.unpack_from(f.mf.mm, HEADER_SIZE + 3 * SLOT_SIZE + ENTRY_SIZE)[0] == 0
        assert SLOT.unpack_from(f.mf.mm, HEADER_SIZE)[0] == 1  # slot 0 % 3


def _full_file(slot_num: int = 3, index_num: int = 6, mapped: int | None = None) -> _File:
    size = index_file_size(slot_num, index_num)
    return _File(
        slot_num,
        index_num,
        1,
        size if mapped is None else mapped,
        bytes(size),
        b"\x01",
        size,
        BASE_TS,
        frozenset(),
    )


@pytest.mark.parametrize("fn", [put_keys_py, "compiled"])
def test_bounds_violations_raise_the_same_error(fn: Any) -> None:
    put = index_c.put_keys if fn == "compiled" else fn
    size = index_file_size(3, 6)
    entries = HEADER_SIZE + 3 * SLOT_SIZE
    # a mapping that ends inside the slot table: struct.error, nothing written
    f = _full_file(mapped=HEADER_SIZE + 2)
    with pytest.raises(struct.error):
        put(f, 0, "u", None, 1, BASE_TS, 0)
    assert f.index_count == 1 and bytes(f.mf.mm) == bytes(HEADER_SIZE + 2)
    # a mapping one byte short of the second entry: the first key written, then struct.error
    f = _full_file(mapped=entries + 3 * ENTRY_SIZE - 1)
    with pytest.raises(struct.error):
        put(f, 0, "u", "k1 k2", 7, BASE_TS, 0)
    assert f.index_count == 2 and f.end_phy_offset == 7 and f.hash_slot_count == 4
    assert ENTRY.unpack_from(f.mf.mm, entries + ENTRY_SIZE)[1] == 7
    assert not any(f.mf.mm[entries + 2 * ENTRY_SIZE :])
    # slot-page flags shorter than the slot table: IndexError, nothing written
    f = _full_file()
    f._slot_pages = bytearray()
    with pytest.raises(IndexError):
        put(f, 0, "u", None, 1, BASE_TS, 0)
    assert f.index_count == 1 and not any(bytes(f.mf.mm))
    # an offset outside int64: struct.error, nothing written
    for phys in (2**63, -(2**63) - 1):
        f = _full_file()
        with pytest.raises(struct.error):
            put(f, 0, "u", "k", phys, BASE_TS, 0)
        assert f.index_count == 1 and not any(bytes(f.mf.mm))
    # a read-only buffer: TypeError, nothing written
    f = _full_file()
    f.mf.mm = bytes(size)
    with pytest.raises(TypeError):
        put(f, 0, "u", None, 1, BASE_TS, 0)
    assert f.index_count == 1


@pytest.mark.parametrize("fn", [put_keys_py, "compiled"])
def test_a_refused_reservation_keeps_the_keys_before_it(fn: Any) -> None:
    put = index_c.put_keys if fn == "compiled" else fn
    f = _full_file()
    f._entries_allocated = HEADER_SIZE + 3 * SLOT_SIZE + 2 * ENTRY_SIZE  # entry 1 only
    f.refuse = frozenset({1})  # the first reservation (the second key's entry) fails
    with pytest.raises(StoreIOError):
        put(f, 0, None, "k0 k1 k2 k3 k4", 5, BASE_TS + 3000, 0)
    assert f.calls == [("entries", HEADER_SIZE + 3 * SLOT_SIZE + 3 * ENTRY_SIZE), ("refused", None)]
    assert f.index_count == 2 and f.hash_slot_count == 4
    assert (f.end_phy_offset, f.end_timestamp) == (5, BASE_TS + 3000)


@pytest.mark.parametrize("fn", [put_keys_py, "compiled"])
def test_a_full_file_stops_at_the_key_that_does_not_fit(fn: Any) -> None:
    put = index_c.put_keys if fn == "compiled" else fn
    f = _full_file(index_num=3)  # entries 1 and 2
    assert put(f, 0, "u", "a b c", 5, BASE_TS, 0) == 2
    assert f.index_count == 3
    assert put(f, 0, "u", "a b c", 5, BASE_TS, 2) == 2  # still full: nothing more
    g = _full_file(index_num=3)
    assert put(g, 0, "u", "a b c", 5, BASE_TS, 2) == -1  # the rest, into the next file
    assert g.index_count == 3
    assert put(g, 0, None, None, 5, BASE_TS, 0) == -1
    assert put(g, 0, "", "   ", 5, BASE_TS, 0) == -1


def test_odd_states_go_to_the_reference() -> None:
    """Counters a file never holds: the twin hands them to the reference, which answers."""
    for change in (
        {"slot_num": 0},  # ZeroDivisionError
        {"index_count": 2**70},
        {"index_count": -3},
        {"begin_timestamp": 2**64},
        {"_slot_pages": b"\x01"},
    ):
        py, c = _full_file(), _full_file()
        for f in (py, c):
            vars(f).update(change)
        ra = _outcome(put_keys_py, py, 5, "u", "a", 9, BASE_TS, 0)
        rb = _outcome(index_c.put_keys, c, 5, "u", "a", 9, BASE_TS, 0)
        assert ra == rb, change
        assert py.state() == c.state(), change
    for args in ((2**32, "u", "a"), (-1, "u", "a"), (5, b"u", "a"), (5, "u", b"a")):
        py, c = _full_file(), _full_file()
        ra = _outcome(put_keys_py, py, *args, 9, BASE_TS, 0)
        rb = _outcome(index_c.put_keys, c, *args, 9, BASE_TS, 0)
        assert ra == rb, args
        assert py.state() == c.state(), args


# ---- whole index files ------------------------------------------------------------------------


def put_keys_per_key(
    f: Any, prefix: int, uniq_key: str | None, keys: str | None, phys: int, ts: int, done: int
) -> int:
    """The record's keys through IndexFile.put_key, one call per key (the per-key path)."""
    for number, key in enumerate(record_keys(uniq_key, keys)):
        if number >= done and not f.put_key(per_key(prefix, key), phys, ts):
            return number
    return -1


IMPLEMENTATIONS = {
    "per_key": put_keys_per_key,
    "python": put_keys_py,
    "compiled": index_c.put_keys,
}

topic_st = st.sampled_from(["TopicA", "T\u00e9pic", "\u4e3b\u9898", "T\U0001f600"])
record_st = st.tuples(
    topic_st,
    opt_key,
    opt_key,
    st.integers(0, 3),  # offset step (0: a re-dispatch, skipped)
    st.integers(-2_000, 3_000_000),  # store time step (ms)
)


@pytest.fixture
def select(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def choose(name: str) -> None:
        monkeypatch.setattr(_index, "put_keys", IMPLEMENTATIONS[name])

    yield choose


def _index_run(root: Path, records: list[Any], slot_num: int, index_num: int) -> dict[str, Any]:
    service = IndexService(
        root, slot_num=slot_num, index_num=index_num, clock=ManualClock(BASE_TS // 1000)
    )
    phys, ts = 0, BASE_TS
    for topic, uniq_key, keys, step, dt in records:
        phys += step * 100
        ts = max(0, ts + dt)
        req = DispatchRequest(topic, 0, phys, 100, 0, ts, 0, keys, uniq_key, 0, 0)
        service.build_index(req, write_header=bool(step % 2))
    service.write_last_header()
    out = {
        f.name: (
            bytes(f.mf.mm),
            f.index_count,
            f.hash_slot_count,
            f.begin_timestamp,
            f.end_timestamp,
            f.begin_phy_offset,
            f.end_phy_offset,
        )
        for f in service.files
    }
    service.shutdown()
    return out


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(record_st, min_size=1, max_size=40), st.integers(1, 9), st.integers(2, 9))
def test_index_files_are_byte_identical(
    tmp_path_factory: pytest.TempPathFactory,
    select: Callable[[str], None],
    records: list[Any],
    slot_num: int,
    index_num: int,
) -> None:
    runs = {}
    for name in IMPLEMENTATIONS:
        select(name)
        runs[name] = _index_run(tmp_path_factory.mktemp(name), records, slot_num, index_num)
    assert runs["python"] == runs["per_key"]
    assert runs["compiled"] == runs["per_key"]


def test_a_stream_rolls_over_many_files_the_same(
    tmp_path: Path, select: Callable[[str], None]
) -> None:
    """A fixed stream with non-ASCII keys and records wider than a file (index_num 3: two
    entries a file), as a check that does not depend on what hypothesis draws."""
    keys = " ".join(f"k\u00e9{i}\U0001f600" for i in range(5))
    records = [("T\u00e9", f"U{i}", keys if i % 3 else None, 1, 1500) for i in range(30)]
    runs = {}
    for name in IMPLEMENTATIONS:
        select(name)
        runs[name] = _index_run(tmp_path / name, records, 5, 3)
    assert len(runs["per_key"]) > 30
    assert runs["python"] == runs["per_key"] == runs["compiled"]


def test_the_index_uses_the_selected_writer() -> None:
    env_on = os.environ.get("ROCKETSTORE_NO_EXTENSIONS")
    assert _index.put_keys is _index_write.put_keys
    assert (_index_write.put_keys is index_c.put_keys) == (not env_on)


def test_the_writer_uses_rocketmqs_index_layout() -> None:
    w = _index_write
    assert (w.HEADER.format, w.HEADER_SIZE, w.SLOT.format, w.ENTRY.format) == (
        ">qqqqii",
        40,
        ">i",
        ">iqii",
    )
    assert (w.INT32_MAX, w.INVALID_INDEX) == (2**31 - 1, 0)
    assert (HEADER_SIZE, SLOT, ENTRY, INT32_MAX) == (w.HEADER_SIZE, w.SLOT, w.ENTRY, w.INT32_MAX)
    assert _index_write.KEY_SEPARATOR == KEY_SEPARATOR == " "


# ---- slot pages reserved in chunks ------------------------------------------------------------


def _counting(f: IndexFile, fail: Callable[[int, int], bool] = lambda lo, hi: False) -> list[Any]:
    calls: list[tuple[int, int]] = []
    real = f.mf.allocate_range

    def allocate_range(start: int, end: int) -> None:
        calls.append((start, end))
        if fail(start, end):
            raise StoreIOError(errno.ENOSPC, "no space left on device")
        real(start, end)

    f.mf.allocate_range = allocate_range  # type: ignore[method-assign]
    return calls


def test_slot_pages_get_their_blocks_in_chunks(tmp_path: Path) -> None:
    slot_num = 300_000  # 293 slot pages, 5 chunks
    f = IndexFile(tmp_path / "0", slot_num, 40_000)
    try:
        calls = _counting(f)
        hasher = KeyHasher()
        for i in range(20_000):
            assert f.put_key(hasher("T", f"key{i}"), i, BASE_TS)
        pages = len(f._slot_pages)
        assert all(f._slot_pages)
        slot_calls = [c for c in calls if c[0] < HEADER_SIZE + slot_num * SLOT_SIZE]
        assert len(slot_calls) == -(-pages // SLOT_PAGE_CHUNK) - 1  # chunk 0 came with the header
        chunk = SLOT_PAGE_CHUNK * OS_PAGE_SIZE
        assert all(lo % chunk == 0 and hi - lo <= chunk for lo, hi in slot_calls)
    finally:
        f.close()


def test_a_chunk_the_disk_cannot_hold_falls_back_to_the_page(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "0", 300_000, 100)
    try:
        page = 200
        calls = _counting(f, fail=lambda lo, hi: hi - lo > OS_PAGE_SIZE)
        f.allocate_slot_pages((page,))
        assert calls[-1] == (page * OS_PAGE_SIZE, (page + 1) * OS_PAGE_SIZE)
        assert f._slot_pages[page] and sum(f._slot_pages) == SLOT_PAGE_CHUNK + 1
        # neither fits: StoreIOError, no flag set, nothing written
        _counting(f, fail=lambda lo, hi: True)
        before = bytes(f.mf.mm[: HEADER_SIZE + 300_000 * SLOT_SIZE])
        hasher = KeyHasher()
        key = next(
            k
            for k in (f"k{i}" for i in range(10_000))
            if not f._slot_pages[(HEADER_SIZE + hasher("T", k) % 300_000 * SLOT_SIZE) // 4096]
        )
        for put in (put_keys_py, index_c.put_keys):
            with pytest.raises(StoreIOError):
                put(f, hasher.prefix("T"), None, key, 1, BASE_TS, 0)
            assert f.index_count == 1
        assert sum(f._slot_pages) == SLOT_PAGE_CHUNK + 1
        assert bytes(f.mf.mm[: HEADER_SIZE + 300_000 * SLOT_SIZE]) == before
    finally:
        f.close()


def test_a_reopened_file_with_chunks_reserved_is_written_and_read(tmp_path: Path) -> None:
    """Pages reserved with their chunk but never written read as empty slots after a restart,
    whether the file system reports them as data or as holes."""
    keys = [f"key{i}" for i in range(300)]
    service = IndexService(tmp_path, slot_num=300_000, index_num=1000, clock=ManualClock(1))
    for i, key in enumerate(keys[:150]):
        service.build_index(DispatchRequest("T", 0, i + 1, 1, 0, BASE_TS, i, key, None, 0, 0))
    service.shutdown()
    again = IndexService(tmp_path, slot_num=300_000, index_num=1000, clock=ManualClock(1))
    again.load()
    for i, key in enumerate(keys[150:], 150):
        again.build_index(DispatchRequest("T", 0, i + 1, 1, 0, BASE_TS, i, key, None, 0, 0))
    try:
        for i, key in enumerate(keys):
            assert again.query("T", key, 4, 0, 2**62)[0] == [i + 1], key
    finally:
        again.shutdown()
