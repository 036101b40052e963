"""A send's header decoded once (rocketstore.remoting._send_header): SEND_MESSAGE's long names,
SEND_MESSAGE_V2's one-letter names, either per field but never both, kept on the command so
that every reader of the request sees the same object."""

from __future__ import annotations

import pytest

from rocketstore.remoting import RemotingCommand, RequestError
from rocketstore.remoting._send_header import (
    FIELD_NAMES,
    SendHeader,
    decode_send_header,
    send_header,
)


def test_both_spellings_decode_to_the_same_header() -> None:
    long = {name: f"v{i}" for i, (name, _) in enumerate(FIELD_NAMES)}
    short = {letter: f"v{i}" for i, (_, letter) in enumerate(FIELD_NAMES)}
    a, b = decode_send_header(long), decode_send_header(short)
    assert a == b and a.topic == "v1" and a.producer_group == "v0" and a.batch == "v12"
    mixed = {"producerGroup": "P", "b": "T", "queueId": 3, "m": "true"}
    h = decode_send_header(mixed)
    assert (h.producer_group, h.topic, h.queue_id, h.is_batch()) == ("P", "T", 3, True)


@pytest.mark.parametrize(
    ("ext", "field"),
    [
        ({"b": "PubOnly", "topic": "Secret"}, "topic"),
        ({"topic": "Secret", "b": "PubOnly", "a": "P"}, "topic"),
        ({"a": "P", "producerGroup": "Q", "b": "T"}, "producerGroup"),
        ({"b": "T", "m": "false", "batch": "true"}, "batch"),
    ],
)
def test_a_field_spelled_twice_is_a_bad_request(ext: dict[str, str], field: str) -> None:
    with pytest.raises(RequestError, match=f"<{field}> twice"):
        decode_send_header(ext)


def test_names_are_text_and_numbers_stay_as_sent() -> None:
    h = decode_send_header({"b": 123, "a": True, "e": 2, "g": "17"})
    assert (h.topic, h.producer_group, h.queue_id, h.born_timestamp) == ("123", "true", 2, "17")
    assert decode_send_header({}).topic is None


@pytest.mark.parametrize(
    ("value", "batch"),
    [(None, False), ("false", False), ("0", False), ("true", True), ("1", True), (True, True)],
)
def test_batch_flag(value: object, batch: bool) -> None:
    assert decode_send_header({"m": value}).is_batch() is batch


def test_decoded_once_and_kept_on_the_command() -> None:
    cmd = RemotingCommand.request(310, {"a": "P", "b": "T"})
    first = send_header(cmd)
    assert isinstance(first, SendHeader) and cmd.header is first
    cmd.ext_fields["b"] = "changed"  # the decoded object is what every reader sees
    assert send_header(cmd) is first and first.topic == "T"
