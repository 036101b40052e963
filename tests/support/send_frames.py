"""Send requests as the tests write them (V1 and V2 headers, the plain sends every path must
answer alike), the official client's recorded sends, and how to read back what they stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rocketstore.remoting import RemotingCommand
from rocketstore.remoting._command import decode_frame

from .fixtures import TRANSCRIPTS

RECORDED = TRANSCRIPTS / "send.jsonl"
TOPIC = "FastTopic"
UNIQ = "UNIQ_KEY\u00010100007F0000F44000000000\u0002"


def v2(**changes: Any) -> dict[str, Any]:
    """SEND_MESSAGE_V2's header as the C++ client sends it (some fields JSON numbers)."""
    ext: dict[str, Any] = {
        "a": "PID_fast",
        "b": TOPIC,
        "c": "TBW102",
        "d": 4,
        "e": 0,
        "f": 0,
        "g": "1795532961562",
        "h": 0,
        "i": UNIQ + "WAIT\u0001true\u0002",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    ext.update(changes)
    return {k: v for k, v in ext.items() if v is not None}


def v1(**changes: Any) -> dict[str, Any]:
    """SEND_MESSAGE's header as the Java client sends it (every field text)."""
    ext: dict[str, Any] = {
        "producerGroup": "PID_fast",
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1795532961563",
        "flag": "0",
        "properties": UNIQ + "TAGS\u0001TagA\u0002KEYS\u0001k1 k2\u0002",
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
    }
    ext.update(changes)
    return {k: v for k, v in ext.items() if v is not None}


PLAIN: list[tuple[int, dict[str, Any], bytes, bool]] = [
    (310, v2(), b"plain", True),
    (310, v2(e=3, f="0", h="7", j=2), b"text numbers", True),
    (310, v2(e="2", g=1795532961999), b"a JSON born timestamp", True),
    (310, v2(i=UNIQ + "WAIT\u0001false\u0002"), b"wait false", True),
    (310, v2(i=UNIQ + "WAIT\u0001TRUE\u0002a\u0001b\u0002"), b"WAIT upper case", True),
    (310, v2(i=""), b"no properties", True),
    (310, v2(i="CLUSTER\u0001Other\u0002" + UNIQ), b"own CLUSTER", True),
    (310, v2(i=UNIQ + "k\u0001\u00e9t\u00e9 \u4e2d\u0002"), b"unicode", True),
    (310, v2(m="0"), b"batch 0", True),
    (310, v2(m=False), b"batch false", True),
    (310, v2(), b"", True),
    (310, v2(), bytes(range(256)) * 8, True),
    (10, v1(), b"long names", True),
    (10, v1(batch=None, queueId="0"), b"no batch field", True),
    (310, v2(e=2, f=4, h=2147483647), b"a big flag", True),
    # left to the general path
    (310, v2(i=UNIQ + "DELAY\u00012\u0002"), b"delayed", False),
    (310, v2(i=UNIQ + "TRAN_MSG\u0001true\u0002PGROUP\u0001PID_fast\u0002"), b"half", False),
    (310, v2(i=UNIQ + "TIMER_DELAY_SEC\u00015\u0002"), b"timer", False),
    (310, v2(e=-1), b"any queue", False),
    (310, v2(e=16), b"queue out of range", False),
    (310, v2(e="x"), b"queue not a number", False),
    (310, v2(f="-1"), b"a negative sys flag", False),
    (310, v2(h=-5), b"a negative flag", False),
    (310, v2(h="2147483648"), b"flag beyond int32", False),
    (310, v2(g=""), b"empty born timestamp", False),
    (310, v2(g="12a"), b"bad born timestamp", False),
    (310, v2(j=None), b"no reconsume times", False),
    (310, v2(b="NewTopicA"), b"auto-created", False),
    (310, v2(b="%RETRY%group"), b"retry topic", False),
    (310, v2(b="SCHEDULE_TOPIC_XXXX"), b"refused topic", False),
    (310, v2(b=5), b"numeric topic", False),
    (310, v2(m="true"), b"not a batch body", False),
    (310, v2(m=1), b"batch 1", False),
    (10, v1(queueId=" 1"), b"spaced queue id", False),
    (10, v1(properties=None), b"no properties field", False),
]


def recorded_sends() -> list[tuple[RemotingCommand, dict[str, Any] | None]]:
    """The C++ client's recorded requests to the broker, each with the recorded broker's
    answer (None for a one-way send)."""
    requests: dict[int, RemotingCommand] = {}
    answers: dict[int, dict[str, Any]] = {}
    for line in RECORDED.read_text().splitlines():
        entry = json.loads(line)
        header = entry["header"]
        if entry["link"] != "broker" or (
            header["code"] not in (10, 310) and entry["dir"] == "c->s"
        ):
            continue
        if entry["dir"] == "c->s":
            cmd = RemotingCommand(
                header["code"],
                header["opaque"],
                header["flag"],
                header.get("remark"),
                header.get("extFields", {}),
                entry.get("body", "").encode("utf-8"),
                header["language"],
                header["version"],
            )
            requests[cmd.opaque] = cmd
        else:
            answers[header["opaque"]] = header.get("extFields", {})
    return [(cmd, answers.get(opaque)) for opaque, cmd in sorted(requests.items())]


def commit_log_bytes(root: Path) -> bytes:
    files = sorted((root / "commitlog").iterdir())
    data = b"".join(f.read_bytes() for f in files)
    return data.rstrip(b"\0")


def frames_by_opaque(writes: list[bytes]) -> dict[int, bytes]:
    """The answer frames written, by opaque (answers that wait for a flush may be written in
    another order than the requests came)."""
    data = b"".join(writes)
    out: dict[int, bytes] = {}
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        frame = data[pos : pos + 4 + length]
        out[decode_frame(frame[4:]).opaque] = frame
        pos += 4 + length
    return out
