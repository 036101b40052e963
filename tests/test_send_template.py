"""SendTemplate: SEND_MESSAGE_V2 headers filled in from a template are the reference encoder's
bytes (``send_request`` → ``RemotingCommand.encode``) for any group, topic, queue, tags, delay
level, opaque, born time and id; with orjson and with the hand-written encoder; names holding a
mark get no template. And plain_properties is message_properties' text for a plain message."""

from __future__ import annotations

import random
import time

import pytest

from rocketstore.client._producer import (
    _BORN_MARK,
    _OPAQUE_MARK,
    _UNIQ_MARK,
    UNIQ_IDS,
    SendTemplate,
    message_properties,
    plain_properties,
    send_request,
)
from rocketstore.client._route import MessageQueue
from rocketstore.remoting import _command as command

NAMES = [
    "T",
    "BenchBroker",
    "%RETRY%group",
    "t\u00e9\u4e2d\U0001f600",
    'q"uo\\te',
    "ctl\x01\x02\x1f\x7f",
    "sl/ash<>&'",
]
TAGS: list[str | None] = [None, "", "TagA", "a||b", 'x"y\\z', "\u00fc\x03", "\ud800lone"]


def reference(
    group: str,
    topic: str,
    queue_id: int,
    tags: str | None,
    delay: int,
    opaque: int,
    born: int,
    uniq: str,
    body: bytes,
) -> bytes:
    props = message_properties(tags, None, None, delay)
    props["UNIQ_KEY"] = uniq
    cmd = send_request(group, topic, MessageQueue(topic, "b", queue_id), props, body, batch=False)
    cmd.opaque = opaque
    cmd.ext_fields["g"] = str(born)
    return cmd.encode()


def templated(
    group: str,
    topic: str,
    queue_id: int,
    tags: str | None,
    delay: int,
    opaque: int,
    born: int,
    uniq: str,
    body: bytes,
) -> bytes:
    template = SendTemplate.make(group, topic, queue_id, tags, delay)
    assert template is not None
    return template.head(opaque, born, uniq, len(body)) + body


@pytest.mark.parametrize("orjson", [True, False])
def test_templated_frames_are_the_reference_frames(
    orjson: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not orjson:
        monkeypatch.setattr(command, "_orjson_dumps", None)
    elif command._orjson_dumps is None:
        pytest.skip("orjson is not in use")
    rng = random.Random(7)
    for _ in range(400):
        args = (
            rng.choice(NAMES),
            rng.choice(NAMES),
            rng.choice([0, 1, 3, 15, 1023]),
            rng.choice(TAGS),
            rng.choice([0, 0, 1, 18, -2]),
            rng.choice([0, 1, 9, 123456, 0x7FFFFFFF]),
            rng.choice([0, 1700000000000, int(4e12)]),
            rng.choice([UNIQ_IDS.next(), "0" * 32, "MYOWN"]),
            rng.choice([b"", b"x", bytes(range(256)) * 5]),
        )
        assert templated(*args) == reference(*args), args


@pytest.mark.parametrize(
    "group, topic, tags",
    [
        ("g", f"T{_OPAQUE_MARK}", None),
        (f"g{_BORN_MARK}", "T", None),
        ("g", "T", f"x{_UNIQ_MARK}"),
        ("g", "T", str(_OPAQUE_MARK)),
    ],
)
def test_names_holding_a_mark_get_no_template(group: str, topic: str, tags: str | None) -> None:
    assert SendTemplate.make(group, topic, 0, tags, 0) is None


@pytest.mark.parametrize("tags", TAGS)
@pytest.mark.parametrize("delay", [0, 3, -1])
def test_plain_properties_are_message_properties_of_a_plain_message(
    tags: str | None, delay: int
) -> None:
    want = message_properties(tags, None, None, delay)
    got = plain_properties(tags, delay, want["UNIQ_KEY"])
    assert list(got.items()) == list(want.items())


def test_ids_at_a_time_have_the_message_id_form() -> None:
    now = 1_800_000_000_123
    a, b = UNIQ_IDS.at(now), UNIQ_IDS.at(now)
    assert len(a) == len(b) == 32
    assert a[:20] == b[:20] == UNIQ_IDS._prefix
    assert a[20:28] == b[20:28] == f"{(now - UNIQ_IDS._start) & 0xFFFFFFFF:08X}"
    assert (int(b[28:], 16) - int(a[28:], 16)) & 0xFFFF == 1
    c, d = UNIQ_IDS.at(now + 5), UNIQ_IDS.at(now)
    assert c[20:28] == f"{(now + 5 - UNIQ_IDS._start) & 0xFFFFFFFF:08X}"
    assert d[20:28] == a[20:28]
    assert (int(d[28:], 16) - int(c[28:], 16)) & 0xFFFF == 1
    before = int(time.time() * 1000)
    e = UNIQ_IDS.next()
    after = int(time.time() * 1000)
    assert before - UNIQ_IDS._start <= int(e[20:28], 16) <= after - UNIQ_IDS._start
