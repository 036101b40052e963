"""Raw reads for pull responses: records exactly as stored, the statuses of get_message, tag
filtering by hash code, and damaged records never handed out."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rocketstore import CorruptRecordError, GetMessageStatus, Message, MessageStore
from rocketstore.store._java_hash import java_string_hash
from rocketstore.store.log._record import INT32, OFFSET_BODY_LENGTH_V4, decode_stored
from rocketstore.store.read._raw_read import get_raw
from support.waits import wait_dispatched

S = GetMessageStatus


def _records(data: bytes) -> list[tuple[int, bytes]]:
    """(queue offset, body) of each record in a raw pull body."""
    out = []
    pos = 0
    while pos < len(data):
        size = INT32.unpack_from(data, pos)[0]
        msg = decode_stored(data, pos, size)
        out.append((msg.queue_offset, msg.body))
        pos += size
    return out


@pytest.fixture
def filled(open_store: Callable[..., MessageStore]) -> MessageStore:
    store = open_store()
    for i in range(200):
        tags = "A" if i % 3 else "B"
        store.put_message(Message("T", f"m{i}".encode(), queue_id=i % 2, tags=tags))
        store.put_message(Message("Other", b"o" * (i % 7), queue_id=0))
    wait_dispatched(store)
    return store


def test_raw_records_are_the_stored_bytes(filled: MessageStore) -> None:
    r = get_raw(filled.reader, "T", 0, 0, 32)
    assert r.status is S.FOUND and r.msg_count == 32 and r.next_begin_offset == 32
    assert (r.min_offset, r.max_offset) == (0, 100)
    got = _records(r.data)
    assert got == [(i, f"m{2 * i}".encode()) for i in range(32)]
    decoded = filled.get_message("g", "T", 0, 0, 32)
    stored = b""
    for m in decoded.messages:
        mf = filled.commit_log.queue.find_mapped_file_by_offset(m.commitlog_offset)
        assert mf is not None
        pos = m.commitlog_offset - mf.from_offset
        stored += mf.mm[pos : pos + INT32.unpack_from(mf.mm, pos)[0]]
    assert stored == r.data


def test_reads_to_the_end_and_statuses(filled: MessageStore) -> None:
    offset, seen = 0, 0
    while True:
        r = get_raw(filled.reader, "T", 1, offset, 32)
        if r.status is not S.FOUND:
            break
        seen += r.msg_count
        offset = r.next_begin_offset
    assert seen == 100 and r.status is S.OFFSET_OVERFLOW_ONE and r.next_begin_offset == 100
    assert get_raw(filled.reader, "T", 1, 500, 32).status is S.OFFSET_OVERFLOW_BADLY
    assert get_raw(filled.reader, "T", 7, 0, 32).status in (
        S.NO_MATCHED_LOGIC_QUEUE,
        S.NO_MESSAGE_IN_QUEUE,
    )
    with pytest.raises(ValueError):
        get_raw(filled.reader, "T", 0, 0, 0)


def test_tag_filter_by_hash_code(filled: MessageStore) -> None:
    r = get_raw(filled.reader, "T", 0, 0, 32, frozenset({java_string_hash("B")}))
    assert r.status is S.FOUND
    bodies = [b for _, b in _records(r.data)]
    assert bodies == [f"m{i}".encode() for i in range(0, 200, 2) if i % 3 == 0][:32]
    none = get_raw(filled.reader, "T", 0, 0, 32, frozenset({java_string_hash("nothing")}))
    assert none.status is S.NO_MATCHED_MESSAGE and none.msg_count == 0
    assert none.next_begin_offset == 100  # every unit looked at


def test_damaged_record_ends_the_batch_or_raises(filled: MessageStore) -> None:
    msgs = filled.get_message("g", "T", 0, 0, 32).messages
    victim = msgs[5]
    mf = filled.commit_log.queue.find_mapped_file_by_offset(victim.commitlog_offset)
    assert mf is not None
    pos = victim.commitlog_offset - mf.from_offset + OFFSET_BODY_LENGTH_V4 + 4
    mf.mm[pos] ^= 0xFF  # flip a body byte: the CRC no longer matches
    r = get_raw(filled.reader, "T", 0, 0, 32)
    assert r.msg_count == 5 and r.next_begin_offset == 5
    with pytest.raises(CorruptRecordError):
        get_raw(filled.reader, "T", 0, 5, 32)
    assert get_raw(filled.reader, "T", 0, 6, 32).msg_count == 32
