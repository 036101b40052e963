"""Dispatch's compiled unit writers (``_unit_write_c``) against their pure-Python reference
(``_unit_write``): the same outcome (result or exception type) and the same bytes for random
and bad input, and byte-identical consume-queue and index files when a store takes the same
random stream of messages (single puts and batches, tags and keys at their edges, a damaged
record at the end of the commit log before a restart) with either."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import ManualClock, Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store.queue import _consume_queue, _reput, _unit_write
from rocketstore.store.queue._unit_write import UNIT, UNIT_SIZE, pack_units_py, put_next_unit_py
from support.waits import wait_dispatched

unit_c = pytest.importorskip(
    "rocketstore.store.queue._unit_write_c", reason="the compiled core is not built"
)

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
wide32 = st.one_of(int32, int32, int32, st.sampled_from([2**31, -(2**31) - 1, 2**40]))
wide64 = st.one_of(int64, int64, int64, st.sampled_from([2**63, -(2**63) - 1, 2**70]))


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return type(exc).__name__, None


# ---- pack_units -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    st.lists(st.tuples(wide64, wide32, wide64), max_size=12),
    st.integers(0, 300),
)
def test_pack_units_matches_the_reference(
    data: st.DataObject, units: list[tuple[int, int, int]], size: int
) -> None:
    offsets = [u[0] for u in units]
    sizes = [u[1] for u in units]
    codes = [u[2] for u in units]
    if data.draw(st.booleans()):  # sometimes sequences of different lengths
        cut = data.draw(st.sampled_from(["offsets", "sizes", "codes"]))
        {"offsets": offsets, "sizes": sizes, "codes": codes}[cut].append(0)
    pos = data.draw(st.one_of(st.integers(0, size), st.integers(-30, size + 30)))
    fill = bytes(range(256)) * 2
    a, b = bytearray(fill[:size]), bytearray(fill[:size])
    ra = _outcome(pack_units_py, a, pos, offsets, sizes, codes)
    rb = _outcome(unit_c.pack_units, b, pos, offsets, sizes, codes)
    assert ra == rb
    assert a == b  # the same bytes written, and none on a refusal
    if ra[0] == "ok":
        for i, unit in enumerate(units):
            assert UNIT.unpack_from(a, pos + i * UNIT_SIZE) == unit
    else:
        assert a == bytearray(fill[:size])


def test_pack_units_refuses_what_does_not_fit() -> None:
    for fn in (pack_units_py, unit_c.pack_units):
        buf = bytearray(40)
        with pytest.raises(ValueError):
            fn(buf, 21, [1, 2], [3, 4], [5, 6])  # 40 bytes from 21 in 40
        with pytest.raises(ValueError):
            fn(buf, -1, [1], [3], [5])
        with pytest.raises(ValueError):
            fn(buf, 0, [1, 2], [3], [5, 6])
        with pytest.raises(TypeError):
            fn(b"\x00" * 40, 0, [1], [3], [5])  # read-only
        assert buf == bytearray(40)
        assert fn(buf, 20, [1], [3], [5]) == 40


# ---- put_next_unit ----------------------------------------------------------------------------


class _File:
    def __init__(
        self, size: int, from_offset: int, wrote: int, allocated: int, writer_held: bool
    ) -> None:
        self.mm = mmap.mmap(-1, size)
        self.from_offset = from_offset
        self.wrote_position = wrote
        self.allocated = allocated
        self.writer_held = writer_held  # not held: may be unmapped (MappingLRU), not written


class _Files:
    def __init__(self, files: list[_File]) -> None:
        self.files = files


class _Queue:
    def __init__(self, files: list[_File], file_size: int, max_physic_offset: int) -> None:
        self.queue = _Files(files)
        self.file_size = file_size
        self.max_physic_offset = max_physic_offset


def _queue_state(q: _Queue) -> tuple[Any, ...]:
    return (
        q.max_physic_offset,
        [(f.wrote_position, bytes(f.mm)) for f in q.queue.files],
    )


@settings(max_examples=400, deadline=None)
@given(
    st.data(),
    st.integers(0, 6),  # units in the file
    st.integers(0, 8),  # file size in units
    st.booleans(),  # a file at all
    st.one_of(st.integers(0, 2**40), wide64),
    st.one_of(st.integers(1, 2**20), wide32),
    wide64,
)
def test_put_next_unit_matches_the_reference(
    data: st.DataObject,
    wrote_units: int,
    file_units: int,
    has_file: bool,
    phys: int,
    size: int,
    code: int,
) -> None:
    file_size = file_units * UNIT_SIZE
    wrote = min(wrote_units, file_units) * UNIT_SIZE
    from_offset = data.draw(st.sampled_from([0, file_size, 3 * file_size]))
    allocated = data.draw(st.one_of(st.just(file_size), st.integers(0, file_size)))
    mapped = data.draw(st.sampled_from([file_size, file_size, max(file_size - UNIT_SIZE, 0)]))
    max_phys = data.draw(st.one_of(st.just(-1), st.just(-1), st.integers(-10, 2**40)))
    offset = data.draw(
        st.one_of(st.just((from_offset + wrote) // UNIT_SIZE), st.integers(-2, 2**20), st.just(0))
    )
    writer_held = data.draw(st.sampled_from([True, True, False]))
    queues = []
    for _ in range(2):
        files = (
            [_File(max(mapped, 1), from_offset, wrote, allocated, writer_held)] if has_file else []
        )
        queues.append(_Queue(files, file_size, max_phys))
    ra = _outcome(put_next_unit_py, queues[0], phys, size, code, offset)
    rb = _outcome(unit_c.put_next_unit, queues[1], phys, size, code, offset)
    assert ra == rb
    assert _queue_state(queues[0]) == _queue_state(queues[1])


# ---- whole stores -----------------------------------------------------------------------------

tag_st = st.one_of(
    st.none(),
    st.sampled_from(["", "a", "TagA", "tag with spaces", "\u00e9t\u00e9", "\U0001f600", "x" * 300]),
    st.text(max_size=20).filter(lambda t: "\x01" not in t and "\x02" not in t),
)
key_st = st.one_of(
    st.none(),
    st.sampled_from(["k", "k1 k2", " ", "key" * 60, "\u00fcml\u00e4ut"]),
    st.lists(st.text("abcXYZ09 _-", min_size=1, max_size=12), min_size=1, max_size=4),
)
msg_st = st.tuples(st.integers(0, 2), tag_st, key_st, st.integers(0, 600), st.booleans())
step_st = st.one_of(
    msg_st.map(lambda m: ("one", [m])),
    st.lists(msg_st, min_size=1, max_size=9).map(lambda ms: ("batch", ms)),
)


def _message(topic: str, queue_id: int, spec: tuple[Any, ...], n: int) -> Message:
    _q, tags, keys, body_len, uniq = spec
    props = {"UNIQ_KEY": f"UNIQ{n:08d}"} if uniq else None
    return Message(
        topic, bytes([n % 251]) * body_len, queue_id, tags=tags or None, keys=keys,
        properties=props,
    )  # fmt: skip


def _run(root: Path, steps: list[tuple[str, list[Any]]], damage_at: int) -> dict[str, bytes]:
    config = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=UNIT_SIZE * 16,
        max_hash_slot_num=7,
        max_index_num=40,
        flush_interval_commit_log=10,
    )
    clock = ManualClock(1_795_000_000_000)
    n = 0
    for phase, part in enumerate((steps[:damage_at], steps[damage_at:])):
        store = MessageStore(config, clock=clock)
        store.load()
        store.start()
        try:
            for kind, specs in part:
                clock.advance(0.003)
                if kind == "one":
                    spec = specs[0]
                    r = store.put_message(_message("TopicA", spec[0], spec, n))
                    n += 1
                else:
                    q = specs[0][0]
                    batch = []
                    for spec in specs:
                        batch.append(_message("TopicB", q, (q, *spec[1:4], False), n))
                        n += 1
                    r = store.put_messages(batch)
                assert r.status is PutMessageStatus.PUT_OK
            wait_dispatched(store)
        finally:
            store.shutdown()
        log_dir = root / "commitlog"
        if phase == 0 and log_dir.is_dir() and any(log_dir.iterdir()):
            # a damaged record after the last one: recovery cuts it off
            last = sorted(log_dir.iterdir())[-1]
            end = store.commit_log.max_offset % config.mapped_file_size_commit_log
            with open(last, "r+b") as f:
                f.seek(end)
                f.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"\xee" * 40)
            (root / "abort").touch()  # as after a crash: the abnormal recovery
    files = {}
    for sub in ("consumequeue", "index"):
        for dirpath, _dirs, names in os.walk(root / sub):
            for name in names:
                p = Path(dirpath) / name
                files[str(p.relative_to(root))] = p.read_bytes()
    return files


@pytest.fixture
def compiled_or_not(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def select(compiled: bool) -> None:
        src = unit_c if compiled else _unit_write
        suffix = "" if compiled else "_py"
        for mod in (_consume_queue, _reput):
            monkeypatch.setattr(mod, "put_next_unit", getattr(src, "put_next_unit" + suffix))
        monkeypatch.setattr(_consume_queue, "pack_units", getattr(src, "pack_units" + suffix))

    yield select


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(step_st, min_size=1, max_size=40), st.data())
def test_stores_write_the_same_queue_and_index_files(
    tmp_path_factory: pytest.TempPathFactory,
    compiled_or_not: Any,
    steps: list[tuple[str, list[Any]]],
    data: st.DataObject,
) -> None:
    damage_at = data.draw(st.integers(0, len(steps)))
    outcomes = []
    for compiled in (False, True):
        compiled_or_not(compiled)
        outcomes.append(_run(tmp_path_factory.mktemp("store"), steps, damage_at))
    py, c = outcomes
    assert py.keys() == c.keys()
    assert any(k.startswith("consumequeue") for k in py)
    for name in py:
        assert py[name] == c[name], name


def test_the_store_uses_the_selected_writer() -> None:
    env_on = os.environ.get("ROCKETSTORE_NO_EXTENSIONS")
    compiled = _unit_write.put_next_unit is unit_c.put_next_unit
    assert compiled == (not env_on)
    assert _consume_queue.put_next_unit is _unit_write.put_next_unit
    assert _reput.put_next_unit is _unit_write.put_next_unit
    assert _consume_queue.pack_units is _unit_write.pack_units
    assert (_unit_write.pack_units is unit_c.pack_units) == (not env_on)
