"""The plain put in one call (``_put_core``) compiled (``_put_core_c``) against its pure-Python
reference: stores that take the same stream of puts with either write byte-identical commit
logs, consume queues and indexes and answer the same (plain puts, puts with properties that
the general path takes, batches, records that wrap at a file's end, fields out of their range),
with dispatch in the put path and on the dispatch thread; the queue offset table behaves as
the same mapping; and the core refuses, writing nothing, a record its buffer cannot hold."""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import ManualClock, Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store.log import _put_core
from rocketstore.store.log._put_core import PutCorePy, QueueOffsetTablePy
from rocketstore.store.log._record import DispatchRequest
from support.waits import wait_dispatched, wait_until

core_c = pytest.importorskip(
    "rocketstore.store.log._put_core_c", reason="the compiled core is not built"
)

FILE_SIZE = 16 * 1024  # small: records wrap at a file's end every few puts


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return type(exc).__name__, None


def _use(store: MessageStore, compiled: bool) -> Any:
    """Give ``store``'s commit log the compiled or the reference core (before load)."""
    cl = store.commit_log
    table_cls, core_cls = (
        (core_c.QueueOffsetTable, core_c.PutCore) if compiled else (QueueOffsetTablePy, PutCorePy)
    )
    table = table_cls()
    old = cl._core
    core = core_cls(
        table,
        cl._topics,
        cl.store_host,
        cl.file_size,
        cl.max_message_size,
        old.crc32,
        old.now_ns,
        old.busy_timeout_ms,
    )
    core.refused = old.refused
    cl.topic_queue_table = table
    cl._core = core
    cl.wire_dispatch(None)
    return core


# ---- whole stores -----------------------------------------------------------------------------

wide32 = st.one_of(st.integers(0, 5), st.sampled_from([-1, 2**31 - 1, 2**31, -(2**31) - 1]))
wide64 = st.one_of(st.just(0), st.integers(1, 2**41), st.sampled_from([2**63 - 1, 2**63, -1]))
plain_st = st.fixed_dictionaries(
    {
        "kind": st.just("plain"),
        "queue": st.one_of(st.integers(0, 3), st.sampled_from([5000, -1])),
        "body": st.integers(0, 3000),
        "flag": st.one_of(st.just(0), wide32),
        "sys_flag": st.sampled_from([0, 0, 0, 1, 2, 4, 8]),  # 4 / 8: transaction types
        "born": st.one_of(st.just(0), wide64),
        "reconsume": st.one_of(st.just(0), wide32),
        "prepared": st.one_of(st.just(0), wide64),
        "topic": st.sampled_from(["TopicA", "TopicB", "T\u00e9"]),
        "bytearray": st.booleans(),
    }
)
props_st = st.fixed_dictionaries(
    {
        "kind": st.just("props"),
        "queue": st.integers(0, 3),
        "body": st.integers(0, 2000),
        "tags": st.one_of(st.none(), st.sampled_from(["a", "TagA", "\u00e9t\u00e9"])),
        "keys": st.one_of(st.none(), st.sampled_from(["k", "k1 k2"])),
        "topic": st.sampled_from(["TopicA", "TopicC"]),
    }
)
batch_st = st.fixed_dictionaries(
    {
        "kind": st.just("batch"),
        "queue": st.integers(0, 3),
        "bodies": st.lists(st.integers(0, 900), min_size=1, max_size=6),
        "topic": st.sampled_from(["TopicA", "TopicB"]),
    }
)
step_st = st.one_of(plain_st, plain_st, plain_st, props_st, batch_st)


def _message(step: dict[str, Any], n: int) -> Message:
    body = bytes([n % 251]) * step["body"]
    if step["kind"] == "props":
        return Message(
            step["topic"], body, step["queue"], tags=step["tags"], keys=step["keys"]
        )  # fmt: skip
    return Message(
        step["topic"],
        bytearray(body) if step["bytearray"] else body,
        step["queue"],
        flag=step["flag"],
        sys_flag=step["sys_flag"],
        born_timestamp=step["born"],
        reconsume_times=step["reconsume"],
        prepared_transaction_offset=step["prepared"],
    )


def _files(root: Path) -> dict[str, bytes]:
    """The store's files by name; index files by their order (a file's name is the time the
    dispatcher made it, which on the dispatch thread depends on its timing)."""
    files = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for dirpath, _dirs, names in os.walk(root / sub):
            for i, name in enumerate(sorted(names)):
                p = Path(dirpath) / name
                key = f"index/{i}" if sub == "index" else str(p.relative_to(root))
                files[key] = p.read_bytes()
    return files


def _run(root: Path, steps: list[dict[str, Any]], compiled: bool, inline: bool) -> Any:
    config = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=20 * 16,
        max_hash_slot_num=7,
        max_index_num=40,
        flush_interval_commit_log=10,
        dispatch_in_put_path=inline,
    )
    clock = ManualClock(1_795_000_000_000)
    answers: list[tuple[str, Any]] = []
    store = MessageStore(config, clock=clock)
    core = _use(store, compiled)
    store.load()
    store.start()
    try:
        for n, step in enumerate(steps):
            clock.advance(0.003)
            if step["kind"] == "batch":
                msgs = [
                    Message(step["topic"], bytes([(n + i) % 251]) * size, step["queue"])
                    for i, size in enumerate(step["bodies"])
                ]
                answers.append(_outcome(store.put_messages, msgs))
            else:
                answers.append(_outcome(store.put_message, _message(step, n)))
        wait_dispatched(store)
        cl = store.commit_log
        state = (
            sorted(cl.topic_queue_table.items()),
            cl.topic_put_counts,
            cl.topic_put_bytes,
            cl.max_offset,
            core.served,
        )
    finally:
        store.shutdown()
    return answers, state, _files(root)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(step_st, min_size=1, max_size=40), st.booleans())
def test_stores_write_the_same_files_and_answers(
    tmp_path_factory: pytest.TempPathFactory, steps: list[dict[str, Any]], inline: bool
) -> None:
    py = _run(tmp_path_factory.mktemp("py"), steps, False, inline)
    c = _run(tmp_path_factory.mktemp("c"), steps, True, inline)
    assert py[0] == c[0]  # the answers: status, offsets, sizes, times, or the same exception
    assert py[1] == c[1]  # queue offsets, counters, the log's end, puts the core took
    assert py[2].keys() == c[2].keys()
    for name in py[2]:
        assert py[2][name] == c[2][name], name


def test_plain_puts_take_the_core_and_wrap_at_a_file_end(tmp_path: Path) -> None:
    plain = {"kind": "plain", "flag": 0, "sys_flag": 0, "born": 0, "reconsume": 0}
    plain |= {"prepared": 0, "topic": "TopicA", "bytearray": False}
    steps = [{**plain, "queue": n % 3, "body": 1000 + 37 * n} for n in range(40)]
    for inline in (True, False):
        py = _run(tmp_path / f"py{inline}", steps, False, inline)
        c = _run(tmp_path / f"c{inline}", steps, True, inline)
        assert py[0] == c[0] and py[1] == c[1] and py[2] == c[2]
        commit_logs = [k for k in c[2] if k.startswith("commitlog")]
        assert len(commit_logs) >= 3  # rolled over twice at least
        assert all(kind == "ok" and r.status.name == "PUT_OK" for kind, r in c[0])
        served = c[1][-1]
        # the first put of a topic and the first of each new file go the general way
        assert len(commit_logs) <= 40 - served <= 2 * len(commit_logs) + 1


class _LateLock:
    """The put lock, taken by the put only once shutdown has begun: the put passed the
    core's first refusal check before."""

    def __init__(self, lock: threading.Lock, cl: Any) -> None:
        self.lock = lock
        self.cl = cl
        self.arrived = threading.Event()

    def acquire(self) -> bool:
        self.arrived.set()
        assert wait_until(lambda: self.cl.refusal() is not None)
        return self.lock.acquire()

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> _LateLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("compiled", [False, True])
def test_a_plain_put_that_reaches_the_lock_after_shutdown_began_is_refused(
    tmp_path: Path, compiled: bool
) -> None:
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=FILE_SIZE)
    store = MessageStore(config)
    core = _use(store, compiled)
    store.load()
    store.start()
    ok = PutMessageStatus.PUT_OK
    assert store.put_message(Message("Late", b"first", 0)).status is ok  # the general path
    assert store.put_message(Message("Late", b"before", 0)).status is ok
    assert core.served == 1
    end_before = store.max_phy_offset
    cl = store.commit_log
    late = _LateLock(cl.put_lock, cl)
    reput = store.reput if cl.inline_plain is not None else None
    core.wire(late, cl.queue, reput, cl.inline_plain, cl.dispatch_handoff, cl.on_append)
    out: list[object] = []

    def put() -> None:
        try:
            out.append(store.put_message(Message("Late", b"after", 0)).status)
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=put)
    t.start()
    try:
        assert late.arrived.wait(10)
        store.shutdown()
    finally:
        t.join(10)
    assert out == [PutMessageStatus.SERVICE_NOT_AVAILABLE]
    assert core.served == 1
    with MessageStore(config) as again:
        assert again.max_phy_offset == end_before  # nothing appended after shutdown began


# ---- the queue offset table -------------------------------------------------------------------

key_st = st.tuples(
    st.sampled_from(["A", "B", "\u00e9"]),
    st.one_of(st.integers(0, 20), st.sampled_from([-1, 4095, 4096, 2**40])),
)
value_st = st.one_of(st.integers(0, 2**40), st.sampled_from([2**63 - 1, 2**63, -5]))
op_st = st.one_of(
    st.tuples(st.just("set"), key_st, value_st),
    st.tuples(st.just("get"), key_st),
    st.tuples(st.just("getitem"), key_st),
    st.tuples(st.just("pop"), key_st),
    st.tuples(st.just("del"), key_st),
    st.tuples(st.just("in"), key_st),
    st.tuples(st.just("advance"), key_st, st.integers(0, 2**40), st.integers(0, 5000)),
    st.tuples(st.just("count"), key_st, st.integers(0, 9), st.integers(0, 5000)),
    st.tuples(st.just("reset"), st.dictionaries(key_st, value_st, max_size=4)),
)


def _apply(table: Any, op: tuple[Any, ...]) -> tuple[str, Any]:
    name = op[0]
    if name == "set":
        return _outcome(table.__setitem__, op[1], op[2])
    if name == "get":
        return _outcome(table.get, op[1], -7)
    if name == "getitem":
        return _outcome(table.__getitem__, op[1])
    if name == "pop":
        return _outcome(table.pop, op[1], None)
    if name == "del":
        return _outcome(table.__delitem__, op[1])
    if name == "in":
        return _outcome(table.__contains__, op[1])
    if name == "advance":
        return _outcome(table.advance, op[1][0], op[1][1], op[2], op[3])
    if name == "count":
        return _outcome(table.count, op[1][0], op[2], op[3])
    return _outcome(table.reset, op[1])


@settings(max_examples=300, deadline=None)
@given(st.lists(op_st, max_size=40))
def test_the_offset_table_is_the_same_mapping(ops: list[tuple[Any, ...]]) -> None:
    py, c = QueueOffsetTablePy(), core_c.QueueOffsetTable()
    for op in ops:
        assert _apply(py, op) == _apply(c, op), op
        assert sorted(py.items()) == sorted(c.items())
        assert len(py) == len(c) and sorted(py) == sorted(c)
        assert py == dict(c.items()) and c == dict(py.items())
        assert py.put_counts() == c.put_counts() and py.put_bytes() == c.put_bytes()
        assert dict(py.items()) == dict(c)


# ---- the core alone: bounds ---------------------------------------------------------------------


class _File:
    def __init__(self, size: int, allocated: int, wrote: int) -> None:
        self.write_target = bytearray(size)
        self.allocated = allocated
        self.wrote_position = wrote
        self.from_offset = 1 << 20
        self.store_timestamp = 0


class _Files:
    def __init__(self, files: list[_File]) -> None:
        self.files = files


def _core(cls: Any, table_cls: Any, files: list[_File], handoff: deque[Any]) -> Any:
    import threading
    from zlib import crc32

    tails = {"T": b"\x01T\x00\x00"}
    host = b"\x7f\x00\x00\x01\x00\x00\x27\x9b"
    now = 1_795_000_000_123_456_789  # the same store time whenever the core reads it
    core = cls(table_cls(), tails, host, 1 << 16, 4096, crc32, lambda: now, 1000)
    core.wire(threading.Lock(), _Files(files), None, None, handoff, None)
    core.refused = False
    return core


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 600),  # the buffer the file maps
    st.integers(0, 700),  # what the file says it has allocated
    st.integers(0, 300),  # its write position
    st.lists(st.integers(0, 200), min_size=1, max_size=4),  # bodies
    st.integers(0, 5000),  # queue id
)
def test_the_core_writes_only_what_its_buffer_holds(
    size: int, allocated: int, wrote: int, bodies: list[int], queue_id: int
) -> None:
    runs = []
    for cls, table_cls in ((PutCorePy, QueueOffsetTablePy), (core_c.PutCore, core_c.QueueOffsetTable)):  # fmt: skip
        f = _File(size, allocated, wrote)
        handoff: deque[Any] = deque()
        core = _core(cls, table_cls, [f], handoff)
        outcomes = []
        for i, blen in enumerate(bodies):
            before = (bytes(f.write_target), f.wrote_position, core.table.items())
            got = _outcome(core.put, Message("T", bytes([i + 1]) * blen, queue_id))
            if got[0] != "ok" or got[1] is None:  # refused or raised: nothing moved
                assert before == (bytes(f.write_target), f.wrote_position, core.table.items())
                got = ("none", None)  # the general path takes it (and raises what it raises)
            outcomes.append(got)
        runs.append((outcomes, bytes(f.write_target), f.wrote_position, list(handoff),
                     sorted(core.table.items()), core.table.put_bytes(), core.served))  # fmt: skip
    assert runs[0] == runs[1]
    assert all(isinstance(r, DispatchRequest) for r in runs[0][3])


def test_the_core_declines_what_is_not_plain() -> None:
    for cls, table_cls in ((PutCorePy, QueueOffsetTablePy), (core_c.PutCore, core_c.QueueOffsetTable)):  # fmt: skip
        f = _File(1 << 16, 1 << 16, 0)
        core = _core(cls, table_cls, [f], deque())
        declined = [
            Message("T", b"x", 0, tags="a"),  # properties
            Message("T", b"x", 0, born_host="10.0.0.1:5"),
            Message("U", b"x", 0),  # a topic not put before
            Message("T", bytearray(b"x"), 0),
            Message("T", b"x" * 4097, 0),  # longer than max_message_size
            Message("T", b"x", -1),
            Message("T", b"x", 0, sys_flag=4),  # a prepared transaction
        ]
        for msg in declined:
            assert core.put(msg) is None, msg
        out_of_range = [
            Message("T", b"x", 2**31),
            Message("T", b"x", 0, flag=2**31),
            Message("T", b"x", 0, born_timestamp=2**63),
            Message("T", b"x", 0, prepared_transaction_offset=-(2**63) - 1),
        ]
        for msg in out_of_range:  # the compiled core declines, the reference's writer raises
            expected = ("ok", None) if cls is core_c.PutCore else ("error", None)
            assert _outcome(core.put, msg) == expected, msg
            # (the pure-Python writer, struct's pack_into as the general path uses it, may
            # have packed the head's first fields past the write position: nothing moved)
            assert f.wrote_position == 0 and not core.table.items()
            if cls is core_c.PutCore:
                assert not any(f.write_target)
        f.write_target[:] = bytes(len(f.write_target))
        assert not any(f.write_target) and f.wrote_position == 0 and core.served == 0
        core.refused = True
        assert core.put(Message("T", b"x", 0)) is None
        core.refused = False
        r = core.put(Message("T", b"x", 0))
        assert r.status.name == "PUT_OK" and r.wrote_offset == f.from_offset and core.served == 1


def test_the_commit_log_uses_the_selected_core() -> None:
    env_on = os.environ.get("ROCKETSTORE_NO_EXTENSIONS")
    assert (_put_core.PutCore is core_c.PutCore) == (not env_on)
    assert (_put_core.QueueOffsetTable is core_c.QueueOffsetTable) == (not env_on)
